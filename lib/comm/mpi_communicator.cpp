#include "comm/mpi_communicator.hpp"

#include <numeric>
#include <climits>
#include <cstdio>
#include <cstring>
#include <exception>
#include <mutex>
#include <utility>

#include "comm/op_desc.hpp"
#include "comm/wait_backoff.hpp"
#include "core/mpi_check.hpp"
#include "tensor/bf16.hpp"
#include "tensor/fp16.hpp"
#if HPCT_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace hpct::comm {

using detail::OpDesc;

namespace {

// ---- bf16 (tensor/bf16.hpp): MPI has no such type ------------------------------------------------------------------
// The datatype is a committed contiguous 2-byte type (MPI_Type_contiguous(2, MPI_BYTE)): MPI moves its bytes and counts
// its elements, and only the user-defined operations below interpret them. Sum widens both operands to fp32, adds and
// rounds once to nearest even (to_bf16); Max and Min compare the fp32 values and keep one operand unchanged (no
// rounding). The operations are created commutative, so libnbc may use its reduce-scatter + allgather and ring
// schedules for them (IallreduceAlgorithm below), exactly as for MPI_SUM on floats.
//
// Determinism. MPI applies a user operation pairwise, in the order its algorithm chooses (binomial tree, ring,
// recursive halving), so a bf16 sum over n ranks is rounded n - 1 times, at places fixed by the schedule: the schedule
// is a function of the communicator size, the element count (and hence the bytes, IallreduceAlgorithm's choice) and the
// Open MPI version and parameters, never of timing. For a fixed communicator size and algorithm the result is
// therefore reproducible bit for bit, and every rank receives the same bits (each element is combined on one rank and
// then distributed). Another communicator size, count or MPI library (or NCCL, whose ring or tree rounds at other
// places) may differ by a few bf16 roundings of partial sums: within bf16 layouts' tolerance (docs/invariants.md), not
// bitwise.
//
// The datatype and the three operations are created once per process, on first use (after MPI_Init), and never freed
// (MPI_Finalize releases them).
// fp16 (tensor/fp16.hpp: the host-staged CUDA backend's fp16 buffers) travels and reduces the same way: widened to
// fp32, rounded once to nearest even per pairwise operation.
struct HalfMpi {
  MPI_Datatype type = MPI_DATATYPE_NULL;
  MPI_Op sum = MPI_OP_NULL, max = MPI_OP_NULL, min = MPI_OP_NULL;
};

// MPI_User_function: inout[i] = in[i] op inout[i] over len elements of the 16-bit type T.
template <typename T>
void half_sum(void* in, void* inout, int* len, MPI_Datatype* /*type*/) {
  const auto* a = static_cast<const T*>(in);
  auto* b = static_cast<T*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = from_f32<T>(to_f32(a[i]) + to_f32(b[i]));
}
template <typename T>
void half_max(void* in, void* inout, int* len, MPI_Datatype* /*type*/) {
  const auto* a = static_cast<const T*>(in);
  auto* b = static_cast<T*>(inout);
  for (int i = 0; i < *len; ++i)
    if (to_f32(a[i]) > to_f32(b[i])) b[i] = a[i];
}
template <typename T>
void half_min(void* in, void* inout, int* len, MPI_Datatype* /*type*/) {
  const auto* a = static_cast<const T*>(in);
  auto* b = static_cast<T*>(inout);
  for (int i = 0; i < *len; ++i)
    if (to_f32(a[i]) < to_f32(b[i])) b[i] = a[i];
}

template <typename T>
const HalfMpi& half_mpi() {
  static const HalfMpi m = [] {
    HalfMpi r;
    MPI_CHECK(MPI_Type_contiguous(2, MPI_BYTE, &r.type));
    MPI_CHECK(MPI_Type_commit(&r.type));
    MPI_CHECK(MPI_Op_create(&half_sum<T>, /*commute=*/1, &r.sum));
    MPI_CHECK(MPI_Op_create(&half_max<T>, /*commute=*/1, &r.max));
    MPI_CHECK(MPI_Op_create(&half_min<T>, /*commute=*/1, &r.min));
    return r;
  }();
  return m;
}

}  // namespace

