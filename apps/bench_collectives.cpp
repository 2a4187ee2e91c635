// bench_collectives: collective bandwidth through hpct::comm::Communicator, the nccl-tests way (docs/performance.md,
// docs/style.md "Output like nccl-tests"). Supersedes validation/bench_comm (allreduce only).
//
//   mpirun -np N bench_collectives [--backend mpi|nccl] [--ops allreduce,reduce_scatter,allgather,broadcast,sendrecv]
//          [--min-bytes 8] [--max-bytes 256M] [--factor 2] [--warmup W] [--iters K] [--json FILE]
//
// Per op and size (f32; reductions sum): `warmup` untimed calls, `iters` timed calls (default: enough to move
// ~256 MiB per size, 5..200), each rank's mean time per call, maximum over ranks (the slowest rank sets the pace).
// Sizes follow nccl-tests: `size` is the largest buffer of the call (reduce_scatter: the send buffer of
// n blocks; allgather: the receive buffer; sendrecv: the message), `count` its elements (rounded down to a
// multiple of n for reduce_scatter and allgather). algbw = size / time; busbw = algbw * factor, with nccl-tests'
// PERFORMANCE.md factors: allreduce 2(n-1)/n, reduce_scatter and allgather (n-1)/n, broadcast and sendrecv 1.
// Timed buffers hold zeros (repeated in-place sums of anything else grow). #wrong: one more call per size with a
// known pattern ((rank+1) * (i % 1009 + 1), exact in f32), checked on every rank, summed over ranks.
// Reference columns (mpi backend): the same loop through the raw MPI call on a duplicate of MPI_COMM_WORLD
// (MPI_Allreduce in place, MPI_Reduce_scatter_block, MPI_Allgather, MPI_Bcast, MPI_Sendrecv), and ours/raw busbw.
// nccl backend (CUDA builds with NCCL): device buffers through NcclCommunicator; no reference columns.
// Ends in a greppable verdict: VALID, or FAILED: <what>. Exit code 0 when VALID, 1 when FAILED.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "app_main.hpp"
#include "comm/comm.hpp"
#include "core/error.hpp"
#if HPCT_HAVE_NCCL
#include <cuda_runtime.h>

#include "comm/nccl_communicator.hpp"
#include "core/cuda_check.hpp"
#endif

