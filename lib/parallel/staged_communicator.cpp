#include "parallel/staged_communicator.hpp"

#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <numeric>
#include <utility>

#include "core/error.hpp"
#include "kernels/kernels.hpp"

namespace hpct::parallel {

namespace {
constexpr size_t kPage = 4096;  // blocks are whole pages: cudaHostRegister locks pages

size_t payload(int64_t count, DType dtype) {
  HPCT_CHECK(count >= 0, "host-staged communicator: element count {} is negative", count);
  return static_cast<size_t>(count) * dtype_size(dtype);
}

int64_t sum_of(const std::vector<int64_t>& counts) { return std::accumulate(counts.begin(), counts.end(), int64_t{0}); }
}  // namespace

// One MPI operation on a staging block, and the copy of its result back to the device when it completes.
class StagedWork final : public comm::Work {
 public:
  StagedWork(HostStagedCommunicator* comm, comm::WorkPtr inner, HostStagedCommunicator::Block* block, void* device_dst,
             size_t block_offset, size_t bytes)
      : comm_(comm), inner_(std::move(inner)), block_(block), dst_(device_dst), offset_(block_offset), bytes_(bytes) {}
  ~StagedWork() override {
    if (done_) return;
    try {
      wait();
    } catch (const std::exception& e) {  // a destructor cannot throw: the job cannot go on with this operation lost
      std::fprintf(stderr, "hpctrain: %s\n", e.what());
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }
  void wait() override {
    if (done_) return;
    inner_->wait();
    waited_ms_ = inner_->waited_ms();
    finish_();
  }
  void wait_host() override {
    wait();
    comm_->synchronize_();
  }
  bool test() override {
    if (done_) return true;
    if (!inner_->test()) return false;
    finish_();
    return true;
  }

 private:
  void finish_() {
    const bool copy_back = dst_ != nullptr && bytes_ > 0;
    if (copy_back) kernels::copy_from_host(comm_->exec_, dst_, block_->host + offset_, static_cast<int64_t>(bytes_));
    if (block_ != nullptr) comm_->release_(block_, copy_back);
    done_ = true;
  }
  HostStagedCommunicator* comm_;
  comm::WorkPtr inner_;
  HostStagedCommunicator::Block* block_;  // null for a barrier
  void* dst_;                             // where the result goes on the device; null: nothing comes back (send)
  size_t offset_, bytes_;
  bool done_ = false;
};

HostStagedCommunicator::HostStagedCommunicator(const comm::MpiCommunicator& host, const ExecContext& exec,
                                               const std::string& name)
    : mpi_(std::make_unique<comm::MpiCommunicator>(host.mpi_comm(), name, host.options())), exec_(exec) {
  exec_.sync_guard = nullptr;  // nothing on the stream waits for a peer: the plain stream wait is bounded
}

HostStagedCommunicator::~HostStagedCommunicator() {
  // A copy back may still read a block: the stream must be done with them before they are unlocked and freed. If it
  // cannot be waited for (a failed device), the blocks are left allocated rather than freed under a pending copy.
  try {
    if (!blocks_.empty()) synchronize_();
    for (const std::unique_ptr<Block>& b : blocks_) {
      kernels::host_unregister(exec_, b->host);
      std::free(b->host);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hpctrain: host-staged communicator %s: staging blocks not freed: %s\n", name().c_str(),
                 e.what());
  }
}

size_t HostStagedCommunicator::staging_bytes() const {
  size_t n = 0;
  for (const std::unique_ptr<Block>& b : blocks_) n += b->bytes;
  return n;
}

size_t HostStagedCommunicator::staging_blocks_in_use() const {
  size_t n = 0;
  for (const std::unique_ptr<Block>& b : blocks_) n += b->in_use ? 1 : 0;
  return n;
}

HostStagedCommunicator::Block* HostStagedCommunicator::acquire_(size_t bytes) {
  const size_t need = (std::max<size_t>(bytes, 1) + kPage - 1) / kPage * kPage;
  Block* best = nullptr;
  for (const std::unique_ptr<Block>& b : blocks_)
    if (!b->in_use && b->bytes >= need && (best == nullptr || b->bytes < best->bytes)) best = b.get();
  if (best == nullptr) {
    auto b = std::make_unique<Block>();
    b->host = static_cast<char*>(std::aligned_alloc(kPage, need));
    HPCT_CHECK(b->host != nullptr, "rank {} of {}: out of host memory for a {:.1f} MiB staging block", rank(), name(),
               static_cast<double>(need) / 1048576.0);
    b->bytes = need;
    try {
      kernels::host_register(exec_, b->host, static_cast<int64_t>(need));
    } catch (...) {
      std::free(b->host);
      throw;
    }
    best = b.get();
    blocks_.push_back(std::move(b));
  }
  best->in_use = true;
  return best;
}

void HostStagedCommunicator::release_(Block* b, bool copy_back_queued) {
  b->in_use = false;
  b->copy_back_pending = b->copy_back_pending || copy_back_queued;
}

void HostStagedCommunicator::synchronize_() {
  kernels::synchronize(exec_);
  for (const std::unique_ptr<Block>& b : blocks_) b->copy_back_pending = false;  // every queued copy has run
}

void HostStagedCommunicator::stage_in_(Block* b, size_t offset, const void* src, size_t bytes) {
  if (bytes > 0) kernels::copy_to_host(exec_, b->host + offset, src, static_cast<int64_t>(bytes));
  synchronize_();  // MPI reads the block from the host: the copy (and any copy back before it) must have run
}

void HostStagedCommunicator::make_writable_(Block* b) {
  if (b->copy_back_pending) synchronize_();
}

comm::WorkPtr HostStagedCommunicator::make_work_(comm::WorkPtr inner, Block* b, void* device_dst, size_t block_offset,
                                                 size_t bytes) {
  return std::make_unique<StagedWork>(this, std::move(inner), b, device_dst, block_offset, bytes);
}

comm::WorkPtr HostStagedCommunicator::allreduce_async(void* buf, int64_t count, DType dtype, comm::ReduceOp op,
                                                      const std::string& what) {
  const size_t bytes = payload(count, dtype);
  record_volume("allreduce", static_cast<double>(bytes));
  Block* b = acquire_(bytes);
  stage_in_(b, 0, buf, bytes);
  return make_work_(mpi_->allreduce_async(b->host, count, dtype, op, what), b, buf, 0, bytes);
}

// The block holds the whole input, as MPI's in-place reduce-scatter wants it; the result is block rank() of it.
comm::WorkPtr HostStagedCommunicator::reduce_scatter_async(const void* send, void* recv, int64_t recv_count,
                                                           DType dtype, comm::ReduceOp op, const std::string& what) {
  const size_t share = payload(recv_count, dtype), total = share * static_cast<size_t>(size());
  record_volume("reduce_scatter", static_cast<double>(total));
  Block* b = acquire_(total);
  stage_in_(b, 0, send, total);
  const size_t own = share * static_cast<size_t>(rank());
  return make_work_(mpi_->reduce_scatter_async(b->host, b->host + own, recv_count, dtype, op, what), b, recv, own,
                    share);
}

// This rank's input goes to its block of the staged output (MPI's in-place allgather); all of it comes back.
comm::WorkPtr HostStagedCommunicator::allgather_async(const void* send, void* recv, int64_t send_count, DType dtype,
                                                      const std::string& what) {
  const size_t share = payload(send_count, dtype), total = share * static_cast<size_t>(size());
  record_volume("allgather", static_cast<double>(total));
  Block* b = acquire_(total);
  const size_t own = share * static_cast<size_t>(rank());
  stage_in_(b, own, send, share);
  return make_work_(mpi_->allgather_async(b->host + own, b->host, send_count, dtype, what), b, recv, 0, total);
}

comm::WorkPtr HostStagedCommunicator::reduce_scatter_v_async(const void* send, void* recv,
                                                             const std::vector<int64_t>& counts, DType dtype,
                                                             comm::ReduceOp op, const std::string& what) {
  HPCT_CHECK(static_cast<int>(counts.size()) == size(), "reduce_scatter_v ({}) on {}: {} counts for {} ranks", what,
             name(), counts.size(), size());
  const size_t total = payload(sum_of(counts), dtype);
  record_volume("reduce_scatter_v", static_cast<double>(total));
  Block* b = acquire_(total);
  stage_in_(b, 0, send, total);
  const size_t own = payload(std::accumulate(counts.begin(), counts.begin() + rank(), int64_t{0}), dtype);
  return make_work_(mpi_->reduce_scatter_v_async(b->host, b->host + own, counts, dtype, op, what), b, recv, own,
                    payload(counts[static_cast<size_t>(rank())], dtype));
}

comm::WorkPtr HostStagedCommunicator::allgather_v_async(const void* send, void* recv,
                                                        const std::vector<int64_t>& counts, DType dtype,
                                                        const std::string& what) {
  HPCT_CHECK(static_cast<int>(counts.size()) == size(), "allgather_v ({}) on {}: {} counts for {} ranks", what, name(),
             counts.size(), size());
  const size_t total = payload(sum_of(counts), dtype);
  record_volume("allgather_v", static_cast<double>(total));
  Block* b = acquire_(total);
  const size_t own = payload(std::accumulate(counts.begin(), counts.begin() + rank(), int64_t{0}), dtype);
  stage_in_(b, own, send, payload(counts[static_cast<size_t>(rank())], dtype));
  return make_work_(mpi_->allgather_v_async(b->host + own, b->host, counts, dtype, what), b, recv, 0, total);
}

// The root's buffer is the source and stays as it is; the others receive into the block and copy it back.
comm::WorkPtr HostStagedCommunicator::broadcast_async(void* buf, int64_t count, DType dtype, int root,
                                                      const std::string& what) {
  const size_t bytes = payload(count, dtype);
  record_volume("broadcast", static_cast<double>(bytes));
  Block* b = acquire_(bytes);
  const bool is_root = root == rank();
  if (is_root) stage_in_(b, 0, buf, bytes);
  else
    make_writable_(b);
  return make_work_(mpi_->broadcast_async(b->host, count, dtype, root, what), b, is_root ? nullptr : buf, 0, bytes);
}

comm::WorkPtr HostStagedCommunicator::send_async(const void* buf, int64_t count, DType dtype, int peer, int tag,
                                                 const std::string& what) {
  const size_t bytes = payload(count, dtype);
  record_volume("send", static_cast<double>(bytes));
  Block* b = acquire_(bytes);
  stage_in_(b, 0, buf, bytes);
  return make_work_(mpi_->send_async(b->host, count, dtype, peer, tag, what), b, nullptr, 0, 0);
}

comm::WorkPtr HostStagedCommunicator::recv_async(void* buf, int64_t count, DType dtype, int peer, int tag,
                                                 const std::string& what) {
  const size_t bytes = payload(count, dtype);
  record_volume("recv", static_cast<double>(bytes));
  Block* b = acquire_(bytes);
  make_writable_(b);
  return make_work_(mpi_->recv_async(b->host, count, dtype, peer, tag, what), b, buf, 0, bytes);
}

comm::WorkPtr HostStagedCommunicator::barrier_async(const std::string& what) {
  return make_work_(mpi_->barrier_async(what), nullptr, nullptr, 0, 0);
}

}  // namespace hpct::parallel
