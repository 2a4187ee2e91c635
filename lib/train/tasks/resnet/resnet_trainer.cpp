// train_resnet as a TrainTask (train/loop/train_task.hpp): the ResNet (BatchNorm or SyncBN over DP), HDF5 image data with
// layout-independent shuffling and augmentation, SGD, test loss and accuracy. Data-parallel only (parallel.tp = pp = 1).
// The loop is train/loop/training_loop.cpp.
#include "train/tasks/resnet/resnet_trainer.hpp"

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <utility>

#include "core/format.hpp"
#include "core/log.hpp"
#include "core/timer.hpp"
#include "data/image_dataset.hpp"
#include "kernels/kernels.hpp"
#include "models/resnet/resnet.hpp"
#include "models/resnet/resnet_stage.hpp"
#include "optim/sgd.hpp"
#include "train/checkpoint/protocol.hpp"
#include "train/tasks/resnet/conv_algorithm_choice.hpp"
#if HPCT_HAVE_CUDA
#include "kernels/cuda/cuda_device.hpp"
#endif
#include "train/tasks/resnet/resnet_deck.hpp"
#include "train/tasks/resnet/resnet_dump.hpp"
#include "train/plan/memory_plan.hpp"
#include "train/tasks/registry.hpp"
#include "train/tasks/resnet/resnet_auto_plan.hpp"
#include "train/tasks/resnet/resnet_plan.hpp"
#include "train/loop/run_device.hpp"
#include "train/loop/training_loop.hpp"

namespace hpct::train {

namespace k = hpct::kernels;

namespace {

class ResNetTask final : public TrainTask {
 public:
  ResNetTask(RunSession& run, ResNetDeck d)
      : run_(run),
        ctx_(run.ctx()),
        d_(std::move(d)),
        MB_(run.cfg.train.micro_batch),
        GB_(run.cfg.train.global_batch),
        sampler_(d_.train_set, run.cfg.train.seed, GB_, d_.norm, d_.aug),
        spe_(sampler_.steps_per_epoch()),
        model_(d_.cfg, MB_, ctx_.device, d_.sync_bn ? &run.pc.device_dp_group() : nullptr,  // SyncBN: device buffers
               /*allocate=*/true, activation_dtype(ctx_.precision), ctx_.precision, /*planned_bn_ranks=*/1,
               // ZeRO-2 places the gradients in its buckets: the model only plans its gradient slab
               /*allocate_grads=*/model_allocates_grads(run.cfg.parallel.sync, run.dp()),
               /*shard_params=*/model_shards_params(run.cfg.parallel.sync, run.dp()), run.cfg.train.recompute),
        stage_(
            ctx_, model_,
            [this](int64_t step, int64_t first, int count, float* images, int32_t* labels) {
              sampler_.fill(step, first, count, images, labels);
              if (dump_) dump_->record_batch(step, first, count, images, labels);
            },
            [this](int64_t j) { return micro_first(j); }) {
    if (!model_.params_sharded()) model_.init_parameters(ctx_, run.cfg.train.seed);  // else the loop's (ZeRO-3)
    shape_ = {static_cast<double>(GB_), "images", "img", 1,
              resnet::training_flops_per_image(d_.cfg) * static_cast<double>(GB_)};
    if (!run.opts.dump_path.empty())
      dump_ = std::make_unique<ResNetDump>(run.opts.dump_path, d_.cfg, d_.sgd, MB_, run.deck.effective_toml(), d_.steps,
                                           GB_);
  }

  parallel::DataParallelModel& model() override { return model_; }
  std::unique_ptr<optim::Optimizer> make_optimizer(std::vector<optim::Segment> segments) override {
    return std::make_unique<optim::Sgd>(model_.params(), std::move(segments), decay_flags(model_.layout()), d_.sgd);
  }
  std::vector<TensorPlacement> placements() const override {  // data-parallel only: every tensor whole
    std::vector<TensorPlacement> p;
    for (const auto& t : model_.layout()) p.push_back({t.shape, std::vector<int64_t>(t.shape.size(), 0), -1, true});
    return p;
  }
  Slab* extra_state() override { return &model_.buffers(); }