MPI_Datatype mpi_datatype(DType t) {
  switch (t) {
    case DType::F32: return MPI_FLOAT;
    case DType::F64: return MPI_DOUBLE;
    case DType::I32: return MPI_INT32_T;
    case DType::I64: return MPI_INT64_T;
    case DType::U8: return MPI_UINT8_T;
    case DType::BF16: return half_mpi<bf16>().type;
    case DType::F16: return half_mpi<fp16>().type;
  }
  HPCT_FAIL("dtype {} has no MPI datatype", static_cast<int>(t));
}

MPI_Op mpi_op(ReduceOp op, DType t) {
  if (t == DType::BF16 || t == DType::F16) {
    const HalfMpi& m = t == DType::BF16 ? half_mpi<bf16>() : half_mpi<fp16>();
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Avg: return m.sum;  // Avg divides after completion
      case ReduceOp::Max: return m.max;
      case ReduceOp::Min: return m.min;
    }
    HPCT_FAIL("unknown ReduceOp {}", static_cast<int>(op));
  }
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: return MPI_SUM;  // Avg divides after completion
    case ReduceOp::Max: return MPI_MAX;
    case ReduceOp::Min: return MPI_MIN;
  }
  HPCT_FAIL("unknown ReduceOp {}", static_cast<int>(op));
}

namespace {

template <typename T>
void divide_by(void* buf, int64_t count, int divisor) {
  T* x = static_cast<T*>(buf);
  const T d = static_cast<T>(divisor);
  for (int64_t i = 0; i < count; ++i) x[i] = static_cast<T>(x[i] / d);  // integers: truncation toward zero
}

// In fp32, rounded once more to nearest even: avg = round(round_sum / n).
template <typename T>
void divide_half_by(void* buf, int64_t count, int divisor) {
  auto* x = static_cast<T*>(buf);
  const float d = static_cast<float>(divisor);
  for (int64_t i = 0; i < count; ++i) x[i] = from_f32<T>(to_f32(x[i]) / d);
}

void divide_by(void* buf, int64_t count, DType t, int divisor) {
  switch (t) {
    case DType::F32: return divide_by<float>(buf, count, divisor);
    case DType::F64: return divide_by<double>(buf, count, divisor);
    case DType::I32: return divide_by<int32_t>(buf, count, divisor);
    case DType::I64: return divide_by<int64_t>(buf, count, divisor);
    case DType::U8: {  // u8 cannot hold divisors above 255: divide in int
      auto* x = static_cast<uint8_t*>(buf);
      for (int64_t i = 0; i < count; ++i) x[i] = static_cast<uint8_t>(x[i] / divisor);
      return;
    }
    case DType::BF16: return divide_half_by<bf16>(buf, count, divisor);
    case DType::F16: return divide_half_by<fp16>(buf, count, divisor);
  }
}

// True for CUDA device memory. Without CUDA, or without a usable GPU, there can be no device pointer.
bool is_device_pointer(const void* p) {
#if HPCT_HAVE_CUDA
  static const bool have_gpu = [] {
    int n = 0;
    const bool ok = cudaGetDeviceCount(&n) == cudaSuccess;
    if (!ok) (void)cudaGetLastError();  // no driver / no device: clear the sticky-free error and move on
    return ok && n > 0;
  }();
  if (!have_gpu || p == nullptr) return false;
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return attr.type == cudaMemoryTypeDevice;  // managed and registered host memory are host-accessible
#else
  (void)p;
  return false;
#endif
}

void check_host(const void* p, const char* op, const std::string& what, const Communicator& comm) {
  HPCT_CHECK(
      !is_device_pointer(p),
      "{} ({}) on communicator {}: the buffer is CUDA device memory, but MpiCommunicator takes host buffers only "
      "(Open MPI here is not CUDA-aware); use NcclCommunicator for device buffers or copy to the host first",
      op, what, comm.name());
}

OpDesc make_desc(const char* op, int64_t count, DType dtype, const std::string& what) {
  OpDesc d;
  d.op = op;
  d.bytes = static_cast<size_t>(count) * dtype_size(dtype);
  d.dtype = dtype;
  d.what = what;
  return d;
}

constexpr int64_t kMaxCount = INT_MAX;

// Open MPI 4.1's non-blocking collectives (coll/libnbc) choose a binomial tree for every MPI_Iallreduce that is in
// place or runs on fewer than 4 ranks (nbc_iallreduce.c: `p < 4 || bytes < 65536 || inplace`): a reduce to rank 0
// and a broadcast back, so the whole buffer crosses the critical path twice, ~2x the time of the blocking
// MPI_Allreduce (coll/tuned) at >= 1 MiB. Our allreduce is always in place. For large calls we therefore select
// libnbc's reduce-scatter + allgather algorithm ("rabenseifner", value 3; libnbc falls back to its ring when
// count < the largest power of two <= size) through the MPI tool interface's control variable
// coll_libnbc_iallreduce_algorithm, per call; small calls keep libnbc's own choice (value 0 = ignore). The choice is
// a function of the byte count only, which every rank passes identically (the collective contract), so all ranks run
// the same schedule. bf16 goes the same way: its user-defined operations are commutative, the condition libnbc puts on
// its reduce-scatter + allgather schedule, and are applied where MPI_SUM would be, so the schedule chosen here also
// fixes where a bf16 sum rounds (see "bf16" above). A mutex makes "write the variable, post the call" atomic within the
// process (the variable is process-wide). A value set by the user (mpirun --mca coll_libnbc_iallreduce_algorithm N, or
// OMPI_MCA_coll_libnbc_iallreduce_algorithm) is left alone, as is any MPI without this variable.
class IallreduceAlgorithm {
 public:
  static constexpr size_t kLargeBytes = 64 * 1024;  // libnbc's own small-message limit for its binomial choice
  static constexpr int kIgnore = 0, kRedscatAllgather = 3;

