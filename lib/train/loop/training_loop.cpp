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

int run_steps(RunSession& run, TrainTask& task) {
  parallel::ParallelContext& pc = run.pc;
  const ExecContext& ctx = run.ctx();
  const RunConfig& cfg = run.cfg;
  const StepShape& shape = task.shape();
  const int64_t steps = task.steps();
  const int dp = run.dp(), world = pc.world_size();

  // ---- set-up: output, gradient sync, optimizer, loss scaler, checkpoint staging (nothing allocates in the loop) ---
  const std::string ckpt_root = prepare_output(pc, run.opts.out_dir);
  const parallel::GradWriteOrder write_order = task.grad_write_order();
  // ZeRO shards over the zero shard group: the DP group, or its groups under hybrid sharding (parallel.zero_group)
  parallel::GradSync grad_sync(cfg.parallel.sync.zero ? pc.device_zero_shard_group() : pc.device_dp_group(),
                               task.params(), task.grads(), cfg.parallel.sync, ctx, &write_order,
                               cfg.parallel.sync.zero ? pc.device_zero_replica_group() : nullptr);
  task.set_grad_ready_hook([&grad_sync](int first, int end) { grad_sync.on_ready(first, end); });
  task.set_grad_write_hook([&grad_sync](int first, int end) { grad_sync.writing(first, end); });
  // ZeRO-3: the rank keeps its shares of the masters; the model's reads gather each layer (parallel/param_gather.hpp)
  std::unique_ptr<parallel::ParamGather> gather;
  if (model_shards_params(cfg.parallel.sync, dp)) {
    gather = std::make_unique<parallel::ParamGather>(pc.device_zero_shard_group(), grad_sync.plan(), task.read_params(),
                                                     ctx, cfg.parallel.sync.prefetch);
    parallel::ParamGather* g = gather.get();
    task.set_param_read_hook(
        [g](int first, int end, int next_first, int next_end) { g->reading(first, end, next_first, next_end); });
    task.init_sharded_params([g](int tensor, const float* host) { g->store_whole(tensor, host); });
  }
  const std::unique_ptr<optim::Optimizer> opt = task.make_optimizer(owned_segments(grad_sync, gather.get()));
  // where the optimizer updates every parameter (AdamW unsharded) it also keeps the model's 16-bit compute copy: the
  // step's separate cast of the masters goes
  if (Slab* copy = task.compute_copy(); copy != nullptr && opt->keep_compute_copy(ctx, *copy))
    task.set_compute_copy_kept();
  optim::LossScaler scaler(loss_scale_config(cfg, ctx.precision));
  const std::vector<TensorPlacement> placements = task.placements();
  // what checkpoints and replica checks read, as host memory (on the CPU: the model's own tensors, zero-copy, unless a
  // background save needs a snapshot the step loop does not change)
  const bool background_saves = CheckpointSaver::background_possible(cfg.checkpoint.async, cfg.checkpoint.files);
  CheckpointStaging staging(ctx, task.params(), optimizer_state(*opt), task.extra_state(), background_saves);
  // checkpoints are written over a communicator of their own, in the background by default (checkpoint.async); declared
  // after the staging its thread reads, so that it is gone (its save finished) before the staging is freed
  CheckpointSaver writer(pc, ckpt_root, cfg.checkpoint.keep, background_saves, cfg.checkpoint.files);
  // the stage's communication buffers for its schedule (none for a single stage)
  parallel::PipelineBuffers pipe_bufs(run.schedule, task.stage().activation_numel(), pc.pipeline_transport().device(),
                                      task.stage().activation_dtype());
  // host-staged device groups: page-locked blocks for the pipeline's transfers, before the first step
  if (pc.pp_size() > 1)
    pc.reserve_pipeline_staging(parallel::PipelineBuffers::planned_transfers(run.schedule),
                                static_cast<size_t>(task.stage().activation_numel()) *
                                    dtype_size(task.stage().activation_dtype()));

  log_info("hpctrain {} | deck {} | out {}", run.app, cfg.deck_path, run.opts.out_dir);
  parallel::log_launch_env(run.launch);
  run.device.log();  // the GPU, or auto's fallback to the CPU (nothing for train.device = cpu)
  log_info("layout: ranks {} = {} | device {} | OpenMP threads {} | global_batch {} = {} x {} micro-batches of {}{}",
           world, task.layout_axes(), device_name(ctx.device), omp_get_max_threads(), cfg.train.global_batch, dp,
           run.n_micro, cfg.train.micro_batch, task.layout_tail());
  log_info("gradient sync: {}", grad_sync.describe());
  if (gather) log_info("parameters: {}", gather->describe());
  log_precision(ctx, scaler);
  log_info("MFU peak: {}", run.mfu_peak.tflops > 0.0
                               ? fmt::format("{:.1f} TFLOP/s per rank ({})", run.mfu_peak.tflops, run.mfu_peak.source)
                               : fmt::format("n/a ({})", run.mfu_peak.source));
  if (ctx.device != Device::CPU || pc.staged_device_groups())
    log_info("communicators: {}", pc.describe_device_groups());
  log_info("checkpoints: {}{}",
           writer.background() ? "written in the background (checkpoint.async)" : "written in the foreground",
           staging.host_bytes() > 0
               ? fmt::format(", host staging {}", human_bytes(static_cast<double>(staging.host_bytes())))
               : std::string());
  task.log_setup(*opt);
  // The memory record (train/loop/memory_record.hpp): every slab is planned above and lives for the whole run.
  MemoryKinds memory = task.model_memory();
  memory.grads += static_cast<double>(grad_sync.shard_bytes());
  memory.optimizer = static_cast<double>(opt->state_bytes());
  memory.comm = static_cast<double>(grad_sync.comm_bytes() + pipe_bufs.bytes() + pc.staging_bytes());
  if (gather) {  // the masters (and the 16-bit shard) are the rank's parameters; the gathers are transient
    memory.params += static_cast<double>(gather->shard_bytes());
    memory.comm += static_cast<double>(gather->gather_bytes());
  }
  memory.ckpt_staging = static_cast<double>(staging.host_bytes());
  double memory_peak = 0.0;  // the first record's peak, repeated by the last

  // ---- resume ------------------------------------------------------------------------------------------------
  const ResumePoint resumed = open_resume(pc, run.deck, run.schema, cfg.checkpoint.resume, ckpt_root, steps);
  const int64_t start = resumed.step;
  if (resumed.reader) {
    task.check_resume(*resumed.reader);
    Timer t;
    load_checkpoint(*resumed.reader, staging.params(), placements, staging.optimizer(), staging.extra());
    staging.to_device();  // CUDA: host views -> device tensors (the CPU loaded in place)
    opt->set_step_count(resumed.reader->attrs().ints.at("optim.step"));
    restore_loss_scaler(scaler, resumed.reader->attrs());
    log_info("resumed at step {}: loaded in {:.2f} s (verified in {:.2f} s)", start, t.seconds(), resumed.seconds);
  }
  if (!task.init_from().empty() && resumed.reader) {
    log_info("model.init_from = {} ignored: the run resumes from its checkpoint at step {}, which holds its weights",
             task.init_from(), start);
  } else if (!task.init_from().empty()) {  // fine-tuning: imported weights, fresh optimizer state
    Timer t;
    const std::unique_ptr<ckpt::TensorSource> src = task.open_init_source();
    staging.to_host();  // CUDA: the fresh optimizer state into the host views, which to_device() copies back
    load_parameters(*src, staging.params(), placements, staging.optimizer());
    staging.to_device();
    log_info("model.init_from: loaded {} onto this layout in {:.2f} s (optimizer state fresh)", src->describe(),
             t.seconds());
  }
  std::unique_ptr<MetricsWriter> metrics;
  if (pc.rank() == 0)
    metrics = std::make_unique<MetricsWriter>((fs::path(run.opts.out_dir) / "metrics.jsonl").string(),
                                              resumed.reader ? start : -1);
  if (gather) gather->refresh();  // the initial or loaded masters
  install_stop_signal_handlers();
  const InjectedOverflow overflow = InjectedOverflow::from_environment();  // a test seam; inert in real runs
  announce_test_fault();  // the planted-defect seam (core/test_fault.hpp): inert unless HPCT_TEST_FAULT is set
  task.before_first_step();

  CheckpointCadence cadence(cfg);
  auto save = [&](int64_t s, const char* why) {
    CheckpointSaver::Job job;
    job.waited_s = writer.wait();  // the staging holds the previous save until it is written
    Timer snapshot;
    task.before_checkpoint();
    staging.to_host();  // CUDA, or a background save: copies into the host views (else the CPU's tensors in place)
    task.check_replicas(staging, fmt::format("step {}", s));
    job.snapshot_s = snapshot.seconds();
    job.step = s;
    job.why = why;
    ckpt::Attrs& a = job.attrs;
    a.ints["step"] = s;
    a.ints["optim.step"] = opt->step_count();
    add_loss_scaler_attrs(a, ctx, scaler);
    a.ints["data.next_step"] = s + 1;  // the data order is keyed by (seed, step): the step is the loader state
                                       // (also in epoch order: epoch and position follow from the step)
    a.ints["rng.seed"] = static_cast<int64_t>(cfg.train.seed);
    a.ints["layout.world"] = world;
    a.ints["layout.dp"] = dp;
    a.ints["layout.tp"] = pc.tp_size();
    a.ints["layout.pp"] = pc.pp_size();
    a.ints["layout.zero"] = cfg.parallel.sync.zero;
    a.floats["lr"] = task.lr_schedule().at(s);
    a.floats["lr_next"] = task.lr_schedule().at(s + 1);
    a.strings["deck"] = run.deck.effective_toml();
    a.strings["deck_path"] = cfg.deck_path;
    a.strings["app"] = run.app;
    add_launch_attrs(a, run.launch);
    task.checkpoint_attrs(a, s);
    job.pieces = checkpoint_pieces(pc, staging.params(), placements, staging.optimizer(), staging.extra());
    cadence.started();
    writer.start(std::move(job));  // the foreground writes here; the background returns at once
    cadence.finished(writer.last_duration_s());
  };

  // ---- training loop ---------------------------------------------------------------------------------------------
  const float dloss = static_cast<float>(1.0 / shape.loss_terms);  // 1 / global loss terms
  // The DP buckets go out during the last backward when its gradients are final then; else after end_step(). ZeRO-2
  // reduce-scatters every micro-batch's buckets as backward completes them (the tensors it keeps whole: in finish()).
  const bool per_micro_batch = grad_sync.per_micro_batch();
  const bool overlap = task.gradients_final_in_last_backward() && !per_micro_batch;
  parallel::PipelineRunOptions schedule_opts;
  schedule_opts.barrier = pc.pp_size() > 1;  // every stage measures the same window (one stage: nothing to wait for)
  if (overlap) schedule_opts.before_last_backward = [&grad_sync] { grad_sync.arm(); };
  if (per_micro_batch) schedule_opts.before_backward = [&grad_sync] { grad_sync.begin_micro_batch(); };
  std::vector<double> step_ms, exposed_ms;
  std::vector<parallel::PipelineStats> pipeline;  // per step, with several stages
  step_ms.reserve(static_cast<size_t>(std::max<int64_t>(steps - start, 0)));
  exposed_ms.reserve(step_ms.capacity());
  double last_loss = NAN;
  std::optional<EvalResult> last_eval;
  int exit_code = 0;
  opt->plan_grad_norm(ctx, task.counted_in_norm());  // the norm's chunk table, before the first step
  for (int64_t s = start + 1; s <= steps; ++s) {
    Timer timer;
    pc.reset_comm_volume();  // comm_bytes counts this step's operations
    // the loss gradient times the loss scale S (1 without scaling; exact for power-of-two S)
    task.begin_step(s, overflow.apply(scaled_loss_gradient(dloss, scaler), s, run.dp_rank()));
    grad_sync.begin_step();
    if (gather) gather->reset_wait_ms();  // this step's waits only (not an evaluation's between steps)
    const parallel::PipelineStats ps = parallel::run_schedule(run.schedule, task.stage(), pc.pipeline_transport(),
                                                              pipe_bufs, schedule_opts);
    if (pc.pp_size() > 1) pipeline.push_back(ps);
    std::vector<double> sums = task.end_step();
    if (!overlap && !per_micro_batch) grad_sync.arm();
    grad_sync.finish();
    pc.dp_group().allreduce(sums.data(), static_cast<int64_t>(sums.size()), DType::F64, comm::ReduceOp::Sum,
                            "loss sum");
    const double loss = sums[0] / shape.loss_terms;
    HPCT_USAGE_CHECK(std::isfinite(loss),
                     "loss is {} at step {}: training diverged; lower optim.lr (now {}) or check the data", loss, s,
                     task.lr_schedule().lr);
    task.after_gradients(s);
    // the global gradient norm: this rank's share, summed over the groups that split the parameters
    double sumsq = opt->grad_sumsq(ctx, task.counted_in_norm());
    if (cfg.parallel.sync.zero && dp > 1)  // the shares of one shard group tile the gradients once
      pc.zero_shard_group().allreduce(&sumsq, 1, DType::F64, comm::ReduceOp::Sum, "gradient norm");
    if (pc.tp_size() > 1) pc.tp_group().allreduce(&sumsq, 1, DType::F64, comm::ReduceOp::Sum, "gradient norm (TP)");
    if (pc.pp_size() > 1) pc.pp_group().allreduce(&sumsq, 1, DType::F64, comm::ReduceOp::Sum, "gradient norm (PP)");
    const double lr = task.lr_schedule().at(s);
    const optim::LossScaler::Outcome ls = scaled_optimizer_step(ctx, *opt, scaler, sumsq, s, lr);
    grad_sync.gather_params();
    double param_wait_ms = 0.0;
    if (gather) {  // the masters changed
      param_wait_ms = gather->last_wait_ms();
      gather->refresh();
    }
    k::synchronize(ctx);
    const double ms = timer.ms();
    const comm::CommVolume volume = pc.comm_volume();  // the step's payload on this rank (rank 0's is recorded)
    step_ms.push_back(ms);
    writer.poll(s);  // a background save that finished meanwhile: its log line (a failure: agreed in decide below)
    cadence.finished(writer.last_duration_s());
    exposed_ms.push_back(grad_sync.last_exposed_ms() + grad_sync.last_gather_ms() + param_wait_ms);
    last_loss = loss;
    task.record_step(s, loss, lr, ls.norm);

    const double rate = shape.loss_terms / (ms / 1e3);
    const std::optional<double> mfu = model_flops_utilization(shape.flops, ms, world, run.mfu_peak.tflops);
    std::optional<EvalResult> eval;
    if ((cfg.train.eval_every > 0 ? s % cfg.train.eval_every == 0 : task.default_eval_step(s)) || s == steps)
      last_eval = eval = task.evaluate();
    const TrainTask::StepReport rep = task.report_step(s, sums);
    // decided collectively (one allreduce(MAX) per step) before the record, which says whether it is the last
    const CheckpointCadence::Decision dec = cadence.decide(pc.world(), s, steps, ms, writer.remaining_s(),
                                                           writer.failed());
    if (dec.save_failed) writer.wait();  // every rank, here: throws the agreed failure (CollectiveError)
    // the memory record: in full in this run's first record, peak and rss again in its last (both collective)
    MetricsWriter::Fields memory_record;
    if (s == start + 1) {
      const MemoryRecord r = gather_memory_record(pc.world(), memory, ctx.device);
      memory_peak = r.peak;
      memory_record = memory_fields(r);
      log_info("{}", describe_memory_record(r, world));
    } else if (s == steps || dec.stop) {
      memory_record = {{"peak", memory_peak}, {"rss", gather_rss(pc.world(), ctx.device)}};
    }
    if (metrics) {
      MetricFields rec = {{"step", static_cast<double>(s)}};
      rec.insert(rec.end(), rep.position.begin(), rep.position.end());
      rec.push_back({"loss", loss});
      rec.insert(rec.end(), rep.train.begin(), rep.train.end());
      rec.push_back({"lr", lr});
      rec.push_back({"grad_norm", ls.skip ? std::nullopt : std::optional<double>(ls.norm)});
      rec.push_back({"ms", ms});
      rec.push_back({shape.unit + "_per_s", rate});
      rec.push_back({"mfu", mfu});
      rec.push_back({"comm_exposed_ms", exposed_ms.back()});
      rec.insert(rec.end(), rep.perf.begin(), rep.perf.end());
      add_loss_scale_metrics(rec, scaler, ls);
      if (eval) {
        rec.push_back({"val_loss", eval->loss});
        rec.insert(rec.end(), eval->extra.begin(), eval->extra.end());
      }
      MetricsWriter::Objects objects = {{"comm_bytes",
                                         {{"allreduce", volume.allreduce},
                                          {"reduce_scatter", volume.reduce_scatter},
                                          {"allgather", volume.allgather},
                                          {"broadcast", volume.broadcast},
                                          {"p2p", volume.p2p}}}};
      if (!memory_record.empty()) objects.emplace_back("memory", memory_record);
      metrics->write(rec, objects);
    }
    if (s % cfg.log.every == 0 || s == steps || eval)
      log_info("step {:>6}/{}{} | loss {:.6f}{} | lr {:.4e} | grad norm {:.4f} | {:.1f} ms (comm exposed {:.1f}{}) | "
               "{:.0f} {}/s | mfu {}{}{}",
               s, steps, rep.position_text, loss, rep.train_text, lr, ls.norm, ms, exposed_ms.back(), rep.comm_text,
               rate, shape.unit_short, mfu ? fmt::format("{:.2f}%", *mfu * 100) : "n/a", eval ? eval->text : "",
               loss_scale_suffix(scaler, ls));
    task.after_step_logged(s, eval);

    // ---- checkpoint and stop (decided above) -------------------------------------------------------------------------
    if (dec.save) save(s, dec.why);
    if (dec.stop) {
      writer.wait();
      log_info("stopping after step {} ({}): checkpoint written; exit code 3 asks to be requeued and resumed with "
               "--set checkpoint.resume=latest",
               s, dec.why);
      exit_code = 3;
      break;
    }
  }
  writer.close();  // the last save written, and nothing of the writer's left running (its HDF5 calls included)
  task.before_checkpoint();
  staging.to_host();
  task.check_replicas(staging, "end of training");
  task.finish(exit_code);
  if (!pipeline.empty()) log_pipeline_summary(run, pipeline, ctx.device);

  // ---- the PERFORMANCE line: steady-state step time, the median over the steps after the first (warm-up) ----------
  const double med = median_after_first(step_ms), med_exposed = median_after_first(exposed_ms);
  const double rate = shape.loss_terms / (med / 1e3);
  const std::optional<double> mfu = model_flops_utilization(shape.flops, med, world, run.mfu_peak.tflops);
  const PerfColumns col = task.perf_columns(last_loss, last_eval);
  const int d = shape.rate_decimals;
  log_info("PERFORMANCE ranks {} | ms/step {}/s {}/s/rank MFU | {} | comm_exposed_ms comm_exposed_frac{}",
           col.layout_names, shape.unit, shape.unit, col.quality_names,
           col.comm_names.empty() ? "" : " " + col.comm_names);
  log_info("PERFORMANCE {} {} | {:.2f} {:.{}f} {:.{}f} {} | {} | {:.2f} {:.4f}{}", world, col.layout_values, med, rate,
           d, rate / world, d, mfu ? fmt::format("{:.2f}%", *mfu * 100) : "n/a", col.quality_values, med_exposed,
           med_exposed / med, col.comm_values.empty() ? "" : " " + col.comm_values);
  set_log_file("");
  return exit_code;
}

}  // namespace

int run_training(RunSession& run, TrainTask& task) {
  try {
    return run_steps(run, task);
  } catch (...) {
    // Before the exception unwinds into the task (whose device buffers are freed, and a cudaFree waits for the
    // device): abort the NCCL communicators, whose kernels may still wait for peers that this rank will never join.
    run.pc.abort_device_communicators();
    throw;
  }
}

}  // namespace hpct::train
