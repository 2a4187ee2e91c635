#include "train/resnet_trainer.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <sstream>

#include "core/format.hpp"
#include "core/h5_check.hpp"
#include "core/log.hpp"
#include "core/timer.hpp"
#include "data/image_dataset.hpp"
#include "kernels/kernels.hpp"
#include "models/resnet/resnet.hpp"
#include "optim/lr_schedule.hpp"
#include "optim/sgd.hpp"
#include "parallel/grad_sync.hpp"
#include "parallel/parallel_context.hpp"
#include "train/checkpointing.hpp"
#include "train/h5_write.hpp"
#include "train/metrics.hpp"
#include "train/resnet_deck.hpp"
#include "train/stop_signals.hpp"

namespace hpct::train {

namespace fs = std::filesystem;
namespace k = hpct::kernels;

namespace {

// "0.485,0.456,0.406" -> {0.485, 0.456, 0.406}; UsageError naming the key on anything else.
std::vector<double> parse_list(const Config& deck, const std::string& key) {
  std::vector<double> out;
  std::stringstream ss(deck.get_string(key));
  std::string item;
  while (std::getline(ss, item, ',')) {
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (item.empty()) continue;
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    HPCT_USAGE_CHECK(end && *end == '\0', "deck {}: {} = \"{}\": \"{}\" is not a number; give comma-separated numbers",
                     deck.deck_path(), key, deck.get_string(key), item);
    out.push_back(v);
  }
  return out;
}

// Correct top-1 predictions among b rows of logits (host, (b, K)) against labels; ties go to the lower class.
int64_t count_correct(const float* logits, const int32_t* labels, int b, int K) {
  int64_t n = 0;
  for (int i = 0; i < b; ++i) {
    const float* row = logits + static_cast<int64_t>(i) * K;
    n += (std::max_element(row, row + K) - row) == labels[i];
  }
  return n;
}

// `train_resnet --dump FILE.h5` (one rank): what tests/reference/resnet_train_reference.py needs to replay the run
// in PyTorch: the initial parameters and BN buffers (/init/<name>), every step's augmented, normalised global batch
// (/batches/images (steps, GB, C, H, W), /batches/labels (steps, GB)), per-step loss, lr and gradient norm (/steps/*),
// and the parameters and BN buffers after the last step (/final/<name>). Attributes carry the model and optimizer.
class ResNetDump {
 public:
  ResNetDump(std::string path, const Config& deck, const resnet::ResNetConfig& cfg, int64_t steps, int64_t gb)
      : path_(std::move(path)), deck_(deck), cfg_(cfg), steps_(steps), gb_(gb) {
    img_elems_ = static_cast<int64_t>(cfg.in_channels) * cfg.height * cfg.width;
    images_.assign(static_cast<size_t>(steps * gb * img_elems_), 0.0f);
    labels_.assign(static_cast<size_t>(steps * gb), 0);
    loss_.assign(static_cast<size_t>(steps), 0.0);
    lr_ = grad_norm_ = loss_;
  }
  void record_state(const ExecContext& ctx, resnet::ResNet& model, const std::string& group) {
    auto& dst = group == "init" ? init_ : final_;
    dst.clear();
    for (Slab* slab : {&model.params(), &model.buffers()})
      for (auto& t : slab->tensors()) {
        Named n{t.name, t.shape, std::vector<float>(static_cast<size_t>(t.numel()))};
        k::copy_to_host(ctx, n.data.data(), t.data, static_cast<int64_t>(t.bytes()));
        dst.push_back(std::move(n));
      }
    k::synchronize(ctx);  // the copies are asynchronous on CUDA: dst is valid only now
  }
  void record_batch(int64_t step, int64_t first, int count, const float* images, const int32_t* labels) {
    const int64_t row = (step - 1) * gb_ + first;
    std::copy(images, images + count * img_elems_, images_.begin() + row * img_elems_);
    std::copy(labels, labels + count, labels_.begin() + row);
  }
  void record_step(int64_t step, double loss, double lr, double norm) {
    loss_[static_cast<size_t>(step - 1)] = loss;
    lr_[static_cast<size_t>(step - 1)] = lr;
    grad_norm_[static_cast<size_t>(step - 1)] = norm;
  }
  void write() {
    const std::string tmp = path_ + ".tmp";
    hid_t f = H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    HPCT_USAGE_CHECK(f >= 0, "--dump: cannot create {} (does its directory exist and is it writable?)", tmp);
    h5::attr_str(f, "style", cfg_.style);
    h5::attr_i64(f, "depth", cfg_.depth);
    h5::attr_i64(f, "base_width", cfg_.base_width);
    h5::attr_i64(f, "channels", cfg_.in_channels);
    h5::attr_i64(f, "height", cfg_.height);
    h5::attr_i64(f, "width", cfg_.width);
    h5::attr_i64(f, "num_classes", cfg_.num_classes);
    h5::attr_i64(f, "steps", steps_);
    h5::attr_i64(f, "global_batch", gb_);
    h5::attr_i64(f, "micro_batch", deck_.get_int("train.micro_batch"));
    h5::attr_f64(f, "momentum", deck_.get_float("optim.momentum"));
    h5::attr_i64(f, "nesterov", deck_.get_bool("optim.nesterov") ? 1 : 0);
    h5::attr_f64(f, "dampening", deck_.get_float("optim.dampening"));
    h5::attr_f64(f, "weight_decay", deck_.get_float("optim.weight_decay"));
    h5::attr_f64(f, "grad_clip", deck_.get_float("optim.grad_clip"));
    h5::attr_f64(f, "label_smoothing", deck_.get_float("optim.label_smoothing"));
    h5::attr_str(f, "deck", deck_.effective_toml());
    for (const auto& n : init_) h5::write_dataset(f, "init/" + n.name, n.shape, H5T_NATIVE_FLOAT, n.data.data());
    for (const auto& n : final_) h5::write_dataset(f, "final/" + n.name, n.shape, H5T_NATIVE_FLOAT, n.data.data());
    h5::write_dataset(f, "batches/images", {steps_, gb_, cfg_.in_channels, cfg_.height, cfg_.width}, H5T_NATIVE_FLOAT,
                      images_.data());
    h5::write_dataset(f, "batches/labels", {steps_, gb_}, H5T_NATIVE_INT32, labels_.data());
    h5::write_dataset(f, "steps/loss", {steps_}, H5T_NATIVE_DOUBLE, loss_.data());
    h5::write_dataset(f, "steps/lr", {steps_}, H5T_NATIVE_DOUBLE, lr_.data());
    h5::write_dataset(f, "steps/grad_norm", {steps_}, H5T_NATIVE_DOUBLE, grad_norm_.data());
    H5_CHECK(H5Fclose(f));
    HPCT_CHECK(std::rename(tmp.c_str(), path_.c_str()) == 0, "cannot rename {} to {}", tmp, path_);
  }

