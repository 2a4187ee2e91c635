#pragma once
// The one training loop of every hpctrain app, over a TrainTask (train/loop/train_task.hpp). Read training_loop.cpp top to
// bottom: set-up (gradient sync, optimizer, loss scaler, checkpoint staging, resume), then per optimizer step the
// micro-batches through the pipeline schedule ("none" at pp = 1), the data-parallel gradient sync, the global norm,
// the optimizer step under the loss scaler, metrics, evaluation, the collective checkpoint / stop decision; then the
// PERFORMANCE line.
//
// RunSession is what a run has before its model: the typed shared configuration, the launch facts, the device, the
// ParallelContext (the DP x TP x PP grid and its communicators), and the step's micro-batch split and schedule. A
// task is built over a session, then run_training(session, task) runs it.
#include <cstdint>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "parallel/launch_env.hpp"
#include "parallel/parallel_context.hpp"
#include "parallel/pipeline_schedule.hpp"
#include "train/loop/run_config.hpp"
#include "train/loop/run_device.hpp"
#include "train/loop/run_environment.hpp"
#include "train/loop/train_task.hpp"

namespace hpct::train {

// The peak MFU is measured against (docs/performance.md): log.peak_tflops when set (> 0); else, on CUDA, the figure
// of the device table (core/device_peaks.hpp) for the GPU's name at the run's precision (bf16 dense, tf32, fp16 or
// fp32); else unknown (the CPU, or a GPU the table does not know): tflops 0, MFU null.
struct MfuPeak {
  double tflops = 0.0;
  std::string source;  // for the log: "log.peak_tflops", "H100/H200 SXM bf16 (device table)", or why unknown
};
MfuPeak resolve_mfu_peak(double deck_peak_tflops, Device device, const std::string& gpu_name, Precision precision);

class RunSession {
 public:
  // Collective over MPI_COMM_WORLD: the launch check, train.device, the ParallelContext; then the global batch split
  // (train.global_batch % (DP x train.micro_batch) == 0, else a UsageError naming both keys) and this stage's schedule.
  // schema: the app's deck schema (resume compares a checkpoint's deck on the keys that must not change).
  RunSession(const char* app, const Config& deck, const ConfigSchema& schema, const RunConfig& cfg,
             const RunOptions& opts);
  RunSession(const RunSession&) = delete;
  RunSession& operator=(const RunSession&) = delete;

  const std::string app;
  const Config& deck;
  const ConfigSchema& schema;
  const RunConfig cfg;
  const RunOptions opts;
  const parallel::LaunchEnv launch;  // Slurm / launcher facts, the node-local rank
  const RunDevice device;            // declared before pc: it outlives everything that computes
  const MfuPeak mfu_peak;            // the device's peak at this precision, for MFU
  parallel::ParallelContext pc;
  const int64_t n_micro;                         // micro-batches per step on this rank: GB / (DP x MB)
  const std::vector<parallel::Action> schedule;  // this stage's actions of a step

  const ExecContext& ctx() { return pc.exec(); }  // with the ParallelContext's bounded synchronize on CUDA
  int dp() const { return pc.dp_size(); }
  int dp_rank() const { return pc.dp_rank(); }
};

// Runs the task's training to its last step, or to a stop (signal, deadline) after a checkpoint. Returns the exit
// code: 0 finished, 3 stopped after writing a checkpoint (requeue me; docs/contracts.md). An error propagates as the
// exception it is, after the device communicators are aborted (ParallelContext::abort_device_communicators: the
// task's device memory is freed next, and nothing may still wait for a peer then).
int run_training(RunSession& run, TrainTask& task);

// MFU of a step (docs/performance.md): (job FLOP/s / world size) / one device's peak; nullopt when the peak is unknown.
std::optional<double> model_flops_utilization(double step_flops, double step_ms, int world_size, double peak_tflops);

}  // namespace hpct::train
