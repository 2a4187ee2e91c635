#include "train/loop/training_loop.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <optional>

#include "core/device_peaks.hpp"
#include "core/format.hpp"
#include "core/log.hpp"
#include "core/test_fault.hpp"
#include "core/timer.hpp"
#include "kernels/kernels.hpp"
#include "optim/loss_scaler.hpp"
#include "parallel/data_parallel.hpp"
#include "parallel/grad_sync.hpp"
#include "parallel/param_gather.hpp"
#include "train/checkpoint/saver.hpp"
#include "train/checkpoint/cadence.hpp"
#include "train/checkpoint/protocol.hpp"
#include "train/plan/memory_plan.hpp"
#include "train/loop/loss_scaling.hpp"
#include "train/checkpoint/resume.hpp"
#include "train/loop/run_device.hpp"
#include "train/loop/metrics.hpp"
#include "train/loop/stop_signals.hpp"

namespace hpct::train {

namespace fs = std::filesystem;
namespace k = hpct::kernels;

RunSession::RunSession(const char* app_name, const Config& deck_, const ConfigSchema& schema_, const RunConfig& cfg_,
                       const RunOptions& opts_)
    : app(app_name),
      deck(deck_),
      schema(schema_),
      cfg(cfg_),
      opts(opts_),
      // srun tasks that did not wire up into one MPI job stop here, before a layout error about a world of 1
      launch(read_launch(cfg_.comm)),
      // train.device, agreed by every rank; on CUDA the GPU (local_rank % devices) and the compute stream, before the
      // ParallelContext, which builds its NCCL groups on that GPU
      device(cfg_, launch),
      mfu_peak(resolve_mfu_peak(cfg_.log.peak_tflops, device.device(), device.gpu_name(), device.exec().precision)),
      pc(cfg_.parallel.tp, cfg_.parallel.pp, cfg_.parallel.order, cfg_.comm, fmt::format("deck {}", cfg_.deck_path),
         device.exec(), cfg_.parallel.sync.zero_group, cfg_.parallel.virtual_stages),
      n_micro(micro_batches_per_step(cfg_, pc.dp_size())),
      schedule(parallel::make_schedule(cfg_.parallel.schedule, pc.pp_size(), pc.pp_rank(), static_cast<int>(n_micro),
                                       cfg_.parallel.virtual_stages)) {
  HPCT_USAGE_CHECK(opts.dump_path.empty() || pc.world_size() == 1,
                   "--dump writes the serial reference state: run it on one rank (world size is {})", pc.world_size());
}

namespace {
// The optimizer's segments: the ranges this rank updates (whole tensors, or its ZeRO-1 shares), with their gradients.
// ZeRO-3 (gather): their masters in the parameter shard.
std::vector<optim::Segment> owned_segments(const parallel::GradSync& sync, parallel::ParamGather* gather) {
  std::vector<optim::Segment> segs;
  for (size_t i = 0; i < sync.owned().size(); ++i) {
    const parallel::OwnedRange& o = sync.owned()[i];
    segs.push_back({o.tensor, o.begin, o.end, o.grad, 0});
    if (gather) segs.back().param = gather->master(sync.plan().owned[i].at);  // the same shard layout
  }
  return segs;
}

// The measured bubble and PP wait (medians over the steps after the first) next to the theory.
void log_pipeline_summary(const RunSession& run, const std::vector<parallel::PipelineStats>& steps, Device device) {
  std::vector<double> bubbles, waits;
  for (const parallel::PipelineStats& ps : steps) {
    bubbles.push_back(ps.measured_bubble);
    waits.push_back(ps.wait_ms);
  }
  log_info("pipeline: schedule {}, {} stages x {} virtual, {} micro-batches per step: measured bubble {:.4f} (median "
           "over steps after the first; stage {}), theory (p-1)/(vm+p-1) = {:.4f}; PP communication wait {:.2f} "
           "ms/step{}",
           parallel::schedule_kind_name(run.cfg.parallel.schedule), run.pc.pp_size(), run.cfg.parallel.virtual_stages,
           run.n_micro, median_after_first(bubbles), run.pc.pp_rank(), steps.back().theoretical_bubble,
           median_after_first(waits),
           device == Device::CPU ? ""
                                 : " (host times: over NCCL the host only queues the work and the waits are "
                                   "stream-ordered, so these do not measure the GPU's bubble)");
}

}  // namespace

MfuPeak resolve_mfu_peak(double deck_peak_tflops, Device device, const std::string& gpu_name, Precision precision) {
  if (deck_peak_tflops > 0.0) return {deck_peak_tflops, "log.peak_tflops"};
  if (device == Device::CPU) return {0.0, "unknown on the CPU: set log.peak_tflops"};
  const char* prec = precision_name(precision);
  const DevicePeaks* entry = find_device_peaks(gpu_name);
  if (entry == nullptr) return {0.0, fmt::format("{} is not in the device table: set log.peak_tflops", gpu_name)};
  return {entry->tflops(prec), fmt::format("{} {} dense, device table", entry->label, prec)};
}

std::optional<double> model_flops_utilization(double step_flops, double step_ms, int world_size, double peak_tflops) {
  if (peak_tflops <= 0.0) return std::nullopt;
  const double job_flops_per_s = step_flops / (step_ms / 1e3);
  return job_flops_per_s / world_size / (peak_tflops * 1e12);
}

namespace {

// One run of the step loop, in named parts: set-up (the constructor: the output directory, the gradient sync, ZeRO-3's
// parameter gather, the optimizer, the loss scaler, the checkpoint staging and saver, the pipeline buffers, the set-up
// log lines and the memory record's kinds; nothing allocates after it), resume, then per step: step (one optimizer
// step), record (metrics.jsonl and the log line) and save; and finish (the last replica check, the PERFORMANCE line).
// Members are declared in construction order, which is also the order of their release in reverse: the saver, whose
// thread reads the staging, goes before the staging.
class StepLoop {
 public:
  StepLoop(RunSession& run, TrainTask& task);
  int run();