  const StepShape& shape() const override { return shape_; }
  int64_t steps() const override { return d_.steps; }
  const optim::LrSchedule& lr_schedule() const override { return d_.sched; }
  std::string layout_axes() const override { return fmt::format("dp {}", run_.dp()); }
  std::string layout_tail() const override {
    return fmt::format(" | BatchNorm: {}", d_.sync_bn && run_.dp() > 1 ? "SyncBN over the DP group"
                                           : d_.sync_bn                ? "SyncBN (one rank: plain)"
                                                                       : "per rank");
  }
  void log_setup(const optim::Optimizer& opt) override {
    const resnet::ResNetConfig& cfg = d_.cfg;
    const resnet::MemoryPlan plan = model_.memory();
    log_info("model: ResNet-{} ({} style{}) | input {}x{}x{} | {} classes | {} parameters ({:.3f} M) | {:.3f} GFLOP "
             "per image (forward)",
             cfg.depth, cfg.style, cfg.bottleneck() ? ", Bottleneck" : ", BasicBlock", cfg.in_channels, cfg.height,
             cfg.width, cfg.num_classes, plan.num_params, plan.num_params / 1e6,
             resnet::forward_flops_per_image(cfg) / 1e9);
    log_info("activation layout: {} (model.memory_format = {})",
             model_.channels_last() ? "channels-last (N,H,W,C)" : "NCHW", cfg.memory_format);
    log_info(
        "memory per rank: params {} | grads {} | BN buffers {} | optimizer {} | 16-bit compute copy {} | activations "
        "{} ({}) | activation grads {} | conv workspace {} | total {}",
        human_bytes(plan.param_bytes), human_bytes(plan.grad_bytes), human_bytes(plan.buffer_bytes),
        human_bytes(opt.state_bytes()), human_bytes(plan.compute_param_bytes), human_bytes(plan.activation_bytes),
        dtype_name(model_.activation_dtype()), human_bytes(plan.activation_grad_bytes),
        human_bytes(plan.workspace_bytes), human_bytes(plan.total() + opt.state_bytes()));
    log_info("data: train {} ({} images, {} steps per epoch) | test {} ({} of {} images evaluated) | crop pad {} flip "
             "{}",
             d_.train_set.path(), d_.train_set.size(), spe_, d_.test_set.path(), d_.n_eval, d_.test_set.size(),
             d_.aug.pad, d_.aug.flip);
    if (d_.epochs > 0 && run_.deck.was_set("train.steps"))
      log_warn("train.epochs = {} sets the run to {} steps; train.steps = {} is ignored", d_.epochs, d_.steps,
               run_.cfg.train.steps);
    log_info("schedule: {} steps ({:.2f} epochs) | SGD lr {} momentum {} nesterov {} weight decay {} | {} LR, warm-up "
             "{}",
             d_.steps, static_cast<double>(d_.steps) / spe_, d_.sched.lr, d_.sgd.momentum, d_.sgd.nesterov,
             d_.sgd.weight_decay, d_.lr_kind, d_.sched.warmup_steps);
  }
  MemoryKinds model_memory() const override {
    return resnet_model_kinds(model_.memory(), stage_.bytes(),
                              kernels::device_workspace_bytes(ctx_.device, model_.activation_dtype()));
  }
  void before_first_step() override {
    if (ctx_.device == Device::CUDA) choose_conv_algorithms();
    if (dump_) dump_->record_state(ctx_, model_, "init");
  }

  void begin_step(int64_t step, float dloss) override {
    model_.zero_grad(ctx_);
    stage_.begin_step(step, dloss);
  }
  parallel::PipelineStage& stage() override { return stage_; }
  bool gradients_final_in_last_backward() const override { return true; }
  void after_gradients(int64_t step) override {
    if (dump_ && step == 1) dump_->record_grads(ctx_, model_);
  }
  std::vector<double> end_step() override { return {stage_.loss_sum(), stage_.correct()}; }
  StepReport report_step(int64_t s, const std::vector<double>& sums) override {
    const double epoch = static_cast<double>(s) / spe_, acc = sums[1] / static_cast<double>(GB_);
    StepReport r;
    r.position = {{"epoch", epoch}};
    r.train = {{"acc", acc}};
    r.position_text = fmt::format(" | epoch {:.2f}", epoch);
    r.train_text = fmt::format(" | acc {:.4f}", acc);
    return r;
  }
  void record_step(int64_t step, double loss, double lr, double norm) override {
    if (dump_) dump_->record_step(step, loss, lr, norm);
  }

