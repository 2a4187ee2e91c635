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
constexpr int kCollectiveSlots = 2;
constexpr size_t kSlotBytes = size_t{4} << 20;

size_t page_round(size_t bytes) { return (std::max<size_t>(bytes, 1) + kPage - 1) / kPage * kPage; }

int64_t sum_of(const std::vector<int64_t>& v) { return std::accumulate(v.begin(), v.end(), int64_t{0}); }
}  // namespace

size_t StagingPlan::bytes() const {
  return static_cast<size_t>(slots) * (slots > 0 ? page_round(slot_bytes) : 0) +
         static_cast<size_t>(p2p_blocks) * (p2p_blocks > 0 ? page_round(p2p_bytes) : 0);
}

StagingPlan collective_staging() {
  StagingPlan p;
  p.slots = kCollectiveSlots;
  p.slot_bytes = kSlotBytes;
  if (const char* v = std::getenv("HPCT_STAGING_CHUNK_BYTES")) {
    char* end = nullptr;
    const long long n = std::strtoll(v, &end, 10);
    HPCT_CHECK(end != v && *end == '\0' && n >= 64 && n <= (1ll << 34),
               "HPCT_STAGING_CHUNK_BYTES = \"{}\": give the staging slot's size in bytes, 64 to 16 GiB", v);
    p.slot_bytes = static_cast<size_t>(n);
  }
  return p;
}

bool uses_host_staging(Device device, comm::DeviceBackend backend) {
  if (device != Device::CPU) return backend == comm::DeviceBackend::HostStagedMpi;
  const char* v = std::getenv("HPCT_STAGE_DEVICE_GROUPS");
  return v != nullptr && std::string(v) == "1";
}

size_t planned_staging_bytes(bool holds_embedding, bool hybrid, int pipeline_transfers, size_t pipeline_bytes) {
  const int groups = 2 + (holds_embedding ? 1 : 0) + (hybrid ? 2 : 0);  // tp, dp, embedding, zero shard and replica
  StagingPlan pipe;
  pipe.p2p_blocks = pipeline_transfers;
  pipe.p2p_bytes = pipeline_bytes;
  return static_cast<size_t>(groups) * collective_staging().bytes() + pipe.bytes();
}

