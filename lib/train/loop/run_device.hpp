#pragma once
// train.device and train.precision: the decision (pure, testable with injected machine facts) and the run's device
// (collective: every rank's CUDA availability; on CUDA the rank's GPU and compute stream).
#include <memory>
#include <string>

#include "comm/communicator.hpp"
#include "core/config.hpp"
#include "kernels/exec_context.hpp"
#include "tensor/tensor.hpp"
#include "parallel/launch_env.hpp"
#include "tensor/device.hpp"

namespace hpct::train {

struct RunConfig;  // train/loop/run_config.hpp

// train.device (docs/contracts.md), the decision alone: pure, so that tests inject what the machine has.
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

// Several ranks on one GPU, pure: how many ranks run on the node (local_size) against its visible devices. One rank
// per device is always fine; more share devices only where the device groups allow it: comm.backend = mpi (host
// staging: no NCCL at all), or NCCL_MULTI_RANK_GPU_ENABLE=1 with an NCCL of at least 2.30 (nccl_version as
// ncclGetVersion gives it, e.g. 23007; 0 when the build has none). Returns "" and sets `note` (the line rank 0 logs,
// "" at one rank per device) when allowed; else the UsageError's cause and fix ("4 ranks run on gpu01 but it has 1
// visible CUDA device(s); ...").
std::string ranks_per_gpu_problem(int local_size, int devices, const std::string& host, comm::DeviceBackend backend,
                                  bool nccl_multi_rank_env, int nccl_version, std::string* note);

// The libraries a CUDA run loaded, with version and path, in one line for the log and the GPU records:
// "runtime libraries: nccl 2.28.9 (/usr/local/cuda/lib/libnccl.so.2) | cudnn 9.13.0 (...) | cublas 13.0.0 (...) |
// cudart 13.0 (...) | mpi Open MPI v4.1.4 (/usr/lib/x86_64-linux-gnu/libmpi.so.40)" (a library the build lacks is
// left out).
std::string runtime_libraries_line();

// train.profile_step's range on the run's device: cudaProfilerStart (start) or cudaProfilerStop after a device
// synchronization (kernels/cuda/cuda_device.hpp) on CUDA; nothing on the CPU.
void profiler_range(Device device, bool start);

// train.precision (exec_context.hpp) on the decided device, pure: on CUDA the requested precision; on the CPU fp32 or
// bf16 as requested. tf32 (tensor-core arithmetic on fp32 storage) and fp16 (fp16 storage, CUDA only) with
// train.device = "cpu" are a UsageError naming the fix; with "auto" that fell back to the CPU they become fp32 and
// `note` gets the line rank 0 logs.
Precision decide_precision(const std::string& requested_device, Device decided, Precision requested,
                           const std::string& deck_path, std::string* note);

// The storage type of the models' activations under a precision (docs/precision.md): bf16 for BF16, fp16 (DType::F16)
// for FP16 (CUDA only: decide_precision has made it fp32 on the CPU), fp32 for FP32 and TF32 (tf32 keeps fp32
// storage and changes only the products' arithmetic on CUDA).
DType activation_dtype(Precision p);

// The run's device: train.device resolved collectively, and on CUDA the rank's GPU and compute stream. Construct it on
// every rank after read_launch and before the ParallelContext (which takes exec(), and builds its NCCL groups on the
// selected GPU); keep it alive longer than everything that computes (declare it first).
//  - "cpu": no CUDA call and no collective; exec() = {CPU, no stream}; the CPU path touches no GPU.
//  - "cuda" / "auto": every rank's CUDA availability (kernels::cuda_unavailable_reason) is gathered over the world, so
//    all ranks decide alike (a node without GPUs cannot split the job) with decide_device.
//  - on CUDA: GPU local_rank % visible devices (kernels::cuda_select_device, launch.local_rank from MPI's shared-memory
//    split); when some node has more ranks than GPUs, ranks_per_gpu_problem decides (a UsageError on every rank unless
//    comm.backend = mpi or NCCL >= 2.30 with NCCL_MULTI_RANK_GPU_ENABLE=1; then a log line says how many ranks share
//    each device); one compute stream per rank (kernels::CudaStream), exec() = {CUDA, that stream, precision}; the
//    log also names the libraries loaded (runtime_libraries_line).
//  - exec().precision: train.precision as decide_precision resolves it (fp32 on the CPU).
class RunDevice {
 public:
  RunDevice(const RunConfig& cfg, const parallel::LaunchEnv& launch);
  ~RunDevice();
  RunDevice(const RunDevice&) = delete;
  RunDevice& operator=(const RunDevice&) = delete;

  const ExecContext& exec() const { return exec_; }
  Device device() const { return exec_.device; }
  // The GPU's name as the driver reports it (cudaDeviceProp::name, e.g. "NVIDIA H100 80GB HBM3"); "" on the CPU.
  const std::string& gpu_name() const { return gpu_name_; }
  // Rank 0 logs one line: the auto fallback note, or the selected GPU (name, index, memory); nothing for "cpu".
  // Call it after prepare_output, so that the line also reaches train.log.
  void log() const;

 private:
  struct Cuda;  // the compute stream (CUDA builds only)
  ExecContext exec_;
  std::string gpu_name_;
  std::string line_;
  std::unique_ptr<Cuda> cuda_;
};

}  // namespace hpct::train
