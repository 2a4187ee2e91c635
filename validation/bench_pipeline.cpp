// bench_pipeline: the pipeline bubble of the executor (parallel/pipeline_schedule.hpp) with synthetic stages whose
// compute time is known, one pipeline rank per MPI rank (p = the world size).
//
//   mpirun -np P bench_pipeline [--micro 8] [--virtual 1] [--fwd-ms 40] [--transport mpi|link] [--busy sleep|spin]
//                               [--steps 5] [--numel 4096] [--schedule 1f1b|gpipe]
//
// Every rank holds v = --virtual chunks (virtual stage s = chunk * p + rank); a chunk's forward takes F / v and its
// backward 2F / v (F = --fwd-ms), so a rank computes the same m * 3F per step whatever v: only the schedule changes.
// --busy sleep sleeps that long (the rank leaves its core: with more ranks than cores the ranks do not slow each other
// down); spin busy-waits on steady_clock (exact durations when every rank has a core of its own, but oversubscribed
// ranks then share cores and a spinning rank delays the others). The stage passes numbers through (out = in * 2 + s,
// din = dout * 2) and checks every value it receives: #wrong.
// One untimed step, then --steps timed ones; per step every rank's PipelineStats (the same window on every rank:
// entry and exit barriers). Rank 0 prints one JSON object: the arguments, the theory (p - 1) / (v m + p - 1), per step
// the mean, min and max over ranks of the measured bubble 1 - compute / total, the median of the per-step means,
// #wrong, and "verdict": "VALID" or "FAILED: <what>" (values only; how close the bubble comes is the caller's call).
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "comm/mpi_communicator.hpp"
#include "core/error.hpp"
#include "parallel/parallel_context.hpp"
#include "parallel/pipeline_schedule.hpp"
#include "parallel/pipeline_transport.hpp"

using namespace hpct;
using namespace hpct::parallel;

namespace {

struct Args {
  int micro = 8;
  int virtual_stages = 1;
  double fwd_ms = 40.0;
  std::string transport = "mpi";
  std::string busy = "sleep";
  std::string schedule = "1f1b";
  int steps = 5;
  int64_t numel = 4096;
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "bench_pipeline: %s\nusage: mpirun -np P bench_pipeline [--micro M] [--virtual V] [--fwd-ms F] "
               "[--transport mpi|link] [--busy sleep|spin] [--steps N] [--numel N] [--schedule 1f1b|gpipe]\n",
               why.c_str());
  MPI_Abort(MPI_COMM_WORLD, 2);
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (i + 1 >= argc) usage("missing value after " + k);
    const char* v = argv[++i];
    if (k == "--micro") a.micro = std::atoi(v);
    else if (k == "--virtual")
      a.virtual_stages = std::atoi(v);
    else if (k == "--fwd-ms")
      a.fwd_ms = std::atof(v);
    else if (k == "--transport")
      a.transport = v;
    else if (k == "--busy")
      a.busy = v;
    else if (k == "--steps")
      a.steps = std::atoi(v);
    else if (k == "--numel")
      a.numel = std::atoll(v);
    else if (k == "--schedule")
      a.schedule = v;
    else
      usage("unknown option " + k);
  }
  if (a.transport != "mpi" && a.transport != "link") usage("--transport mpi or link");
  if (a.busy != "sleep" && a.busy != "spin") usage("--busy sleep or spin");
  if (a.micro < 1 || a.virtual_stages < 1 || a.steps < 1 || a.numel < 1 || a.fwd_ms < 0) usage("bad value");
  return a;
}

// Virtual stage s = chunk * p + rank: out = in * 2 + s, din = dout * 2 (small integers: exact in fp32 for the sizes
// used here); busy for fwd_ms (backward: twice that) per call.
class TimedStage final : public PipelineStage {
 public:
  TimedStage(int rank, int ranks, int chunks, int64_t numel, double fwd_ms, bool spin)
      : rank_(rank), ranks_(ranks), n_(ranks * chunks), numel_(numel), fwd_ms_(fwd_ms), spin_(spin) {}
  void forward(int chunk, int micro, const void* in, void* out) override {
    busy(fwd_ms_);
    const int s = chunk * ranks_ + rank_;
    const auto* x = static_cast<const float*>(in);
    auto* y = static_cast<float*>(out);
    for (int64_t i = 0; i < numel_; ++i) {
      const float v = x ? x[i] : x0(micro, i);
      if (v != act(micro, i, s)) ++wrong_;
      if (y) y[i] = v * 2.0f + static_cast<float>(s);
    }
  }
  void backward(int chunk, int micro, const void* dout, void* din) override {
    busy(2.0 * fwd_ms_);
    const int s = chunk * ranks_ + rank_;
    const auto* g = static_cast<const float*>(dout);
    auto* d = static_cast<float*>(din);
    for (int64_t i = 0; i < numel_; ++i) {
      const float v = g ? g[i] : g0(micro, i);
      if (v != grad(micro, i, s)) ++wrong_;
      if (d) d[i] = v * 2.0f;
    }
  }
  int64_t activation_numel() const override { return numel_; }
  int64_t wrong() const { return wrong_; }
  void set_ms(double ms) { fwd_ms_ = ms; }