// One operation: a sequence of chunks, each staged into the operation's block, run by the MpiCommunicator and copied
// back, the next staged when the previous completed.
class StagedWork final : public comm::Work {
 public:
  enum class Kind { Allreduce, ReduceScatter, Allgather, Broadcast, Send, Recv, Barrier };
  StagedWork(HostStagedCommunicator* comm, Kind kind, DType dtype, comm::ReduceOp op, const std::string& what)
      : comm_(comm), kind_(kind), dtype_(dtype), op_(op), what_(what), es_(dtype_size(dtype)) {}
  ~StagedWork() override {
    if (done_ || !started_) {
      comm_->forget_(this);
      return;
    }
    try {
      wait();
    } catch (const std::exception& e) {  // a destructor cannot throw: the job cannot go on with this operation lost
      std::fprintf(stderr, "hpctrain: %s\n", e.what());
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }
  void wait() override {
    while (!done_) {
      inner_->wait();
      waited_ms_ += inner_->waited_ms();
      step();
    }
  }
  void wait_host() override {
    wait();
    comm_->synchronize_();
  }
  bool test() override { return step(); }
  // A collective's chunks are posted one after another as they complete; MPI needs every rank to post a communicator's
  // collectives in the same order, so no other collective may be posted between them (post_).
  bool posting_chunks() const { return !done_ && is_collective() && k_ + 1 < chunks_; }

  // Completes the chunk in flight if MPI has, and stages the next; true once the whole operation is done.
  bool step() {
    if (done_) return true;
    if (!inner_->test()) return false;
    finish_chunk_();
    if (++k_ < chunks_) {
      start_chunk_();
      return false;
    }
    if (block_ != nullptr) comm_->release_(block_);
    block_ = nullptr;
    done_ = true;
    comm_->forget_(this);
    return true;
  }

  bool is_collective() const { return kind_ != Kind::Send && kind_ != Kind::Recv; }

  // Set up by the communicator, then start().
  const char* src = nullptr;    // device input
  char* dst = nullptr;          // device output (null: nothing comes back)
  std::vector<int64_t> counts;  // elements per rank (reduce-scatter, allgather forms); {n} for the others
  int peer = -1, tag = 0, root = 0;
  HostStagedCommunicator::Block* block_ = nullptr;

  // Chunks of at most `chunk` elements (per rank block for the reduce-scatter and allgather forms).
  void start(int64_t chunk) {
    chunk_ = std::max<int64_t>(chunk, 1);
    const int64_t longest = counts.empty() ? 0 : *std::max_element(counts.begin(), counts.end());
    chunks_ = std::max<int64_t>(1, (longest + chunk_ - 1) / chunk_);  // the same on every rank: a collective
    started_ = true;
    if (kind_ == Kind::Barrier) {
      inner_ = comm_->mpi_->barrier_async(what_);
      return;
    }
    start_chunk_();
  }

 private:
  char* host() const { return block_->host; }
  int64_t piece(int64_t n) const { return std::clamp<int64_t>(n - k_ * chunk_, 0, chunk_); }  // this chunk's share
  void to_host(size_t off, const char* dev, int64_t n) {
    if (n > 0) kernels::copy_to_host(comm_->exec_, host() + off, dev, n * static_cast<int64_t>(es_));
  }
  void to_device(char* dev, size_t off, int64_t n) {
    if (n <= 0) return;
    kernels::copy_from_host(comm_->exec_, dev, host() + off, n * static_cast<int64_t>(es_));
    block_->copy_back_pending = true;
  }
  // The chunk's elements of every rank, and where they sit in the block (back to back in rank order).
  std::vector<int64_t> pieces(std::vector<int64_t>* offsets) const {
    std::vector<int64_t> p(counts.size());
    offsets->assign(counts.size(), 0);
    int64_t at = 0;
    for (size_t r = 0; r < counts.size(); ++r) {
      p[r] = piece(counts[r]);
      (*offsets)[r] = at;
      at += p[r];
    }
    return p;
  }
  // Where rank r's block starts in the full (device) buffer, in elements.
  int64_t block_start(size_t r) const { return std::accumulate(counts.begin(), counts.begin() + r, int64_t{0}); }

  void start_chunk_() {
    comm::MpiCommunicator& mpi = *comm_->mpi_;
    const int64_t at = k_ * chunk_;  // this chunk's first element within a block
    const size_t me = static_cast<size_t>(comm_->rank());
    switch (kind_) {
      case Kind::Allreduce: {
        const int64_t n = piece(counts[0]);
        to_host(0, src + at * es_, n);
        comm_->synchronize_();
        inner_ = mpi.allreduce_async(host(), n, dtype_, op_, what_);
        return;
      }
      case Kind::ReduceScatter: {
        std::vector<int64_t> off;
        const std::vector<int64_t> p = pieces(&off);
        for (size_t r = 0; r < counts.size(); ++r)
          to_host(static_cast<size_t>(off[r]) * es_, src + (block_start(r) + at) * es_, p[r]);
        comm_->synchronize_();
        inner_ = mpi.reduce_scatter_v_async(host(), host() + off[me] * es_, p, dtype_, op_, what_);
        return;
      }
      case Kind::Allgather: {
        std::vector<int64_t> off;
        const std::vector<int64_t> p = pieces(&off);
        to_host(static_cast<size_t>(off[me]) * es_, src + at * es_, p[me]);
        comm_->synchronize_();
        inner_ = mpi.allgather_v_async(host() + off[me] * es_, host(), p, dtype_, what_);
        return;
      }
      case Kind::Broadcast: {
        const int64_t n = piece(counts[0]);
        if (root == comm_->rank()) {
          to_host(0, src + at * es_, n);
          comm_->synchronize_();
        } else {
          comm_->make_writable_(block_);
        }
        inner_ = mpi.broadcast_async(host(), n, dtype_, root, what_);
        return;
      }
      case Kind::Send: {
        const int64_t n = piece(counts[0]);
        to_host(0, src + at * es_, n);
        comm_->synchronize_();
        inner_ = mpi.send_async(host(), n, dtype_, peer, tag, what_);
        return;
      }
      case Kind::Recv:
        comm_->make_writable_(block_);
        inner_ = mpi.recv_async(host(), piece(counts[0]), dtype_, peer, tag, what_);
        return;
      case Kind::Barrier: return;
    }
  }

  void finish_chunk_() {
    const int64_t at = k_ * chunk_;
    const size_t me = static_cast<size_t>(comm_->rank());
    switch (kind_) {
      case Kind::Allreduce: to_device(dst + at * es_, 0, piece(counts[0])); return;
      case Kind::ReduceScatter: {
        std::vector<int64_t> off;
        const std::vector<int64_t> p = pieces(&off);
        to_device(dst + at * es_, static_cast<size_t>(off[me]) * es_, p[me]);
        return;
      }
      case Kind::Allgather: {
        std::vector<int64_t> off;
        const std::vector<int64_t> p = pieces(&off);
        for (size_t r = 0; r < counts.size(); ++r)
          to_device(dst + (block_start(r) + at) * es_, static_cast<size_t>(off[r]) * es_, p[r]);
        return;
      }
      case Kind::Broadcast:
        if (root != comm_->rank()) to_device(dst + at * es_, 0, piece(counts[0]));
        return;
      case Kind::Recv: to_device(dst + at * es_, 0, piece(counts[0])); return;
      case Kind::Send:
      case Kind::Barrier: return;
    }
  }

  HostStagedCommunicator* comm_;
  Kind kind_;
  DType dtype_;
  comm::ReduceOp op_;
  std::string what_;
  size_t es_;
  int64_t chunk_ = 1, chunks_ = 1, k_ = 0;
  comm::WorkPtr inner_;
  bool started_ = false, done_ = false;
};

HostStagedCommunicator::HostStagedCommunicator(const comm::MpiCommunicator& host, const ExecContext& exec,
                                               const std::string& name, const StagingPlan& plan)
    : mpi_(std::make_unique<comm::MpiCommunicator>(host.mpi_comm(), name, host.options())), exec_(exec), plan_(plan) {
  exec_.sync_guard = nullptr;  // nothing on the stream waits for a peer: the plain stream wait is bounded
  add_blocks_(plan.slots, plan.slot_bytes, false);
  add_blocks_(plan.p2p_blocks, plan.p2p_bytes, true);
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

void HostStagedCommunicator::add_blocks_(int n, size_t bytes, bool p2p) {
  for (int i = 0; i < n; ++i) {
    auto b = std::make_unique<Block>();
    b->bytes = page_round(bytes);
    b->p2p = p2p;
    b->host = static_cast<char*>(std::aligned_alloc(kPage, b->bytes));
    HPCT_CHECK(b->host != nullptr, "rank {} of {}: out of host memory for a {:.1f} MiB staging block", rank(), name(),
               static_cast<double>(b->bytes) / 1048576.0);
    try {
      kernels::host_register(exec_, b->host, static_cast<int64_t>(b->bytes));
    } catch (...) {
      std::free(b->host);
      throw;
    }
    blocks_.push_back(std::move(b));
  }
}

void HostStagedCommunicator::reserve_p2p(int blocks, size_t bytes) {
  HPCT_CHECK(blocks >= 0, "reserve_p2p of {} blocks", blocks);
  add_blocks_(blocks, bytes, true);
  plan_.p2p_blocks += blocks;
  plan_.p2p_bytes = std::max(plan_.p2p_bytes, bytes);
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

HostStagedCommunicator::Block* HostStagedCommunicator::acquire_slot_(const char* op, const std::string& what) {
  for (;;) {
    for (const std::unique_ptr<Block>& b : blocks_)
      if (!b->p2p && !b->in_use) {
        b->in_use = true;
        return b.get();
      }
    HPCT_CHECK(plan_.slots > 0 && !in_flight_.empty(),
               "{} ({}) on the host-staged communicator {}: it has no staging slot for collectives ({} planned)", op,
               what, name(), plan_.slots);
    in_flight_.front()->wait();  // the oldest operation hands its block back (and leaves in_flight_)
  }
}

HostStagedCommunicator::Block* HostStagedCommunicator::acquire_p2p_(size_t bytes) {
  Block* best = nullptr;
  for (const std::unique_ptr<Block>& b : blocks_)
    if (b->p2p && !b->in_use && b->bytes >= bytes && (best == nullptr || b->bytes < best->bytes)) best = b.get();
  if (best != nullptr) best->in_use = true;
  return best;
}

void HostStagedCommunicator::release_(Block* b) { b->in_use = false; }

void HostStagedCommunicator::synchronize_() {
  kernels::synchronize(exec_);
  for (const std::unique_ptr<Block>& b : blocks_) b->copy_back_pending = false;  // every queued copy has run
}

void HostStagedCommunicator::make_writable_(Block* b) {
  if (b->copy_back_pending) synchronize_();
}

void HostStagedCommunicator::forget_(StagedWork* w) {
  auto it = std::find(in_flight_.begin(), in_flight_.end(), w);
  if (it != in_flight_.end()) in_flight_.erase(it);
}

void HostStagedCommunicator::progress() {
  mpi_->progress();
  const std::vector<StagedWork*> now = in_flight_;  // step() may finish a Work, which leaves in_flight_
  for (StagedWork* w : now) w->step();
}

namespace {
// Elements per chunk a block holds: for the forms that stage every rank's block, a share of it per rank.
int64_t chunk_elements(size_t block_bytes, DType dtype, int blocks, const std::string& name) {
  const int64_t n = static_cast<int64_t>(block_bytes / (dtype_size(dtype) * static_cast<size_t>(blocks)));
  HPCT_CHECK(n >= 1,
             "host-staged communicator {}: a staging block of {} bytes cannot hold one element of each of {} "
             "ranks",
             name, block_bytes, blocks);
  return n;
}
}  // namespace

comm::WorkPtr HostStagedCommunicator::post_(std::unique_ptr<StagedWork> w, Block* b, DType dtype, int blocks) {
  // Collectives run on every rank in posting order, chunks included: an earlier collective that still has chunks to
  // post completes first (the ranks would otherwise interleave the chunks of the two at different places).
  if (w->is_collective()) {
    for (auto it = in_flight_.begin(); it != in_flight_.end();) {
      if ((*it)->posting_chunks()) {
        (*it)->wait();
        it = in_flight_.begin();
      } else {
        ++it;
      }
    }
  }
  w->block_ = b;
  const int64_t chunk = b != nullptr ? chunk_elements(b->bytes, dtype, blocks, name()) : 1;
  in_flight_.push_back(w.get());
  w->start(chunk);
  return w;
}

comm::WorkPtr HostStagedCommunicator::allreduce_async(void* buf, int64_t count, DType dtype, comm::ReduceOp op,
                                                      const std::string& what) {
  HPCT_CHECK(count >= 0, "allreduce ({}) on {}: count {} is negative", what, name(), count);
  record_volume("allreduce", static_cast<double>(count) * static_cast<double>(dtype_size(dtype)));
  auto w = std::make_unique<StagedWork>(this, StagedWork::Kind::Allreduce, dtype, op, what);
  w->src = static_cast<const char*>(buf);
  w->dst = static_cast<char*>(buf);
  w->counts = {count};
  return post_(std::move(w), acquire_slot_("allreduce", what), dtype, 1);
}

comm::WorkPtr HostStagedCommunicator::reduce_scatter_async(const void* send, void* recv, int64_t recv_count,
                                                           DType dtype, comm::ReduceOp op, const std::string& what) {
  HPCT_CHECK(recv_count >= 0, "reduce_scatter ({}) on {}: count {} is negative", what, name(), recv_count);
  return reduce_scatter_v_async(send, recv, std::vector<int64_t>(static_cast<size_t>(size()), recv_count), dtype, op,
                                what);
}

comm::WorkPtr HostStagedCommunicator::allgather_async(const void* send, void* recv, int64_t send_count, DType dtype,
                                                      const std::string& what) {
  HPCT_CHECK(send_count >= 0, "allgather ({}) on {}: count {} is negative", what, name(), send_count);
  return allgather_v_async(send, recv, std::vector<int64_t>(static_cast<size_t>(size()), send_count), dtype, what);
}

// The uniform forms above are these with equal counts: the chunks of every rank's block are staged back to back and
// reduced or gathered by MPI's uneven forms (the same reduction per element as the block forms).
comm::WorkPtr HostStagedCommunicator::reduce_scatter_v_async(const void* send, void* recv,
                                                             const std::vector<int64_t>& counts, DType dtype,
                                                             comm::ReduceOp op, const std::string& what) {
  HPCT_CHECK(static_cast<int>(counts.size()) == size(), "reduce_scatter_v ({}) on {}: {} counts for {} ranks", what,
             name(), counts.size(), size());
  record_volume("reduce_scatter", static_cast<double>(sum_of(counts)) * static_cast<double>(dtype_size(dtype)));
  auto w = std::make_unique<StagedWork>(this, StagedWork::Kind::ReduceScatter, dtype, op, what);
  w->src = static_cast<const char*>(send);
  w->dst = static_cast<char*>(recv);
  w->counts = counts;
  return post_(std::move(w), acquire_slot_("reduce_scatter", what), dtype, size());
}

comm::WorkPtr HostStagedCommunicator::allgather_v_async(const void* send, void* recv,
                                                        const std::vector<int64_t>& counts, DType dtype,
                                                        const std::string& what) {
  HPCT_CHECK(static_cast<int>(counts.size()) == size(), "allgather_v ({}) on {}: {} counts for {} ranks", what, name(),
             counts.size(), size());
  record_volume("allgather", static_cast<double>(sum_of(counts)) * static_cast<double>(dtype_size(dtype)));
  auto w = std::make_unique<StagedWork>(this, StagedWork::Kind::Allgather, dtype, comm::ReduceOp::Sum, what);
  w->src = static_cast<const char*>(send);
  w->dst = static_cast<char*>(recv);
  w->counts = counts;
  return post_(std::move(w), acquire_slot_("allgather", what), dtype, size());
}

comm::WorkPtr HostStagedCommunicator::broadcast_async(void* buf, int64_t count, DType dtype, int root,
                                                      const std::string& what) {
  HPCT_CHECK(count >= 0 && root >= 0 && root < size(), "broadcast ({}) on {}: count {}, root {} of {} ranks", what,
             name(), count, root, size());
  record_volume("broadcast", static_cast<double>(count) * static_cast<double>(dtype_size(dtype)));
  auto w = std::make_unique<StagedWork>(this, StagedWork::Kind::Broadcast, dtype, comm::ReduceOp::Sum, what);
  w->src = static_cast<const char*>(buf);
  w->dst = static_cast<char*>(buf);
  w->counts = {count};
  w->root = root;
  return post_(std::move(w), acquire_slot_("broadcast", what), dtype, 1);
}

// A reserved p2p block holds the whole message (no chunks: a receive posted early waits for nothing but its sender);
// without a free one, a collective slot in chunks, as the sender's side does the same.
comm::WorkPtr HostStagedCommunicator::send_async(const void* buf, int64_t count, DType dtype, int peer, int tag,
                                                 const std::string& what) {
  HPCT_CHECK(count >= 0, "send ({}) on {}: count {} is negative", what, name(), count);
  const size_t bytes = static_cast<size_t>(count) * dtype_size(dtype);
  record_volume("send", static_cast<double>(bytes));
  auto w = std::make_unique<StagedWork>(this, StagedWork::Kind::Send, dtype, comm::ReduceOp::Sum, what);
  w->src = static_cast<const char*>(buf);
  w->counts = {count};
  w->peer = peer;
  w->tag = tag;
  Block* b = acquire_p2p_(bytes);
  return post_(std::move(w), b != nullptr ? b : acquire_slot_("send", what), dtype, 1);
}

comm::WorkPtr HostStagedCommunicator::recv_async(void* buf, int64_t count, DType dtype, int peer, int tag,
                                                 const std::string& what) {
  HPCT_CHECK(count >= 0, "recv ({}) on {}: count {} is negative", what, name(), count);
  const size_t bytes = static_cast<size_t>(count) * dtype_size(dtype);
  record_volume("recv", static_cast<double>(bytes));
  auto w = std::make_unique<StagedWork>(this, StagedWork::Kind::Recv, dtype, comm::ReduceOp::Sum, what);
  w->dst = static_cast<char*>(buf);
  w->counts = {count};
  w->peer = peer;
  w->tag = tag;
  Block* b = acquire_p2p_(bytes);
  return post_(std::move(w), b != nullptr ? b : acquire_slot_("recv", what), dtype, 1);
}

comm::WorkPtr HostStagedCommunicator::barrier_async(const std::string& what) {
  return post_(std::make_unique<StagedWork>(this, StagedWork::Kind::Barrier, DType::U8, comm::ReduceOp::Sum, what),
               nullptr, DType::U8, 1);
}

}  // namespace hpct::parallel