  static IallreduceAlgorithm& instance() {
    static IallreduceAlgorithm a;  // after MPI_Init (first allreduce); thread-safe initialisation
    return a;
  }
  // Selects the algorithm for a call of `bytes`; hold the returned lock until the MPI_Iallreduce is posted.
  std::unique_lock<std::mutex> select(size_t bytes) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!usable_) return lock;
    int want = bytes >= kLargeBytes ? kRedscatAllgather : kIgnore;
    if (want != current_ && MPI_T_cvar_write(handle_, &want) == MPI_SUCCESS) current_ = want;
    return lock;
  }

 private:
  IallreduceAlgorithm() {
    int provided = 0, index = 0, count = 0, value = -1;
    // MPI_THREAD_MULTIPLE, as MPI_Init_thread asked: Open MPI 4.1's MPI_T_init_thread overwrites the process's thread
    // level with the one it is given (MPI_Query_thread then says SINGLE, and the background checkpoint writer, which
    // needs MULTIPLE, would be turned off)
    if (MPI_T_init_thread(MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) return;
    if (MPI_T_cvar_get_index("coll_libnbc_iallreduce_algorithm", &index) != MPI_SUCCESS) return;
    if (MPI_T_cvar_handle_alloc(index, nullptr, &handle_, &count) != MPI_SUCCESS) return;
    if (count != 1 || MPI_T_cvar_read(handle_, &value) != MPI_SUCCESS || value != kIgnore) return;  // user's choice
    int v = kIgnore;
    usable_ = MPI_T_cvar_write(handle_, &v) == MPI_SUCCESS;  // not writable at run time: leave it
  }
  std::mutex mutex_;
  MPI_T_cvar_handle handle_ = MPI_T_CVAR_HANDLE_NULL;
  bool usable_ = false;
  int current_ = kIgnore;
};

}  // namespace

// ---- MpiWork ----------------------------------------------------------------------------------------------------

// One non-blocking MPI operation. Lifecycle: constructed, MPI_I* posts into request(), start() registers it with
// the communicator; poll_() completes it (post-processing: the in-place reduce-scatter move, the Avg division);
// whoever saw poll_() complete it (wait, test, progress) removes it from the registry.
class MpiWork final : public Work {
 public:
  MpiWork(MpiCommunicator* comm, OpDesc desc) : comm_(comm), desc_(std::move(desc)) {}
  ~MpiWork() override;
  void wait() override;
  bool test() override;

  MPI_Request* request() { return &req_; }
  void start() {
    comm_->in_flight_.push_back(this);
    registered_ = true;
  }
  void set_avg(void* buf, int64_t count) {
    avg_buf_ = buf;
    avg_count_ = count;
  }
  void set_move(void* dst, const void* src, size_t bytes) {
    move_dst_ = dst;
    move_src_ = src;
    move_bytes_ = bytes;
  }
  void set_expected_recv(int64_t count) { expect_recv_ = count; }
  // Count and displacement arrays of the _v collectives: MPI reads them until the operation completes.
  std::vector<int>& counts() { return counts_; }
  std::vector<int>& displs() { return displs_; }