  // The test split (its first n_eval images), split over the DP ranks in contiguous blocks, micro_batch at a time,
  // with the running statistics: (loss sum, correct) summed over DP.
  bool default_eval_step(int64_t s) const override { return s % spe_ == 0; }
  EvalResult evaluate() override {
    before_checkpoint();
    const int64_t dp = run_.dp(), dr = run_.dp_rank();
    const int64_t forwards = evaluation_forwards(model_.params_sharded(), d_.n_eval, static_cast<int>(dp), MB_);
    const auto [loss, correct] = stage_.evaluate(d_.test_set, d_.norm, d_.n_eval * dr / dp, d_.n_eval * (dr + 1) / dp,
                                                 forwards);
    double part[2] = {loss, correct};
    run_.pc.dp_group().allreduce(part, 2, DType::F64, comm::ReduceOp::Sum, "test loss and accuracy");
    EvalResult r;
    r.loss = part[0] / static_cast<double>(d_.n_eval);
    const double acc = part[1] / static_cast<double>(d_.n_eval);
    r.extra = {{"val_acc", acc}};
    r.text = fmt::format(" | test loss {:.6f} acc {:.4f}", r.loss, acc);
    return r;
  }
  void after_step_logged(int64_t s, const std::optional<EvalResult>& eval) override {
    if (s % spe_ != 0) return;
    log_info("epoch {} done in {:.1f} s{}", s / spe_, epoch_timer_.seconds(),
             eval ? fmt::format(" | test accuracy {:.4f} ({} images)", *eval->extra[0].second, d_.n_eval) : "");
    epoch_timer_.reset();
  }

  // Without SyncBN every rank's running statistics follow its own images; DP rank 0's are the model's (as torch
  // DDP's broadcast_buffers): they are broadcast before every evaluation and checkpoint.
  void before_checkpoint() override {
    if (!d_.sync_bn && run_.dp() > 1)
      run_.pc.device_dp_group().broadcast(model_.buffers().base(), static_cast<int64_t>(model_.buffers().bytes() / 4),
                                          DType::F32, 0, "BN running statistics (from DP rank 0)");
  }
  void checkpoint_attrs(ckpt::Attrs& a, int64_t s) const override {
    a.ints["images_seen"] = s * GB_;
    a.ints["samples_seen"] = s * GB_;
    a.ints["epoch"] = s / spe_;
    a.ints["data.steps_per_epoch"] = spe_;
    a.ints["model.num_classes"] = d_.cfg.num_classes;
    a.strings["layout"] = fmt::format("world={} dp={} zero={} sync_bn={}", run_.pc.world_size(), run_.dp(),
                                      run_.cfg.parallel.sync.zero, d_.sync_bn);
    a.strings["rng.algorithm"] = "philox4x32-10 keyed by (train.seed, stream name, counter); data order keyed by "
                                 "(seed, epoch), augmentation by (seed, step, sample): rng.seed and step are the state";
  }
  void check_replicas(CheckpointStaging& staging, const std::string& when) override {
    // ZeRO-3: each rank holds its shares of the masters only, no replica (the BN statistics stay replicated)
    if (!model_.params_sharded()) train::check_replicas(run_.pc.dp_group(), staging.params(), when);
    train::check_replicas(run_.pc.dp_group(), *staging.extra(), when + ", BN running statistics");
  }

  void finish(int) override {
    if (!dump_) return;
    dump_->record_state(ctx_, model_, "final");
    dump_->write();
    log_info("reference dump written to {}", run_.opts.dump_path);
  }
  PerfColumns perf_columns(double last_loss, const std::optional<EvalResult>& eval) const override {
    return {"dp",
            fmt::format("{}", run_.dp()),
            "loss test_loss test_acc",
            fmt::format("{:.6f} {:.6f} {:.4f}", last_loss, eval ? eval->loss : NAN,
                        eval ? *eval->extra[0].second : NAN),
            "",
            ""};
  }