 private:
  static float x0(int j, int64_t i) { return static_cast<float>(j * 8 + i % 7); }
  static float g0(int j, int64_t i) { return static_cast<float>(j * 4 + i % 3 + 1); }
  float act(int j, int64_t i, int s) const {
    float v = x0(j, i);
    for (int t = 0; t < s; ++t) v = v * 2.0f + static_cast<float>(t);
    return v;
  }
  float grad(int j, int64_t i, int s) const {
    float v = g0(j, i);
    for (int t = n_ - 1; t > s; --t) v *= 2.0f;
    return v;
  }
  void busy(double ms) const {
    if (ms <= 0) return;
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double, std::milli>(ms);
    if (spin_) {
      while (std::chrono::steady_clock::now() < until) {
      }
    } else {
      std::this_thread::sleep_until(until);
    }
  }
  int rank_, ranks_, n_;
  int64_t numel_;
  double fwd_ms_;
  bool spin_;
  int64_t wrong_ = 0;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int run(const Args& a) {
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  ParallelContext pc(1, world, "tp-dp-pp", comm::CommOptions{120.0}, "bench_pipeline");
  auto& pp = dynamic_cast<comm::MpiCommunicator&>(pc.pp_group());
  const int r = pp.rank(), p = pp.size(), v = a.virtual_stages;
  if (p == 1) usage("p = 1 has no pipeline: run with mpirun -np 2 or more");
  const ScheduleKind kind = schedule_kind_for(p, parse_schedule_kind(a.schedule));
  const auto schedule = make_schedule(kind, p, r, a.micro, v);
  PipelineLinks links;
  std::unique_ptr<PipelineTransport> transport;
  if (a.transport == "link" && p > 1) {
    links = split_pipeline_links(pp, v > 1);
    transport = std::make_unique<LinkPipelineTransport>(pp, links.to_prev(), links.to_prev(), links.to_next(),
                                                        links.to_next(), v);
  } else {
    transport = std::make_unique<MpiPipelineTransport>(pp, v);
  }
  TimedStage stage(r, p, v, a.numel, 0.0, a.busy == "spin");
  PipelineBuffers buffers(schedule, a.numel);
  run_schedule(schedule, stage, *transport, buffers);  // untimed: connections, first touch
  stage.set_ms(a.fwd_ms / v);

  std::vector<double> means, mins, maxs, totals, computes;
  double theory = 0.0;
  for (int step = 0; step < a.steps; ++step) {
    const PipelineStats st = run_schedule(schedule, stage, *transport, buffers);
    theory = st.theoretical_bubble;
    double sum = st.measured_bubble, lo = st.measured_bubble, hi = st.measured_bubble, total = st.total_ms;
    MPI_Allreduce(MPI_IN_PLACE, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &total, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    means.push_back(sum / p);
    mins.push_back(lo);
    maxs.push_back(hi);
    totals.push_back(total);
    computes.push_back(st.compute_ms);
  }
  long long wrong = stage.wrong();
  MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (r == 0) {
    auto list = [](const std::vector<double>& x) {
      std::string s = "[";
      for (size_t i = 0; i < x.size(); ++i) s += fmt::format("{}{:.5f}", i ? ", " : "", x[i]);
      return s + "]";
    };
    const double ideal = (v * a.micro + p - 1) * 3.0 * a.fwd_ms / v;
    std::printf("{\"p\": %d, \"micro\": %d, \"virtual\": %d, \"schedule\": \"%s\", \"transport\": \"%s\", "
                "\"busy\": \"%s\", \"fwd_ms\": %.3f, \"numel\": %lld, \"steps\": %d,\n"
                " \"theory\": %.5f, \"ideal_step_ms\": %.3f, \"slots\": %d,\n"
                " \"bubble_mean\": %s,\n \"bubble_min\": %s,\n \"bubble_max\": %s,\n \"step_ms\": %s,\n"
                " \"compute_ms_rank0\": %s,\n \"bubble_median\": %.5f, \"step_ms_median\": %.3f, \"wrong\": %lld, "
                "\"verdict\": \"%s\"}\n",
                p, a.micro, v, schedule_kind_name(kind), a.transport.c_str(), a.busy.c_str(), a.fwd_ms,
                static_cast<long long>(a.numel), a.steps, theory, ideal, buffers.slots(), list(means).c_str(),
                list(mins).c_str(), list(maxs).c_str(), list(totals).c_str(), list(computes).c_str(), median(means),
                median(totals), wrong,
                wrong == 0 ? "VALID" : fmt::format("FAILED: {} wrong values (should be 0)", wrong).c_str());
  }
  return wrong == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rc = 1;
  try {
    rc = run(parse(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_pipeline: %s\n", e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return rc;
}