 private:
  // What one optimizer step produced, for its record.
  struct StepOutcome {
    double loss = NAN, lr = 0.0, ms = 0.0;
    double param_wait_ms = 0.0;  // ZeRO-3: the wait for the parameters' gather after the optimizer step
    std::vector<double> sums;
    optim::LossScaler::Outcome ls;
    comm::CommVolume volume;
  };
  std::unique_ptr<optim::Optimizer> make_optimizer();
  void log_setup();
  MemoryKinds memory_kinds() const;
  void resume();
  StepOutcome step(int64_t s);
  void record(int64_t s, const StepOutcome& o, const std::optional<EvalResult>& eval, const TrainTask::StepReport& rep,
              const CheckpointCadence::Decision& dec);
  void save(int64_t s, const char* why);
  int finish(int exit_code);

  RunSession& run_;
  TrainTask& task_;
  parallel::ParallelContext& pc_;
  const ExecContext& ctx_;
  const RunConfig& cfg_;
  const StepShape& shape_;
  const int64_t steps_;
  const int dp_, world_;
  const std::string ckpt_root_;
  // the gradient sync and, under ZeRO-3, the parameter gather, connected to the model (parallel/data_parallel.hpp)
  parallel::DataParallel data_parallel_;
  parallel::GradSync& grad_sync_;
  // ZeRO-3: the rank keeps its shares of the masters; the model's reads gather each layer (null otherwise)
  parallel::ParamGather* const gather_;
  const std::unique_ptr<optim::Optimizer> opt_;
  optim::LossScaler scaler_;
  const std::vector<TensorPlacement> placements_;
  const bool background_saves_;
  // what checkpoints and replica checks read, as host memory (on the CPU: the model's own tensors, zero-copy, unless a
  // background save needs a snapshot the step loop does not change)
  CheckpointStaging staging_;
  // checkpoints are written over a communicator of their own, in the background by default (checkpoint.async); declared
  // after the staging its thread reads, so that it is gone (its save finished) before the staging is freed
  CheckpointSaver writer_;
  // the stage's communication buffers for its schedule (none for a single stage)
  parallel::PipelineBuffers pipe_bufs_;
  MemoryKinds memory_;        // the memory record's kinds (train/loop/memory_record.hpp)
  double memory_peak_ = 0.0;  // the first record's peak, repeated by the last
  int64_t start_ = 0;         // the step the run starts after (0, or the resumed checkpoint's)
  bool resumed_ = false;
  std::unique_ptr<MetricsWriter> metrics_;    // rank 0
  std::optional<CheckpointCadence> cadence_;  // from the first step on (its minutes count from there)
  // The DP buckets go out during the last backward when its gradients are final then; else after end_step(). ZeRO-2
  // reduce-scatters every micro-batch's buckets as backward completes them (the tensors it keeps whole: in finish()).
  bool per_micro_batch_ = false, overlap_ = false;
  parallel::PipelineRunOptions schedule_opts_;
  float dloss_ = 0.0f;  // 1 / global loss terms
  std::vector<double> step_ms_, exposed_ms_;
  std::vector<parallel::PipelineStats> pipeline_;  // per step, with several stages
  double last_loss_ = NAN;
  std::optional<EvalResult> last_eval_;
};

// ---- set-up: output, gradient sync, optimizer, loss scaler, checkpoint staging (nothing allocates in the loop) -----
StepLoop::StepLoop(RunSession& run, TrainTask& task)
    : run_(run),
      task_(task),
      pc_(run.pc),
      ctx_(run.ctx()),
      cfg_(run.cfg),
      shape_(task.shape()),
      steps_(task.steps()),
      dp_(run.dp()),
      world_(run.pc.world_size()),
      ckpt_root_(prepare_output(run.pc, run.opts.out_dir)),
      // ZeRO shards over the zero shard group: the DP group, or its groups under hybrid sharding (parallel.zero_group)
      data_parallel_(task.model(), cfg_.parallel.sync.zero ? pc_.device_zero_shard_group() : pc_.device_dp_group(),
                     cfg_.parallel.sync.zero ? pc_.device_zero_replica_group() : nullptr, cfg_.parallel.sync, ctx_,
                     model_shards_params(cfg_.parallel.sync, dp_), cfg_.train.seed),
      grad_sync_(data_parallel_.sync()),
      gather_(data_parallel_.gather()),
      opt_(make_optimizer()),
      scaler_(loss_scale_config(cfg_, ctx_.precision)),
      placements_(task.placements()),
      background_saves_(CheckpointSaver::background_possible(cfg_.checkpoint.async)),
      staging_(ctx_, task.model().params(), optimizer_state(*opt_), task.extra_state(), background_saves_),
      writer_(pc_, ckpt_root_, cfg_.checkpoint.keep, background_saves_, cfg_.checkpoint.files),
      pipe_bufs_(run.schedule, task.stage().activation_numel(), pc_.pipeline_transport().device(),
                 task.stage().activation_dtype()) {
  // host-staged device groups: page-locked blocks for the pipeline's transfers, before the first step
  if (pc_.pp_size() > 1)
    pc_.reserve_pipeline_staging(parallel::PipelineBuffers::planned_transfers(run.schedule),
                                 static_cast<size_t>(task.stage().activation_numel()) *
                                     dtype_size(task.stage().activation_dtype()));
  log_setup();
  memory_ = memory_kinds();
}

std::unique_ptr<optim::Optimizer> StepLoop::make_optimizer() {
  std::unique_ptr<optim::Optimizer> opt = task_.make_optimizer(owned_segments(grad_sync_, gather_));
  // where the optimizer updates every parameter (AdamW unsharded) it also keeps the model's 16-bit compute copy: the
  // step's separate cast of the masters goes
  if (Slab* copy = task_.compute_copy(); copy != nullptr && opt->keep_compute_copy(ctx_, *copy))
    task_.set_compute_copy_kept();
  return opt;
}

void StepLoop::log_setup() {
  log_info("hpctrain {} | deck {} | out {}", run_.app, cfg_.deck_path, run_.opts.out_dir);
  parallel::log_launch_env(run_.launch);
  run_.device.log();  // the GPU, or auto's fallback to the CPU (nothing for train.device = cpu)
  log_info("layout: ranks {} = {} | device {} | OpenMP threads {} | global_batch {} = {} x {} micro-batches of {}{}",
           world_, task_.layout_axes(), device_name(ctx_.device), omp_get_max_threads(), cfg_.train.global_batch, dp_,
           run_.n_micro, cfg_.train.micro_batch, task_.layout_tail());
  log_info("gradient sync: {}", grad_sync_.describe());
  if (gather_) log_info("parameters: {}", gather_->describe());
  log_precision(ctx_, scaler_);
  log_info("MFU peak: {}", run_.mfu_peak.tflops > 0.0
                               ? fmt::format("{:.1f} TFLOP/s per rank ({})", run_.mfu_peak.tflops, run_.mfu_peak.source)
                               : fmt::format("n/a ({})", run_.mfu_peak.source));
  if (ctx_.device != Device::CPU || pc_.staged_device_groups())
    log_info("communicators: {}", pc_.describe_device_groups());
  log_info("checkpoints: {}{}",
           writer_.background() ? "written in the background (checkpoint.async)" : "written in the foreground",
           staging_.host_bytes() > 0
               ? fmt::format(", host staging {}", human_bytes(static_cast<double>(staging_.host_bytes())))
               : std::string());
  task_.log_setup(*opt_);
}

// The memory record's kinds (train/loop/memory_record.hpp): every slab is planned above and lives for the whole run.
MemoryKinds StepLoop::memory_kinds() const {
  MemoryKinds memory = task_.model_memory();
  memory.grads += static_cast<double>(grad_sync_.shard_bytes());
  memory.optimizer = static_cast<double>(opt_->state_bytes());
  memory.comm = static_cast<double>(grad_sync_.comm_bytes() + pipe_bufs_.bytes() + pc_.staging_bytes());
  if (gather_) {  // the masters (and the 16-bit shard) are the rank's parameters; the gathers are transient
    memory.params += static_cast<double>(gather_->shard_bytes());
    memory.comm += static_cast<double>(gather_->gather_bytes());
  }
  memory.ckpt_staging = static_cast<double>(staging_.host_bytes());
  return memory;
}

// ---- resume: a checkpoint (checkpoint.resume), or model.init_from's weights -------------------------------------
void StepLoop::resume() {
  const ResumePoint resumed = open_resume(pc_, run_.deck, run_.schema, cfg_.checkpoint.resume, ckpt_root_, steps_);
  start_ = resumed.step;
  resumed_ = resumed.reader != nullptr;
  if (resumed.reader) {
    task_.check_resume(*resumed.reader);
    Timer t;
    load_checkpoint(*resumed.reader, staging_.params(), placements_, staging_.optimizer(), staging_.extra());
    staging_.to_device();  // CUDA: host views -> device tensors (the CPU loaded in place)
    opt_->set_step_count(resumed.reader->attrs().ints.at("optim.step"));
    restore_loss_scaler(scaler_, resumed.reader->attrs());
    log_info("resumed at step {}: loaded in {:.2f} s (verified in {:.2f} s)", start_, t.seconds(), resumed.seconds);
  }
  if (!task_.init_from().empty() && resumed.reader) {
    log_info("model.init_from = {} ignored: the run resumes from its checkpoint at step {}, which holds its weights",
             task_.init_from(), start_);
  } else if (!task_.init_from().empty()) {  // fine-tuning: imported weights, fresh optimizer state
    Timer t;
    const std::unique_ptr<ckpt::TensorSource> src = task_.open_init_source();
    staging_.to_host();  // CUDA: the fresh optimizer state into the host views, which to_device() copies back
    load_parameters(*src, staging_.params(), placements_, staging_.optimizer());
    staging_.to_device();
    log_info("model.init_from: loaded {} onto this layout in {:.2f} s (optimizer state fresh)", src->describe(),
             t.seconds());
  }
}

int StepLoop::run() {
  resume();
  if (const int64_t k = cfg_.train.profile_step; k > 0) {
    if (ctx_.device != Device::CUDA) log_info("train.profile_step = {}: no effect on the CPU", k);
    else if (k <= start_ || k > steps_)
      log_warn("train.profile_step = {} is outside this run's steps {}..{}: no step is profiled", k, start_ + 1,
               steps_);
    else
      log_info("profiler range: step {} between cudaProfilerStart and cudaProfilerStop (train.profile_step)", k);
  }
  if (pc_.rank() == 0)
    metrics_ = std::make_unique<MetricsWriter>((fs::path(run_.opts.out_dir) / "metrics.jsonl").string(),
                                               resumed_ ? start_ : -1);
  if (gather_) gather_->refresh();  // the initial or loaded masters
  install_stop_signal_handlers();
  const InjectedOverflow overflow = InjectedOverflow::from_environment();  // a test seam; inert in real runs
  announce_test_fault();  // the planted-defect seam (core/test_fault.hpp): inert unless HPCT_TEST_FAULT is set
  task_.before_first_step();
  cadence_.emplace(cfg_);

  dloss_ = static_cast<float>(1.0 / shape_.loss_terms);
  per_micro_batch_ = grad_sync_.per_micro_batch();
  overlap_ = task_.gradients_final_in_last_backward() && !per_micro_batch_;
  schedule_opts_.barrier = pc_.pp_size() > 1;  // every stage measures the same window (one stage: nothing to wait for)
  parallel::GradSync* sync = &grad_sync_;
  if (overlap_) schedule_opts_.before_last_backward = [sync] { sync->arm(); };
  if (per_micro_batch_) schedule_opts_.before_backward = [sync] { sync->begin_micro_batch(); };
  step_ms_.reserve(static_cast<size_t>(std::max<int64_t>(steps_ - start_, 0)));
  exposed_ms_.reserve(step_ms_.capacity());
  int exit_code = 0;
  opt_->plan_grad_norm(ctx_, task_.counted_in_norm());  // the norm's chunk table, before the first step
  for (int64_t s = start_ + 1; s <= steps_; ++s) {
    const bool profiled = s == cfg_.train.profile_step;  // its synchronizations outside the step's time
    if (profiled) profiler_range(ctx_.device, true);
    Timer timer;
    pc_.reset_comm_volume();  // comm_bytes counts this step's operations
    // the loss gradient times the loss scale S (1 without scaling; exact for power-of-two S)
    task_.begin_step(s, overflow.apply(scaled_loss_gradient(dloss_, scaler_), s, run_.dp_rank()));
    StepOutcome o = step(s);
    o.ms = timer.ms();
    if (profiled) profiler_range(ctx_.device, false);
    o.volume = pc_.comm_volume();  // the step's payload on this rank (rank 0's is recorded)
    step_ms_.push_back(o.ms);
    writer_.poll(s);  // a background save that finished meanwhile: its log line (a failure: agreed in decide below)
    cadence_->finished(writer_.last_duration_s());
    exposed_ms_.push_back(grad_sync_.last_exposed_ms() + grad_sync_.last_gather_ms() + o.param_wait_ms);
    last_loss_ = o.loss;
    task_.record_step(s, o.loss, o.lr, o.ls.norm);

    std::optional<EvalResult> eval;
    if ((cfg_.train.eval_every > 0 ? s % cfg_.train.eval_every == 0 : task_.default_eval_step(s)) || s == steps_)
      last_eval_ = eval = task_.evaluate();
    const TrainTask::StepReport rep = task_.report_step(s, o.sums);
    // decided collectively (one allreduce(MAX) per step) before the record, which says whether it is the last
    const CheckpointCadence::Decision dec = cadence_->decide(pc_.world(), s, steps_, o.ms, writer_.remaining_s(),
                                                             writer_.failed());
    if (dec.save_failed) writer_.wait();  // every rank, here: throws the agreed failure (CollectiveError)
    record(s, o, eval, rep, dec);
    task_.after_step_logged(s, eval);

    // ---- checkpoint and stop (decided above) -------------------------------------------------------------------------
    if (dec.save) save(s, dec.why);
    if (dec.stop) {
      writer_.wait();
      log_info("stopping after step {} ({}): checkpoint written; exit code 3 asks to be requeued and resumed with "
               "--set checkpoint.resume=latest",
               s, dec.why);
      exit_code = 3;
      break;
    }
  }
  return finish(exit_code);
}

// ---- step: forward and backward of every micro-batch through the schedule, gradient sync, norm, optimizer --------
StepLoop::StepOutcome StepLoop::step(int64_t s) {
  StepOutcome o;
  grad_sync_.begin_step();
  if (gather_) gather_->reset_wait_ms();  // this step's waits only (not an evaluation's between steps)
  const parallel::PipelineStats ps = parallel::run_schedule(run_.schedule, task_.stage(), pc_.pipeline_transport(),
                                                            pipe_bufs_, schedule_opts_);
  if (pc_.pp_size() > 1) pipeline_.push_back(ps);
  o.sums = task_.end_step();
  if (!overlap_ && !per_micro_batch_) grad_sync_.arm();
  grad_sync_.finish();
  pc_.dp_group().allreduce(o.sums.data(), static_cast<int64_t>(o.sums.size()), DType::F64, comm::ReduceOp::Sum,
                           "loss sum");
  o.loss = o.sums[0] / shape_.loss_terms;
  HPCT_USAGE_CHECK(std::isfinite(o.loss),
                   "loss is {} at step {}: training diverged; lower optim.lr (now {}) or check the data", o.loss, s,
                   task_.lr_schedule().lr);
  task_.after_gradients(s);
  // the global gradient norm: this rank's share, summed over the groups that split the parameters
  double sumsq = opt_->grad_sumsq(ctx_, task_.counted_in_norm());
  if (cfg_.parallel.sync.zero && dp_ > 1)  // the shares of one shard group tile the gradients once
    pc_.zero_shard_group().allreduce(&sumsq, 1, DType::F64, comm::ReduceOp::Sum, "gradient norm");
  if (pc_.tp_size() > 1) pc_.tp_group().allreduce(&sumsq, 1, DType::F64, comm::ReduceOp::Sum, "gradient norm (TP)");
  if (pc_.pp_size() > 1) pc_.pp_group().allreduce(&sumsq, 1, DType::F64, comm::ReduceOp::Sum, "gradient norm (PP)");
  o.lr = task_.lr_schedule().at(s);
  o.ls = scaled_optimizer_step(ctx_, *opt_, scaler_, sumsq, s, o.lr);
  grad_sync_.gather_params();
  if (gather_) {  // the masters changed
    o.param_wait_ms = gather_->last_wait_ms();
    gather_->refresh();
  }
  k::synchronize(ctx_);
  return o;
}

// ---- record: metrics.jsonl (rank 0) and the log line --------------------------------------------------------------
void StepLoop::record(int64_t s, const StepOutcome& o, const std::optional<EvalResult>& eval,
                      const TrainTask::StepReport& rep, const CheckpointCadence::Decision& dec) {
  const double rate = shape_.loss_terms / (o.ms / 1e3);
  const std::optional<double> mfu = model_flops_utilization(shape_.flops, o.ms, world_, run_.mfu_peak.tflops);
  // the memory record: in full in this run's first record, peak and rss again in its last (both collective)
  MetricsWriter::Fields memory_record;
  if (s == start_ + 1) {
    const MemoryRecord r = gather_memory_record(pc_.world(), memory_, ctx_.device);
    memory_peak_ = r.peak;
    memory_record = memory_fields(r);
    log_info("{}", describe_memory_record(r, world_));
  } else if (s == steps_ || dec.stop) {
    memory_record = {{"peak", memory_peak_}, {"rss", gather_rss(pc_.world(), ctx_.device)}};
  }
  if (metrics_) {
    MetricFields rec = {{"step", static_cast<double>(s)}};
    rec.insert(rec.end(), rep.position.begin(), rep.position.end());
    rec.push_back({"loss", o.loss});
    rec.insert(rec.end(), rep.train.begin(), rep.train.end());
    rec.push_back({"lr", o.lr});
    rec.push_back({"grad_norm", o.ls.skip ? std::nullopt : std::optional<double>(o.ls.norm)});
    rec.push_back({"ms", o.ms});
    rec.push_back({shape_.unit + "_per_s", rate});
    rec.push_back({"mfu", mfu});
    rec.push_back({"comm_exposed_ms", exposed_ms_.back()});
    rec.insert(rec.end(), rep.perf.begin(), rep.perf.end());
    add_loss_scale_metrics(rec, scaler_, o.ls);
    if (eval) {
      rec.push_back({"val_loss", eval->loss});
      rec.insert(rec.end(), eval->extra.begin(), eval->extra.end());
    }
    MetricsWriter::Objects objects = {{"comm_bytes",
                                       {{"allreduce", o.volume.allreduce},
                                        {"reduce_scatter", o.volume.reduce_scatter},
                                        {"allgather", o.volume.allgather},
                                        {"broadcast", o.volume.broadcast},
                                        {"p2p", o.volume.p2p}}}};
    if (!memory_record.empty()) objects.emplace_back("memory", memory_record);
    metrics_->write(rec, objects);
  }
  if (s % cfg_.log.every == 0 || s == steps_ || eval)
    log_info("step {:>6}/{}{} | loss {:.6f}{} | lr {:.4e} | grad norm {:.4f} | {:.1f} ms (comm exposed {:.1f}{}) | "
             "{:.0f} {}/s | mfu {}{}{}",
             s, steps_, rep.position_text, o.loss, rep.train_text, o.lr, o.ls.norm, o.ms, exposed_ms_.back(),
             rep.comm_text, rate, shape_.unit_short, mfu ? fmt::format("{:.2f}%", *mfu * 100) : "n/a",
             eval ? eval->text : "", loss_scale_suffix(scaler_, o.ls));
}

// ---- save: a checkpoint of step s (the saver writes it in the foreground or the background) -----------------------
void StepLoop::save(int64_t s, const char* why) {
  CheckpointSaver::Job job;
  job.waited_s = writer_.wait();  // the staging holds the previous save until it is written
  Timer snapshot;
  task_.before_checkpoint();
  staging_.to_host();  // CUDA, or a background save: copies into the host views (else the CPU's tensors in place)
  task_.check_replicas(staging_, fmt::format("step {}", s));
  job.snapshot_s = snapshot.seconds();
  job.step = s;
  job.why = why;
  ckpt::Attrs& a = job.attrs;
  a.ints["step"] = s;
  a.ints["optim.step"] = opt_->step_count();
  add_loss_scaler_attrs(a, ctx_, scaler_);
  a.ints["data.next_step"] = s + 1;  // the data order is keyed by (seed, step): the step is the loader state
                                     // (also in epoch order: epoch and position follow from the step)
  a.ints["rng.seed"] = static_cast<int64_t>(cfg_.train.seed);
  a.ints["layout.world"] = world_;
  a.ints["layout.dp"] = dp_;
  a.ints["layout.tp"] = pc_.tp_size();
  a.ints["layout.pp"] = pc_.pp_size();
  a.ints["layout.zero"] = cfg_.parallel.sync.zero;
  a.floats["lr"] = task_.lr_schedule().at(s);
  a.floats["lr_next"] = task_.lr_schedule().at(s + 1);
  a.strings["deck"] = run_.deck.effective_toml();
  a.strings["deck_path"] = cfg_.deck_path;
  a.strings["app"] = run_.app;
  add_launch_attrs(a, run_.launch);
  task_.checkpoint_attrs(a, s);
  job.pieces = checkpoint_pieces(pc_, staging_.params(), placements_, staging_.optimizer(), staging_.extra());
  cadence_->started();
  writer_.start(std::move(job));  // the foreground writes here; the background returns at once
  cadence_->finished(writer_.last_duration_s());
}

// ---- finish: the last save written, the replicas checked, the PERFORMANCE line -------------------------------------
int StepLoop::finish(int exit_code) {
  writer_.close();  // the last save written, and nothing of the writer's left running (its HDF5 calls included)
  task_.before_checkpoint();
  staging_.to_host();
  task_.check_replicas(staging_, "end of training");
  task_.finish(exit_code);
  if (!pipeline_.empty()) log_pipeline_summary(run_, pipeline_, ctx_.device);

  // the PERFORMANCE line: steady-state step time, the median over the steps after the first (warm-up)
  const double med = median_after_first(step_ms_), med_exposed = median_after_first(exposed_ms_);
  const double rate = shape_.loss_terms / (med / 1e3);
  const std::optional<double> mfu = model_flops_utilization(shape_.flops, med, world_, run_.mfu_peak.tflops);
  const PerfColumns col = task_.perf_columns(last_loss_, last_eval_);
  const int d = shape_.rate_decimals;
  log_info("PERFORMANCE ranks {} | ms/step {}/s {}/s/rank MFU | {} | comm_exposed_ms comm_exposed_frac{}",
           col.layout_names, shape_.unit, shape_.unit, col.quality_names,
           col.comm_names.empty() ? "" : " " + col.comm_names);
  log_info("PERFORMANCE {} {} | {:.2f} {:.{}f} {:.{}f} {} | {} | {:.2f} {:.4f}{}", world_, col.layout_values, med, rate,
           d, rate / world_, d, mfu ? fmt::format("{:.2f}%", *mfu * 100) : "n/a", col.quality_values, med_exposed,
           med_exposed / med, col.comm_values.empty() ? "" : " " + col.comm_values);
  set_log_file("");
  return exit_code;
}

}  // namespace

int run_training(RunSession& run, TrainTask& task) {
  try {
    StepLoop loop(run, task);
    return loop.run();
  } catch (...) {
    // Before the exception unwinds into the task (whose device buffers are freed, and a cudaFree waits for the
    // device): abort the NCCL communicators, whose kernels may still wait for peers that this rank will never join.
    run.pc.abort_device_communicators();
    throw;
  }
}

}  // namespace hpct::train
