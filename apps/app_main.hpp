#pragma once
// The shared main() frame of every hpctrain MPI app (docs/invariants.md, invariant 3): MPI up, process identity
// set, HDF5's error-stack printing off (HPCT_HDF5_DEBUG=1 keeps it), the app body run, and any error turned into one
// clear line and a non-zero exit of the whole job.
//   - UsageError (bad deck, option, missing file): every rank hits it the same way, so rank 0 prints it
//     (without a source location: the message says what to do) and the job ends with exit code 2; a RankUsageError
//     (bad data met by the rank that reads it) is printed by every rank that meets it.
//   - a CollectiveError (a failure every rank meets at the same point, e.g. a failed checkpoint write): rank 0 prints
//     it, every rank finalizes, exit code 1.
//   - any other error: the failing rank prints rank, host, file, line and cause; the job aborts (1).
// With several ranks the job ends through MPI_Abort, so no rank is left waiting in a collective.
#include <mpi.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <functional>
#include <thread>

#include "core/error.hpp"
#include "core/h5_check.hpp"

namespace hpct {

inline int run_mpi_app(int argc, char** argv, const char* app, const std::function<int(int, char**)>& body) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  set_process_identity(rank, world);
  h5::configure_error_printing();  // every HDF5 failure is reported by our own one-line message

  int code = 0;
  bool usage = false, failed = false, rank_local = false;
  try {
    code = body(argc, argv);
  } catch (const UsageError& e) {
    usage = failed = true;
    code = 2;
    rank_local = dynamic_cast<const RankUsageError*>(&e) != nullptr;
    if (rank == 0 || rank_local) std::fprintf(stderr, "%s: error: %s\n", app, e.cause().c_str());
  } catch (const CollectiveError& e) {
    code = 1;  // not `failed`: every rank is here, so every rank finalizes
    if (rank == 0) std::fprintf(stderr, "%s: error: %s\n", app, e.what());
  } catch (const Error& e) {
    failed = true;
    code = 1;
    std::fprintf(stderr, "%s: error: %s\n", app, e.what());
  } catch (const std::exception& e) {
    failed = true;
    code = 1;
    std::fprintf(stderr, "%s: error: [rank %d on %s] %s\n", app, rank, process_identity().host.c_str(), e.what());
  }
  std::fflush(stderr);
  std::fflush(stdout);
  // A returned code (0, or 3 = checkpointed and stopped) is collective: every rank finalizes. An error
  // may be on one rank only: abort the whole job.
  if (failed && world > 1) {
    // let rank 0 print the message and abort first
    if (usage && !rank_local && rank != 0) std::this_thread::sleep_for(std::chrono::seconds(2));
    MPI_Abort(MPI_COMM_WORLD, code);
  }
  MPI_Finalize();
  return code;
}

}  // namespace hpct
