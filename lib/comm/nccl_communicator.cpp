#include "comm/nccl_communicator.hpp"

#include <numeric>
#include <cstdio>
#include <exception>
#include <utility>

#include "core/shared_object.hpp"
#include "comm/nccl_check.hpp"
#include "comm/nccl_wait.hpp"
#include "comm/wait_backoff.hpp"
#include "core/cuda_check.hpp"

namespace hpct::comm {

using detail::OpDesc;

ncclDataType_t nccl_datatype(DType t) {
  switch (t) {
    case DType::F32: return ncclFloat32;
    case DType::F64: return ncclFloat64;
    case DType::I32: return ncclInt32;
    case DType::I64: return ncclInt64;
    case DType::U8: return ncclUint8;
    case DType::BF16: return ncclBfloat16;  // NCCL >= 2.10; reduced in fp32 per step, rounded to nearest even
    case DType::F16: return ncclFloat16;    // likewise: each combination in fp32, rounded to nearest even
  }
  HPCT_FAIL("dtype {} has no NCCL datatype", static_cast<int>(t));
}

std::string detail::nccl_init_timeout_message(const std::string& name, int rank, int size, int cuda_device,
                                              double timeout_s) {
  return fmt::format("NCCL initialisation (ncclCommInitRankConfig) on communicator {} (rank {} of {}, CUDA device {}) "
                     "timed out after {:g} s (comm.timeout_s): a rank of this group stalled or died before joining, or "
                     "NCCL cannot reach it over the network (check NCCL_SOCKET_IFNAME, the interface NCCL bootstraps "
                     "over; NCCL_DEBUG=INFO shows where it waits); the job aborts",
                     name, rank, size, cuda_device, timeout_s);
}

namespace {

// A non-blocking communicator's calls return ncclInProgress while NCCL finishes them in the background.
bool nccl_accepted(ncclResult_t rc) { return rc == ncclSuccess || rc == ncclInProgress; }

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Avg: return ncclAvg;
    case ReduceOp::Max: return ncclMax;
    case ReduceOp::Min: return ncclMin;
  }
  HPCT_FAIL("unknown ReduceOp {}", static_cast<int>(op));
}

OpDesc make_desc(const char* op, int64_t count, DType dtype, const std::string& what) {
  OpDesc d;
  d.op = op;
  d.bytes = static_cast<size_t>(count) * dtype_size(dtype);
  d.dtype = dtype;
  d.what = what;
  return d;
}

// NCCL reads and writes device memory (or managed memory); a plain host pointer is a caller's mistake.
void check_device(const void* p, size_t bytes, const char* op, const std::string& what, const Communicator& comm) {
  if (bytes == 0) return;
  cudaPointerAttributes attr{};
  const cudaError_t rc = cudaPointerGetAttributes(&attr, p);
  if (rc != cudaSuccess) (void)cudaGetLastError();
  HPCT_CHECK(rc == cudaSuccess && (attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged),
             "{} ({}) on communicator {}: the buffer is not CUDA device memory; NcclCommunicator takes device buffers "
             "(use MpiCommunicator for host buffers)",
             op, what, comm.name());
}

}  // namespace

// ---- NcclWork ---------------------------------------------------------------------------------------------------

// One NCCL operation, followed on its stream by a completion event (taken from the communicator's pool and given
// back when the Work leaves the registry: a cudaStreamWaitEvent already issued on it keeps waiting for the record it
// saw, so the event can be recorded again by a later operation).
class NcclWork final : public Work {
 public:
  NcclWork(NcclCommunicator* comm, OpDesc desc, cudaEvent_t event)
      : comm_(comm), desc_(std::move(desc)), event_(event) {}
  ~NcclWork() override;
  void wait() override;       // stream-ordered: the input stream waits on event_
  void wait_host() override;  // the host polls event_, bounded by timeout_s
  bool test() override;