namespace {

using hpct::DType;
using hpct::comm::Communicator;
using hpct::comm::ReduceOp;
using clock_type = std::chrono::steady_clock;

const std::vector<std::string> kAllOps = {"allreduce", "reduce_scatter", "allgather", "broadcast", "sendrecv"};

struct Args {
  std::string backend = "mpi";
  std::string ops = "allreduce,reduce_scatter,allgather,broadcast,sendrecv";
  std::string min_bytes = "8";
  std::string max_bytes = "256M";
  int64_t factor = 2;
  int warmup = -1;  // -1: min(5, iters)
  int iters = 0;    // 0: adaptive
  std::string json;
};

// "8", "4096", "16K", "16KiB", "256M", "256MiB", "1G", "1GiB" (binary multiples) -> bytes.
int64_t parse_bytes(const std::string& s, const char* opt) {
  size_t pos = 0;
  double v = 0.0;
  try {
    v = std::stod(s, &pos);
  } catch (const std::exception&) {
    HPCT_USAGE_FAIL("{} {}: not a size (use e.g. 8, 4096, 64K, 16M, 1G)", opt, s);
  }
  std::string unit = s.substr(pos);
  for (auto& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (unit == "IB" || unit == "B") unit.clear();
  if (unit.size() == 3 && unit.substr(1) == "IB") unit = unit.substr(0, 1);
  if (unit.size() == 2 && unit[1] == 'B') unit = unit.substr(0, 1);
  double mult = 1.0;
  if (unit == "K") mult = 1024.0;
  else if (unit == "M")
    mult = 1024.0 * 1024;
  else if (unit == "G")
    mult = 1024.0 * 1024 * 1024;
  else
    HPCT_USAGE_CHECK(unit.empty(), "{} {}: unknown unit '{}' (use K, M, G or KiB, MiB, GiB)", opt, s, s.substr(pos));
  const double b = v * mult;
  HPCT_USAGE_CHECK(b >= 1 && b <= 64.0 * (1ll << 30), "{} {}: must be between 1 B and 64 GiB", opt, s);
  return static_cast<int64_t>(b);
}

std::vector<std::string> parse_ops(const std::string& s) {
  std::vector<std::string> ops;
  std::stringstream ss(s);
  std::string op;
  while (std::getline(ss, op, ',')) {
    if (op.empty()) continue;
    HPCT_USAGE_CHECK(std::find(kAllOps.begin(), kAllOps.end(), op) != kAllOps.end(),
                     "--ops: unknown operation '{}' (choose from allreduce, reduce_scatter, allgather, broadcast, "
                     "sendrecv, comma-separated)",
                     op);
    if (std::find(ops.begin(), ops.end(), op) == ops.end()) ops.push_back(op);
  }
  HPCT_USAGE_CHECK(!ops.empty(), "--ops: no operation given");
  return ops;
}

// Bus factor of nccl-tests' PERFORMANCE.md.
double bus_factor(const std::string& op, int n) {
  if (op == "allreduce") return n > 1 ? 2.0 * (n - 1) / n : 0.0;
  if (op == "reduce_scatter" || op == "allgather") return n > 1 ? static_cast<double>(n - 1) / n : 0.0;
  return 1.0;  // broadcast, sendrecv
}

const char* raw_name(const std::string& op) {
  if (op == "allreduce") return "MPI_Allreduce";
  if (op == "reduce_scatter") return "MPI_Reduce_scatter_block";
  if (op == "allgather") return "MPI_Allgather";
  if (op == "broadcast") return "MPI_Bcast";
  return "MPI_Sendrecv";
}

const char* op_note(const std::string& op) {
  if (op == "allreduce") return "f32, sum, in place; busbw = algbw * 2(n-1)/n";
  if (op == "reduce_scatter") return "f32, sum, out of place; size = send buffer (n blocks); busbw = algbw * (n-1)/n";
  if (op == "allgather") return "f32, out of place; size = receive buffer (n blocks); busbw = algbw * (n-1)/n";
  if (op == "broadcast") return "f32, in place, root 0; busbw = algbw";
  return "f32, ring: rank r sends to r+1 and receives from r-1; busbw = algbw";
}

// Buffers on the communicator's device: host vectors (mpi) or cudaMalloc'ed memory (nccl).
class Buffer {
 public:
  Buffer(int64_t count, bool device) : count_(count), device_(device) {
    if (device_) {
#if HPCT_HAVE_NCCL
      if (count_ > 0 && cudaMalloc(&dev_, static_cast<size_t>(count_) * sizeof(float)) != cudaSuccess)
        HPCT_FAIL("cudaMalloc of {} bytes failed", count_ * 4);
      if (count_ > 0) CUDA_CHECK(cudaMemset(dev_, 0, static_cast<size_t>(count_) * sizeof(float)));
#endif
    } else {
      host_.assign(static_cast<size_t>(count_), 0.0f);
    }
  }
  ~Buffer() {
#if HPCT_HAVE_NCCL
    if (dev_) cudaFree(dev_);
#endif
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  float* data() { return device_ ? static_cast<float*>(dev_) : host_.data(); }
  int64_t count() const { return count_; }
  void fill(const std::function<float(int64_t)>& f) {
    std::vector<float> h(static_cast<size_t>(count_));
    for (int64_t i = 0; i < count_; ++i) h[i] = f(i);
    put(h);
  }
  void zero() {
    fill([](int64_t) { return 0.0f; });
  }
  std::vector<float> get() const {
    if (!device_) return host_;
    std::vector<float> h(static_cast<size_t>(count_));
#if HPCT_HAVE_NCCL
    if (count_ > 0) CUDA_CHECK(cudaMemcpy(h.data(), dev_, h.size() * sizeof(float), cudaMemcpyDeviceToHost));
#endif
    return h;
  }

 private:
  void put(const std::vector<float>& h) {
    if (!device_) {
      host_ = h;
      return;
    }
#if HPCT_HAVE_NCCL
    if (count_ > 0) CUDA_CHECK(cudaMemcpy(dev_, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice));
#endif
  }
  int64_t count_;
  bool device_;
  std::vector<float> host_;
  void* dev_ = nullptr;
};

// Mean seconds per call of f over `iters` calls after `warmup`, maximum over ranks.
double time_per_call(const std::function<void()>& f, int warmup, int iters) {
  for (int i = 0; i < warmup; ++i) f();
  MPI_Barrier(MPI_COMM_WORLD);
  const auto t0 = clock_type::now();
  for (int i = 0; i < iters; ++i) f();
  double s = std::chrono::duration<double>(clock_type::now() - t0).count() / iters;
  MPI_Allreduce(MPI_IN_PLACE, &s, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return s;
}

struct Row {
  std::string op;
  int64_t bytes = 0, count = 0;
  int iters = 0;
  double time_us = 0, algbw = 0, busbw = 0;
  int64_t wrong = 0;
  bool has_raw = false;
  double raw_time_us = 0, raw_algbw = 0, raw_busbw = 0;
};

// One op at one size: sets up buffers, times ours and (mpi backend) raw MPI, checks one call exactly.
class Case {
 public:
  Case(const std::string& op, int64_t count, Communicator& comm, MPI_Comm raw, bool device, bool nccl_group,
       std::function<void()> group_start, std::function<void()> group_end)
      : op_(op),
        count_(count),
        comm_(comm),
        raw_(raw),
        n_(comm.size()),
        rank_(comm.rank()),
        block_(op == "reduce_scatter" || op == "allgather" ? count / comm.size() : count),
        a_(op == "allgather" ? block_ : count, device),
        b_(op == "reduce_scatter"                    ? block_
           : (op == "allgather" || op == "sendrecv") ? count
                                                     : 0,
           device),
        nccl_group_(nccl_group),
        group_start_(std::move(group_start)),
        group_end_(std::move(group_end)) {}

  void ours() {
    const int next = (rank_ + 1) % n_, prev = (rank_ + n_ - 1) % n_;
    if (op_ == "allreduce") {
      comm_.allreduce(a_.data(), count_, DType::F32, ReduceOp::Sum, "bench_collectives");
    } else if (op_ == "reduce_scatter") {
      comm_.reduce_scatter(a_.data(), b_.data(), block_, DType::F32, ReduceOp::Sum, "bench_collectives");
    } else if (op_ == "allgather") {
      comm_.allgather(a_.data(), b_.data(), block_, DType::F32, "bench_collectives");
    } else if (op_ == "broadcast") {
      comm_.broadcast(a_.data(), count_, DType::F32, 0, "bench_collectives");
    } else {  // sendrecv: both posted before either is waited on (a ring of blocking sends could deadlock)
      if (nccl_group_) group_start_();
      auto r = comm_.recv_async(b_.data(), count_, DType::F32, prev, 7, "bench_collectives ring");
      auto s = comm_.send_async(a_.data(), count_, DType::F32, next, 7, "bench_collectives ring");
      if (nccl_group_) group_end_();
      r->wait();
      s->wait();
    }
  }

  void raw() {
    const int c = static_cast<int>(count_), blk = static_cast<int>(block_);
    const int next = (rank_ + 1) % n_, prev = (rank_ + n_ - 1) % n_;
    if (op_ == "allreduce") MPI_Allreduce(MPI_IN_PLACE, a_.data(), c, MPI_FLOAT, MPI_SUM, raw_);
    else if (op_ == "reduce_scatter")
      MPI_Reduce_scatter_block(a_.data(), b_.data(), blk, MPI_FLOAT, MPI_SUM, raw_);
    else if (op_ == "allgather")
      MPI_Allgather(a_.data(), blk, MPI_FLOAT, b_.data(), blk, MPI_FLOAT, raw_);
    else if (op_ == "broadcast")
      MPI_Bcast(a_.data(), c, MPI_FLOAT, 0, raw_);
    else
      MPI_Sendrecv(a_.data(), c, MPI_FLOAT, next, 7, b_.data(), c, MPI_FLOAT, prev, 7, raw_, MPI_STATUS_IGNORE);
  }

  // One call on a known pattern through the Communicator; returns this rank's wrong elements and the first one.
  int64_t check(std::string& first) {
    auto pat = [](int64_t i) { return static_cast<float>(i % 1009 + 1); };
    const float tri = static_cast<float>(n_ * (n_ + 1) / 2);
    const float me = static_cast<float>(rank_ + 1);
    if (op_ == "broadcast") a_.fill([&](int64_t i) { return rank_ == 0 ? pat(i) : -1.0f; });
    else
      a_.fill([&](int64_t i) { return me * pat(i); });
    if (b_.count() > 0) b_.fill([](int64_t) { return -1.0f; });
    ours();
    const std::vector<float> got = (op_ == "allreduce" || op_ == "broadcast") ? a_.get() : b_.get();
    int64_t wrong = 0;
    const int prev = (rank_ + n_ - 1) % n_;
    for (int64_t i = 0; i < static_cast<int64_t>(got.size()); ++i) {
      float want = 0.0f;
      if (op_ == "allreduce") want = tri * pat(i);
      else if (op_ == "reduce_scatter")
        want = tri * pat(rank_ * block_ + i);
      else if (op_ == "allgather")
        want = static_cast<float>(i / block_ + 1) * pat(i % block_);
      else if (op_ == "broadcast")
        want = pat(i);
      else
        want = static_cast<float>(prev + 1) * pat(i);
      if (got[i] != want) {
        if (wrong == 0)
          first = fmt::format("{} of {} B: element {} on rank {} is {}, should be {}", op_, count_ * 4, i, rank_,
                              got[i], want);
        ++wrong;
      }
    }
    a_.zero();
    if (b_.count() > 0) b_.zero();
    return wrong;
  }

 private:
  std::string op_;
  int64_t count_;
  Communicator& comm_;
  MPI_Comm raw_;
  int n_, rank_;
  int64_t block_;
  Buffer a_, b_;  // allreduce/broadcast: a_ in place; reduce_scatter: a_ -> b_; allgather: a_ -> b_; sendrecv: a_ -> b_
  bool nccl_group_;
  std::function<void()> group_start_, group_end_;
};

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  char s[64];
  std::strftime(s, sizeof(s), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return s;
}

int run(int argc, char** argv) {
  const int rank = hpct::process_identity().rank, n = hpct::process_identity().world;
  Args a;
  CLI::App app{"bench_collectives: algbw / busbw of allreduce, reduce_scatter, allgather, broadcast and sendrecv "
               "through hpct::comm, nccl-tests style, with the raw MPI call as reference. Run under mpirun."};
  app.add_option("--backend", a.backend,
                 "mpi (MpiCommunicator, host buffers) or nccl (NcclCommunicator, device "
                 "buffers; CUDA builds with NCCL)")
      ->capture_default_str();
  app.add_option("--ops", a.ops, "comma-separated operations")->capture_default_str();
  app.add_option("--min-bytes", a.min_bytes, "smallest size (bytes; K, M, G suffixes = KiB, MiB, GiB)")
      ->capture_default_str();
  app.add_option("--max-bytes", a.max_bytes, "largest size")->capture_default_str();
  app.add_option("--factor", a.factor, "size multiplier between rows (> 1)")->capture_default_str();
  app.add_option("--warmup", a.warmup, "untimed calls per size (default: min(5, iters))");
  app.add_option("--iters", a.iters, "timed calls per size (default: ~256 MiB moved per size, 5..200)");
  app.add_option("--json", a.json, "also write every row to this JSON file (rank 0)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return rank == 0 ? app.exit(e) : 0;
  } catch (const CLI::ParseError& e) {
    HPCT_USAGE_FAIL("{} (see bench_collectives --help)", e.what());
  }
  const std::vector<std::string> ops = parse_ops(a.ops);
  const int64_t min_bytes = parse_bytes(a.min_bytes, "--min-bytes");
  const int64_t max_bytes = parse_bytes(a.max_bytes, "--max-bytes");
  HPCT_USAGE_CHECK(min_bytes <= max_bytes, "--min-bytes {} is larger than --max-bytes {}", a.min_bytes, a.max_bytes);
  HPCT_USAGE_CHECK(a.factor > 1, "--factor {}: must be > 1", a.factor);
  HPCT_USAGE_CHECK(a.iters >= 0 && a.warmup >= -1, "--iters and --warmup must be >= 0");
  HPCT_USAGE_CHECK(a.backend == "mpi" || a.backend == "nccl", "--backend {}: choose mpi or nccl", a.backend);
  HPCT_USAGE_CHECK(max_bytes / 4 <= INT32_MAX,
                   "--max-bytes {}: counts above 2^31-1 f32 elements are not supported "
                   "(MPI int counts)",
                   a.max_bytes);

  auto world = hpct::comm::make_world_communicator();
  Communicator* comm = world.get();
  const bool nccl = a.backend == "nccl";
  std::function<void()> group_start, group_end;
#if HPCT_HAVE_NCCL
  std::unique_ptr<hpct::comm::NcclCommunicator> nccl_comm;
  if (nccl) {
    int devices = 0;
    HPCT_USAGE_CHECK(cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0,
                     "--backend nccl: no CUDA device is visible (use --backend mpi on CPU nodes)");
    MPI_Comm local = MPI_COMM_NULL;
    int local_rank = 0;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local);
    MPI_Comm_rank(local, &local_rank);
    MPI_Comm_free(&local);
    HPCT_USAGE_CHECK(local_rank < devices, "--backend nccl: {} ranks on this node but {} GPU(s); one GPU per rank",
                     local_rank + 1, devices);
    CUDA_CHECK(cudaSetDevice(local_rank));
    nccl_comm = std::make_unique<hpct::comm::NcclCommunicator>(*world, "world (nccl)");
    comm = nccl_comm.get();
    group_start = [&] { nccl_comm->group_start(); };
    group_end = [&] { nccl_comm->group_end(); };
  }
#else
  HPCT_USAGE_CHECK(!nccl,
                   "--backend nccl: this build has no NcclCommunicator (it needs a CUDA build with NCCL: "
                   "configure with -DHPCT_ENABLE_CUDA=ON on a machine with the CUDA toolkit); use --backend mpi");
#endif
  MPI_Comm raw = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &raw);

  char lib[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  int len = 0;
  MPI_Get_library_version(lib, &len);
  for (char* p = lib; *p; ++p)
    if (*p == ',' || *p == '\n') {
      *p = '\0';
      break;
    }
  const std::string host = hpct::process_identity().host;
  const std::string date = utc_now();
  if (rank == 0) {
    std::printf("# bench_collectives: %d ranks on %s, %s, backend %s, %s\n", n, host.c_str(), lib, a.backend.c_str(),
                date.c_str());
    std::printf("# time: mean per call over the timed calls, max over ranks; algbw = size / time; bandwidths in GB/s "
                "(1e9 B/s)\n");
  }

  std::vector<Row> rows;
  int64_t total_wrong = 0;
  std::string first_failure;
  for (const std::string& op : ops) {
    const double bus = bus_factor(op, n);
    if (rank == 0) {
      std::printf("#\n# %s (%s)\n", op.c_str(), op_note(op));
      std::printf("#                          %-46s  %s\n", ("hpct::comm (" + a.backend + ")").c_str(),
                  nccl ? "" : fmt::format("{} (reference)", raw_name(op)).c_str());
      std::printf("# %10s %11s %6s %10s %8s %8s %6s", "size(B)", "count", "iters", "time_us", "algbw", "busbw",
                  "#wrong");
      if (!nccl) std::printf("  %10s %8s %8s %8s", "time_us", "algbw", "busbw", "ours/raw");
      std::printf("\n");
      std::fflush(stdout);
    }
    for (int64_t bytes = min_bytes; bytes <= max_bytes; bytes *= a.factor) {
      int64_t count = bytes / 4;
      if (op == "reduce_scatter" || op == "allgather") count -= count % n;
      if (count <= 0) continue;
      const int64_t size = count * 4;
      const int iters = a.iters > 0 ? a.iters
                                    : static_cast<int>(std::clamp<int64_t>((int64_t{256} << 20) / size, 5, 200));
      const int warmup = a.warmup >= 0 ? a.warmup : std::min(5, iters);
      Case c(op, count, *comm, raw, nccl, nccl, group_start, group_end);
      Row r;
      r.op = op;
      r.bytes = size;
      r.count = count;
      r.iters = iters;
      const double t = time_per_call([&] { c.ours(); }, warmup, iters);
      r.time_us = t * 1e6;
      r.algbw = size / t / 1e9;
      r.busbw = r.algbw * bus;
      if (!nccl) {
        const double tr = time_per_call([&] { c.raw(); }, warmup, iters);
        r.has_raw = true;
        r.raw_time_us = tr * 1e6;
        r.raw_algbw = size / tr / 1e9;
        r.raw_busbw = r.raw_algbw * bus;
      }
      std::string first;
      int64_t wrong = c.check(first);
      int any_rank_first = wrong > 0 ? rank : n;  // the lowest failing rank reports its first wrong element
      MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
      MPI_Allreduce(MPI_IN_PLACE, &any_rank_first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
      if (wrong > 0 && first_failure.empty()) {
        // Bring the failing rank's description to rank 0.
        char buf[512] = {0};
        if (rank == any_rank_first) std::snprintf(buf, sizeof(buf), "%s", first.c_str());
        MPI_Bcast(buf, sizeof(buf), MPI_CHAR, any_rank_first, MPI_COMM_WORLD);
        first_failure = fmt::format("{} wrong element(s) in total; first: {}", wrong, buf);
      }
      r.wrong = wrong;
      total_wrong += wrong;
      rows.push_back(r);
      if (rank == 0) {
        std::printf("  %10lld %11lld %6d %10.1f %8.3f %8.3f %6lld", static_cast<long long>(size),
                    static_cast<long long>(count), iters, r.time_us, r.algbw, r.busbw, static_cast<long long>(wrong));
        if (r.has_raw)
          std::printf("  %10.1f %8.3f %8.3f %8.2f", r.raw_time_us, r.raw_algbw, r.raw_busbw,
                      r.raw_busbw > 0 ? r.busbw / r.raw_busbw : 0.0);
        std::printf("\n");
        std::fflush(stdout);
      }
    }
  }
  MPI_Comm_free(&raw);

  if (rank == 0) {
    std::printf("#\n# Out of bounds values : %lld %s\n", static_cast<long long>(total_wrong),
                total_wrong ? "ERROR" : "OK");
    for (const std::string& op : ops) {
      double s = 0, sr = 0;
      int k = 0;
      for (const Row& r : rows)
        if (r.op == op) {
          s += r.busbw;
          sr += r.raw_busbw;
          ++k;
        }
      if (k == 0) continue;
      std::printf("# Avg bus bandwidth    : %8.3f GB/s %-15s", s / k, op.c_str());
      if (!nccl) std::printf(" (raw MPI %.3f GB/s)", sr / k);
      std::printf("\n");
    }
    if (!a.json.empty()) {
      std::FILE* f = std::fopen(a.json.c_str(), "w");
      HPCT_USAGE_CHECK(f != nullptr, "--json {}: cannot open for writing", a.json);
      std::fprintf(f, "{\n  \"tool\": \"bench_collectives\",\n  \"date\": \"%s\",\n  \"host\": \"%s\",\n", date.c_str(),
                   host.c_str());
      std::fprintf(f, "  \"mpi\": \"%s\",\n  \"backend\": \"%s\",\n  \"ranks\": %d,\n  \"dtype\": \"f32\",\n", lib,
                   a.backend.c_str(), n);
      std::fprintf(f, "  \"valid\": %s,\n  \"rows\": [\n", total_wrong == 0 ? "true" : "false");
      for (size_t i = 0; i < rows.size(); ++i) {
        const Row& r = rows[i];
        std::fprintf(f,
                     "    {\"op\": \"%s\", \"bytes\": %lld, \"count\": %lld, \"iters\": %d, \"time_us\": %.9g, "
                     "\"algbw_gbs\": %.9g, \"busbw_gbs\": %.9g, \"bus_factor\": %.9g, \"wrong\": %lld",
                     r.op.c_str(), static_cast<long long>(r.bytes), static_cast<long long>(r.count), r.iters, r.time_us,
                     r.algbw, r.busbw, bus_factor(r.op, n), static_cast<long long>(r.wrong));
        if (r.has_raw)
          std::fprintf(f,
                       ", \"raw\": \"%s\", \"raw_time_us\": %.9g, \"raw_algbw_gbs\": %.9g, \"raw_busbw_gbs\": %.9g, "
                       "\"ratio_busbw\": %.9g",
                       raw_name(r.op), r.raw_time_us, r.raw_algbw, r.raw_busbw,
                       r.raw_busbw > 0 ? r.busbw / r.raw_busbw : 0.0);
        std::fprintf(f, "}%s\n", i + 1 < rows.size() ? "," : "");
      }
      std::fprintf(f, "  ]\n}\n");
      std::fclose(f);
    }
    if (total_wrong == 0) std::printf("VALID\n");
    else
      std::printf("FAILED: %s\n", first_failure.c_str());
    std::fflush(stdout);
  }
  return total_wrong == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) { return hpct::run_mpi_app(argc, argv, "bench_collectives", run); }
