#include "comm/comm.hpp"

namespace hpct::comm {

std::unique_ptr<MpiCommunicator> make_world_communicator(const CommOptions& options) {
  return std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, "world", options);
}

}  // namespace hpct::comm