 private:
  // Which global samples micro-batch j of this DP rank holds. A BatchNorm batch must be the same images on every
  // layout (docs/invariants.md, invariant 1), so the split follows what BatchNorm normalises over:
  //   - per-rank BN: the rank's micro-batch, as for the GPT: rank d takes the contiguous block d of the global batch
  //     and micro-batch j is the contiguous sub-block j of it; layouts agree at a constant train.micro_batch.
  //   - SyncBN: the global micro-batch j (all ranks' micro-batch j) is normalised together, so it must be a
  //     contiguous block of the global batch: [j*DP*MB, (j+1)*DP*MB), rank d taking its sub-block d (a departure
  //     from the rank-block rule, which would make SyncBN groups depend on DP); layouts agree at a constant DP x MB.
  int64_t micro_first(int64_t j) const {
    const int64_t dp = run_.dp(), dr = run_.dp_rank();
    return d_.sync_bn && dp > 1 ? j * dp * MB_ + dr * MB_ : dr * (GB_ / dp) + j * MB_;
  }

  // train.conv_algorithms (train/tasks/resnet/conv_algorithm_choice.hpp): the table the model runs with, the same on every rank.
  void choose_conv_algorithms() {
#if HPCT_HAVE_CUDA
    ConvAlgorithmRequest request{d_.conv_algorithms, run_.opts.out_dir, run_.device.gpu_name(),
                                 k::cudnn_runtime_version(), model_.conv_algo_keys(ctx_)};
    model_.set_conv_algorithms(decide_conv_algorithms(run_.pc.world(), request, [&] {
      return model_.time_conv_algorithms(ctx_, kConvAlgorithmRepeats);
    }));
#endif
  }

  RunSession& run_;
  const ExecContext& ctx_;
  ResNetDeck d_;
  int MB_;
  int64_t GB_;
  const data::ImageBatchSampler sampler_;
  int64_t spe_;
  resnet::ResNet model_;
  resnet::ResNetStage stage_;
  StepShape shape_;
  std::unique_ptr<ResNetDump> dump_;
  Timer epoch_timer_;
};

}  // namespace

int run_resnet(const Config& deck, const RunOptions& opts) {
  const RunConfig cfg = read_run_config(deck);
  check_resnet_layout(cfg);
  RunSession run("train_resnet", deck, resnet_deck_schema(), cfg, opts);
  ResNetDeck resnet_deck = read_resnet_deck(deck, cfg);
  // train.memory_limit_gb: the plan on the decided device, before the model allocates
  check_memory_limit(cfg.train.memory_limit_gb,
                     plan_resnet_memory(resnet_deck.cfg, cfg, run.pc.world_size(), resnet_deck.sync_bn,
                                        resnet_deck.sgd.momentum > 0.0f ? 1 : 0,
                                        {run.ctx().device, activation_dtype(run.ctx().precision)}),
                     cfg.parallel.sync.zero,
                     fmt::format("train_resnet {} --plan {}", deck.deck_path(), run.pc.world_size()));
  ResNetTask task(run, std::move(resnet_deck));
  return run_training(run, task);
}

TrainingApp resnet_training_app() {
  return {"train_resnet",
          "hpctrain train_resnet: trains a ResNet described by a TOML deck on an HDF5 image dataset",
          "inputs/resnet20_fmnist.toml",
          "write initial weights, every step's batch, losses and final weights to this HDF5 file (for the PyTorch "
          "cross-check; one rank)",
          "print the model and the memory plan by kind (the memory record's) of every rank of a world of this many "
          "ranks, from the deck and the dataset's header, without training",
          "with --plan: also print one JSON line {\"plan\":{...}} (parameters, FLOPs per image and per step, memory by "
          "kind, the device's peak TFLOP/s)",
          &resnet_deck_schema,
          &run_resnet,
          &plan_resnet,
          &auto_plan_resnet};
}

}  // namespace hpct::train
