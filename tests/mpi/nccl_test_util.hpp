#pragma once
// Shared by the NCCL tests (label cuda, CUDA builds only): the GPU choice of one rank per GPU, or of several ranks
// per GPU where the loaded NCCL allows it.
#include <cuda_runtime.h>
#include <fmt/format.h>
#include <mpi.h>
#include <nccl.h>

#include <cstdlib>
#include <string>

#include "core/cuda_check.hpp"

namespace hpct::test {

// Selects this rank's GPU (local rank on the node); returns "" when the test can run, else why it cannot.
inline std::string select_gpu() {
  int ngpu = 0;
  const cudaError_t rc = cudaGetDeviceCount(&ngpu);
  if (rc != cudaSuccess) {
    (void)cudaGetLastError();
    return std::string("no usable GPU: ") + cudaGetErrorString(rc);
  }
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int local = 0, local_n = 1;
  MPI_Comm_rank(node, &local);
  MPI_Comm_size(node, &local_n);
  MPI_Comm_free(&node);
  // Several ranks on one GPU: NCCL 2.30 or later with NCCL_MULTI_RANK_GPU_ENABLE=1 (lib/train/loop/run_device.hpp).
  const char* multi = std::getenv("NCCL_MULTI_RANK_GPU_ENABLE");
  int version = 0;
  if (ncclGetVersion(&version) != ncclSuccess) version = 0;
  const bool sharing = multi != nullptr && std::string(multi) == "1" && version >= 23000;
  if (ngpu < local_n && !sharing)
    return fmt::format("{} GPU(s) for {} ranks on this node: NCCL {} needs one GPU per rank (NCCL >= 2.30 with "
                       "NCCL_MULTI_RANK_GPU_ENABLE=1 shares one)",
                       ngpu, local_n, version);
  CUDA_CHECK(cudaSetDevice(ngpu > 0 ? local % ngpu : 0));
  return "";
}

}  // namespace hpct::test
