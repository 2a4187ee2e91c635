#pragma once
// What every training app's run shares (train_gpt, train_resnet), so that the loops stay model-specific and the
// contracts of DESIGN.md §4 live in one place: the device, the deadline check, the output directory, resuming
// (resolve, verify, compatibility, or moving an earlier run's checkpoints aside), the collective checkpoint / stop
// decision of every step (signals, train.deadline, checkpoint cadences), and the steady-state median.
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
#include "optim/segment.hpp"
#include "parallel/grad_sync.hpp"
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

// Resolves a data.* path: absolute paths stay; relative ones resolve against $HPCT_DATA_DIR
// (default <repository>/data).
std::string resolve_data_path(const std::string& path);

// Sum of n device floats, through the one-float device buffer sum_dev and one explicit copy to the host, after which
// it synchronizes ctx (the host reads the copy): all work queued on ctx.stream before has completed on return.
float sum_to_host(const ExecContext& ctx, Tensor& sum_dev, const float* x, int64_t n);

double unix_now();  // seconds since the epoch, wall clock

// The deck keys every training app shares, added to a schema inside its [parallel] section: parallel.zero,
// parallel.bucket_mb, parallel.overlap; then the [comm] (comm.timeout_s) and [checkpoint] sections (every,
// every_minutes, keep, at_end, resume).
void add_run_keys(ConfigSchema& s);
// The data-parallel gradient sync those keys describe.
parallel::GradSyncOptions grad_sync_options(const Config& deck);
// The optimizer's segments: the ranges this rank updates (whole tensors, or its ZeRO-1 shares), with their gradients.
std::vector<optim::Segment> owned_segments(const parallel::GradSync& sync);
// Weight-decay flags of a parameter layout (any model's ParamSpec list with a `decay` member), by tensor index.
template <class Layout>
std::vector<bool> decay_flags(const Layout& layout) {
  std::vector<bool> d;
  for (const auto& p : layout) d.push_back(p.decay);
  return d;
}

// train.device (DESIGN.md §4), the decision alone: pure, so that tests inject what the machine has.
//   requested       "cpu" | "cuda" | "auto" (the deck's value)
//   build_gap       "" when this build has the CUDA backend and NCCL; else why not ("this build has no CUDA backend ...")
//   unusable_ranks  how many of the world_size ranks have no usable CUDA device (0: every rank has one)
//   reason          why, for the messages: the first such rank's CUDA runtime error ("rank 3 on vm02: ...")
// "cpu" -> CPU. "cuda" -> CUDA, else a UsageError naming the cause and the fix (--set train.device=cpu). "auto" -> CUDA
// when every rank can use it, else CPU with `note` set to the one line rank 0 logs:
//   train.device = auto: no usable CUDA device (CUDA driver version is insufficient ...): running on the CPU
struct DeviceDecision {
  Device device = Device::CPU;
  std::string note;  // "" unless auto fell back to the CPU
};
DeviceDecision decide_device(const std::string& requested, const std::string& build_gap, int unusable_ranks,
                             int world_size, const std::string& reason, const std::string& deck_path);

// train.precision (exec_context.hpp) on the decided device, pure: on CUDA the requested precision; on the CPU fp32 (the
// CPU backend computes nothing else). Non-fp32 with train.device = "cpu" is a UsageError naming the fix; with "auto"
// that fell back to the CPU it becomes fp32 and `note` gets the line rank 0 logs.
Precision decide_precision(const std::string& requested_device, Device decided, Precision requested,
                           const std::string& deck_path, std::string* note);

// The [train] keys of mixed precision (both apps): train.precision, train.loss_scale, train.loss_scale_init,
// train.loss_scale_window, train.loss_scale_min. Add them inside the [train] section.
void add_precision_keys(ConfigSchema& s);
// The loss scaling those keys describe, for the run's effective precision (RunDevice::exec().precision).
optim::LossScaleConfig loss_scale_config(const Config& deck, Precision precision);