 private:
  friend class NcclCommunicator;
  bool poll_();  // true once complete or failed (error_ set); never throws
  void deregister_();
  void throw_if_failed_() {
    if (!error_.empty()) HPCT_FAIL("{}", error_);
  }

  NcclCommunicator* comm_;
  OpDesc desc_;
  cudaEvent_t event_;
  bool registered_ = false;
  bool done_ = false;
  std::string error_;
};

bool NcclWork::poll_() {
  if (done_) return true;
  if (comm_->aborted_) {
    done_ = true;
    error_ = fmt::format("{}: the NCCL communicator was aborted after an earlier failure",
                         detail::describe(desc_, *comm_));
    return true;
  }
  if (event_ == nullptr) return false;  // issued inside a group that has not ended yet
  const cudaError_t e = cudaEventQuery(event_);
  if (e == cudaSuccess) {
    done_ = true;
    return true;
  }
  if (e != cudaErrorNotReady) {
    (void)cudaGetLastError();
    done_ = true;
    error_ = fmt::format("{} failed: {} ({})", detail::describe(desc_, *comm_), cudaGetErrorString(e),
                         cudaGetErrorName(e));
    return true;
  }
  ncclResult_t async = ncclSuccess;
  const ncclResult_t rc = ncclCommGetAsyncError(comm_->comm_, &async);
  if (rc != ncclSuccess || (async != ncclSuccess && async != ncclInProgress)) {
    const ncclResult_t bad = rc != ncclSuccess ? rc : async;
    done_ = true;
    error_ = fmt::format("{} failed: NCCL: {} ({}); the NCCL communicator was aborted", detail::describe(desc_, *comm_),
                         ncclGetErrorString(bad), ncclGetLastError(comm_->comm_));
    comm_->abort_();
    return true;
  }
  return false;
}

void NcclWork::deregister_() {
  if (!registered_) return;
  auto& v = comm_->in_flight_;
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i] == this) {
      v[i] = v.back();
      v.pop_back();
      break;
    }
  if (event_ != nullptr) comm_->give_event_(event_);
  event_ = nullptr;
  auto& g = comm_->group_works_;
  for (size_t i = 0; i < g.size(); ++i)
    if (g[i] == this) {
      g.erase(g.begin() + static_cast<std::ptrdiff_t>(i));
      break;
    }
  registered_ = false;
}

void NcclWork::wait() {
  if (!registered_) {
    throw_if_failed_();
    return;
  }
  HPCT_CHECK(event_ != nullptr || done_ || comm_->aborted_, "{}: wait() called before group_end() of its group",
             detail::describe(desc_, *comm_));
  if (!poll_()) {  // still running on the GPU (poll_ also checked NCCL's asynchronous error): order, do not block
    const cudaError_t rc = cudaStreamWaitEvent(comm_->input_stream_, event_, 0);
    if (rc != cudaSuccess) {
      (void)cudaGetLastError();
      const std::string what = detail::describe(desc_, *comm_);
      deregister_();
      HPCT_FAIL("{}: cudaStreamWaitEvent of the input stream on its completion failed: {} ({})", what,
                cudaGetErrorString(rc), cudaGetErrorName(rc));
    }
  }
  deregister_();
  throw_if_failed_();
}

void NcclWork::wait_host() {
  if (!registered_) {
    throw_if_failed_();
    return;
  }
  HPCT_CHECK(event_ != nullptr || done_ || comm_->aborted_, "{}: wait_host() called before group_end() of its group",
             detail::describe(desc_, *comm_));
  const bool complete = wait_with_backoff([this] { return poll_(); }, comm_->options().timeout_s, waited_ms_);
  if (!complete) {
    const std::string msg = detail::timeout_message(desc_, *comm_);
    comm_->abort_();
    done_ = true;
    deregister_();
    HPCT_FAIL("{} (the NCCL communicator was aborted)", msg);
  }
  deregister_();
  throw_if_failed_();
}