 private:
  struct Named {
    std::string name;
    std::vector<int64_t> shape;
    std::vector<float> data;
  };
  std::string path_;
  const Config& deck_;
  resnet::ResNetConfig cfg_;
  int64_t steps_, gb_, img_elems_ = 0;
  std::vector<Named> init_, final_;
  std::vector<float> images_;
  std::vector<int32_t> labels_;
  std::vector<double> loss_, lr_, grad_norm_;
};

}  // namespace

int run_resnet(const Config& deck, const RunOptions& opts) {
  // ---- configuration and data, validated before any work ---------------------------------------
  const std::string where = fmt::format("deck {}", deck.deck_path());
  const uint64_t seed = static_cast<uint64_t>(deck.get_int("train.seed"));
  const int64_t GB = deck.get_int("train.global_batch");
  const int MB = static_cast<int>(deck.get_int("train.micro_batch"));
  const bool sync_bn = deck.get_bool("model.sync_bn");
  HPCT_USAGE_CHECK(deck.get_int("parallel.tp") == 1 && deck.get_int("parallel.pp") == 1,
                   "deck {}: parallel.tp = {} and parallel.pp = {}: train_resnet is data-parallel only (DP = the world "
                   "size); set both to 1",
                   deck.deck_path(), deck.get_int("parallel.tp"), deck.get_int("parallel.pp"));
  comm::CommOptions copts;
  copts.timeout_s = deck.get_float("comm.timeout_s");
  // Slurm / launcher facts and the node-local rank (the CUDA backend's GPU choice), before the ParallelContext: srun
  // tasks that did not wire up into one MPI job stop here (run_support.hpp)
  const parallel::LaunchEnv launch = read_launch(copts);
  // train.device, agreed by every rank; on CUDA the GPU (local_rank % devices) and the compute stream. Before the
  // ParallelContext, which builds its NCCL groups on that GPU; declared first, so it outlives everything that computes.
  const RunDevice run_device(deck, launch, copts);
  parallel::ParallelContext pc(1, 1, deck.get_string("parallel.order"), copts, where, run_device.exec());
  // the compute context, with the ParallelContext's bounded synchronize on CUDA (NCCL work is queued on the stream)
  const ExecContext& ctx = pc.exec();
  const int dp = pc.dp_size(), dr = pc.dp_rank();
  HPCT_USAGE_CHECK(GB % (static_cast<int64_t>(dp) * MB) == 0,
                   "deck {}: train.global_batch={} is not divisible by DP x train.micro_batch = {} x {}; choose a "
                   "global batch that is a multiple of {} (or another micro_batch)",
                   deck.deck_path(), GB, dp, MB, static_cast<int64_t>(dp) * MB);
  HPCT_USAGE_CHECK(opts.dump_path.empty() || pc.world_size() == 1,
                   "--dump writes the serial reference state: run it on one rank (world size is {})", pc.world_size());
  const int64_t n_micro = GB / (dp * MB);
  // Which global samples micro-batch j of DP rank d holds. A BatchNorm batch must be the same images on every layout
  // (DESIGN.md invariant 1), so the split follows what BatchNorm normalises over:
  //   - per-rank BN: the rank's micro-batch, as for the GPT: rank d takes the contiguous block d of the global batch
  //     and micro-batch j is the contiguous sub-block j of it; layouts agree at a constant train.micro_batch.
  //   - SyncBN: the global micro-batch j (all ranks' micro-batch j) is normalised together, so it must be a
  //     contiguous block of the global batch: [j*DP*MB, (j+1)*DP*MB), rank d taking its sub-block d (a departure from
  //     the rank-block rule, which would make SyncBN groups depend on DP); layouts agree at a constant DP x MB.
  const bool sync_split = sync_bn && dp > 1;
  auto micro_first = [&](int64_t j) {
    return sync_split ? j * dp * MB + static_cast<int64_t>(dr) * MB : dr * (GB / dp) + j * MB;
  };
  check_deadline(deck);

  const data::ImageDataset train_set = data::ImageDataset::open(resolve_data_path(deck.get_string("data.train")));
  const data::ImageDataset test_set = data::ImageDataset::open(resolve_data_path(deck.get_string("data.test")));
  HPCT_USAGE_CHECK(test_set.channels() == train_set.channels() && test_set.height() == train_set.height() &&
                       test_set.width() == train_set.width(),
                   "deck {}: data.test {} holds {}x{}x{} images but data.train {} holds {}x{}x{}; both splits must have "
                   "one image shape",
                   deck.deck_path(), test_set.path(), test_set.channels(), test_set.height(), test_set.width(),
                   train_set.path(), train_set.channels(), train_set.height(), train_set.width());
  HPCT_USAGE_CHECK(GB <= train_set.size(), "deck {}: train.global_batch = {} is larger than data.train {} ({} images)",
                   deck.deck_path(), GB, train_set.path(), train_set.size());
  const resnet::ResNetConfig cfg = resnet::ResNetConfig::from_deck(
      deck, train_set.channels(), train_set.height(), train_set.width(),
      std::max(train_set.num_classes(), test_set.num_classes()));
  HPCT_USAGE_CHECK(cfg.num_classes >= std::max(train_set.num_classes(), test_set.num_classes()),
                   "deck {}: model.num_classes = {} but the datasets have {} classes; raise it or set 0 (the dataset's)",
                   deck.deck_path(), cfg.num_classes, std::max(train_set.num_classes(), test_set.num_classes()));
  data::ImageNormalization norm;
  const auto floats = [&](const std::string& key) {
    const std::vector<double> v = parse_list(deck, key);
    return std::vector<float>(v.begin(), v.end());
  };
  norm.mean = floats("data.mean");
  norm.std = floats("data.std");
  const auto n_ok = [&](size_t n) { return n == 1 || n == static_cast<size_t>(train_set.channels()); };
  HPCT_USAGE_CHECK(n_ok(norm.mean.size()) && n_ok(norm.std.size()),
                   "deck {}: data.mean has {} and data.std {} values; give 1 or C = {} values each", deck.deck_path(),
                   norm.mean.size(), norm.std.size(), train_set.channels());
  for (float s : norm.std) HPCT_USAGE_CHECK(s > 0, "deck {}: data.std values must be positive", deck.deck_path());
  data::ImageAugmentation aug;
  aug.pad = static_cast<int>(deck.get_int("data.crop_pad"));
  aug.flip = deck.get_bool("data.flip");
  HPCT_USAGE_CHECK(aug.pad <= std::min(train_set.height(), train_set.width()),
                   "deck {}: data.crop_pad = {} is larger than the image ({}x{})", deck.deck_path(), aug.pad,
                   train_set.height(), train_set.width());
  const data::ImageBatchSampler sampler(train_set, seed, GB, norm, aug);
  const int64_t spe = sampler.steps_per_epoch();
  const int64_t epochs = deck.get_int("train.epochs");
  const int64_t steps = epochs > 0 ? epochs * spe : deck.get_int("train.steps");
  int64_t n_eval = deck.get_int("data.eval_images");
  n_eval = n_eval > 0 ? std::min<int64_t>(n_eval, test_set.size()) : test_set.size();

  optim::LrSchedule sched;
  sched.lr = deck.get_float("optim.lr");
  sched.warmup_steps = deck.get_int("optim.warmup_steps");
  std::vector<int64_t> milestones;  // optimizer steps
  for (double e : parse_list(deck, "optim.milestones")) {
    HPCT_USAGE_CHECK(e == std::floor(e) && e > static_cast<double>(milestones.empty() ? 0 : milestones.back() / spe),
                     "deck {}: optim.milestones = \"{}\": epochs must be ascending positive integers",
                     deck.deck_path(), deck.get_string("optim.milestones"));
    milestones.push_back(static_cast<int64_t>(e) * spe);
  }
  if (deck.get_string("optim.schedule") == "step") {
    HPCT_USAGE_CHECK(!milestones.empty(), "deck {}: optim.schedule = \"step\" needs optim.milestones (epochs, e.g. "
                                          "\"30,60,80\")", deck.deck_path());
    sched.kind = optim::LrSchedule::Kind::Step;
    sched.gamma = deck.get_float("optim.gamma");
    sched.milestones = milestones;
  } else {
    sched.final_lr_frac = deck.get_float("optim.final_lr_frac");
    sched.decay_steps = deck.get_int("optim.decay_steps") > 0 ? deck.get_int("optim.decay_steps") : steps;
    HPCT_USAGE_CHECK(sched.decay_steps >= sched.warmup_steps || steps == 0,
                     "deck {}: optim.decay_steps={} is before the end of optim.warmup_steps={}", deck.deck_path(),
                     sched.decay_steps, sched.warmup_steps);
  }
  optim::SgdConfig ocfg;
  ocfg.momentum = static_cast<float>(deck.get_float("optim.momentum"));
  ocfg.nesterov = deck.get_bool("optim.nesterov");
  ocfg.dampening = static_cast<float>(deck.get_float("optim.dampening"));
  ocfg.weight_decay = static_cast<float>(deck.get_float("optim.weight_decay"));
  ocfg.grad_clip = static_cast<float>(deck.get_float("optim.grad_clip"));
  HPCT_USAGE_CHECK(!ocfg.nesterov || (ocfg.momentum > 0 && ocfg.dampening == 0),
                   "deck {}: optim.nesterov = true needs optim.momentum > 0 and optim.dampening = 0 (torch.optim.SGD)",
                   deck.deck_path());
  const int64_t log_every = deck.get_int("log.every");
  const int64_t eval_every = deck.get_int("train.eval_every");
  const double peak_tflops = deck.get_float("log.peak_tflops");
  const int ckpt_keep = static_cast<int>(deck.get_int("checkpoint.keep"));

  // ---- output, model, gradient sync, optimizer, planned buffers (nothing allocates in the step loop) ----
  const std::string ckpt_root = prepare_output(pc, opts.out_dir);
  resnet::ResNet model(cfg, MB, ctx.device, sync_bn ? &pc.device_dp_group() : nullptr);  // SyncBN: device buffers
  model.init_parameters(ctx, seed);
  const parallel::GradSyncOptions gso = grad_sync_options(deck);
  parallel::GradSync grad_sync(pc.device_dp_group(), model.params(), model.grads(), gso);
  model.set_grad_ready_hook([&grad_sync](int first, int end) { grad_sync.on_ready(first, end); });
  optim::Sgd sgd(model.params(), owned_segments(grad_sync), decay_flags(model.layout()), ocfg);
  optim::LossScaler scaler(loss_scale_config(deck, ctx.precision));
  std::vector<TensorPlacement> placements;  // data-parallel only: every tensor whole
  for (const auto& p : model.layout()) placements.push_back({p.shape, std::vector<int64_t>(p.shape.size(), 0), -1, true});
  // Without SyncBN every rank's running statistics follow its own images; DP rank 0's are the model's (as
  // torch DDP's broadcast_buffers): they are broadcast before every evaluation and checkpoint.
  auto sync_buffers = [&] {
    if (!sync_bn && dp > 1)
      pc.device_dp_group().broadcast(model.buffers().base(), static_cast<int64_t>(model.buffers().bytes() / 4),
                                     DType::F32, 0, "BN running statistics (from DP rank 0)");
  };
  // what checkpoints and replica checks read, as host memory (on the CPU: the model's own tensors, zero-copy)
  CheckpointStaging staging(ctx, model.params(), optimizer_state(sgd), &model.buffers());
  auto check_all_replicas = [&](const std::string& when) {  // replicas stay bitwise equal (DESIGN.md §6); after to_host()
    check_replicas(pc.dp_group(), staging.params(), when);
    check_replicas(pc.dp_group(), *staging.extra(), when + ", BN running statistics");
  };
  const int D = static_cast<int>(train_set.image_elems()), K = cfg.num_classes;
  Slab io("batch", ctx.device);
  Tensor& img_dev = io.add("images", {MB, cfg.in_channels, cfg.height, cfg.width});
  Tensor& lab_dev = io.add("labels", {MB}, DType::I32);
  Tensor& sum_dev = io.add("loss_sum", {1});
  io.allocate();
  std::vector<float> img_host(static_cast<size_t>(MB) * D), logits_host(static_cast<size_t>(MB) * K);
  std::vector<int32_t> lab_host(static_cast<size_t>(MB));

  resnet::MemoryPlan plan = model.memory();
  const double flops_img = 3.0 * resnet::forward_flops_per_image(cfg);  // forward + backward (2x)
  log_info("hpctrain train_resnet | deck {} | out {}", deck.deck_path(), opts.out_dir);
  parallel::log_launch_env(launch);
  run_device.log();  // the GPU, or auto's fallback to the CPU (nothing for train.device = cpu)
  log_info("model: ResNet-{} ({} style{}) | input {}x{}x{} | {} classes | {} parameters ({:.3f} M) | {:.3f} GFLOP "
           "per image (forward)",
           cfg.depth, cfg.style, cfg.bottleneck() ? ", Bottleneck" : ", BasicBlock", cfg.in_channels, cfg.height,
           cfg.width, K, plan.num_params, plan.num_params / 1e6, resnet::forward_flops_per_image(cfg) / 1e9);
  log_info("layout: ranks {} = dp {} | device {} | OpenMP threads {} | global_batch {} = {} x {} micro-batches of {} "
           "| BatchNorm: {}",
           pc.world_size(), dp, device_name(ctx.device), omp_get_max_threads(), GB, dp, n_micro, MB,
           sync_bn && dp > 1 ? "SyncBN over the DP group" : sync_bn ? "SyncBN (one rank: plain)" : "per rank");
  log_info("gradient sync: {}", grad_sync.describe());
  log_precision(ctx, scaler);
  if (ctx.device != Device::CPU)
    log_info("communicators: {} | checkpoint host staging {}", pc.describe_device_groups(),
             human_bytes(static_cast<double>(staging.host_bytes())));
  log_info("memory per rank: params {} | grads {} | BN buffers {} | optimizer {} | activations {} | activation grads "
           "{} | conv workspace {} | total {}",
           human_bytes(plan.param_bytes), human_bytes(plan.grad_bytes), human_bytes(plan.buffer_bytes),
           human_bytes(sgd.state_bytes()), human_bytes(plan.activation_bytes), human_bytes(plan.activation_grad_bytes),
           human_bytes(plan.workspace_bytes), human_bytes(plan.total() + sgd.state_bytes()));
  log_info("data: train {} ({} images, {} steps per epoch) | test {} ({} of {} images evaluated) | crop pad {} flip {}",
           train_set.path(), train_set.size(), spe, test_set.path(), n_eval, test_set.size(), aug.pad, aug.flip);
  if (epochs > 0 && deck.was_set("train.steps"))
    log_warn("train.epochs = {} sets the run to {} steps; train.steps = {} is ignored", epochs, steps,
             deck.get_int("train.steps"));
  log_info("schedule: {} steps ({:.2f} epochs) | SGD lr {} momentum {} nesterov {} weight decay {} | {} LR, warm-up {}",
           steps, static_cast<double>(steps) / spe, sched.lr, ocfg.momentum, ocfg.nesterov, ocfg.weight_decay,
           deck.get_string("optim.schedule"), sched.warmup_steps);

  // ---- resume ----------------------------------------------------------------------------------
  const ResumePoint resumed = open_resume(pc, deck, resnet_deck_schema(), ckpt_root, steps);
  const int64_t start = resumed.step;
  if (resumed.reader) {
    Timer t;
    load_checkpoint(*resumed.reader, staging.params(), placements, staging.optimizer(), staging.extra());
    staging.to_device();  // CUDA: host views -> device tensors (the CPU loaded in place)
    sgd.set_step_count(resumed.reader->attrs().ints.at("optim.step"));
    restore_loss_scaler(scaler, resumed.reader->attrs());
    log_info("resumed at step {} (epoch {}): loaded in {:.2f} s (verified in {:.2f} s)", start,
             start / std::max<int64_t>(spe, 1), t.seconds(), resumed.seconds);
  }
  std::unique_ptr<MetricsWriter> metrics;
  if (pc.rank() == 0)
    metrics = std::make_unique<MetricsWriter>((fs::path(opts.out_dir) / "metrics.jsonl").string(),
                                              resumed.reader ? start : -1);
  install_stop_signal_handlers();
  std::unique_ptr<ResNetDump> dump;
  if (!opts.dump_path.empty()) {
    dump = std::make_unique<ResNetDump>(opts.dump_path, deck, cfg, steps, GB);
    dump->record_state(ctx, model, "init");
  }

  CheckpointCadence cadence(deck);
  auto save = [&](int64_t s, const char* why) {
    sync_buffers();
    staging.to_host();  // CUDA: device -> host views, synchronized (the CPU writes its tensors in place)
    check_all_replicas(fmt::format("step {}", s));
    ckpt::Attrs a;
    a.ints["step"] = s;
    a.ints["images_seen"] = s * GB;
    a.ints["samples_seen"] = s * GB;
    a.ints["epoch"] = s / spe;
    a.ints["optim.step"] = sgd.step_count();
    add_loss_scaler_attrs(a, ctx, scaler);
    a.ints["data.next_step"] = s + 1;  // the sampler is a pure function of (seed, N, GB, step)
    a.ints["data.steps_per_epoch"] = spe;
    a.ints["rng.seed"] = static_cast<int64_t>(seed);
    a.ints["layout.world"] = pc.world_size();
    a.ints["layout.dp"] = dp;
    a.ints["layout.tp"] = 1;
    a.ints["layout.pp"] = 1;
    a.ints["layout.zero"] = gso.zero;
    a.ints["model.num_classes"] = K;
    a.floats["lr"] = sched.at(s);
    a.floats["lr_next"] = sched.at(s + 1);
    a.strings["layout"] = fmt::format("world={} dp={} zero={} sync_bn={}", pc.world_size(), dp, gso.zero, sync_bn);
    a.strings["deck"] = deck.effective_toml();
    a.strings["deck_path"] = deck.deck_path();
    a.strings["rng.algorithm"] = "philox4x32-10 keyed by (train.seed, stream name, counter); data order keyed by "
                                 "(seed, epoch), augmentation by (seed, step, sample): rng.seed and step are the state";
    a.strings["app"] = "train_resnet";
    add_launch_attrs(a, launch);
    const SaveResult r =
        save_checkpoint(pc, ckpt_root, ckpt_keep, staging.params(), placements, staging.optimizer(), a, staging.extra());
    cadence.saved(r.seconds);
    int64_t bytes = r.bytes_written;
    pc.world().allreduce(&bytes, 1, DType::I64, comm::ReduceOp::Sum, "checkpoint size");
    log_info("checkpoint ({}) step {} -> {} | {} in {:.2f} s", why, s, r.dir, human_bytes(static_cast<double>(bytes)),
             r.seconds);
  };

  // The test split (its first n_eval images), split over the DP ranks in contiguous blocks, micro_batch at a time,
  // with the running statistics: (loss sum, correct) summed over DP.
  auto evaluate = [&](double& loss_out, double& acc_out) {
    sync_buffers();
    const int64_t e0 = n_eval * dr / dp, e1 = n_eval * (dr + 1) / dp;
    double part[2] = {0.0, 0.0};
    for (int64_t first = e0; first < e1; first += MB) {
      const int b = static_cast<int>(std::min<int64_t>(MB, e1 - first));
      k::synchronize(ctx);  // the last batch's copies from img_host / lab_host are done before we refill them
      data::fill_images(test_set, norm, first, b, img_host.data(), lab_host.data());
      k::copy_from_host(ctx, img_dev.data, img_host.data(), static_cast<int64_t>(b) * D * 4);
      k::copy_from_host(ctx, lab_dev.data, lab_host.data(), static_cast<int64_t>(b) * 4);
      model.forward(ctx, img_dev.f32(), b, /*train=*/false);
      part[0] += sum_to_host(ctx, sum_dev, model.loss(ctx, lab_dev.i32(), b), b);
      k::copy_to_host(ctx, logits_host.data(), model.logits(), static_cast<int64_t>(b) * K * 4);
      k::synchronize(ctx);  // logits_host is read now
      part[1] += static_cast<double>(count_correct(logits_host.data(), lab_host.data(), b, K));
    }
    pc.dp_group().allreduce(part, 2, DType::F64, comm::ReduceOp::Sum, "test loss and accuracy");
    loss_out = part[0] / static_cast<double>(n_eval);
    acc_out = part[1] / static_cast<double>(n_eval);
  };

  // ---- training loop ------------------------------------------------------------------------------
  const float dloss = static_cast<float>(1.0 / static_cast<double>(GB));  // 1 / global loss terms
  std::vector<double> step_ms, exposed_ms;
  step_ms.reserve(static_cast<size_t>(std::max<int64_t>(steps - start, 0)));
  exposed_ms.reserve(step_ms.capacity());
  double last_loss = NAN, last_val = NAN, last_acc = NAN;
  Timer epoch_timer;
  int exit_code = 0;
  for (int64_t s = start + 1; s <= steps; ++s) {
    Timer timer;
    model.zero_grad(ctx);
    // the loss gradient times the loss scale S (1 without scaling; exact for power-of-two S)
    const float scaled_dloss = scaled_loss_gradient(dloss, scaler, s, dr);
    double sums[2] = {0.0, 0.0};  // loss sum, correct predictions (this rank's images)
    for (int64_t j = 0; j < n_micro; ++j) {
      const int64_t first = micro_first(j);
      // The previous copies from img_host / lab_host have completed before we refill them (CUDA copies are
      // asynchronous; the stream is idle here anyway: sum_to_host below and the step's end synchronize). CPU: a no-op.
      k::synchronize(ctx);
      sampler.fill(s, first, MB, img_host.data(), lab_host.data());
      if (dump) dump->record_batch(s, first, MB, img_host.data(), lab_host.data());
      k::copy_from_host(ctx, img_dev.data, img_host.data(), static_cast<int64_t>(img_host.size()) * 4);
      k::copy_from_host(ctx, lab_dev.data, lab_host.data(), static_cast<int64_t>(lab_host.size()) * 4);
      if (j == n_micro - 1) grad_sync.arm();  // gradients are final during the last backward
      model.forward(ctx, img_dev.f32(), MB, /*train=*/true);
      k::copy_to_host(ctx, logits_host.data(), model.logits(), static_cast<int64_t>(MB) * K * 4);  // before backward
      const float* losses = model.loss_and_backward(ctx, lab_dev.i32(), scaled_dloss, MB);  // (overwrites the logits)
      sums[0] += sum_to_host(ctx, sum_dev, losses, MB);
      // logits_host is read only now: sum_to_host synchronized, so the copy queued before backward has landed
      sums[1] += static_cast<double>(count_correct(logits_host.data(), lab_host.data(), MB, K));
    }
    grad_sync.finish();
    pc.dp_group().allreduce(sums, 2, DType::F64, comm::ReduceOp::Sum, "loss sum and accuracy");
    const double loss = sums[0] / static_cast<double>(GB), acc = sums[1] / static_cast<double>(GB);
    HPCT_USAGE_CHECK(std::isfinite(loss),
                     "loss is {} at step {}: training diverged; lower optim.lr (now {}) or check the data", loss, s,
                     sched.lr);
    double sumsq = sgd.grad_sumsq(ctx);
    if (gso.zero && dp > 1) pc.dp_group().allreduce(&sumsq, 1, DType::F64, comm::ReduceOp::Sum, "gradient norm");
    const double lr = sched.at(s);
    const optim::LossScaler::Outcome ls = scaled_optimizer_step(ctx, sgd, scaler, sumsq, s, lr);
    const double norm = ls.norm;
    grad_sync.gather_params();
    k::synchronize(ctx);
    const double ms = timer.ms();
    step_ms.push_back(ms);
    exposed_ms.push_back(grad_sync.last_exposed_ms() + grad_sync.last_gather_ms());
    last_loss = loss;
    if (dump) dump->record_step(s, loss, lr, norm);
    const double img_s = static_cast<double>(GB) / (ms / 1e3);
    std::optional<double> mfu;
    if (peak_tflops > 0) mfu = flops_img * img_s / (peak_tflops * 1e12 * pc.world_size());
    const bool epoch_end = s % spe == 0;
    std::optional<double> val_loss, val_acc;
    if ((eval_every > 0 ? s % eval_every == 0 : epoch_end) || s == steps) {
      double vl = 0, va = 0;
      evaluate(vl, va);
      val_loss = last_val = vl;
      val_acc = last_acc = va;
    }
    if (metrics) {
      std::vector<std::pair<std::string, std::optional<double>>> rec = {
          {"step", static_cast<double>(s)}, {"epoch", static_cast<double>(s) / spe}, {"loss", loss}, {"acc", acc},
          {"lr", lr}, {"grad_norm", ls.skip ? std::nullopt : std::optional<double>(norm)}, {"ms", ms},
          {"images_per_s", img_s}, {"mfu", mfu}, {"comm_exposed_ms", exposed_ms.back()}};
      add_loss_scale_metrics(rec, scaler, ls);
      if (val_loss) {
        rec.push_back({"val_loss", *val_loss});
        rec.push_back({"val_acc", *val_acc});
      }
      metrics->write(rec);
    }
    if (s % log_every == 0 || s == steps || val_loss)
      log_info("step {:>6}/{} | epoch {:.2f} | loss {:.6f} | acc {:.4f} | lr {:.4e} | grad norm {:.4f} | {:.1f} ms "
               "(comm exposed {:.1f}) | {:.0f} img/s{}{}",
               s, steps, static_cast<double>(s) / spe, loss, acc, lr, norm, ms, exposed_ms.back(), img_s,
               val_loss ? fmt::format(" | test loss {:.6f} acc {:.4f}", *val_loss, *val_acc) : "",
               loss_scale_suffix(scaler, ls));
    if (epoch_end) {
      log_info("epoch {} done in {:.1f} s{}", s / spe, epoch_timer.seconds(),
               val_acc ? fmt::format(" | test accuracy {:.4f} ({} images)", *val_acc, n_eval) : "");
      epoch_timer.reset();
    }

    // ---- checkpoint and stop, decided collectively (one allreduce(MAX) per step) -------------
    const CheckpointCadence::Decision dec = cadence.decide(pc.world(), s, steps, ms);
    if (dec.save) save(s, dec.why);
    if (dec.stop) {
      log_info("stopping after step {} ({}): checkpoint written; exit code 3 asks to be requeued and resumed with "
               "--set checkpoint.resume=latest",
               s, dec.why);
      exit_code = 3;
      break;
    }
  }
  sync_buffers();
  staging.to_host();
  check_all_replicas("end of training");
  if (dump) {
    dump->record_state(ctx, model, "final");
    dump->write();
    log_info("reference dump written to {}", opts.dump_path);
  }
  const double med = median_after_first(step_ms), med_exposed = median_after_first(exposed_ms);
  const double img_s = static_cast<double>(GB) / (med / 1e3);
  const std::string mfu_s = peak_tflops > 0
                                ? fmt::format("{:.2f}%", 100 * flops_img * img_s / (peak_tflops * 1e12 * pc.world_size()))
                                : std::string("n/a");
  log_info("PERFORMANCE ranks dp | ms/step images/s images/s/rank MFU | loss test_loss test_acc | comm_exposed_ms "
           "comm_exposed_frac");
  log_info("PERFORMANCE {} {} | {:.2f} {:.1f} {:.1f} {} | {:.6f} {:.6f} {:.4f} | {:.2f} {:.4f}", pc.world_size(), dp, med,
           img_s, img_s / pc.world_size(), mfu_s, last_loss, last_val, last_acc, med_exposed, med_exposed / med);
  set_log_file("");
  return exit_code;
}

}  // namespace hpct::train
