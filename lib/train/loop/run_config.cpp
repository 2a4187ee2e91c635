#include "train/loop/run_config.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "train/loop/loss_scaling.hpp"
#include "train/loop/run_environment.hpp"

namespace hpct::train {

RunConfig read_run_config(const Config& deck) {
  RunConfig c;
  c.deck_path = deck.deck_path();
  TrainSection& t = c.train;
  t.steps = deck.get_int("train.steps");
  t.seed = static_cast<uint64_t>(deck.get_int("train.seed"));
  t.global_batch = deck.get_int("train.global_batch");
  t.micro_batch = static_cast<int>(deck.get_int("train.micro_batch"));
  t.deadline = deck.get_int("train.deadline");
  t.eval_every = deck.get_int("train.eval_every");
  t.profile_step = deck.get_int("train.profile_step");
  t.device = deck.get_string("train.device");
  t.precision = parse_precision(deck.get_string("train.precision"));
  t.loss_scale = deck.get_string("train.loss_scale");
  t.loss_scale_init = deck.get_float("train.loss_scale_init");
  t.loss_scale_window = deck.get_int("train.loss_scale_window");
  t.loss_scale_min = deck.get_float("train.loss_scale_min");
  t.memory_limit_gb = deck.get_float("train.memory_limit_gb");
  t.recompute = models::parse_recompute(deck.get_string("train.recompute"), "deck " + deck.deck_path());
  HPCT_USAGE_CHECK(t.deadline == 0 || t.deadline > unix_now(),
                   "deck {}: train.deadline = {} is in the past (now {:.0f}); set a future Unix time or 0",
                   deck.deck_path(), t.deadline, unix_now());

  ParallelSection& p = c.parallel;
  p.tp = static_cast<int>(deck.get_int("parallel.tp"));
  p.pp = static_cast<int>(deck.get_int("parallel.pp"));
  p.order = deck.get_string("parallel.order");
  const parallel::ScheduleKind requested = deck.has_key("parallel.schedule")
                                               ? parallel::parse_schedule_kind(deck.get_string("parallel.schedule"))
                                               : parallel::ScheduleKind::OneFOneB;
  p.schedule = parallel::schedule_kind_for(p.pp, requested);
  p.sp = deck.has_key("parallel.sp") && deck.get_bool("parallel.sp");
  HPCT_USAGE_CHECK(
      !p.sp || p.tp > 1,
      "deck {}: parallel.sp = true with parallel.tp = {}: sequence parallelism shards the activations over "
      "the tensor-parallel group; set parallel.tp > 1, or parallel.sp = false",
      deck.deck_path(), p.tp);
  // a key of the apps with a pipeline (train_gpt); the others' schema lacks it
  p.virtual_stages = deck.has_key("parallel.virtual_stages") ? static_cast<int>(deck.get_int("parallel.virtual_stages"))
                                                             : 1;
  HPCT_USAGE_CHECK(p.virtual_stages == 1 || p.pp > 1,
                   "deck {}: parallel.virtual_stages = {} with parallel.pp = {}: virtual stages interleave the model "
                   "chunks of a pipeline of several ranks; set parallel.pp > 1, or parallel.virtual_stages = 1",
                   deck.deck_path(), p.virtual_stages, p.pp);
  HPCT_USAGE_CHECK(p.virtual_stages == 1 || p.schedule == parallel::ScheduleKind::OneFOneB,
                   "deck {}: parallel.virtual_stages = {} with parallel.schedule = \"{}\": the interleaved schedule is "
                   "1F1B's (Megatron-LM's); set parallel.schedule = \"1f1b\", or parallel.virtual_stages = 1",
                   deck.deck_path(), p.virtual_stages, parallel::schedule_kind_name(p.schedule));
  p.sync.bucket_bytes = static_cast<size_t>(deck.get_float("parallel.bucket_mb") * 1024 * 1024);
  p.sync.overlap = deck.get_bool("parallel.overlap");
  p.sync.reduce_dtype = parallel::parse_grad_dtype(deck.get_string("parallel.grad_dtype"));
  p.sync.zero = static_cast<int>(deck.get_int("parallel.zero"));
  p.sync.zero_group = static_cast<int>(deck.get_int("parallel.zero_group"));
  p.sync.prefetch = deck.get_bool("parallel.prefetch");
  HPCT_USAGE_CHECK(
      p.sync.zero_group == 0 || p.sync.zero >= 1,
      "deck {}: parallel.zero_group = {} with parallel.zero = 0: hybrid sharding groups the ranks that share "
      "ZeRO's state; set parallel.zero = 1, 2 or 3, or parallel.zero_group = 0",
      deck.deck_path(), p.sync.zero_group);
  HPCT_USAGE_CHECK(p.sync.zero < 2 || p.sync.overlap,
                   "deck {}: parallel.zero = {} with parallel.overlap = false: ZeRO-{} reduce-scatters every gradient "
                   "bucket as backward completes it (that is how it avoids a full-size gradient buffer); set "
                   "parallel.overlap = true, or use parallel.zero = 1",
                   deck.deck_path(), p.sync.zero, p.sync.zero);
  HPCT_USAGE_CHECK(p.sync.zero != 3 || p.pp == 1,
                   "deck {}: parallel.zero = 3 with parallel.pp = {}: ZeRO-3 gathers each layer's parameters for "
                   "every micro-batch's forward and backward, which a pipeline schedule's interleaved micro-batches "
                   "would repeat per micro-batch and stage (DeepSpeed refuses the combination too); use "
                   "parallel.pp = 1, or parallel.zero = 2 with pipelining",
                   deck.deck_path(), p.pp);
  HPCT_USAGE_CHECK(p.sync.zero != 2 || p.virtual_stages == 1,
                   "deck {}: parallel.zero = 2 with parallel.virtual_stages = {}: ZeRO-2 reduce-scatters every "
                   "micro-batch's gradient buckets as one backward completes them, and with virtual stages a backward "
                   "runs one model chunk, so the buckets of the others stay open; use parallel.zero = 1 (or 0), or "
                   "parallel.virtual_stages = 1",
                   deck.deck_path(), p.virtual_stages);

  c.comm.timeout_s = deck.get_float("comm.timeout_s");
  c.comm.device_backend = comm::parse_device_backend(deck.get_string("comm.backend"));

  CheckpointSection& k = c.checkpoint;
  k.every = deck.get_int("checkpoint.every");
  k.every_minutes = deck.get_float("checkpoint.every_minutes");
  k.keep = static_cast<int>(deck.get_int("checkpoint.keep"));
  k.at_end = deck.get_bool("checkpoint.at_end");
  k.resume = deck.get_string("checkpoint.resume");
  k.async = deck.get_bool("checkpoint.async");
  k.files = deck.get_string("checkpoint.files");

  c.log.every = deck.get_int("log.every");
  c.log.peak_tflops = deck.get_float("log.peak_tflops");
  return c;
}

optim::LrSchedule read_cosine_schedule(const Config& deck, int64_t steps) {
  optim::LrSchedule s;
  s.lr = deck.get_float("optim.lr");
  s.final_lr_frac = deck.get_float("optim.final_lr_frac");
  s.warmup_steps = deck.get_int("optim.warmup_steps");
  const int64_t decay = deck.get_int("optim.decay_steps");
  // a derived default never fails by itself: with warm-up longer than the run, the decay starts where warm-up ends
  s.decay_steps = decay > 0 ? decay : std::max(steps, s.warmup_steps);
  HPCT_USAGE_CHECK(
      s.decay_steps >= s.warmup_steps,
      "deck {}: optim.decay_steps = {} is before the end of optim.warmup_steps = {}; set optim.decay_steps "
      ">= {} (or 0: max(train.steps, optim.warmup_steps))",
      deck.deck_path(), s.decay_steps, s.warmup_steps, s.warmup_steps);
  return s;
}

void add_train_keys(ConfigSchema& s, const SharedKeyWords& w) {
  s.section("train", false, "the training run");
  s.int_key("train.steps", 100, w.steps_doc, 0, 1e12);
  s.int_key("train.seed", 1337, "seed of parameter init, " + w.seeded, 0, 9.2e18);
  s.int_key("train.global_batch", w.global_batch, w.unit + " per optimizer step (all ranks, all micro-batches)", 1,
            1 << 24);
  s.int_key("train.micro_batch", w.micro_batch, w.unit + " per forward/backward pass on one rank", 1, 1 << 20);
  s.string_key("train.device", "cpu",
               "where to compute: cpu | cuda | auto (auto: cuda when every rank has a "
               "usable GPU, else cpu with one log line)",
               {"cpu", "cuda", "auto"});
  add_precision_keys(s);
  s.float_key("train.memory_limit_gb", 0.0,
              "fail before allocating when a rank's planned memory on the run's device exceeds this many GB (1e9 "
              "bytes), naming the kind that is largest and what to change (0: no limit; `--plan WORLD` shows the plan)",
              0.0, 1e9);  // checked by check_memory_limit (train/plan/memory_plan.hpp)
  s.string_key("train.recompute", "none", w.recompute_doc, w.recompute_choices);
  s.int_key("train.deadline", 0, "Unix time (s): checkpoint and exit with code 3 before it (0: none)", 0, 9.2e18);
  s.int_key("train.eval_every", 0, w.eval_every_doc, 0, 1e12);
  s.int_key("train.profile_step", 0,
            "CUDA: bracket training step K (the optimizer step's forward, backward, gradient sync and update) with "
            "cudaProfilerStart / cudaProfilerStop, so that ncu --profile-from-start off or nsys profile "
            "--capture-range=cudaProfilerApi record that one step and not the set-up or the evaluations (0: none; "
            "no effect on the CPU)",
            0, 1e12);
}

void add_layout_keys(ConfigSchema& s, const SharedKeyWords& w) {
  s.section("parallel", false, w.parallel_doc);
  s.int_key("parallel.tp", 1, w.tp_doc, 1, 4096);
  s.int_key("parallel.pp", 1, w.pp_doc, 1, 4096);
  s.string_key("parallel.order", "tp-dp-pp", w.order_doc,
               {"tp-dp-pp", "tp-pp-dp", "dp-tp-pp", "dp-pp-tp", "pp-tp-dp", "pp-dp-tp"});
}

void add_log_keys(ConfigSchema& s, const SharedKeyWords& w) {
  s.section("log", false, "stdout logging");
  s.int_key("log.every", w.log_every, "print one line every this many steps", 1, 1e12);
  s.float_key("log.peak_tflops", 0.0,
              "peak TFLOP/s of one rank's device for MFU (0: the device table's at train.precision on CUDA; unknown "
              "on the CPU: mfu = null)",
              0.0, 1e6);
}

void add_run_keys(ConfigSchema& s) {
  s.int_key("parallel.zero", 0,
            "ZeRO stage: 0 (replicated optimizer), 1 (optimizer state, AdamW moments or SGD momentum, sharded over "
            "DP; gradients reduce-scattered once per step, parameters allgathered) or 2 (gradients sharded too: every "
            "micro-batch's buckets reduce-scattered as backward completes them, summed in fp32 into the rank's shard; "
            "no full-size gradient buffer) or 3 (train_gpt: parameters sharded too, each layer allgathered before its "
            "forward and its backward; no pipeline parallelism)",
            0, 3);
  s.bool_key("parallel.prefetch", true,
             "ZeRO-3: gather the next layer's parameters while the current one computes (false: each gather waits at "
             "its layer)");
  s.int_key(
      "parallel.zero_group", 0,
      "hybrid sharding (FSDP HYBRID_SHARD, ZeRO++ hpZ): ZeRO shards over groups of this many consecutive DP ranks "
      "and replicates across the groups, the gradient shards summed over the replicas once per step; it must "
      "divide the DP size (0: shard over the whole DP group; docs/parallelism.md says how to make a group one "
      "node)",
      0, 1 << 20);
  s.float_key("parallel.bucket_mb", 1.0, "gradient bucket size in MiB (buckets start as backward produces them)", 1e-6,
              1e6);
  s.bool_key("parallel.overlap", true, "launch gradient buckets during backward (false: all after backward)");
  s.string_key("parallel.grad_dtype", "fp32",
               "type of the data-parallel gradient reduction: fp32 | bf16 (bf16 halves the bytes on the wire; "
               "gradients are still accumulated, clipped and applied in fp32)",
               {"fp32", "bf16"});

  s.section("comm", false, "communication");
  s.float_key("comm.timeout_s", 300.0,
              "bound of every wait (collective, p2p, checkpoint barrier): past it the job "
              "aborts naming the rank and the operation",
              0.01, 1e7);
  s.string_key(
      "comm.backend", "nccl",
      "how a CUDA run moves device buffers: nccl | mpi (MPI over pinned host staging: every collective crosses "
      "PCIe; for sites without NCCL, and several ranks on one GPU); the CPU always uses MPI",
      {"nccl", "mpi"});

  s.section("checkpoint", false, "HDF5 sharded checkpoints under <out>/checkpoints (docs/contracts.md)");
  s.int_key("checkpoint.every", 0, "write a checkpoint every this many steps (0: off)", 0, 1e12);
  s.float_key("checkpoint.every_minutes", 0.0,
              "write a checkpoint when this many minutes passed since the last "
              "(decided collectively; 0: off)",
              0.0, 1e9);
  s.int_key("checkpoint.keep", 3, "keep the newest this many checkpoints (0: all)", 0, 1e9);
  s.bool_key("checkpoint.at_end", true, "write a checkpoint after the last step");
  s.bool_key("checkpoint.async", true,
             "write checkpoints in the background: the step that saves copies its state to a host staging buffer "
             "(accounted as ckpt_staging) and a writer thread writes and commits it while training goes on (false: "
             "the step loop waits for the whole write, and the CPU needs no staging copy)");
  s.string_key("checkpoint.files", "per_rank",
               "shard files of a checkpoint: per_rank (one per rank, no communication), per_node (one per node, the "
               "node's ranks writing collectively with parallel HDF5), single (one file, every rank collectively); "
               "any of them restores onto any layout",
               {"per_rank", "per_node", "single"});
  s.string_key("checkpoint.resume", "none",
               "\"latest\" (the newest under <out>/checkpoints; none yet: start "
               "fresh), a step_XXXXXXXX directory, or \"none\"");
}

int64_t micro_batches_per_step(const RunConfig& cfg, int dp) {
  const int64_t GB = cfg.train.global_batch, MB = cfg.train.micro_batch;
  HPCT_USAGE_CHECK(GB % (dp * MB) == 0,
                   "deck {}: train.global_batch={} is not divisible by DP x train.micro_batch = {} x {}; choose a "
                   "global batch that is a multiple of {} (or another micro_batch)",
                   cfg.deck_path, GB, dp, MB, dp * MB);
  const int64_t m = GB / (dp * MB), pp = cfg.parallel.pp, v = cfg.parallel.virtual_stages;
  // the interleaved schedule numbers its (chunk, micro-batch) pairs in whole groups of pp micro-batches
  HPCT_USAGE_CHECK(v == 1 || m % pp == 0,
                   "deck {}: parallel.virtual_stages = {} needs the micro-batches per step, train.global_batch / (DP x "
                   "train.micro_batch) = {} / ({} x {}) = {}, to be a multiple of parallel.pp = {}: choose "
                   "train.global_batch as a multiple of {} (or another micro_batch), or parallel.virtual_stages = 1",
                   cfg.deck_path, v, GB, dp, MB, m, pp, dp * MB * pp);
  return m;
}

}  // namespace hpct::train