bool NcclWork::test() {
  if (!registered_) {
    throw_if_failed_();
    return true;
  }
  if (!poll_()) return false;
  deregister_();
  throw_if_failed_();
  return true;
}

NcclWork::~NcclWork() {
  if (!registered_) return;
  if (std::uncaught_exceptions() > 0) {  // an error is on its way to main(), which aborts the job
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

// ---- NcclCommunicator -------------------------------------------------------------------------------------------

NcclCommunicator::NcclCommunicator(MpiCommunicator& bootstrap, std::string name, CommOptions options)
    : name_(std::move(name)), options_(options), rank_(bootstrap.rank()), size_(bootstrap.size()) {
  HPCT_CHECK(options_.timeout_s > 0, "communicator {}: comm.timeout_s must be > 0 seconds, is {}", name_,
             options_.timeout_s);
  CUDA_CHECK(cudaGetDevice(&cuda_device_));
  try {
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&input_ready_, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&last_done_, cudaEventDisableTiming));
    CUDA_CHECK(cudaMalloc(&barrier_scratch_, 3 * sizeof(int32_t)));
    CUDA_CHECK(cudaMemset(barrier_scratch_, 0, 3 * sizeof(int32_t)));  // sums of zeros stay zero
    ncclUniqueId id{};
    if (rank_ == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    // Bounded by the bootstrap's timeout (MPI_Ibcast polled with back-off): a rank 0 that failed above aborts the job
    // instead of hanging the others.
    bootstrap.broadcast(&id, static_cast<int64_t>(sizeof(id)), DType::U8, 0, fmt::format("NCCL id of {}", name_));
    // Non-blocking: the call returns at once (ncclInProgress) and NCCL joins the peers in the background; a peer that
    // is stuck (not dead) would block ncclCommInitRank forever, here the wait is bounded by timeout_s.
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t state = ncclCommInitRankConfig(&comm_, size_, id, rank_, &config);
    if (nccl_accepted(state)) state = comm_ != nullptr ? await_state_() : ncclInternalError;
    if (state != ncclSuccess) {
      const std::string msg =
          state == ncclInProgress
              ? detail::nccl_init_timeout_message(name_, rank_, size_, cuda_device_, options_.timeout_s)
              : fmt::format("NCCL initialisation (ncclCommInitRankConfig) on communicator {} (rank {} of {}, CUDA "
                            "device {}) failed: NCCL: {} ({}); a rank of this group failed, or NCCL cannot reach it "
                            "(NCCL_SOCKET_IFNAME; NCCL_DEBUG=INFO for details); the job aborts",
                            name_, rank_, size_, cuda_device_, ncclGetErrorString(state), ncclGetLastError(comm_));
      // Stops the background initialisation (it watches the abort flag) and frees the communicator; the job is
      // failing already, so its own result changes nothing.
      if (comm_ != nullptr) (void)ncclCommAbort(comm_);
      comm_ = nullptr;
      HPCT_FAIL("{} (the NCCL communicator was aborted)", msg);
    }
  } catch (...) {
    if (barrier_scratch_) cudaFree(barrier_scratch_);
    if (last_done_) cudaEventDestroy(last_done_);
    if (input_ready_) cudaEventDestroy(input_ready_);
    if (stream_) cudaStreamDestroy(stream_);
    throw;
  }
}

NcclCommunicator::~NcclCommunicator() {
  const bool unwinding = std::uncaught_exceptions() > 0;
  while (!in_flight_.empty()) {
    NcclWork* w = in_flight_.back();
    if (!unwinding && !aborted_) {
      try {
        w->wait_host();  // removes w from in_flight_ (the streams are destroyed below: the host waits)
      } catch (const std::exception& e) {
        std::fprintf(stderr, "%s\n(while destroying communicator %s: aborting the job)\n", e.what(), name_.c_str());
        std::fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, 1);
      }
    }
    w->deregister_();  // no-op when wait() did it
    w->comm_ = nullptr;
  }
  if (comm_ && !aborted_) {
    if (unwinding) {
      abort_();  // an error is on its way to main(): no waiting on peers that may be the cause
    } else {
      // Non-blocking: ncclCommFinalize flushes the communicator and returns ncclInProgress until it is quiescent;
      // wait for that (bounded by timeout_s), then ncclCommDestroy frees the local resources without waiting on
      // peers. A failure or a timeout aborts instead (nothing can be thrown from here).
      ncclResult_t state = ncclCommFinalize(comm_);
      if (nccl_accepted(state)) state = await_state_();
      if (state == ncclSuccess) {
        state = ncclCommDestroy(comm_);
        if (!nccl_accepted(state))
          std::fprintf(stderr, "warning: ncclCommDestroy of communicator %s (rank %d of %d) failed: %s\n",
                       name_.c_str(), rank_, size_, ncclGetErrorString(state));
      } else {
        const std::string why = state == ncclInProgress
                                    ? fmt::format("timed out after {:g} s (comm.timeout_s)", options_.timeout_s)
                                    : fmt::format("failed: {}", ncclGetErrorString(state));
        std::fprintf(stderr, "warning: finalising NCCL communicator %s (rank %d of %d) %s: aborting it instead\n",
                     name_.c_str(), rank_, size_, why.c_str());
        abort_();
      }
      std::fflush(stderr);
    }
  }
  for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
  if (barrier_scratch_) cudaFree(barrier_scratch_);
  if (last_done_) cudaEventDestroy(last_done_);
  if (input_ready_) cudaEventDestroy(input_ready_);
  if (stream_) cudaStreamDestroy(stream_);
}

