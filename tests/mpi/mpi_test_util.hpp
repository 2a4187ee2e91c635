#pragma once
// Small helpers shared by the MPI tests: this process's rank and the world size straight from MPI_COMM_WORLD.
#include <mpi.h>

namespace hpct::test {

inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
inline int world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

}  // namespace hpct::test