// The loss scaler in a trainer's step (both apps alike):
//   log_precision          one log line: the precision of the products, and the loss scaling when active
//   add_loss_scaler_attrs  checkpoint attributes: precision, loss_scale.mode, loss_scale.scale, loss_scale.good_steps
//   restore_loss_scaler    a resumed run continues the checkpoint's dynamic scale (absent attributes: the deck's init)
//   scaled_optimizer_step  the step's update under the scaler (below)
//   add_loss_scale_metrics metrics.jsonl fields loss_scale (S of the step) and skipped (1) when scaling is active
//   loss_scale_suffix      " | scale S" (and " | SKIPPED") for the step line, "" without scaling
void log_precision(const ExecContext& ctx, const optim::LossScaler& scaler);
void add_loss_scaler_attrs(ckpt::Attrs& a, const ExecContext& ctx, const optim::LossScaler& scaler);
void restore_loss_scaler(optim::LossScaler& scaler, const ckpt::Attrs& a);
void log_skipped_step(int64_t step, const optim::LossScaler::Outcome& o);  // (scaled_optimizer_step's line)
void add_loss_scale_metrics(std::vector<std::pair<std::string, std::optional<double>>>& rec,
                            const optim::LossScaler& scaler, const optim::LossScaler::Outcome& o);
std::string loss_scale_suffix(const optim::LossScaler& scaler, const optim::LossScaler::Outcome& o);
// One optimizer step (AdamW, Sgd: clip_scale and step) under the loss scaler. sumsq: the global sum of squares of the
// scaled gradients, the same on every rank, so all ranks decide alike. A finite step updates with grad_scale = clip / S
// (clip from the unscaled norm); a skipped one updates nothing and logs one line. Returns the scaler's outcome (norm:
// the unscaled gradient norm).
template <class Optimizer>
optim::LossScaler::Outcome scaled_optimizer_step(const ExecContext& ctx, Optimizer& opt, optim::LossScaler& scaler,
                                                 double sumsq, int64_t step, double lr) {
  const optim::LossScaler::Outcome o = scaler.update(sumsq, step);
  if (o.skip)
    log_skipped_step(step, o);
  else
    opt.step(ctx, static_cast<float>(lr), optim::LossScaler::grad_scale(opt.clip_scale(o.norm), o));
  return o;
}
// The loss gradient of step `step` on a rank of DP rank dp_rank: dloss x S. Test hook (tests/integration/
// check_loss_scale.py): the environment variable HPCT_TEST_INF_DLOSS_STEPS="3,4" makes the ranks of DP rank 0 use an
// infinite loss gradient on those steps, a deterministic stand-in for an fp16 overflow (fp32 on the CPU cannot overflow
// at any representable scale); the other DP ranks see it only through the gradient reduction, as with a real overflow.
float scaled_loss_gradient(float dloss, const optim::LossScaler& scaler, int64_t step, int dp_rank);

// The run's device: train.device resolved collectively, and on CUDA the rank's GPU and compute stream. Construct it on
// every rank after read_launch and before the ParallelContext (which takes exec(), and builds its NCCL groups on the
// selected GPU); keep it alive longer than everything that computes (declare it first).
//  - "cpu": no CUDA call and no collective; exec() = {CPU, no stream}, as before there was a CUDA backend.
//  - "cuda" / "auto": every rank's CUDA availability (kernels::cuda_unavailable_reason) is gathered over the world, so
//    all ranks decide alike (a node without GPUs cannot split the job) with decide_device.
//  - on CUDA: GPU local_rank % visible devices (kernels::cuda_select_device, launch.local_rank from MPI's shared-memory
//    split); a UsageError on every rank when some node has more ranks than GPUs (one GPU cannot host two ranks of an
//    NCCL communicator); one compute stream per rank (kernels::CudaStream), exec() = {CUDA, that stream, precision}.
//  - exec().precision: train.precision as decide_precision resolves it (fp32 on the CPU).
class RunDevice {
 public:
  RunDevice(const Config& deck, const parallel::LaunchEnv& launch, const comm::CommOptions& opts);
  ~RunDevice();
  RunDevice(const RunDevice&) = delete;
  RunDevice& operator=(const RunDevice&) = delete;