 private:
  friend class MpiCommunicator;
  bool poll_();  // true once complete or failed (then error_ holds the message); never throws
  void throw_if_failed_();
  void deregister_();

  MpiCommunicator* comm_;  // nullptr once the communicator is gone (only possible for completed Works)
  OpDesc desc_;
  MPI_Request req_ = MPI_REQUEST_NULL;
  bool registered_ = false;
  bool done_ = false;
  std::string error_;
  void* avg_buf_ = nullptr;
  int64_t avg_count_ = 0;
  void* move_dst_ = nullptr;
  const void* move_src_ = nullptr;
  size_t move_bytes_ = 0;
  int64_t expect_recv_ = -1;  // recv: elements the matching send must carry
  std::vector<int> counts_, displs_;
};

bool MpiWork::poll_() {
  if (done_) return true;
  int flag = 0;
  MPI_Status status;
  const int rc = MPI_Test(&req_, &flag, &status);
  if (rc != MPI_SUCCESS) {
    done_ = true;
    error_ = fmt::format("{} failed: {}", detail::describe(desc_, *comm_), ::hpct::detail::mpi_error_string(rc));
    return true;
  }
  if (!flag) return false;
  done_ = true;
  if (expect_recv_ >= 0) {
    int got = 0;
    MPI_Get_count(&status, mpi_datatype(desc_.dtype), &got);
    if (got != expect_recv_)
      error_ = fmt::format("{} received {} elements, expected {}: the sender's count does not match",
                           detail::describe(desc_, *comm_), got, expect_recv_);
  }
  if (move_bytes_ > 0 && move_dst_ != move_src_) std::memmove(move_dst_, move_src_, move_bytes_);
  if (avg_buf_ != nullptr) divide_by(avg_buf_, avg_count_, desc_.dtype, comm_->size());
  return true;
}

void MpiWork::deregister_() {
  if (!registered_) return;
  auto& v = comm_->in_flight_;
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i] == this) {
      v[i] = v.back();
      v.pop_back();
      break;
    }
  registered_ = false;
}

void MpiWork::throw_if_failed_() {
  if (!error_.empty()) HPCT_FAIL("{}", error_);
}

void MpiWork::wait() {
  if (!registered_) {  // completed before (or never posted)
    throw_if_failed_();
    return;
  }
  HPCT_CHECK(comm_ != nullptr, "{}: its communicator was destroyed while it was in flight", desc_.op);
  const bool complete = wait_with_backoff([this] { return poll_(); }, comm_->options().timeout_s, waited_ms_);
  if (!complete) HPCT_FAIL("{}", detail::timeout_message(desc_, *comm_));
  deregister_();
  throw_if_failed_();
}

bool MpiWork::test() {
  if (!registered_) {
    throw_if_failed_();
    return true;
  }
  if (!poll_()) return false;
  deregister_();
  throw_if_failed_();
  return true;
}

