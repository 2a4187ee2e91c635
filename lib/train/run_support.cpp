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
#include "train/run_config.hpp"
#include "train/stop_signals.hpp"

#if HPCT_HAVE_CUDA
#include "kernels/cuda/cuda_device.hpp"
#endif

#ifndef HPCT_SOURCE_DIR
#define HPCT_SOURCE_DIR "."
#endif

namespace hpct::train {

namespace fs = std::filesystem;

std::string data_dir() {
  const char* env = std::getenv("HPCT_DATA_DIR");
  return env && *env ? std::string(env) : (fs::path(HPCT_SOURCE_DIR) / "data").string();
}

std::string resolve_data_path(const std::string& path) {
  if (fs::path(path).is_absolute()) return path;
  return (fs::path(data_dir()) / path).string();
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

std::vector<optim::Segment> owned_segments(const parallel::GradSync& sync, parallel::ParamGather* gather) {
  std::vector<optim::Segment> segs;
  for (size_t i = 0; i < sync.owned().size(); ++i) {
    const parallel::OwnedRange& o = sync.owned()[i];
    segs.push_back({o.tensor, o.begin, o.end, o.grad, 0});
    if (gather) segs.back().param = gather->master(sync.plan().owned[i].at);  // the same shard layout
  }
  return segs;
}

double unix_now() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

parallel::LaunchEnv read_launch(const comm::CommOptions& opts) {
  // a world communicator of its own (a duplicate of MPI_COMM_WORLD, freed on return): the ParallelContext, which
  // checks the layout against the world size, comes after the wire-up check
  return parallel::read_launch_env(*comm::make_world_communicator(opts));
}

void add_launch_attrs(ckpt::Attrs& a, const parallel::LaunchEnv& launch) {
  a.ints["restart_count"] = launch.restart_count;
  if (launch.job_id) a.ints["slurm_job_id"] = *launch.job_id;
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

CheckpointCadence::CheckpointCadence(const RunConfig& cfg)
    : every_(cfg.checkpoint.every),
      deadline_(cfg.train.deadline),
      minutes_(cfg.checkpoint.every_minutes),
      at_end_(cfg.checkpoint.at_end) {}

CheckpointCadence::Decision CheckpointCadence::decide(comm::Communicator& world, int64_t s, int64_t steps,
                                                      double step_ms, double in_flight_s, bool save_failed) {
  // signal, deadline near, minutes cadence due, a background save failed
  int32_t flags[4] = {stop_signal_received(), 0, 0, save_failed ? 1 : 0};
  if (deadline_ > 0) {
    const double margin = 2.0 * step_ms / 1e3 + 1.5 * last_ckpt_s_ + in_flight_s + 2.0;
    flags[1] = unix_now() + margin >= static_cast<double>(deadline_) ? 1 : 0;
  }
  if (minutes_ > 0) flags[2] = since_.seconds() >= minutes_ * 60.0 ? 1 : 0;
  world.allreduce(flags, 4, DType::I32, comm::ReduceOp::Max, "stop / checkpoint decision");
  Decision d;
  d.save_failed = flags[3] != 0;
  d.stop = (flags[0] != 0 || flags[1] != 0) && s < steps;
  const bool every = every_ > 0 && s % every_ == 0;
  d.why = flags[0]   ? signal_name(flags[0])
          : flags[1] ? "train.deadline"
          : flags[2] ? "every_minutes"
          : every    ? "every"
                     : "end";
  d.save = d.stop || flags[2] || every || (s == steps && at_end_);
  return d;
}

void CheckpointCadence::started() { since_.reset(); }

void CheckpointCadence::finished(double seconds) { last_ckpt_s_ = seconds; }

int64_t evaluation_forwards(bool params_sharded, int64_t n_eval, int dp, int micro_batch) {
  if (!params_sharded) return 0;
  return ((n_eval + dp - 1) / dp + micro_batch - 1) / micro_batch;
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

double median_after_first(const std::vector<double>& x) {
  if (x.empty()) return NAN;
  std::vector<double> v(x.begin() + (x.size() > 1 ? 1 : 0), x.end());
  std::nth_element(v.begin(), v.begin() + static_cast<int64_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

}  // namespace hpct::train
