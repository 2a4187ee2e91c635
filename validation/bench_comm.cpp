// bench_comm: allreduce bandwidth of hpct::comm::MpiCommunicator, the nccl-tests way (docs/performance.md).
//
//   mpirun -np N bench_comm [--min-bytes 4096] [--max-bytes 67108864] [--factor 4] [--warmup 5] [--iters K]
//
// For each size (f32, sum, in place): `warmup` untimed allreduces, then `iters` timed ones (default: enough for
// ~256 MiB of traffic per size, 5..200), each rank's mean time per call, and the maximum over ranks (the slowest rank
// sets the pace). algbw = bytes / time, busbw = algbw * 2(n-1)/n (the allreduce's bus factor, nccl-tests'
// PERFORMANCE.md). The timed buffer holds zeros (repeated in-place sums of anything else overflow); #wrong comes from
// one more allreduce of (rank+1) * (i % 1009 + 1), checked exactly on every rank and summed over ranks. The same loop
// over plain MPI_Allreduce on MPI_COMM_WORLD is the reference: the difference is the cost of the Work layer
// (MPI_Iallreduce + the back-off wait). Ends in a greppable verdict: VALID, or FAILED: <what>.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "comm/comm.hpp"
#include "core/error.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

struct Args {
  int64_t min_bytes = 4096;
  int64_t max_bytes = 64 << 20;
  int64_t factor = 4;
  int warmup = 5;
  int iters = 0;  // 0: by size
};

bool parse(int argc, char** argv, Args& a) {
  for (int i = 1; i < argc; ++i) {
    auto next = [&](int64_t& v) {
      if (i + 1 >= argc) return false;
      v = std::atoll(argv[++i]);
      return v > 0;
    };
    int64_t v = 0;
    if (!std::strcmp(argv[i], "--min-bytes") && next(a.min_bytes)) continue;
    if (!std::strcmp(argv[i], "--max-bytes") && next(a.max_bytes)) continue;
    if (!std::strcmp(argv[i], "--factor") && next(a.factor) && a.factor > 1) continue;
    if (!std::strcmp(argv[i], "--warmup") && next(v)) {
      a.warmup = static_cast<int>(v);
      continue;
    }
    if (!std::strcmp(argv[i], "--iters") && next(v)) {
      a.iters = static_cast<int>(v);
      continue;
    }
    return false;
  }
  return a.min_bytes <= a.max_bytes;
}

// Mean seconds per call of f over `iters` calls after `warmup`, maximum over ranks.
template <typename F>
double time_per_call(F&& f, int warmup, int iters) {
  for (int i = 0; i < warmup; ++i) f();
  MPI_Barrier(MPI_COMM_WORLD);
  const auto t0 = clock_type::now();
  for (int i = 0; i < iters; ++i) f();
  double s = std::chrono::duration<double>(clock_type::now() - t0).count() / iters;
  MPI_Allreduce(MPI_IN_PLACE, &s, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  hpct::set_process_identity(rank, n);
  Args args;
  if (!parse(argc, argv, args)) {
    if (rank == 0)
      std::fprintf(stderr,
                   "usage: mpirun -np N %s [--min-bytes B] [--max-bytes B] [--factor F>1] [--warmup W] "
                   "[--iters K]\n",
                   argv[0]);
    MPI_Finalize();
    return 2;
  }
  int64_t total_wrong = 0;
  std::string first_failure;
  try {
    auto comm = hpct::comm::make_world_communicator();
    char host[256] = {0};
    char lib[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
    int len = 0;
    MPI_Get_library_version(lib, &len);
    if (char* nl = std::strchr(lib, ',')) *nl = '\0';
    MPI_Get_processor_name(host, &len);
    const double bus = n > 1 ? 2.0 * (n - 1) / n : 0.0;
    if (rank == 0) {
      std::printf("# bench_comm: allreduce (f32, sum, in place), %d ranks on %s, %s\n", n, host, lib);
      std::printf("# time: mean per call over the timed iterations, max over ranks; busbw = algbw * 2(n-1)/n\n");
      std::printf("#                                      %-38s  %s\n", "hpct::comm::MpiCommunicator",
                  "MPI_Allreduce (reference)");
      std::printf("# %10s %11s %5s %5s %6s %10s %10s %10s %6s  %10s %10s %10s\n", "size(B)", "count", "type", "redop",
                  "iters", "time_us", "algbw GB/s", "busbw GB/s", "#wrong", "time_us", "algbw GB/s", "busbw GB/s");
    }
    double busbw_sum = 0.0;
    int sizes = 0;
    for (int64_t bytes = args.min_bytes; bytes <= args.max_bytes; bytes *= args.factor) {
      const int64_t count = bytes / 4;
      std::vector<float> buf(static_cast<size_t>(count), 0.0f);
      const int iters = args.iters > 0 ? args.iters
                                       : static_cast<int>(std::clamp<int64_t>((int64_t{256} << 20) / bytes, 5, 200));
      const double t_comm = time_per_call(
          [&] { comm->allreduce(buf.data(), count, hpct::DType::F32, hpct::comm::ReduceOp::Sum, "bench"); },
          args.warmup, iters);
      const double t_mpi = time_per_call(
          [&] { MPI_Allreduce(MPI_IN_PLACE, buf.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); },
          args.warmup, iters);
      // Correctness: one allreduce of a known pattern, checked exactly.
      for (int64_t i = 0; i < count; ++i) buf[i] = static_cast<float>((rank + 1) * (i % 1009 + 1));
      comm->allreduce(buf.data(), count, hpct::DType::F32, hpct::comm::ReduceOp::Sum, "bench check");
      int64_t wrong = 0;
      const float tri = static_cast<float>(n * (n + 1) / 2);
      for (int64_t i = 0; i < count; ++i) wrong += buf[i] != tri * static_cast<float>(i % 1009 + 1);
      MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
      if (wrong > 0 && first_failure.empty())
        first_failure = "allreduce of " + std::to_string(bytes) + " B: " + std::to_string(wrong) + " wrong elements";
      total_wrong += wrong;
      const double alg_comm = bytes / t_comm / 1e9, alg_mpi = bytes / t_mpi / 1e9;
      busbw_sum += alg_comm * bus;
      ++sizes;
      if (rank == 0)
        std::printf("  %10lld %11lld %5s %5s %6d %10.1f %10.3f %10.3f %6lld  %10.1f %10.3f %10.3f\n",
                    static_cast<long long>(bytes), static_cast<long long>(count), "float", "sum", iters, t_comm * 1e6,
                    alg_comm, alg_comm * bus, static_cast<long long>(wrong), t_mpi * 1e6, alg_mpi, alg_mpi * bus);
    }
    if (rank == 0) {
      std::printf("# Out of bounds values : %lld %s\n", static_cast<long long>(total_wrong),
                  total_wrong ? "ERROR" : "OK");
      std::printf("# Avg bus bandwidth    : %.3f GB/s (hpct::comm)\n", sizes ? busbw_sum / sizes : 0.0);
      if (total_wrong == 0) std::printf("VALID\n");
      else
        std::printf("FAILED: %s (is wrong, should be the exact sum)\n", first_failure.c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return total_wrong == 0 ? 0 : 1;
}
