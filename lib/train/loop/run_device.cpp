#include "train/loop/run_device.hpp"

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "comm/comm.hpp"
#include "core/error.hpp"
#include "core/format.hpp"
#include "core/log.hpp"
#include "train/checkpoint/protocol.hpp"
#include "train/loop/run_config.hpp"

#if HPCT_HAVE_CUDA
#include "kernels/cuda/cuda_device.hpp"
#endif
#if HPCT_HAVE_NCCL
#include "comm/nccl_communicator.hpp"
#endif

namespace hpct::train {

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
  if (decided == Device::CUDA || requested == Precision::FP32 || requested == Precision::BF16) return requested;
  HPCT_USAGE_CHECK(
      requested_device != "cpu",
      "deck {}: train.precision = {} needs train.device = cuda ({}; the CPU backend computes fp32 or bf16); "
      "use --set train.precision=fp32 or bf16 on the CPU",
      deck_path, precision_name(requested),
      requested == Precision::FP16 ? "fp16 storage with dynamic loss scaling exists on CUDA only"
                                   : "it names a tensor-core arithmetic on fp32 storage");
  if (note)
    *note += fmt::format("{}train.precision = {} applies to CUDA only: fp32 on the CPU", note->empty() ? "" : "; ",
                         precision_name(requested));
  return Precision::FP32;
}

std::string ranks_per_gpu_problem(int local_size, int devices, const std::string& host, comm::DeviceBackend backend,
                                  bool nccl_multi_rank_env, int nccl_version, std::string* note) {
  if (note) note->clear();
  if (devices <= 0 || local_size <= devices) return "";
  const std::string shared = fmt::format("{} ranks run on {} but it has {} visible CUDA device(s)", local_size, host,
                                         devices);
  const int per_device = (local_size + devices - 1) / devices;
  if (backend == comm::DeviceBackend::HostStagedMpi) {
    if (note)
      *note = fmt::format("{}: up to {} ranks share each device (comm.backend = mpi: device buffers travel through "
                          "host staging, no NCCL); their timings are not the device's speed",
                          shared, per_device);
    return "";
  }
  if (nccl_multi_rank_env && nccl_version >= 23000) {
    if (note)
      *note = fmt::format("{}: up to {} ranks share each device (NCCL {}.{}.{} with NCCL_MULTI_RANK_GPU_ENABLE=1); "
                          "their timings are not the device's speed",
                          shared, per_device, nccl_version / 10000, nccl_version / 100 % 100, nccl_version % 100);
    return "";
  }
  if (nccl_multi_rank_env)
    return fmt::format("{}, and NCCL_MULTI_RANK_GPU_ENABLE=1 needs NCCL 2.30 or later, but this process loaded NCCL "
                       "{}.{}.{}; load a newer libnccl.so.2 (LD_LIBRARY_PATH), or set comm.backend = \"mpi\" (host "
                       "staging), or launch at most one rank per GPU",
                       shared, nccl_version / 10000, nccl_version / 100 % 100, nccl_version % 100);
  return fmt::format("{}; NCCL needs one GPU per rank: launch at most one rank per GPU on each node (e.g. srun "
                     "--ntasks-per-node=<GPUs> --gpus-per-task=1), or share the GPUs through host staging with --set "
                     "comm.backend=mpi (or NCCL >= 2.30 with NCCL_MULTI_RANK_GPU_ENABLE=1), or run on the CPU with "
                     "--set train.device=cpu",
                     shared);
}

void profiler_range(Device device, bool start) {
#if HPCT_HAVE_CUDA
  if (device == Device::CUDA) start ? kernels::cuda_profiler_start() : kernels::cuda_profiler_stop();
#else
  (void)device, (void)start;
#endif
}

std::string runtime_libraries_line() {
  std::vector<std::string> parts;
#if HPCT_HAVE_NCCL
  parts.push_back(comm::nccl_library());
#endif
#if HPCT_HAVE_CUDA
  for (const std::string& l : kernels::cuda_libraries()) parts.push_back(l);
#endif
  parts.push_back(comm::mpi_library());
  std::string line = "runtime libraries: ";
  for (size_t i = 0; i < parts.size(); ++i) line += (i ? " | " : "") + parts[i];
  return line;
}

