#pragma once
// lib/comm entry points: the Communicator interface (communicator.hpp), its MPI implementation for host buffers
// (mpi_communicator.hpp) and, in CUDA builds with NCCL, NcclCommunicator for device buffers (nccl_communicator.hpp,
// included only where HPCT_HAVE_NCCL is defined).
#include <memory>

#include "comm/communicator.hpp"
#include "comm/mpi_communicator.hpp"

namespace hpct::comm {

// The MpiCommunicator over MPI_COMM_WORLD, named "world". Collective over MPI_COMM_WORLD; needs MPI initialised.
std::unique_ptr<MpiCommunicator> make_world_communicator(const CommOptions& options = {});

}  // namespace hpct::comm
