#include "comm/comm.hpp"

#include "core/format.hpp"
#include "core/shared_object.hpp"

namespace hpct::comm {

std::unique_ptr<MpiCommunicator> make_world_communicator(const CommOptions& options) {
  return std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, "world", options);
}

std::string mpi_library() {
  char version[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int len = 0;
  if (MPI_Get_library_version(version, &len) != MPI_SUCCESS) return "mpi (version unknown)";
  std::string v(version, static_cast<size_t>(len));
  const size_t cut = v.find_first_of(",\n");
  if (cut != std::string::npos) v.resize(cut);
  return fmt::format("mpi {} {}", v, shared_object_of(reinterpret_cast<const void*>(&MPI_Init)));
}

}  // namespace hpct::comm