MpiWork::~MpiWork() {
  if (!registered_ || comm_ == nullptr) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized || std::uncaught_exceptions() > 0) {
    // Unwinding towards main(), which aborts the job: waiting up to timeout_s here would only delay that.
    deregister_();
    return;
  }
  try {
    wait();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n(while destroying an unfinished operation's handle: aborting the job)\n", e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

// ---- MpiCommunicator --------------------------------------------------------------------------------------------

MpiCommunicator::MpiCommunicator(MPI_Comm comm, std::string name, CommOptions options)
    : name_(std::move(name)), options_(options) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  HPCT_CHECK(initialized, "communicator {}: MPI is not initialised (call MPI_Init_thread first)", name_);
  HPCT_CHECK(comm != MPI_COMM_NULL, "communicator {}: MPI_COMM_NULL given", name_);
  MPI_CHECK(MPI_Comm_dup(comm, &comm_));
  init_();
}

MpiCommunicator::MpiCommunicator(Adopt, MPI_Comm comm, std::string name, CommOptions options)
    : comm_(comm), name_(std::move(name)), options_(options) {
  init_();
}

void MpiCommunicator::init_() {
  HPCT_CHECK(options_.timeout_s > 0, "communicator {}: comm.timeout_s must be > 0 seconds, is {}", name_,
             options_.timeout_s);
  MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  MPI_CHECK(MPI_Comm_size(comm_, &size_));
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  const bool unwinding = std::uncaught_exceptions() > 0;
  // Operations still in flight: complete them (their buffers are still being written), unless MPI is gone or an
  // error is on its way to main(), which aborts the job. Then detach them, so that destroying them later is safe.
  while (!in_flight_.empty()) {
    MpiWork* w = in_flight_.back();
    if (!finalized && !unwinding) {
      try {
        w->wait();  // removes w from in_flight_
      } catch (const std::exception& e) {
        std::fprintf(stderr, "%s\n(while destroying communicator %s: aborting the job)\n", e.what(), name_.c_str());
        std::fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, 1);
      }
    }
    if (!in_flight_.empty() && in_flight_.back() == w) in_flight_.pop_back();
    w->registered_ = false;
    w->comm_ = nullptr;
  }
  if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void MpiCommunicator::forget_(MpiWork* w) { w->deregister_(); }

void MpiCommunicator::progress() {
  std::string first_error;
  for (size_t i = 0; i < in_flight_.size();) {
    MpiWork* w = in_flight_[i];
    if (!w->poll_()) {
      ++i;
      continue;
    }
    in_flight_[i] = in_flight_.back();
    in_flight_.pop_back();
    w->registered_ = false;
    if (first_error.empty()) first_error = w->error_;
  }
  if (!first_error.empty()) HPCT_FAIL("{}", first_error);
}

std::unique_ptr<MpiCommunicator> MpiCommunicator::split(int color, int key, const std::string& name) const {
  MPI_Comm sub = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split(comm_, color, key, &sub));
  if (sub == MPI_COMM_NULL) return nullptr;
  return std::unique_ptr<MpiCommunicator>(new MpiCommunicator(Adopt{}, sub, name, options_));
}

WorkPtr MpiCommunicator::allreduce_async(void* buf, int64_t count, DType dtype, ReduceOp op, const std::string& what) {
  detail::check_count(count, kMaxCount, "allreduce", what, *this);
  check_host(buf, "allreduce", what, *this);
  OpDesc d = make_desc("allreduce", count, dtype, what);
  record_volume("allreduce", static_cast<double>(count) * static_cast<double>(dtype_size(dtype)));
  d.set_reduce(op);
  auto w = std::make_unique<MpiWork>(this, std::move(d));
  const auto algorithm = IallreduceAlgorithm::instance().select(static_cast<size_t>(count) * dtype_size(dtype));
  MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf, static_cast<int>(count), mpi_datatype(dtype), mpi_op(op, dtype), comm_,
                           w->request()));
  if (op == ReduceOp::Avg) w->set_avg(buf, count);
  w->start();
  return w;
}

WorkPtr MpiCommunicator::reduce_scatter_async(const void* send, void* recv, int64_t recv_count, DType dtype,
                                              ReduceOp op, const std::string& what) {
  detail::check_count(recv_count, kMaxCount, "reduce_scatter", what, *this);
  check_host(send, "reduce_scatter", what, *this);
  check_host(recv, "reduce_scatter", what, *this);
  const size_t block = static_cast<size_t>(recv_count) * dtype_size(dtype);
  const bool in_place = recv == static_cast<const char*>(send) + rank_ * block;
  HPCT_CHECK(in_place || !detail::overlaps(send, size_ * block, recv, block),
             "reduce_scatter ({}) on communicator {}: send and recv overlap; recv must be disjoint from send or be "
             "exactly block {} of send (in place)",
             what, name_, rank_);
  OpDesc d = make_desc("reduce_scatter", recv_count, dtype, what);
  record_volume("reduce_scatter", static_cast<double>(recv_count) * size() * static_cast<double>(dtype_size(dtype)));
  d.set_reduce(op);
  auto w = std::make_unique<MpiWork>(this, std::move(d));
  if (in_place) {
    // MPI_IN_PLACE reads the whole send buffer and leaves the result in its first block: move it to block rank().
    void* full = const_cast<void*>(send);
    MPI_CHECK(MPI_Ireduce_scatter_block(MPI_IN_PLACE, full, static_cast<int>(recv_count), mpi_datatype(dtype),
                                        mpi_op(op, dtype), comm_, w->request()));
    w->set_move(recv, full, block);
  } else {
    MPI_CHECK(MPI_Ireduce_scatter_block(send, recv, static_cast<int>(recv_count), mpi_datatype(dtype),
                                        mpi_op(op, dtype), comm_, w->request()));
  }
  if (op == ReduceOp::Avg) w->set_avg(recv, recv_count);
  w->start();
  return w;
}