void NcclCommunicator::abort_() {
  if (aborted_) return;
  aborted_ = true;
  // Frees the communicator; its kernels and background work stop, so the stream drains. Only called on the way to
  // an error (or during one): its own result changes nothing.
  (void)ncclCommAbort(comm_);
}

ncclResult_t NcclCommunicator::await_state_() {
  double waited_ms = 0.0;  // not a Work's wait: not accounted
  return detail::await_nccl_state(
      [this] {
        ncclResult_t state = ncclInProgress;
        const ncclResult_t rc = ncclCommGetAsyncError(comm_, &state);
        return rc != ncclSuccess ? rc : state;
      },
      options_.timeout_s, waited_ms);
}

void NcclCommunicator::await_enqueued_(const OpDesc* desc) {
  const ncclResult_t state = await_state_();
  if (state == ncclSuccess) return;
  const std::string what = desc != nullptr ? detail::describe(*desc, *this)
                                           : fmt::format("group of {} operation(s) ending in group_end() on "
                                                         "communicator {} (rank {} of {})",
                                                         group_works_.size(), name_, rank_, size_);
  const std::string msg =
      state == ncclInProgress
          ? fmt::format("{} timed out after {:g} s (comm.timeout_s) while NCCL set it up (it connects to the peers on "
                        "first use): a rank of this group stalled or died, or NCCL cannot reach it "
                        "(NCCL_SOCKET_IFNAME); the job aborts",
                        what, options_.timeout_s)
          : fmt::format("{} failed: NCCL: {} ({})", what, ncclGetErrorString(state), ncclGetLastError(comm_));
  abort_();
  HPCT_FAIL("{} (the NCCL communicator was aborted)", msg);
}

