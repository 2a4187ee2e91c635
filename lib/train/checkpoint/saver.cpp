#include "train/checkpoint/saver.hpp"

#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <utility>

#include "core/error.hpp"
#include "ckpt/shared_shard.hpp"
#include "core/format.hpp"
#include "core/mpi_check.hpp"
#include "core/log.hpp"

namespace hpct::train {

namespace {

MPI_Comm mpi_world(parallel::ParallelContext& pc) {
  auto* world = dynamic_cast<comm::MpiCommunicator*>(&pc.world());
  HPCT_CHECK(world != nullptr, "the checkpoint writer needs the MPI world communicator");
  return world->mpi_comm();
}

// The ranks that share a file and its name (checkpoint.files); collective over world.
ShardFiles shard_files(MPI_Comm world, const std::string& mode) {
  ShardFiles f;
  f.mode = mode;
  if (mode == "per_rank") return f;
  HPCT_CHECK(mode == "per_node" || mode == "single", "checkpoint.files = {}", mode);
  if (mode == "single") {
    MPI_CHECK(MPI_Comm_dup(world, &f.comm));
    f.file_name = ckpt::kSingleFileName;
    return f;
  }
  const ckpt::NodeGroup node = ckpt::node_group(world);
  f.comm = node.comm;
  f.file_name = ckpt::node_file_name(node.index);
  return f;
}

}  // namespace

CheckpointSaver::CheckpointSaver(parallel::ParallelContext& pc, std::string root, int keep, bool background,
                                 const std::string& files)
    : root_(std::move(root)),
      keep_(keep),
      background_(background),
      comm_(std::make_unique<comm::MpiCommunicator>(mpi_world(pc), "checkpoint writer", pc.world().options())),
      files_(shard_files(comm_->mpi_comm(), files)) {}

bool CheckpointSaver::background_possible(bool async) {
  if (!async) return false;
  int provided = MPI_THREAD_SINGLE;
  MPI_Query_thread(&provided);
  if (provided < MPI_THREAD_MULTIPLE) {
    log_info("checkpoint.async: the MPI library does not provide MPI_THREAD_MULTIPLE: checkpoints are written in the "
             "foreground");
    return false;
  }
  return true;
}

CheckpointSaver::~CheckpointSaver() {
  wait_quietly();
  if (files_.comm != MPI_COMM_NULL) MPI_Comm_free(&files_.comm);
}

void CheckpointSaver::wait_quietly() {
  if (!thread_.joinable()) return;
  // unwinding from another error: finish the save (its collectives need every rank's writer), say how it ended
  try {
    finish(true);
    if (!failure_.empty()) log_warn("{}", failure_);
  } catch (const std::exception& e) {
    log_warn("checkpoint step {} (background write): {}", job_.step, e.what());
  }
}

void CheckpointSaver::close() {
  wait();
  pruner_.wait_and_warn();
}

void CheckpointSaver::start(Job job) {
  HPCT_CHECK(!thread_.joinable(), "checkpoint step {}: the save of step {} is still in flight (wait() first)", job.step,
             job_.step);
  job_ = std::move(job);
  since_start_.reset();
  last_step_seen_ = job_.step;
  if (!background_) {
    const SaveResult r = write_checkpoint(*comm_, root_, keep_, job_.attrs, job_.pieces, &pruner_, files_);
    last_duration_s_ = r.seconds + job_.snapshot_s;
    result_ = r;
    report(r, job_.waited_s + job_.snapshot_s + r.seconds);
    if (!failure_.empty()) throw CollectiveError(failure_, __FILE__, __LINE__);  // every rank, here
    return;
  }
  done_.store(false, std::memory_order_relaxed);
  thread_failure_.clear();
  thread_ = std::thread([this] {
    try {
      result_ = write_checkpoint(*comm_, root_, keep_, job_.attrs, job_.pieces, &pruner_, files_);
    } catch (const Error& e) {
      thread_failure_ = fmt::format("rank {}: {}", comm_->rank(), e.cause());
    } catch (const std::exception& e) {
      thread_failure_ = fmt::format("rank {}: {}", comm_->rank(), e.what());
    }
    done_.store(true, std::memory_order_release);
  });
}

void CheckpointSaver::poll(int64_t step) {
  if (!thread_.joinable()) return;
  last_step_seen_ = step;
  if (done_.load(std::memory_order_acquire)) finish(true);  // a failure is kept for the next wait()
}

double CheckpointSaver::wait() {
  Timer waited;
  if (thread_.joinable()) finish(true);
  if (!failure_.empty()) throw CollectiveError(failure_, __FILE__, __LINE__);
  return waited.seconds();
}

double CheckpointSaver::remaining_s() const {
  if (!thread_.joinable()) return 0.0;
  const double ran = since_start_.seconds();
  const double expected = last_duration_s_ > 0.0 ? last_duration_s_ : 2.0 * ran;
  return std::max(expected - ran, 0.0);
}

void CheckpointSaver::finish(bool log) {
  Timer join;
  thread_.join();
  const double waited = join.seconds();
  if (!thread_failure_.empty()) {
    // this rank's own failure (the protocol itself threw): this rank reports it
    HPCT_FAIL("checkpoint step {} (background write) failed: {}", job_.step, thread_failure_);
  }
  last_duration_s_ = result_.seconds + job_.snapshot_s;
  // the step loop stalled for the snapshot, for what it waited for the previous save before it, and for this wait
  if (log) report(result_, job_.snapshot_s + job_.waited_s + waited);
}

void CheckpointSaver::report(const SaveResult& r, double stall_s) {
  if (!r.error.empty()) {
    const std::string latest = [&] {
      try {
        const std::string dir = ckpt::resolve_latest(root_);
        return dir.empty() ? std::string("no checkpoint yet") : "`latest` still names " + dir;
      } catch (const Error&) {
        return std::string("`latest` is untouched");
      }
    }();
    const std::string msg = fmt::format("checkpoint step {} ({}) was not written: {}; {} (the run stops: fix the cause "
                                        "and resume with --set checkpoint.resume=latest)",
                                        job_.step, background_ ? "background write" : "write", r.error, latest);
    // every rank holds the agreed outcome (the rank that failed names itself in r.error): the caller throws it on every
    // rank at the same point (rank 0 prints it)
    failure_ = msg;
    return;
  }
  const ckpt::SavePhases& ph = r.phases;
  const double total_s = job_.snapshot_s + r.seconds;
  const std::string where = !background_ ? std::string("foreground")
                            : last_step_seen_ > job_.step
                                ? fmt::format("background, during steps {}..{}", job_.step + 1, last_step_seen_)
                                : std::string("background, no step overlapped it");
  log_info("checkpoint ({}) step {} -> {} | {} in {:.2f} s ({:.1f} MiB/s) | {}: step loop stalled {:.3f} s, write "
           "{:.2f} s | rank 0: snapshot {:.3f} s, crc {:.3f}, metadata {:.3f}, write {:.3f}, fsync {:.3f}, manifests "
           "{:.3f}, index {:.3f}, commit {:.3f}, prune {:.3f}",
           job_.why, job_.step, r.dir, human_bytes(static_cast<double>(r.total_bytes)), total_s,
           r.total_bytes / 1048576.0 / std::max(total_s, 1e-9), where, stall_s, r.seconds, job_.snapshot_s, ph.crc_s,
           ph.metadata_s, ph.write_s, ph.fsync_s, r.manifests_s, ph.index_s, ph.commit_s, ph.prune_s);
}

}  // namespace hpct::train
