#pragma once
// lib/comm entry points: the Communicator interface (communicator.hpp), its MPI implementation for host buffers
// (mpi_communicator.hpp) and, in CUDA builds with NCCL, NcclCommunicator for device buffers (nccl_communicator.hpp,
// included only where HPCT_HAVE_NCCL is defined).
#include <memory>
#include <string>

#include "comm/communicator.hpp"
#include "comm/mpi_communicator.hpp"

namespace hpct::comm {

// The MpiCommunicator over MPI_COMM_WORLD, named "world". Collective over MPI_COMM_WORLD; needs MPI initialised.
std::unique_ptr<MpiCommunicator> make_world_communicator(const CommOptions& options = {});

// The MPI library this process loaded, for the logs and the GPU records: "mpi Open MPI v4.1.4 (/usr/lib/x86_64-linux-
// gnu/libmpi.so.40)" (MPI_Get_library_version up to its first comma; the path of the shared object that holds
// MPI_Init, by dladdr).
std::string mpi_library();

}  // namespace hpct::comm
