#pragma once
// CheckpointSaver: runs the checkpoint protocol (train/checkpoint/protocol.hpp, write_checkpoint) for the step loop, in the
// foreground or in the background (checkpoint.async, docs/contracts.md "Background saves").
//
// Background: the step that saves has copied its state into host staging (CheckpointStaging, snapshot mode on the
// CPU) and hands the pieces, which point into that staging, to start(); a thread writes and commits them while training
// goes on, over a duplicate of the world communicator that only that thread drives (MPI_THREAD_MULTIPLE), so its
// collectives never match the step loop's. At most one save is in flight: the next save (before its snapshot overwrites
// the staging), a stop and the end of the run wait() for it. While one is in flight every HDF5 call of the process is
// the writer's (Debian's parallel HDF5 is not thread-safe): the step loop makes none, and whoever needs HDF5 waits first.
// Foreground: start() writes on the calling thread over the same duplicate, then returns.
//
// checkpoint.files = per_node groups the ranks of one node (MPI_Comm_split_type SHARED; the test seam
// HPCT_CKPT_RANKS_PER_NODE=K groups ranks by rank / K instead, so that one machine stands for several nodes) and names
// the file by the node's rank among the nodes' first ranks; single puts every rank in one file.
//
// Every finished save logs one line on rank 0 (where it was written, its size and bandwidth, how long the step loop
// stalled for it, its phases). A failed one (its outcome agreed by every rank, naming the rank that failed and its
// cause) throws a CollectiveError on every rank at the same point: a foreground start(), or the next wait(); poll()
// only notes it (failed()), and the step loop agrees on it in the step's decision, then waits. `latest` and the
// checkpoint it names are untouched. (A rank whose protocol itself threw, a communication timeout, throws an Error.)
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/checkpoint.hpp"
#include "comm/mpi_communicator.hpp"
#include "core/timer.hpp"
#include "parallel/parallel_context.hpp"
#include "train/checkpoint/protocol.hpp"

namespace hpct::train {

class CheckpointSaver {
 public:
  // Collective over pc.world() (duplicates it; files = per_node or single: also the communicator of the ranks that share
  // a file). background: background_possible(). files: checkpoint.files.
  CheckpointSaver(parallel::ParallelContext& pc, std::string root, int keep, bool background,
                  const std::string& files = "per_rank");
  // Whether checkpoint.async = `async` writes in the background (else the foreground, saying why once): the MPI library
  // must provide MPI_THREAD_MULTIPLE. Every checkpoint.files mode can: the shared files' ranks agree over a communicator
  // split here, beforehand, and write with plain pwrite (no MPI-IO, which creates communicators inside the save).
  static bool background_possible(bool async);
  ~CheckpointSaver();  // waits for a save in flight (errors are logged, not thrown)
  CheckpointSaver(const CheckpointSaver&) = delete;
  CheckpointSaver& operator=(const CheckpointSaver&) = delete;

  bool background() const { return background_; }

  struct Job {
    int64_t step = 0;
    const char* why = "";  // the cadence's reason, for the log
    ckpt::Attrs attrs;
    std::vector<ckpt::Piece> pieces;  // into host memory that stays unchanged until the save finishes
    double snapshot_s = 0.0;          // the step loop's copy into staging (and replica check), for the log
    double waited_s = 0.0;            // the step loop's wait for the previous save, for the log
  };
  // Background: starts the thread and returns (no save may be in flight: wait() first). Foreground: writes, logs and
  // returns. Collective (every rank starts the same step).
  void start(Job job);
  // Without blocking: when the save in flight has finished, logs it (or notes its failure). `step`: the step just
  // completed, for the log's "during steps" range.
  void poll(int64_t step);
  // A finished save failed (poll() found it): agree on it over the world, then wait() on every rank.
  bool failed() const { return !failure_.empty(); }
  // Blocks until no save is in flight (logs it); throws a finished save's failure (CollectiveError); returns the
  // seconds waited.
  double wait();
  // wait(), then the background prune of older checkpoints (the end of the run: nothing left running)
  void close();
  bool in_flight() const { return thread_.joinable(); }
  // Seconds the last finished save took, snapshot to commit (0 before the first): the deadline's margin
  double last_duration_s() const { return last_duration_s_; }
  // Estimated seconds left of the save in flight (0 when none): the previous save's duration less the time this one
  // has run (the first one: as long again as it has run so far); the deadline's margin adds it.
  double remaining_s() const;

 private:
  void finish(bool log);
  void
  wait_quietly();  // the destructor's wait: a failure is logged, not thrown  // joins the thread, logs the finished save (or throws its failure)
  void report(const SaveResult& r, double stall_s);

  std::string root_;
  int keep_ = 0;
  bool background_ = true;
  std::unique_ptr<comm::MpiCommunicator> comm_;  // the world's duplicate: driven by one thread at a time
  ShardFiles files_;                             // files_.comm: split from comm_, driven with it
  ckpt::BackgroundRemover pruner_;               // rank 0 prunes older checkpoints on a thread of its own
  Job job_;
  std::thread thread_;
  std::atomic<bool> done_{false};
  SaveResult result_;
  std::string thread_failure_;  // an exception the protocol itself threw (communication), for the main thread
  std::string failure_;         // the agreed failure of a finished save, "" when none
  Timer since_start_;
  int64_t last_step_seen_ = 0;
  double last_duration_s_ = 0.0;
};

}  // namespace hpct::train