WorkPtr MpiCommunicator::allgather_async(const void* send, void* recv, int64_t send_count, DType dtype,
                                         const std::string& what) {
  detail::check_count(send_count, kMaxCount, "allgather", what, *this);
  check_host(send, "allgather", what, *this);
  check_host(recv, "allgather", what, *this);
  const size_t block = static_cast<size_t>(send_count) * dtype_size(dtype);
  const bool in_place = send == static_cast<const char*>(recv) + rank_ * block;
  HPCT_CHECK(in_place || !detail::overlaps(send, block, recv, size_ * block),
             "allgather ({}) on communicator {}: send and recv overlap; send must be disjoint from recv or be exactly "
             "block {} of recv (in place)",
             what, name_, rank_);
  auto w = std::make_unique<MpiWork>(this, make_desc("allgather", send_count, dtype, what));
  record_volume("allgather", static_cast<double>(send_count) * size() * static_cast<double>(dtype_size(dtype)));
  const MPI_Datatype t = mpi_datatype(dtype);
  const int n = static_cast<int>(send_count);
  MPI_CHECK(MPI_Iallgather(in_place ? MPI_IN_PLACE : send, n, t, recv, n, t, comm_, w->request()));
  w->start();
  return w;
}

namespace {
// Checks the counts of a _v collective and returns their sum; every count and the sum must fit MPI's int.
int64_t check_v_counts(const std::vector<int64_t>& counts, const char* op, const std::string& what,
                       const Communicator& comm) {
  HPCT_CHECK(static_cast<int>(counts.size()) == comm.size(),
             "{} ({}) on communicator {}: {} counts given, one per rank ({}) expected", op, what, comm.name(),
             counts.size(), comm.size());
  int64_t total = 0;
  for (int64_t c : counts) {
    detail::check_count(c, kMaxCount, op, what, comm);
    total += c;
  }
  detail::check_count(total, kMaxCount, op, what, comm);
  return total;
}
}  // namespace

WorkPtr MpiCommunicator::reduce_scatter_v_async(const void* send, void* recv, const std::vector<int64_t>& counts,
                                                DType dtype, ReduceOp op, const std::string& what) {
  const int64_t total = check_v_counts(counts, "reduce_scatter_v", what, *this);
  check_host(send, "reduce_scatter_v", what, *this);
  check_host(recv, "reduce_scatter_v", what, *this);
  const size_t esize = dtype_size(dtype);
  int64_t displ = 0;
  for (int q = 0; q < rank_; ++q) displ += counts[q];
  const int64_t mine = counts[rank_];
  const bool in_place = recv == static_cast<const char*>(send) + displ * esize;
  HPCT_CHECK(in_place || !detail::overlaps(send, total * esize, recv, mine * esize),
             "reduce_scatter_v ({}) on communicator {}: send and recv overlap; recv must be disjoint from send or be "
             "exactly block {} of send (in place)",
             what, name_, rank_);
  OpDesc d = make_desc("reduce_scatter_v", mine, dtype, what);
  record_volume("reduce_scatter_v", static_cast<double>(std::accumulate(counts.begin(), counts.end(), int64_t{0})) *
                                        static_cast<double>(dtype_size(dtype)));
  d.set_reduce(op);
  auto w = std::make_unique<MpiWork>(this, std::move(d));
  w->counts().assign(counts.begin(), counts.end());
  if (in_place) {  // as in reduce_scatter_async: the result lands at the start of send, then moves to block rank()
    void* full = const_cast<void*>(send);
    MPI_CHECK(MPI_Ireduce_scatter(MPI_IN_PLACE, full, w->counts().data(), mpi_datatype(dtype), mpi_op(op, dtype), comm_,
                                  w->request()));
    w->set_move(recv, full, static_cast<size_t>(mine) * esize);
  } else {
    MPI_CHECK(MPI_Ireduce_scatter(send, recv, w->counts().data(), mpi_datatype(dtype), mpi_op(op, dtype), comm_,
                                  w->request()));
  }
  if (op == ReduceOp::Avg) w->set_avg(recv, mine);
  w->start();
  return w;
}