cudaEvent_t NcclCommunicator::take_event_() {
  if (!free_events_.empty()) {
    cudaEvent_t e = free_events_.back();
    free_events_.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return e;
}

void NcclCommunicator::check_usable_(const char* op, const std::string& what) const {
  HPCT_CHECK(!aborted_,
             "{} ({}) on communicator {}: the NCCL communicator was aborted after an earlier timeout or "
             "error; the job must stop",
             op, what, name_);
  int dev = -1;
  CUDA_CHECK(cudaGetDevice(&dev));
  HPCT_CHECK(dev == cuda_device_, "{} ({}) on communicator {}: the current CUDA device is {}, the communicator's is {}",
             op, what, name_, dev, cuda_device_);
}

template <typename Enqueue>
WorkPtr NcclCommunicator::issue_(OpDesc desc, Enqueue&& enqueue) {
  check_usable_(desc.op, desc.what);
  CUDA_CHECK(cudaEventRecord(input_ready_, input_stream_));
  CUDA_CHECK(cudaStreamWaitEvent(stream_, input_ready_, 0));
  const ncclResult_t rc = enqueue();
  HPCT_CHECK(nccl_accepted(rc), "{} failed: {} ({})", detail::describe(desc, *this), ncclGetErrorString(rc),
             ncclGetLastError(comm_));
  cudaEvent_t ev = nullptr;
  if (group_depth_ == 0) {  // inside a group the operation is only enqueued by ncclGroupEnd: record then
    // Non-blocking: the kernel is on stream_ only once the state has left ncclInProgress (checked also after a
    // plain ncclSuccess: one atomic read).
    await_enqueued_(&desc);
    ev = take_event_();
    const cudaError_t rec = cudaEventRecord(ev, stream_);
    if (rec != cudaSuccess) {
      give_event_(ev);
      CUDA_CHECK(rec);
    }
    CUDA_CHECK(cudaEventRecord(last_done_, stream_));
    last_op_ = desc;  // described only if a timeout message needs it (unfinished())
    last_group_ = 0;
  }
  auto w = std::make_unique<NcclWork>(this, std::move(desc), ev);
  in_flight_.push_back(w.get());
  if (group_depth_ > 0) group_works_.push_back(w.get());
  w->registered_ = true;
  return w;
}

void NcclCommunicator::group_start() {
  check_usable_("group_start", "");
  NCCL_CHECK(ncclGroupStart());
  ++group_depth_;
}

void NcclCommunicator::group_end() {
  HPCT_CHECK(group_depth_ > 0, "group_end() on communicator {} without group_start()", name_);
  --group_depth_;
  const ncclResult_t rc = ncclGroupEnd();  // non-blocking: may return ncclInProgress when the depth reaches 0
  if (group_depth_ > 0) {
    NCCL_CHECK(rc);
    return;
  }
  if (!nccl_accepted(rc)) {
    const std::string msg = fmt::format("group of {} operation(s) ending in group_end() on communicator {} (rank {} of "
                                        "{}) failed: NCCL: {} ({})",
                                        group_works_.size(), name_, rank_, size_, ncclGetErrorString(rc),
                                        ncclGetLastError(comm_));
    abort_();  // the group's Works report the abort
    HPCT_FAIL("{} (the NCCL communicator was aborted)", msg);
  }
  await_enqueued_(nullptr);
  for (NcclWork* w : group_works_) {
    w->event_ = take_event_();
    CUDA_CHECK(cudaEventRecord(w->event_, stream_));
  }
  if (!group_works_.empty()) {
    CUDA_CHECK(cudaEventRecord(last_done_, stream_));
    last_op_ = group_works_.back()->desc_;
    last_group_ = group_works_.size();
  }
  group_works_.clear();
}

void NcclCommunicator::connect_p2p(int peer, const std::string& what) {
  detail::check_peer(peer, "peer", "connect_p2p", what, *this);
  group_start();
  WorkPtr s, r;
  try {
    s = send_async(barrier_scratch_ + 1, 1, DType::I32, peer, 0, what);
    r = recv_async(barrier_scratch_ + 2, 1, DType::I32, peer, 0, what);
  } catch (...) {
    abort_();  // a group left open cannot be ended cleanly; the error is on its way to main()
    throw;
  }
  group_end();
  r->wait_host();
  s->wait_host();
}

std::string NcclCommunicator::async_error() const {
  if (aborted_)
    return fmt::format("NCCL communicator {} (rank {} of {}) was aborted after an earlier failure", name_, rank_,
                       size_);
  ncclResult_t state = ncclSuccess;
  const ncclResult_t rc = ncclCommGetAsyncError(comm_, &state);
  const ncclResult_t bad = rc != ncclSuccess ? rc : state;
  if (bad == ncclSuccess || bad == ncclInProgress) return "";
  return fmt::format("NCCL error on communicator {} (rank {} of {}): {} ({})", name_, rank_, size_,
                     ncclGetErrorString(bad), ncclGetLastError(comm_));
}

std::string NcclCommunicator::unfinished() const {
  if (last_op_.op[0] == '\0' || aborted_) return "";
  const cudaError_t e = cudaEventQuery(last_done_);
  if (e == cudaSuccess) return "";
  std::string d = detail::describe(last_op_, *this);
  if (last_group_ > 0) d = fmt::format("group of {} operation(s), the last {}", last_group_, d);
  if (e == cudaErrorNotReady) return d;
  (void)cudaGetLastError();
  return fmt::format("{} (its completion event reports {})", d, cudaGetErrorString(e));
}

void NcclCommunicator::progress() {
  std::string first_error;
  for (size_t i = 0; i < in_flight_.size();) {
    NcclWork* w = in_flight_[i];
    if (!w->poll_()) {
      ++i;
      continue;
    }
    if (first_error.empty()) first_error = w->error_;
    w->deregister_();  // swaps the last Work into slot i
  }
  if (!first_error.empty()) HPCT_FAIL("{}", first_error);
}

WorkPtr NcclCommunicator::allreduce_async(void* buf, int64_t count, DType dtype, ReduceOp op, const std::string& what) {
  detail::check_count(count, -1, "allreduce", what, *this);
  OpDesc d = make_desc("allreduce", count, dtype, what);
  record_volume("allreduce", static_cast<double>(count) * static_cast<double>(dtype_size(dtype)));
  d.set_reduce(op);
  check_device(buf, d.bytes, d.op, what, *this);
  return issue_(std::move(d), [&] {
    return ncclAllReduce(buf, buf, static_cast<size_t>(count), nccl_datatype(dtype), nccl_op(op), comm_, stream_);
  });
}

WorkPtr NcclCommunicator::reduce_scatter_async(const void* send, void* recv, int64_t recv_count, DType dtype,
                                               ReduceOp op, const std::string& what) {
  detail::check_count(recv_count, -1, "reduce_scatter", what, *this);
  OpDesc d = make_desc("reduce_scatter", recv_count, dtype, what);
  record_volume("reduce_scatter", static_cast<double>(recv_count) * size() * static_cast<double>(dtype_size(dtype)));
  d.set_reduce(op);
  const size_t block = d.bytes;
  const bool in_place = recv == static_cast<const char*>(send) + rank_ * block;  // NCCL's own in-place form
  HPCT_CHECK(in_place || !detail::overlaps(send, size_ * block, recv, block),
             "reduce_scatter ({}) on communicator {}: send and recv overlap; recv must be disjoint from send or be "
             "exactly block {} of send (in place)",
             what, name_, rank_);
  check_device(send, size_ * block, d.op, what, *this);
  check_device(recv, block, d.op, what, *this);
  return issue_(std::move(d), [&] {
    return ncclReduceScatter(send, recv, static_cast<size_t>(recv_count), nccl_datatype(dtype), nccl_op(op), comm_,
                             stream_);
  });
}

WorkPtr NcclCommunicator::allgather_async(const void* send, void* recv, int64_t send_count, DType dtype,
                                          const std::string& what) {
  detail::check_count(send_count, -1, "allgather", what, *this);
  OpDesc d = make_desc("allgather", send_count, dtype, what);
  record_volume("allgather", static_cast<double>(send_count) * size() * static_cast<double>(dtype_size(dtype)));
  const size_t block = d.bytes;
  const bool in_place = send == static_cast<const char*>(recv) + rank_ * block;  // NCCL's own in-place form
  HPCT_CHECK(in_place || !detail::overlaps(send, block, recv, size_ * block),
             "allgather ({}) on communicator {}: send and recv overlap; send must be disjoint from recv or be exactly "
             "block {} of recv (in place)",
             what, name_, rank_);
  check_device(send, block, d.op, what, *this);
  check_device(recv, size_ * block, d.op, what, *this);
  return issue_(std::move(d), [&] {
    return ncclAllGather(send, recv, static_cast<size_t>(send_count), nccl_datatype(dtype), comm_, stream_);
  });
}

namespace {
// Checks the counts of a _v collective; returns rank's displacement (elements) and the total.
std::pair<int64_t, int64_t> v_layout(const std::vector<int64_t>& counts, int rank, const char* op,
                                     const std::string& what, const Communicator& comm) {
  HPCT_CHECK(static_cast<int>(counts.size()) == comm.size(),
             "{} ({}) on communicator {}: {} counts given, one per rank ({}) expected", op, what, comm.name(),
             counts.size(), comm.size());
  int64_t displ = 0, total = 0;
  for (int q = 0; q < comm.size(); ++q) {
    detail::check_count(counts[q], -1, op, what, comm);
    if (q == rank) displ = total;
    total += counts[q];
  }
  return {displ, total};
}
}  // namespace

WorkPtr NcclCommunicator::reduce_scatter_v_async(const void* send, void* recv, const std::vector<int64_t>& counts,
                                                 DType dtype, ReduceOp op, const std::string& what) {
  const auto [displ, total] = v_layout(counts, rank_, "reduce_scatter_v", what, *this);
  const size_t esize = dtype_size(dtype);
  OpDesc d = make_desc("reduce_scatter_v", counts[rank_], dtype, what);
  record_volume("reduce_scatter_v", static_cast<double>(std::accumulate(counts.begin(), counts.end(), int64_t{0})) *
                                        static_cast<double>(dtype_size(dtype)));
  d.set_reduce(op);
  const bool in_place = recv == static_cast<const char*>(send) + displ * esize;
  HPCT_CHECK(in_place || !detail::overlaps(send, total * esize, recv, d.bytes),
             "reduce_scatter_v ({}) on communicator {}: send and recv overlap; recv must be disjoint from send or be "
             "exactly block {} of send (in place)",
             what, name_, rank_);
  check_device(send, total * esize, d.op, what, *this);
  check_device(recv, d.bytes, d.op, what, *this);
  return issue_(std::move(d), [&]() -> ncclResult_t {
    // Block q is reduced onto rank q; recvbuff is only written on the root.
    ncclResult_t rc = ncclGroupStart();
    int64_t off = 0;
    for (int q = 0; q < size_ && nccl_accepted(rc); ++q) {
      rc = ncclReduce(static_cast<const char*>(send) + off * esize, recv, static_cast<size_t>(counts[q]),
                      nccl_datatype(dtype), nccl_op(op), q, comm_, stream_);
      off += counts[q];
    }
    const ncclResult_t end = ncclGroupEnd();  // ncclInProgress at depth 0: issue_ waits for the enqueue
    return nccl_accepted(rc) ? end : rc;
  });
}

WorkPtr NcclCommunicator::allgather_v_async(const void* send, void* recv, const std::vector<int64_t>& counts,
                                            DType dtype, const std::string& what) {
  const auto [displ, total] = v_layout(counts, rank_, "allgather_v", what, *this);
  const size_t esize = dtype_size(dtype);
  OpDesc d = make_desc("allgather_v", counts[rank_], dtype, what);
  record_volume("allgather_v", static_cast<double>(std::accumulate(counts.begin(), counts.end(), int64_t{0})) *
                                   static_cast<double>(dtype_size(dtype)));
  const bool in_place = send == static_cast<const char*>(recv) + displ * esize;
  HPCT_CHECK(
      in_place || !detail::overlaps(send, d.bytes, recv, total * esize),
      "allgather_v ({}) on communicator {}: send and recv overlap; send must be disjoint from recv or be exactly "
      "block {} of recv (in place)",
      what, name_, rank_);
  check_device(send, d.bytes, d.op, what, *this);
  check_device(recv, total * esize, d.op, what, *this);
  return issue_(std::move(d), [&]() -> ncclResult_t {
    // Rank q broadcasts its block into place q of everyone's recv; sendbuff is only read on the root.
    ncclResult_t rc = ncclGroupStart();
    int64_t off = 0;
    for (int q = 0; q < size_ && nccl_accepted(rc); ++q) {
      char* block = static_cast<char*>(recv) + off * esize;
      rc = ncclBroadcast(q == rank_ ? send : block, block, static_cast<size_t>(counts[q]), nccl_datatype(dtype), q,
                         comm_, stream_);
      off += counts[q];
    }
    const ncclResult_t end = ncclGroupEnd();  // ncclInProgress at depth 0: issue_ waits for the enqueue
    return nccl_accepted(rc) ? end : rc;
  });
}

WorkPtr NcclCommunicator::broadcast_async(void* buf, int64_t count, DType dtype, int root, const std::string& what) {
  detail::check_count(count, -1, "broadcast", what, *this);
  detail::check_peer(root, "root", "broadcast", what, *this);
  OpDesc d = make_desc("broadcast", count, dtype, what);
  record_volume("broadcast", static_cast<double>(count) * static_cast<double>(dtype_size(dtype)));
  d.peer_role = "from root";
  d.peer = root;
  check_device(buf, d.bytes, d.op, what, *this);
  return issue_(std::move(d), [&] {
    return ncclBroadcast(buf, buf, static_cast<size_t>(count), nccl_datatype(dtype), root, comm_, stream_);
  });
}

WorkPtr NcclCommunicator::send_async(const void* buf, int64_t count, DType dtype, int peer, int /*tag*/,
                                     const std::string& what) {
  detail::check_count(count, -1, "send", what, *this);
  detail::check_peer(peer, "peer", "send", what, *this);
  OpDesc d = make_desc("send", count, dtype, what);
  record_volume("send", static_cast<double>(count) * static_cast<double>(dtype_size(dtype)));
  d.peer_role = "to rank";
  d.peer = peer;
  check_device(buf, d.bytes, d.op, what, *this);
  return issue_(std::move(d),
                [&] { return ncclSend(buf, static_cast<size_t>(count), nccl_datatype(dtype), peer, comm_, stream_); });
}

WorkPtr NcclCommunicator::recv_async(void* buf, int64_t count, DType dtype, int peer, int /*tag*/,
                                     const std::string& what) {
  detail::check_count(count, -1, "recv", what, *this);
  detail::check_peer(peer, "peer", "recv", what, *this);
  OpDesc d = make_desc("recv", count, dtype, what);
  record_volume("recv", static_cast<double>(count) * static_cast<double>(dtype_size(dtype)));
  d.peer_role = "from rank";
  d.peer = peer;
  check_device(buf, d.bytes, d.op, what, *this);
  return issue_(std::move(d),
                [&] { return ncclRecv(buf, static_cast<size_t>(count), nccl_datatype(dtype), peer, comm_, stream_); });
}

WorkPtr NcclCommunicator::barrier_async(const std::string& what) {
  return issue_(make_desc("barrier", 0, DType::I32, what), [&] {
    return ncclAllReduce(barrier_scratch_, barrier_scratch_, 1, ncclInt32, ncclSum, comm_, stream_);
  });
}

int nccl_version() {
  int v = 0;
  return ncclGetVersion(&v) == ncclSuccess ? v : 0;
}

std::string nccl_library() {
  const int v = nccl_version();
  return fmt::format("nccl {}.{}.{} {}", v / 10000, v / 100 % 100, v % 100,
                     shared_object_of(reinterpret_cast<const void*>(&ncclGetVersion)));
}

}  // namespace hpct::comm
