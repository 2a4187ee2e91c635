#pragma once
// What every training app's run shares besides the loop (train/training_loop.hpp): the command-line options, data
// paths, the shared deck keys, the launch facts, the output directory, the collective checkpoint / stop decision of
// every step (signals, train.deadline, checkpoint cadences), and the steady-state median. The device is
// train/run_device.hpp, loss scaling train/loss_scaling.hpp, resuming train/resume.hpp.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/checkpoint.hpp"
#include "comm/communicator.hpp"
#include "core/config.hpp"
#include "core/timer.hpp"
#include "optim/loss_scaler.hpp"
#include "optim/optimizer.hpp"
#include "optim/segment.hpp"
#include "parallel/grad_sync.hpp"
#include "parallel/param_gather.hpp"
#include "parallel/launch_env.hpp"
#include "parallel/parallel_context.hpp"
#include "kernels/exec_context.hpp"
#include "tensor/device.hpp"
#include "tensor/tensor.hpp"

namespace hpct::train {

struct RunOptions {
  std::string out_dir;    // receives train.log, metrics.jsonl and checkpoints/
  std::string dump_path;  // optional: write the app's reference dump (PyTorch cross-check) there
};

// The data directory: $HPCT_DATA_DIR, default <repository>/data.
std::string data_dir();
// Resolves a data.* path: absolute paths stay; relative ones resolve against data_dir().
std::string resolve_data_path(const std::string& path);

double unix_now();  // seconds since the epoch, wall clock

// The deck keys every training app shares, added to a schema inside its [parallel] section: parallel.zero,
// parallel.bucket_mb, parallel.overlap; then the [comm] (comm.timeout_s) and [checkpoint] sections (every,
// every_minutes, keep, at_end, async, resume).
void add_run_keys(ConfigSchema& s);
// The optimizer's segments: the ranges this rank updates (whole tensors, or its ZeRO-1 shares), with their gradients.
// ZeRO-3 (gather): their masters in the parameter shard.
std::vector<optim::Segment> owned_segments(const parallel::GradSync& sync, parallel::ParamGather* gather = nullptr);
// Weight-decay flags of a parameter layout (any model's ParamSpec list with a `decay` member), by tensor index.
template <class Layout>
std::vector<bool> decay_flags(const Layout& layout) {
  std::vector<bool> d;
  for (const auto& p : layout) d.push_back(p.decay);
  return d;
}

// How the job was started (parallel/launch_env.hpp), collective over MPI_COMM_WORLD: call it on every rank before the
// ParallelContext, so that srun tasks that did not wire up into one MPI job fail first (UsageError), not with a layout
// error about a world of 1. The trainers keep the result: its local_rank is what the CUDA backend will choose the GPU
// by (device = local_rank % device count); log it with parallel::log_launch_env after the run's first log line.
parallel::LaunchEnv read_launch(const comm::CommOptions& opts);
// The launch facts a checkpoint records in index.h5's attributes: restart_count (SLURM_RESTART_COUNT, 0 outside
// Slurm) and, under Slurm, slurm_job_id: which job (and which requeue of it) wrote the checkpoint.
void add_launch_attrs(ckpt::Attrs& a, const parallel::LaunchEnv& launch);

// Creates the output directory (rank 0), waits for it, and sends the log to <out_dir>/train.log.
// Returns the checkpoint root <out_dir>/checkpoints.
std::string prepare_output(parallel::ParallelContext& pc, const std::string& out_dir);

struct RunConfig;  // train/run_config.hpp

// The per-step checkpoint and stop decision (docs/contracts.md): SIGUSR1/SIGTERM, train.deadline (with a margin of two
// steps, 1.5 checkpoint writes, what remains of a background write in flight, and 2 s) and checkpoint.every_minutes are
// agreed by one allreduce(MAX) over the world, so every rank saves and stops at the same step; checkpoint.every and
// checkpoint.at_end are local.
class CheckpointCadence {
 public:
  explicit CheckpointCadence(const RunConfig& cfg);
  struct Decision {
    bool save = false, stop = false;
    const char* why = "";  // the reason, for the log: a signal name, "train.deadline", "every_minutes", "every", "end"
    bool save_failed = false;  // some rank found its background save failed: every rank waits for it (and throws)
  };
  // After optimizer step s of steps, which took step_ms; in_flight_s: the estimated remaining seconds of a background
  // write still in flight (a stop must wait for it before its own save); save_failed: this rank found its finished
  // background save failed.
  Decision decide(comm::Communicator& world, int64_t s, int64_t steps, double step_ms, double in_flight_s = 0.0,
                  bool save_failed = false);
  // A save started (restarts the minutes cadence).
  void started();
  // A checkpoint write finished and took `seconds`, snapshot to commit (sizes the deadline margin).
  void finished(double seconds);

 private:
  int64_t every_ = 0, deadline_ = 0;
  double minutes_ = 0.0, last_ckpt_s_ = 0.0;
  bool at_end_ = true;
  Timer since_;
};

// Median of x without its first element (the warm-up step); NaN when empty.
double median_after_first(const std::vector<double>& x);

// Micro-batches per step on each rank: train.global_batch / (DP x train.micro_batch); a UsageError naming both keys when
// it does not divide (the run and the memory plan check it alike).
int64_t micro_batches_per_step(const RunConfig& cfg, int dp);
// The forwards every DP rank runs when it evaluates its block of n_eval items, micro_batch at a time: with sharded
// parameters (ZeRO-3) every forward gathers over DP, so each rank runs as many as the largest block needs; else 0 (each
// rank as many as its own block needs).
int64_t evaluation_forwards(bool params_sharded, int64_t n_eval, int dp, int micro_batch);

}  // namespace hpct::train