  const ExecContext& exec() const { return exec_; }
  Device device() const { return exec_.device; }
  // Rank 0 logs one line: the auto fallback note, or the selected GPU (name, index, memory); nothing for "cpu".
  // Call it after prepare_output, so that the line also reaches train.log.
  void log() const;

 private:
  struct Cuda;  // the compute stream (CUDA builds only)
  ExecContext exec_;
  std::string line_;
  std::unique_ptr<Cuda> cuda_;
};

// How the job was started (parallel/launch_env.hpp), collective over MPI_COMM_WORLD: call it on every rank before the
// ParallelContext, so that srun tasks that did not wire up into one MPI job fail first (UsageError), not with a layout
// error about a world of 1. The trainers keep the result: its local_rank is what the CUDA backend will choose the GPU
// by (device = local_rank % device count); log it with parallel::log_launch_env after the run's first log line.
parallel::LaunchEnv read_launch(const comm::CommOptions& opts);
// The launch facts a checkpoint records in index.h5's attributes: restart_count (SLURM_RESTART_COUNT, 0 outside
// Slurm) and, under Slurm, slurm_job_id: which job (and which requeue of it) wrote the checkpoint.
void add_launch_attrs(ckpt::Attrs& a, const parallel::LaunchEnv& launch);

// train.deadline: 0 or a future Unix time (UsageError naming the key otherwise).
void check_deadline(const Config& deck);

// Creates the output directory (rank 0), waits for it, and sends the log to <out_dir>/train.log.
// Returns the checkpoint root <out_dir>/checkpoints.
std::string prepare_output(parallel::ParallelContext& pc, const std::string& out_dir);

// checkpoint.resume, collective over pc.world(): "latest" / a path -> the checkpoint is verified (every shard, split
// over the ranks), its deck checked against this one on the keys that must not change, and opened; "none" or no
// checkpoint yet -> a fresh start, and an earlier run's checkpoints under ckpt_root are moved aside to
// <ckpt_root>.prev-<UTC time> (never mixed, never deleted). `reader` is null for a fresh start.
struct ResumePoint {
  std::unique_ptr<ckpt::Reader> reader;
  std::string dir;
  int64_t step = 0;  // optimizer steps the checkpoint completed
  int64_t checked_bytes = 0;
  double seconds = 0.0;
};
ResumePoint open_resume(parallel::ParallelContext& pc, const Config& deck, const ConfigSchema& schema,
                        const std::string& ckpt_root, int64_t steps);

// The per-step checkpoint and stop decision (DESIGN.md §4): SIGUSR1/SIGTERM, train.deadline (with a margin of two
// steps, 1.5 checkpoint writes and 2 s) and checkpoint.every_minutes are agreed by one allreduce(MAX) over the
// world, so every rank saves and stops at the same step; checkpoint.every and checkpoint.at_end are local.
class CheckpointCadence {
 public:
  explicit CheckpointCadence(const Config& deck);
  struct Decision {
    bool save = false, stop = false;
    const char* why = "";  // the reason, for the log: a signal name, "train.deadline", "every_minutes", "every", "end"
  };
  // After optimizer step s of steps, which took step_ms.
  Decision decide(comm::Communicator& world, int64_t s, int64_t steps, double step_ms);
  // A checkpoint was written and took `seconds` (restarts the minutes cadence, sizes the deadline margin).
  void saved(double seconds);

 private:
  int64_t every_ = 0, deadline_ = 0;
  double minutes_ = 0.0, last_ckpt_s_ = 0.0;
  bool at_end_ = true;
  Timer since_;
};

// Median of x without its first element (the warm-up step); NaN when empty.
double median_after_first(const std::vector<double>& x);

}  // namespace hpct::train
