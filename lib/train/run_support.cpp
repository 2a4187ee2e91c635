#include "train/run_support.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <cstdlib>
#include <filesystem>
#include <limits>

#include "comm/comm.hpp"
#include "core/format.hpp"
#include "core/log.hpp"
#include "kernels/kernels.hpp"
#include "train/checkpointing.hpp"
#include "train/stop_signals.hpp"

#if HPCT_HAVE_CUDA
#include "kernels/cuda/cuda_device.hpp"
#endif

#ifndef HPCT_SOURCE_DIR
#define HPCT_SOURCE_DIR "."
#endif

namespace hpct::train {

namespace fs = std::filesystem;

std::string resolve_data_path(const std::string& path) {
  if (fs::path(path).is_absolute()) return path;
  const char* env = std::getenv("HPCT_DATA_DIR");
  const fs::path base = env && *env ? fs::path(env) : fs::path(HPCT_SOURCE_DIR) / "data";
  return (base / path).string();
}

float sum_to_host(const ExecContext& ctx, Tensor& sum_dev, const float* x, int64_t n) {
  kernels::sum(ctx, sum_dev.f32(), x, n);
  float s = 0.0f;
  kernels::copy_to_host(ctx, &s, sum_dev.f32(), 4);
  kernels::synchronize(ctx);  // CUDA copies are asynchronous: s is valid only now (a no-op on the CPU)
  return s;
}

void add_run_keys(ConfigSchema& s) {
  s.int_key("parallel.zero", 0, "ZeRO stage: 0 (replicated optimizer) or 1 (optimizer state, AdamW moments or SGD "
                                "momentum, sharded over DP; gradients reduce-scattered, parameters allgathered)", 0, 1);
  s.float_key("parallel.bucket_mb", 1.0, "gradient bucket size in MiB (buckets start as backward produces them)",
              1e-6, 1e6);
  s.bool_key("parallel.overlap", true, "launch gradient buckets during backward (false: all after backward)");

  s.section("comm", false, "communication");
  s.float_key("comm.timeout_s", 300.0, "bound of every wait (collective, p2p, checkpoint barrier): past it the job "
                                       "aborts naming the rank and the operation", 0.01, 1e7);

  s.section("checkpoint", false, "HDF5 sharded checkpoints under <out>/checkpoints (DESIGN.md §4)");
  s.int_key("checkpoint.every", 0, "write a checkpoint every this many steps (0: off)", 0, 1e12);
  s.float_key("checkpoint.every_minutes", 0.0, "write a checkpoint when this many minutes passed since the last "
                                               "(decided collectively; 0: off)", 0.0, 1e9);
  s.int_key("checkpoint.keep", 3, "keep the newest this many checkpoints (0: all)", 0, 1e9);
  s.bool_key("checkpoint.at_end", true, "write a checkpoint after the last step");
  s.string_key("checkpoint.resume", "none", "\"latest\" (the newest under <out>/checkpoints; none yet: start "
                                            "fresh), a step_XXXXXXXX directory, or \"none\"");
}

parallel::GradSyncOptions grad_sync_options(const Config& deck) {
  parallel::GradSyncOptions o;
  o.bucket_bytes = static_cast<size_t>(deck.get_float("parallel.bucket_mb") * 1024 * 1024);
  o.overlap = deck.get_bool("parallel.overlap");
  o.zero = static_cast<int>(deck.get_int("parallel.zero"));
  return o;
}

std::vector<optim::Segment> owned_segments(const parallel::GradSync& sync) {
  std::vector<optim::Segment> segs;
  for (const auto& o : sync.owned()) segs.push_back({o.tensor, o.begin, o.end, o.grad, 0});
  return segs;
}

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

DeviceDecision decide_device(const std::string& requested, const std::string& build_gap, int unusable_ranks,
                             int world_size, const std::string& reason, const std::string& deck_path) {
  HPCT_CHECK(requested == "cpu" || requested == "cuda" || requested == "auto", "train.device = \"{}\"", requested);
  DeviceDecision d;
  if (requested == "cpu") return d;
  std::string why;  // why CUDA cannot be used, "" when it can
  if (!build_gap.empty()) {
    why = build_gap;
  } else if (unusable_ranks > 0) {
    why = unusable_ranks == world_size
              ? fmt::format("no usable CUDA device ({})", reason)
              : fmt::format("no usable CUDA device on {} of {} ranks ({})", unusable_ranks, world_size, reason);
  }
  if (why.empty()) {
    d.device = Device::CUDA;
    return d;
  }
  if (requested == "cuda")
    HPCT_USAGE_FAIL("deck {}: train.device = \"cuda\" but {}; {}, or run on the CPU with --set train.device=cpu",
                    deck_path, why,
                    build_gap.empty() ? "run where every rank sees a GPU"
                                      : "rebuild with the CUDA toolkit (scripts/build.sh -DHPCT_ENABLE_CUDA=ON)");
  d.note = fmt::format("train.device = auto: {}: running on the CPU", why);
  return d;
}

Precision decide_precision(const std::string& requested_device, Device decided, Precision requested,
                           const std::string& deck_path, std::string* note) {
  if (decided == Device::CUDA || requested == Precision::FP32) return requested;
  HPCT_USAGE_CHECK(requested_device != "cpu",
                   "deck {}: train.precision = {} needs train.device = cuda (the CPU backend computes fp32 only); use "
                   "--set train.precision=fp32 on the CPU",
                   deck_path, precision_name(requested));
  if (note)
    *note += fmt::format("{}train.precision = {} applies to CUDA only: fp32 on the CPU", note->empty() ? "" : "; ",
                         precision_name(requested));
  return Precision::FP32;
}

void add_precision_keys(ConfigSchema& s) {
  s.string_key("train.precision", "fp32",
               "arithmetic of the matrix products on CUDA: fp32 | tf32 | bf16 | fp16 (fp32 storage, master weights "
               "and accumulation throughout; the CPU computes fp32 only)",
               {"fp32", "tf32", "bf16", "fp16"});
  s.string_key("train.loss_scale", "auto",
               "loss scaling: auto (dynamic for fp16, none otherwise) | none | dynamic | a fixed positive number");
  s.float_key("train.loss_scale_init", 65536.0, "dynamic loss scaling: the initial scale", 1e-30, 3.4e38);
  s.int_key("train.loss_scale_window", 2000,
            "dynamic loss scaling: double the scale after this many consecutive finite steps (at most 2^24)", 1, 1e12);
  s.float_key("train.loss_scale_min", 1.0,
              "dynamic loss scaling: a non-finite step at this scale stops the run (divergence, not overflow)", 1e-30,
              1e38);
}

optim::LossScaleConfig loss_scale_config(const Config& deck, Precision precision) {
  return optim::parse_loss_scale(deck.get_string("train.loss_scale"), precision, deck.get_float("train.loss_scale_init"),
                                 deck.get_int("train.loss_scale_window"), deck.get_float("train.loss_scale_min"),
                                 fmt::format("deck {}", deck.deck_path()));
}

void log_precision(const ExecContext& ctx, const optim::LossScaler& scaler) {
  if (ctx.precision == Precision::FP32 && !scaler.active()) return;
  const optim::LossScaleConfig& c = scaler.config();
  std::string scaling = "none";
  if (c.mode == optim::LossScaleConfig::Mode::Fixed) scaling = fmt::format("fixed {}", c.init);
  if (c.mode == optim::LossScaleConfig::Mode::Dynamic)
    scaling = fmt::format("dynamic (init {}, x{} after {} finite steps up to {}, x{} on a non-finite step, min {})",
                          c.init, c.growth, c.growth_interval, c.max_scale, c.backoff, c.min_scale);
  log_info("precision: {} products, fp32 storage, master weights and accumulation | loss scaling {}",
           precision_name(ctx.precision), scaling);
}

void add_loss_scaler_attrs(ckpt::Attrs& a, const ExecContext& ctx, const optim::LossScaler& scaler) {
  a.strings["precision"] = precision_name(ctx.precision);
  a.strings["loss_scale.mode"] = optim::loss_scale_mode_name(scaler.config().mode);
  a.floats["loss_scale.scale"] = scaler.scale();
  a.ints["loss_scale.good_steps"] = scaler.good_steps();
}

void restore_loss_scaler(optim::LossScaler& scaler, const ckpt::Attrs& a) {
  const auto s = a.floats.find("loss_scale.scale");
  const auto g = a.ints.find("loss_scale.good_steps");
  const auto m = a.strings.find("loss_scale.mode");
  // only a dynamic scale carries over, and only from a run that was scaling dynamically too
  if (s == a.floats.end() || g == a.ints.end() || m == a.strings.end() || m->second != "dynamic") return;
  scaler.restore(s->second, g->second);
  if (scaler.config().mode == optim::LossScaleConfig::Mode::Dynamic)
    log_info("loss scale resumed at {} ({} finite steps since its last change)", scaler.scale(), scaler.good_steps());
}

void log_skipped_step(int64_t step, const optim::LossScaler::Outcome& o) {
  log_info("step {}: non-finite gradients (gradient norm {}) at loss scale {}: optimizer step skipped, loss scale -> {}",
           step, std::isnan(o.norm) ? std::string("NaN") : fmt::format("{}", o.norm), o.scale, o.next_scale);
}

void add_loss_scale_metrics(std::vector<std::pair<std::string, std::optional<double>>>& rec,
                            const optim::LossScaler& scaler, const optim::LossScaler::Outcome& o) {
  if (!scaler.active()) return;
  rec.push_back({"loss_scale", o.scale});
  if (o.skip) rec.push_back({"skipped", 1.0});
}

float scaled_loss_gradient(float dloss, const optim::LossScaler& scaler, int64_t step, int dp_rank) {
  static const std::vector<int64_t> inf_steps = [] {
    std::vector<int64_t> v;
    if (const char* e = std::getenv("HPCT_TEST_INF_DLOSS_STEPS")) {
      std::string item;
      for (const char* c = e;; ++c) {
        if (*c == ',' || *c == '\0') {
          if (!item.empty()) {
            char* end = nullptr;
            const long long step = std::strtoll(item.c_str(), &end, 10);
            HPCT_USAGE_CHECK(end && *end == '\0', "HPCT_TEST_INF_DLOSS_STEPS=\"{}\": \"{}\" is not a step number; give "
                             "comma-separated steps, e.g. 2,3,7 (a test hook: unset it for real runs)", e, item);
            v.push_back(step);
          }
          item.clear();
          if (*c == '\0') break;
        } else {
          item += *c;
        }
      }
    }
    return v;
  }();
  if (dp_rank == 0 && std::find(inf_steps.begin(), inf_steps.end(), step) != inf_steps.end())
    return std::numeric_limits<float>::infinity();
  return static_cast<float>(static_cast<double>(dloss) * scaler.scale());
}

std::string loss_scale_suffix(const optim::LossScaler& scaler, const optim::LossScaler::Outcome& o) {
  if (!scaler.active()) return "";
  return fmt::format(" | scale {}{}", o.scale, o.skip ? " | SKIPPED" : "");
}

#if HPCT_HAVE_CUDA
struct RunDevice::Cuda {
  kernels::CudaStream stream;  // the rank's compute stream
};
#else
struct RunDevice::Cuda {};
#endif

RunDevice::RunDevice(const Config& deck, const parallel::LaunchEnv& launch, const comm::CommOptions& opts) {
  const std::string& requested = deck.get_string("train.device");
  const Precision precision = parse_precision(deck.get_string("train.precision"));
  if (requested == "cpu") {  // no CUDA call, no collective: the CPU path exactly as before
    exec_.precision = decide_precision(requested, Device::CPU, precision, deck.deck_path(), &line_);
    return;
  }
  std::string build_gap;
#if !HPCT_HAVE_CUDA
  build_gap = "this build has no CUDA backend (configured without the CUDA toolkit, or with -DHPCT_ENABLE_CUDA=OFF)";
#elif !HPCT_HAVE_NCCL
  build_gap = "this build has the CUDA kernels but no NCCL (nccl.h / libnccl were not found at configure time)";
#endif
  int unusable = 0;
  std::string reason;
  std::unique_ptr<comm::MpiCommunicator> world;
#if HPCT_HAVE_CUDA
  if (build_gap.empty()) {
    // Every rank's view, gathered: all ranks take the same decision (the deck, hence this branch, is the same on all).
    world = comm::make_world_communicator(opts);
    const std::vector<std::string> why =
        allgather_strings(*world, kernels::cuda_unavailable_reason(), "train.device: CUDA availability");
    const std::vector<std::string> hosts = allgather_strings(*world, launch.host, "train.device: host names");
    for (size_t r = 0; r < why.size(); ++r) {
      if (why[r].empty()) continue;
      if (unusable++ == 0) reason = why.size() > 1 ? fmt::format("rank {} on {}: {}", r, hosts[r], why[r]) : why[r];
    }
  }
#else
  (void)opts;
#endif
  const DeviceDecision d = decide_device(requested, build_gap, unusable, launch.world_size, reason, deck.deck_path());
  line_ = d.note;
  exec_.precision = decide_precision(requested, d.device, precision, deck.deck_path(), &line_);
  if (d.device == Device::CPU) return;
#if HPCT_HAVE_CUDA
  const kernels::CudaDeviceInfo info = kernels::cuda_select_device(launch.local_rank);
  // One GPU per rank: NCCL refuses two ranks of one communicator on one GPU. Gathered, so every rank stops alike.
  const std::string shared =
      launch.local_size > info.count
          ? fmt::format("{} ranks run on {} but it has {} visible CUDA device(s)", launch.local_size, launch.host,
                        info.count)
          : std::string();
  const std::vector<std::string> over = allgather_strings(*world, shared, "train.device: ranks per GPU");
  for (const std::string& o : over)
    HPCT_USAGE_CHECK(o.empty(),
                     "deck {}: train.device = {}: {}; NCCL needs one GPU per rank: launch at most one rank per GPU on "
                     "each node (e.g. srun --ntasks-per-node=<GPUs> --gpus-per-task=1), or run on the CPU with --set "
                     "train.device=cpu",
                     deck.deck_path(), requested, o);
  cuda_ = std::make_unique<Cuda>();
  exec_.device = Device::CUDA;  // exec_.precision: decided above
  exec_.stream = cuda_->stream.get();
  line_ = fmt::format("device: cuda:{} {} (sm_{}{}, {} total, {} free) on rank 0 | train.device = {}: every rank "
                      "computes on GPU local_rank % visible devices ({} rank(s), {} device(s) on rank 0's node) | precision {}",
                      info.index, info.name, info.cc_major, info.cc_minor,
                      human_bytes(static_cast<double>(info.total_bytes)),
                      human_bytes(static_cast<double>(info.free_bytes)), requested, launch.local_size, info.count,
                      precision_name(precision));
#endif
}

RunDevice::~RunDevice() = default;

void RunDevice::log() const {
  if (!line_.empty()) log_info("{}", line_);
}

parallel::LaunchEnv read_launch(const comm::CommOptions& opts) {
  // a world communicator of its own (a duplicate of MPI_COMM_WORLD, freed on return): the ParallelContext, which
  // checks the layout against the world size, comes after the wire-up check
  return parallel::read_launch_env(*comm::make_world_communicator(opts));
}

void add_launch_attrs(ckpt::Attrs& a, const parallel::LaunchEnv& launch) {
  a.ints["restart_count"] = launch.restart_count;
  if (launch.job_id) a.ints["slurm_job_id"] = *launch.job_id;
}

void check_deadline(const Config& deck) {
  const int64_t deadline = deck.get_int("train.deadline");
  HPCT_USAGE_CHECK(deadline == 0 || deadline > unix_now(),
                   "deck {}: train.deadline = {} is in the past (now {:.0f}); set a future Unix time or 0",
                   deck.deck_path(), deadline, unix_now());
}

std::string prepare_output(parallel::ParallelContext& pc, const std::string& out_dir) {
  if (pc.rank() == 0) {
    std::error_code ec;
    fs::create_directories(out_dir, ec);
    HPCT_USAGE_CHECK(!ec, "cannot create the output directory {}: {}", out_dir, ec.message());
  }
  pc.world().barrier("output directory created");
  set_log_file((fs::path(out_dir) / "train.log").string());
  return (fs::path(out_dir) / "checkpoints").string();
}

ResumePoint open_resume(parallel::ParallelContext& pc, const Config& deck, const ConfigSchema& schema,
                        const std::string& ckpt_root, int64_t steps) {
  ResumePoint r;
  const std::string resume = deck.get_string("checkpoint.resume");
  r.dir = resolve_resume(resume, ckpt_root, deck.deck_path());
  if (!r.dir.empty()) {
    Timer t;
    r.checked_bytes = verify_collective(pc.world(), r.dir);
    r.reader = std::make_unique<ckpt::Reader>(r.dir);
    check_resume_compatible(deck, schema, *r.reader);
    r.step = r.reader->attrs().ints.at("step");
    HPCT_USAGE_CHECK(r.step <= steps || steps == 0,
                     "checkpoint {} is at step {}, past train.steps = {}; raise train.steps to continue", r.dir,
                     r.step, steps);
    r.seconds = t.seconds();
    log_info("resuming from {} (step {}, written with {}): {} verified", r.dir, r.step,
             r.reader->attrs().strings.count("layout") ? r.reader->attrs().strings.at("layout") : "?",
             human_bytes(static_cast<double>(r.checked_bytes)));
  } else if (resume == "latest") {
    log_info("checkpoint.resume = latest: no checkpoint under {}, starting fresh", ckpt_root);
  }
  if (r.dir.empty() && pc.rank() == 0 && fs::exists(fs::path(ckpt_root) / "latest")) {
    // A fresh run never mixes its checkpoints with an earlier run's, and never deletes them: move them aside.
    const std::time_t now = std::time(nullptr);
    char stamp[32];
    std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", std::gmtime(&now));
    const std::string aside = ckpt_root + ".prev-" + stamp;
    std::error_code ec;
    fs::rename(ckpt_root, aside, ec);
    HPCT_USAGE_CHECK(!ec, "cannot move the earlier run's checkpoints {} aside to {}: {}", ckpt_root, aside, ec.message());
    log_warn("starting fresh (checkpoint.resume = {}): the earlier run's checkpoints in {} were moved to {} (resume "
             "them with --set checkpoint.resume=latest next time)",
             resume, ckpt_root, aside);
  }
  pc.world().barrier("resume decided");
  return r;
}

CheckpointCadence::CheckpointCadence(const Config& deck)
    : every_(deck.get_int("checkpoint.every")),
      deadline_(deck.get_int("train.deadline")),
      minutes_(deck.get_float("checkpoint.every_minutes")),
      at_end_(deck.get_bool("checkpoint.at_end")) {}

CheckpointCadence::Decision CheckpointCadence::decide(comm::Communicator& world, int64_t s, int64_t steps,
                                                      double step_ms) {
  int32_t flags[3] = {stop_signal_received(), 0, 0};  // signal, deadline near, minutes cadence due
  if (deadline_ > 0) {
    const double margin = 2.0 * step_ms / 1e3 + 1.5 * last_ckpt_s_ + 2.0;
    flags[1] = unix_now() + margin >= static_cast<double>(deadline_) ? 1 : 0;
  }
  if (minutes_ > 0) flags[2] = since_.seconds() >= minutes_ * 60.0 ? 1 : 0;
  world.allreduce(flags, 3, DType::I32, comm::ReduceOp::Max, "stop / checkpoint decision");
  Decision d;
  d.stop = (flags[0] != 0 || flags[1] != 0) && s < steps;
  const bool every = every_ > 0 && s % every_ == 0;
  d.why = flags[0] ? signal_name(flags[0]) : flags[1] ? "train.deadline" : flags[2] ? "every_minutes"
          : every ? "every" : "end";
  d.save = d.stop || flags[2] || every || (s == steps && at_end_);
  return d;
}

void CheckpointCadence::saved(double seconds) {
  last_ckpt_s_ = seconds;
  since_.reset();
}

double median_after_first(const std::vector<double>& x) {
  if (x.empty()) return NAN;
  std::vector<double> v(x.begin() + (x.size() > 1 ? 1 : 0), x.end());
  std::nth_element(v.begin(), v.begin() + static_cast<int64_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

}  // namespace hpct::train
