#include "parallel/tp_collectives.hpp"

#include "core/error.hpp"
#include "core/timer.hpp"
#include "kernels/kernels.hpp"

namespace hpct::parallel {

namespace {

// The one allreduce behind every communicating side, timed by a host timer around the call: the model's
// tp_comm_ms (the host time spent in TP collectives).
template <typename T>
double timed_allreduce(comm::Communicator& tp, T* buf, int64_t n, comm::ReduceOp op, const char* what) {
  const Timer t;
  tp.allreduce(buf, n, dtype_of<T>(), op, what);
  return t.ms();
}

// Column slice [c0, c0 + cl) of src (rows, src_cols) into dst (rows, dst_cols) at column d0: one contiguous row
// segment per copy (kernels have no strided copy; fine for the activation sizes this serves).
template <typename A>
void copy_columns(const ExecContext& ctx, A* dst, int64_t dst_cols, int64_t d0, const A* src, int64_t src_cols,
                  int64_t c0, int64_t rows, int64_t cl) {
  const int64_t bytes = cl * static_cast<int64_t>(sizeof(A));
  if (dst_cols == cl && src_cols == cl) {  // whole rows on both sides: one copy
    kernels::copy_device(ctx, dst, src, rows * bytes);
    return;
  }
  for (int64_t r = 0; r < rows; ++r) kernels::copy_device(ctx, dst + r * dst_cols + d0, src + r * src_cols + c0, bytes);
}

int64_t local_cols(const comm::Communicator& tp, int64_t cols, const char* what) {
  HPCT_CHECK(cols % tp.size() == 0, "{}: last dimension {} is not divisible by the TP size {}", what, cols, tp.size());
  return cols / tp.size();
}

}  // namespace

template <typename A>
double copy_to_tp_region_forward(comm::Communicator& /*tp*/, A* /*x*/, int64_t /*n*/, const char* /*what*/) {
  return 0.0;
}

template <typename A>
double copy_to_tp_region_backward(comm::Communicator& tp, A* dx, int64_t n, const char* what) {
  return timed_allreduce(tp, dx, n, comm::ReduceOp::Sum, what);
}

template <typename A>
double reduce_from_tp_region_forward(comm::Communicator& tp, A* y, int64_t n, const char* what) {
  return timed_allreduce(tp, y, n, comm::ReduceOp::Sum, what);
}

template <typename A>
double reduce_from_tp_region_backward(comm::Communicator& /*tp*/, A* /*dy*/, int64_t /*n*/, const char* /*what*/) {
  return 0.0;
}

template <typename A>
double scatter_to_tp_region_forward(const ExecContext& ctx, comm::Communicator& tp, const A* x, A* y, int64_t rows,
                                    int64_t cols, const char* what) {
  const int64_t cl = local_cols(tp, cols, what);
  copy_columns(ctx, y, cl, 0, x, cols, tp.rank() * cl, rows, cl);
  return 0.0;
}

template <typename A>
double scatter_to_tp_region_backward(const ExecContext& ctx, comm::Communicator& tp, const A* dy, A* dx, A* scratch,
                                     int64_t rows, int64_t cols, const char* what) {
  return gather_from_tp_region_forward(ctx, tp, dy, dx, scratch, rows, cols, what);
}

template <typename A>
double gather_from_tp_region_forward(const ExecContext& ctx, comm::Communicator& tp, const A* x, A* y, A* scratch,
                                     int64_t rows, int64_t cols, const char* what) {
  const int64_t cl = local_cols(tp, cols, what);
  const Timer t;
  tp.allgather(x, scratch, rows * cl, dtype_of<A>(), what);  // scratch: (t, rows, cl), block r from rank r
  const double ms = t.ms();
  for (int r = 0; r < tp.size(); ++r) copy_columns(ctx, y, cols, r * cl, scratch + r * rows * cl, cl, 0, rows, cl);
  return ms;
}

template <typename A>
double gather_from_tp_region_backward(const ExecContext& ctx, comm::Communicator& tp, const A* dy, A* dx, int64_t rows,
                                      int64_t cols, const char* what) {
  return scatter_to_tp_region_forward(ctx, tp, dy, dx, rows, cols, what);
}

template <typename A>
double gather_from_sequence_parallel_region_forward(comm::Communicator& tp, const A* x, A* full, int64_t n,
                                                    const char* what) {
  const Timer t;
  tp.allgather(x, full, n, dtype_of<A>(), what);
  return t.ms();
}

template <typename A>
double gather_from_sequence_parallel_region_backward(comm::Communicator& tp, const A* dfull, A* dx, int64_t n,
                                                     const char* what) {
  const Timer t;
  tp.reduce_scatter(dfull, dx, n, dtype_of<A>(), comm::ReduceOp::Sum, what);
  return t.ms();
}

template <typename A>
double reduce_scatter_to_sequence_parallel_region_forward(comm::Communicator& tp, const A* full, A* y, int64_t n,
                                                          const char* what) {
  return gather_from_sequence_parallel_region_backward(tp, full, y, n, what);
}

template <typename A>
double reduce_scatter_to_sequence_parallel_region_backward(comm::Communicator& tp, const A* dy, A* dfull, int64_t n,
                                                           const char* what) {
  return gather_from_sequence_parallel_region_forward(tp, dy, dfull, n, what);
}

double allreduce_sequence_parallel_grads(comm::Communicator& tp, float* buf, int64_t n, const char* what) {
  return timed_allreduce(tp, buf, n, comm::ReduceOp::Sum, what);
}

double allreduce_tp_stats(comm::Communicator& tp, float* buf, int64_t n, comm::ReduceOp op, const char* what) {
  return timed_allreduce(tp, buf, n, op, what);
}

// The three storage types (kernels.hpp): fp32, bf16 and fp16 activations (fp16: CUDA runs, over NCCL).
#define HPCT_TP_COLLECTIVES_INSTANTIATE(A)                                                                             \
  template double copy_to_tp_region_forward<A>(comm::Communicator&, A*, int64_t, const char*);                         \
  template double copy_to_tp_region_backward<A>(comm::Communicator&, A*, int64_t, const char*);                        \
  template double reduce_from_tp_region_forward<A>(comm::Communicator&, A*, int64_t, const char*);                     \
  template double reduce_from_tp_region_backward<A>(comm::Communicator&, A*, int64_t, const char*);                    \
  template double scatter_to_tp_region_forward<A>(const ExecContext&, comm::Communicator&, const A*, A*, int64_t,      \
                                                  int64_t, const char*);                                               \
  template double scatter_to_tp_region_backward<A>(const ExecContext&, comm::Communicator&, const A*, A*, A*, int64_t, \
                                                   int64_t, const char*);                                              \
  template double gather_from_tp_region_forward<A>(const ExecContext&, comm::Communicator&, const A*, A*, A*, int64_t, \
                                                   int64_t, const char*);                                              \
  template double gather_from_tp_region_backward<A>(const ExecContext&, comm::Communicator&, const A*, A*, int64_t,    \
                                                    int64_t, const char*);                                             \
  template double gather_from_sequence_parallel_region_forward<A>(comm::Communicator&, const A*, A*, int64_t,          \
                                                                  const char*);                                        \
  template double gather_from_sequence_parallel_region_backward<A>(comm::Communicator&, const A*, A*, int64_t,         \
                                                                   const char*);                                       \
  template double reduce_scatter_to_sequence_parallel_region_forward<A>(comm::Communicator&, const A*, A*, int64_t,    \
                                                                        const char*);                                  \
  template double reduce_scatter_to_sequence_parallel_region_backward<A>(comm::Communicator&, const A*, A*, int64_t,   \
                                                                         const char*);
HPCT_TP_COLLECTIVES_INSTANTIATE(float)
HPCT_TP_COLLECTIVES_INSTANTIATE(bf16)
HPCT_TP_COLLECTIVES_INSTANTIATE(fp16)
#undef HPCT_TP_COLLECTIVES_INSTANTIATE

}  // namespace hpct::parallel