DType activation_dtype(Precision p) {
  switch (p) {
    case Precision::BF16: return DType::BF16;
    case Precision::FP16: return DType::F16;
    case Precision::FP32:
    case Precision::TF32: return DType::F32;
  }
  HPCT_FAIL("activation_dtype: unknown precision {}", static_cast<int>(p));
}

#if HPCT_HAVE_CUDA
struct RunDevice::Cuda {
  kernels::CudaStream stream;  // the rank's compute stream
};
#else
struct RunDevice::Cuda {};
#endif

RunDevice::RunDevice(const RunConfig& cfg, const parallel::LaunchEnv& launch) {
  const comm::CommOptions& opts = cfg.comm;
  const std::string& requested = cfg.train.device;
  const Precision precision = cfg.train.precision;
  const std::string& deck_path = cfg.deck_path;
  if (requested == "cpu") {  // no CUDA call, no collective: the CPU path only
    exec_.precision = decide_precision(requested, Device::CPU, precision, deck_path, &line_);
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
    const std::vector<std::string> why = allgather_strings(*world, kernels::cuda_unavailable_reason(),
                                                           "train.device: CUDA availability");
    const std::vector<std::string> hosts = allgather_strings(*world, launch.host, "train.device: host names");
    for (size_t r = 0; r < why.size(); ++r) {
      if (why[r].empty()) continue;
      if (unusable++ == 0) reason = why.size() > 1 ? fmt::format("rank {} on {}: {}", r, hosts[r], why[r]) : why[r];
    }
  }
#else
  (void)opts;
#endif
  const DeviceDecision d = decide_device(requested, build_gap, unusable, launch.world_size, reason, deck_path);
  line_ = d.note;
  exec_.precision = decide_precision(requested, d.device, precision, deck_path, &line_);
  if (d.device == Device::CPU) return;
#if HPCT_HAVE_CUDA
  const kernels::CudaDeviceInfo info = kernels::cuda_select_device(launch.local_rank);
  // One GPU per rank, unless the device groups can share one (ranks_per_gpu_problem). Gathered, so every rank stops
  // alike.
  const char* multi = std::getenv("NCCL_MULTI_RANK_GPU_ENABLE");
  int nccl_version = 0;
#if HPCT_HAVE_NCCL
  nccl_version = comm::nccl_version();
#endif
  std::string sharing;
  const std::string problem = ranks_per_gpu_problem(launch.local_size, info.count, launch.host, opts.device_backend,
                                                    multi != nullptr && std::string(multi) == "1", nccl_version,
                                                    &sharing);
  const std::vector<std::string> over = allgather_strings(*world, problem, "train.device: ranks per GPU");
  for (const std::string& o : over)
    HPCT_USAGE_CHECK(o.empty(), "deck {}: train.device = {}: {}", deck_path, requested, o);
  cuda_ = std::make_unique<Cuda>();
  exec_.device = Device::CUDA;  // exec_.precision: decided above
  exec_.stream = cuda_->stream.get();
  gpu_name_ = info.name;
  line_ = fmt::format(
      "device: cuda:{} {} (sm_{}{}, {} total, {} free) on rank 0 | train.device = {}: every rank "
      "computes on GPU local_rank % visible devices ({} rank(s), {} device(s) on rank 0's node) | precision {}",
      info.index, info.name, info.cc_major, info.cc_minor, human_bytes(static_cast<double>(info.total_bytes)),
      human_bytes(static_cast<double>(info.free_bytes)), requested, launch.local_size, info.count,
      precision_name(precision));
  if (!sharing.empty()) line_ += "\n" + sharing;
  line_ += fmt::format("\ncomm.backend = {}: {} | {}", comm::device_backend_name(opts.device_backend),
                       opts.device_backend == comm::DeviceBackend::Nccl
                           ? "device buffers through NCCL"
                           : "device buffers through MPI over pinned host staging (slower: every collective crosses "
                             "PCIe)",
                       runtime_libraries_line());
#endif
}

RunDevice::~RunDevice() = default;

void RunDevice::log() const {
  size_t from = 0;
  while (from < line_.size()) {  // one log line each
    const size_t nl = line_.find('\n', from);
    log_info("{}", line_.substr(from, nl == std::string::npos ? std::string::npos : nl - from));
    if (nl == std::string::npos) break;
    from = nl + 1;
  }
}

}  // namespace hpct::train