WorkPtr MpiCommunicator::allgather_v_async(const void* send, void* recv, const std::vector<int64_t>& counts,
                                           DType dtype, const std::string& what) {
  const int64_t total = check_v_counts(counts, "allgather_v", what, *this);
  check_host(send, "allgather_v", what, *this);
  check_host(recv, "allgather_v", what, *this);
  const size_t esize = dtype_size(dtype);
  auto w = std::make_unique<MpiWork>(this, make_desc("allgather_v", counts[rank_], dtype, what));
  record_volume("allgather_v", static_cast<double>(std::accumulate(counts.begin(), counts.end(), int64_t{0})) *
                                   static_cast<double>(dtype_size(dtype)));
  std::vector<int>& c = w->counts();
  std::vector<int>& displs = w->displs();
  c.assign(counts.begin(), counts.end());
  displs.resize(counts.size());
  int displ = 0;
  for (size_t q = 0; q < counts.size(); ++q) {
    displs[q] = displ;
    displ += c[q];
  }
  const size_t mine = static_cast<size_t>(counts[rank_]) * esize;
  const bool in_place = send == static_cast<const char*>(recv) + static_cast<size_t>(displs[rank_]) * esize;
  HPCT_CHECK(
      in_place || !detail::overlaps(send, mine, recv, total * esize),
      "allgather_v ({}) on communicator {}: send and recv overlap; send must be disjoint from recv or be exactly "
      "block {} of recv (in place)",
      what, name_, rank_);
  const MPI_Datatype t = mpi_datatype(dtype);
  MPI_CHECK(MPI_Iallgatherv(in_place ? MPI_IN_PLACE : send, c[rank_], t, recv, c.data(), displs.data(), t, comm_,
                            w->request()));
  w->start();
  return w;
}

WorkPtr MpiCommunicator::broadcast_async(void* buf, int64_t count, DType dtype, int root, const std::string& what) {
  detail::check_count(count, kMaxCount, "broadcast", what, *this);
  detail::check_peer(root, "root", "broadcast", what, *this);
  check_host(buf, "broadcast", what, *this);
  OpDesc d = make_desc("broadcast", count, dtype, what);
  record_volume("broadcast", static_cast<double>(count) * static_cast<double>(dtype_size(dtype)));
  d.peer_role = "from root";
  d.peer = root;
  auto w = std::make_unique<MpiWork>(this, std::move(d));
  MPI_CHECK(MPI_Ibcast(buf, static_cast<int>(count), mpi_datatype(dtype), root, comm_, w->request()));
  w->start();
  return w;
}

WorkPtr MpiCommunicator::send_async(const void* buf, int64_t count, DType dtype, int peer, int tag,
                                    const std::string& what) {
  detail::check_count(count, kMaxCount, "send", what, *this);
  detail::check_peer(peer, "peer", "send", what, *this);
  check_host(buf, "send", what, *this);
  OpDesc d = make_desc("send", count, dtype, what);
  record_volume("send", static_cast<double>(count) * static_cast<double>(dtype_size(dtype)));
  d.peer_role = "to rank";
  d.peer = peer;
  auto w = std::make_unique<MpiWork>(this, std::move(d));
  MPI_CHECK(MPI_Isend(buf, static_cast<int>(count), mpi_datatype(dtype), peer, tag, comm_, w->request()));
  w->start();
  return w;
}

WorkPtr MpiCommunicator::recv_async(void* buf, int64_t count, DType dtype, int peer, int tag, const std::string& what) {
  detail::check_count(count, kMaxCount, "recv", what, *this);
  detail::check_peer(peer, "peer", "recv", what, *this);
  check_host(buf, "recv", what, *this);
  OpDesc d = make_desc("recv", count, dtype, what);
  record_volume("recv", static_cast<double>(count) * static_cast<double>(dtype_size(dtype)));
  d.peer_role = "from rank";
  d.peer = peer;
  auto w = std::make_unique<MpiWork>(this, std::move(d));
  MPI_CHECK(MPI_Irecv(buf, static_cast<int>(count), mpi_datatype(dtype), peer, tag, comm_, w->request()));
  w->set_expected_recv(count);
  w->start();
  return w;
}

WorkPtr MpiCommunicator::barrier_async(const std::string& what) {
  auto w = std::make_unique<MpiWork>(this, make_desc("barrier", 0, DType::U8, what));
  MPI_CHECK(MPI_Ibarrier(comm_, w->request()));
  w->start();
  return w;
}

}  // namespace hpct::comm
