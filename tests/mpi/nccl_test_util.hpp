#pragma once
// Shared by the NCCL tests (label cuda, CUDA builds only): the GPU choice of one rank per GPU.
#include <cuda_runtime.h>
#include <fmt/format.h>
#include <mpi.h>

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
  if (ngpu < local_n)
    return fmt::format("{} GPU(s) for {} ranks on this node: NCCL needs one GPU per rank", ngpu, local_n);
  CUDA_CHECK(cudaSetDevice(local));
  return "";
}

}  // namespace hpct::test
