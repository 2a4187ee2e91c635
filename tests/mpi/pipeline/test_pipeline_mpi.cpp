// Under mpirun at np 2 and 4, one pipeline stage per rank (ParallelContext with pp = world):
//  - values: a synthetic stage passes numbers through (forward out = in * 2 + stage, backward din = dout * 2),
//    so every stage checks that the activation and gradient it received for micro-batch j are exactly the
//    ones of micro-batch j (small integers: exact in fp32), with large activations too (rendezvous protocol)
//    and the same buffers reused over several steps;
//  - exactness of the schedule (docs/parallelism.md): the stage sleeps F ms in forward and 2F in backward (a
//    sleeping rank leaves the core, so oversubscription does not distort it); the measured bubble
//    1 - compute / total of every stage must be within 0.02 of (p - 1) / (m + p - 1), and the step must
//    take (m + p - 1) * 3F within 3% (best of up to 3 steps, see the test);
//  - the link transport (one 2-rank communicator per link, the splits ParallelContext bootstraps its NCCL links over)
//    over MPI link communicators with tag 0, so that MPI matches sends and receives by order, as NCCL does: the same
//    exact values through both schedules;
//  - bf16 activations (train.precision = bf16): the same stage storing its outputs and input gradients as bf16
//    (rounded once when stored, as the kernels do), over both transports and schedules, every value checked against
//    the host computation with the same rounding;
//  - the interleaved 1F1B (v = 2, 3 chunks per rank, m = p and 2p): the same stage per virtual stage s = c p + r
//    (out = in * 2 + s), so the value a chunk receives tells which virtual stage sent it, over the MPI transport (tags
//    with the chunk) and over the link transport with the wrap link (order-matched); m not a multiple of p and a
//    transport built without the wrap are refused before anything is sent; and the measured bubble of the sleeping
//    stage at v = 2 against (p - 1) / (v m + p - 1).
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <thread>

#include "comm/mpi_communicator.hpp"
#include "core/error.hpp"
#include "parallel/parallel_context.hpp"
#include "parallel/pipeline_schedule.hpp"
#include "tensor/bf16.hpp"

using namespace hpct;
using namespace hpct::parallel;

namespace {

int world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

// Micro-batch j's input on stage 0 and its output gradient on the last stage: distinct small integers.
float x0(int j, int64_t i) { return static_cast<float>(j * 64 + i % 61); }
float g0(int j, int64_t i) { return static_cast<float>(j * 32 + i % 29 + 1); }

// Virtual stage s = chunk * ranks + rank (chunks = 1: the rank's one stage). Forward: out = in * 2 + s; backward:
// din = dout * 2, computed in fp32 and stored as the activation type (bf16: rounded once to nearest even, as the
// kernels store). Counts every value that is not the expected one. fwd_ms per chunk (the backward sleeps twice that).
class SyntheticStage final : public PipelineStage {
 public:
  SyntheticStage(int rank, int ranks, int64_t numel, double fwd_ms, DType dtype = DType::F32, int chunks = 1)
      : rank_(rank), ranks_(ranks), n_stages_(ranks * chunks), numel_(numel), fwd_ms_(fwd_ms), dtype_(dtype) {}

  void forward(int chunk, int micro, const void* in, void* out) override {
    sleep_ms(fwd_ms_);
    const int s = chunk * ranks_ + rank_;
    if ((s == 0) != (in == nullptr) || (s == n_stages_ - 1) != (out == nullptr) || s >= n_stages_) ++wrong_;
    for (int64_t i = 0; i < numel_; ++i) {
      const float x = s == 0 ? x0(micro, i) : load(in, i);
      if (x != expected_act(micro, i, s)) ++wrong_;
      if (out) store(out, i, x * 2.0f + static_cast<float>(s));
    }
    ++forwards_;
  }
  void backward(int chunk, int micro, const void* dout, void* din) override {
    sleep_ms(2.0 * fwd_ms_);
    const int s = chunk * ranks_ + rank_;
    if ((s == n_stages_ - 1) != (dout == nullptr) || (s == 0) != (din == nullptr)) ++wrong_;
    for (int64_t i = 0; i < numel_; ++i) {
      const float g = dout ? load(dout, i) : g0(micro, i);
      if (g != expected_grad(micro, i, s)) ++wrong_;
      if (din) store(din, i, g * 2.0f);
    }
    ++backwards_;
  }
  int64_t activation_numel() const override { return numel_; }
  DType activation_dtype() const override { return dtype_; }

  // The input of stage s for micro-batch j: x0 put through stages 0 .. s-1, each output stored (rounded).
  float expected_act(int j, int64_t i, int s) const {
    float v = x0(j, i);
    for (int t = 0; t < s; ++t) v = stored(v * 2.0f + static_cast<float>(t));
    return v;
  }
  // The output gradient of stage s: g0 doubled (and stored) by each later stage.
  float expected_grad(int j, int64_t i, int s) const {
    float v = g0(j, i);
    for (int t = n_stages_ - 1; t > s; --t) v = stored(v * 2.0f);
    return v;
  }

  int64_t wrong() const { return wrong_; }
  int forwards() const { return forwards_; }
  int backwards() const { return backwards_; }

 private:
  static void sleep_ms(double ms) {
    if (ms > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms));
  }
  bool is_bf16() const { return dtype_ == DType::BF16; }
  float load(const void* buf, int64_t i) const {
    return is_bf16() ? to_f32(static_cast<const bf16*>(buf)[i]) : static_cast<const float*>(buf)[i];
  }
  void store(void* buf, int64_t i, float v) const {
    if (is_bf16()) static_cast<bf16*>(buf)[i] = to_bf16(v);
    else
      static_cast<float*>(buf)[i] = v;
  }
  float stored(float v) const { return is_bf16() ? round_to<bf16>(v) : v; }
  int rank_, ranks_, n_stages_;
  int64_t numel_;
  double fwd_ms_;
  DType dtype_;
  int64_t wrong_ = 0;
  int forwards_ = 0, backwards_ = 0;
};

struct Measured {
  PipelineStats stats;  // this stage's
  double max_bubble_err = 0.0, max_total_ms = 0.0, min_bubble = 0.0, max_bubble = 0.0;
};

// One step of `kind` at p = world stages, m micro-batches, v chunks per rank, forward F ms per rank (F / v per
// chunk); after one unmeasured warm-up step.
Measured run_timed(ScheduleKind kind, int m, double f_ms, int v = 1) {
  ParallelContext pc(1, world_size(), "tp-dp-pp", comm::CommOptions{60.0}, "test_pipeline_mpi");
  comm::Communicator& pp = pc.pp_group();
  const auto schedule = make_schedule(kind, pp.size(), pp.rank(), m, v);
  SyntheticStage warm(pp.rank(), pp.size(), 256, 0.0, DType::F32, v),
      stage(pp.rank(), pp.size(), 256, f_ms / v, DType::F32, v);
  PipelineBuffers buffers(schedule, stage.activation_numel());
  run_schedule(schedule, warm, pp, buffers);  // warm-up step without sleeps (connections, first touch)
  Measured r;
  r.stats = run_schedule(schedule, stage, pp, buffers);
  EXPECT_EQ(warm.wrong() + stage.wrong(), 0);
  EXPECT_EQ(stage.forwards(), v * m);
  EXPECT_EQ(stage.backwards(), v * m);
  double err = std::fabs(r.stats.measured_bubble - r.stats.theoretical_bubble);
  double vals[4] = {err, r.stats.total_ms, r.stats.measured_bubble, -r.stats.measured_bubble};
  MPI_Allreduce(MPI_IN_PLACE, vals, 4, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  r.max_bubble_err = vals[0];
  r.max_total_ms = vals[1];
  r.max_bubble = vals[2];
  r.min_bubble = -vals[3];
  if (pp.rank() == 0)
    std::printf("pipeline %-5s p %d v %d m %2d F %4.1f ms | total %7.1f ms (ideal %7.1f) | bubble stage0 %.4f, "
                "stages [%.4f, %.4f], theory %.4f | compute %.1f wait %.1f ms\n",
                schedule_kind_name(kind), pp.size(), v, m, f_ms, r.max_total_ms,
                (v * m + pp.size() - 1) * 3.0 * f_ms / v, r.stats.measured_bubble, r.min_bubble, r.max_bubble,
                r.stats.theoretical_bubble, r.stats.compute_ms, r.stats.wait_ms);
  return r;
}

}  // namespace

// Exact values over both schedules, several m (fewer and more micro-batches than stages), large activations
// (256 KiB: Open MPI's rendezvous protocol) and three steps on the same buffers.
TEST(Pipeline, PassesExactValuesBothWays) {
  ParallelContext pc(1, world_size(), "tp-dp-pp", comm::CommOptions{60.0}, "test_pipeline_mpi");
  comm::Communicator& pp = pc.pp_group();
  ASSERT_EQ(pp.size(), world_size());
  for (ScheduleKind kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB})
    for (int m : {1, 3, 8, 16})
      for (int64_t numel : {int64_t{5}, int64_t{1} << 16}) {
        SCOPED_TRACE(fmt::format("{} m {} numel {}", schedule_kind_name(kind), m, numel));
        const auto schedule = make_schedule(kind, pp.size(), pp.rank(), m);
        SyntheticStage stage(pp.rank(), pp.size(), numel, 0.0);
        PipelineBuffers buffers(schedule, numel);
        for (int step = 0; step < 3; ++step) {
          const PipelineStats st = run_schedule(
              schedule, stage, pp, buffers, {.barrier = step != 1, .before_last_backward = {}, .before_backward = {}});
          EXPECT_GE(st.total_ms, st.compute_ms);
          EXPECT_GE(st.wait_ms, 0.0);
        }
        EXPECT_EQ(stage.wrong(), 0);
        EXPECT_EQ(stage.forwards(), 3 * m);
        EXPECT_EQ(stage.backwards(), 3 * m);
      }
}

// The executor over LinkPipelineTransport with MPI links: every transfer has tag 0, so a receive issued out of the
// peer's send order would get another micro-batch's data (as over NCCL) and the stage would count it wrong.
TEST(Pipeline, LinkTransportMatchedByOrderPassesExactValues) {
  ParallelContext pc(1, world_size(), "tp-dp-pp", comm::CommOptions{60.0}, "test_pipeline_mpi");
  auto& pp = dynamic_cast<comm::MpiCommunicator&>(pc.pp_group());
  const int s = pp.rank(), p = pp.size();
  PipelineLinks links = split_pipeline_links(pp);
  ASSERT_EQ(links.prev != nullptr, s > 0);
  ASSERT_EQ(links.next != nullptr, s < p - 1);
  if (links.prev) {
    EXPECT_EQ(links.prev->name(), fmt::format("pp link {}-{}", s - 1, s));
    EXPECT_EQ(links.prev->rank(), 1);
  }
  if (links.next) {
    EXPECT_EQ(links.next->name(), fmt::format("pp link {}-{}", s, s + 1));
    EXPECT_EQ(links.next->rank(), 0);
  }
  // one MPI link carries both directions here (the source tells them apart); NCCL gets one communicator for each
  LinkPipelineTransport transport(pp, links.prev.get(), links.prev.get(), links.next.get(), links.next.get());
  EXPECT_EQ(transport.device(), Device::CPU);
  for (ScheduleKind kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB})
    for (int m : {1, 3, 8})
      for (int64_t numel : {int64_t{5}, int64_t{1} << 16}) {
        SCOPED_TRACE(fmt::format("{} m {} numel {}", schedule_kind_name(kind), m, numel));
        const auto schedule = make_schedule(kind, p, s, m);
        SyntheticStage stage(s, p, numel, 0.0);
        PipelineBuffers buffers(schedule, numel);
        for (int step = 0; step < 3; ++step)
          run_schedule(schedule, stage, transport, buffers,
                       {.barrier = step != 1, .before_last_backward = {}, .before_backward = {}});
        EXPECT_EQ(stage.wrong(), 0);
        EXPECT_EQ(stage.forwards(), 3 * m);
        EXPECT_EQ(stage.backwards(), 3 * m);
      }
}

// bf16 activations and activation gradients over both transports and schedules. The values round when stored (x0 up
// to 1020 has 10 significant bits), so a transfer that reinterpreted or reordered the 2-byte elements, or a stage
// handed another micro-batch's slot, shows in the comparison with the host's equally rounded chain.
TEST(Pipeline, Bf16ActivationsPassBothWays) {
  ParallelContext pc(1, world_size(), "tp-dp-pp", comm::CommOptions{60.0}, "test_pipeline_mpi");
  auto& pp = dynamic_cast<comm::MpiCommunicator&>(pc.pp_group());
  const int s = pp.rank(), p = pp.size();
  PipelineLinks links = split_pipeline_links(pp);
  LinkPipelineTransport link(pp, links.prev.get(), links.prev.get(), links.next.get(), links.next.get());
  MpiPipelineTransport mpi(pp);
  for (PipelineTransport* transport : {static_cast<PipelineTransport*>(&mpi), static_cast<PipelineTransport*>(&link)})
    for (ScheduleKind kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB})
      for (int m : {1, 5})
        for (int64_t numel : {int64_t{7}, int64_t{1} << 17}) {  // 256 KiB of bf16: the rendezvous protocol
          SCOPED_TRACE(fmt::format("{} {} m {} numel {}", transport->describe(), schedule_kind_name(kind), m, numel));
          const auto schedule = make_schedule(kind, p, s, m);
          SyntheticStage stage(s, p, numel, 0.0, DType::BF16);
          PipelineBuffers buffers(schedule, numel, Device::CPU, DType::BF16);
          const size_t payload = static_cast<size_t>(buffers.slots() * numel) * 2;  // of each of the 4 buffers
          EXPECT_GE(buffers.bytes(), 4 * payload);
          EXPECT_LT(buffers.bytes(), 4 * (payload + 64));  // the slab's 64-byte alignment
          for (int step = 0; step < 2; ++step) run_schedule(schedule, stage, *transport, buffers);
          EXPECT_EQ(stage.wrong(), 0);
          EXPECT_EQ(stage.forwards(), 2 * m);
          EXPECT_EQ(stage.backwards(), 2 * m);
        }
}

TEST(Pipeline, RejectsMismatchedBuffers) {
  ParallelContext pc(1, world_size(), "tp-dp-pp", comm::CommOptions{60.0}, "test_pipeline_mpi");
  comm::Communicator& pp = pc.pp_group();
  const auto schedule = make_schedule(ScheduleKind::OneFOneB, pp.size(), pp.rank(), 4);
  SyntheticStage stage(pp.rank(), pp.size(), 8, 0.0);
  PipelineBuffers wrong_size(schedule, 9);
  EXPECT_THROW(run_schedule(schedule, stage, pp, wrong_size), Error);
  PipelineBuffers wrong_schedule(make_schedule(ScheduleKind::GPipe, pp.size(), pp.rank(), 4), 8);
  EXPECT_THROW(run_schedule(schedule, stage, pp, wrong_schedule), Error);
  PipelineBuffers wrong_dtype(schedule, 8, Device::CPU, DType::BF16);  // the stage exchanges f32
  EXPECT_THROW(run_schedule(schedule, stage, pp, wrong_dtype), Error);
}

// docs/parallelism.md: with forward F and backward 2F on every stage, each stage idles (p - 1) / (m + p - 1).
// Each wait hand-off costs up to ~1 ms here (the communicator's back-off sleeps), which puts the measured
// bubble about 0.003 (p 2) to 0.006 (p 4) above the theory on an idle machine. Load from other processes
// delays every wake-up and can only make the bubble larger, so the step is repeated up to 3 times and the
// best one is judged (the decision uses allreduced figures: all ranks take the same branch). Measured on the
// 2-core machine: idle, every stage within 0.002 (p 2) to 0.007 (p 4) of the theory; with two CPU hogs
// saturating both cores, p 2 still within 0.013, but p 4 (4 ranks + 2 hogs on 2 cores) measures 0.32-0.36
// for 0.273 and fails: run it on a quiet machine (ctest runs it RUN_SERIAL).
TEST(Pipeline, MeasuredBubbleMatchesTheory) {
  const int m = 8;
  const double f_ms = 25.0;
  const int p = world_size();
  const double ideal_ms = (m + p - 1) * 3.0 * f_ms;
  for (ScheduleKind kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB}) {
    SCOPED_TRACE(schedule_kind_name(kind));
    Measured best;
    for (int attempt = 0; attempt < 3; ++attempt) {
      const Measured r = run_timed(kind, m, f_ms);
      if (attempt == 0 || r.max_bubble_err < best.max_bubble_err) best = r;
      if (best.max_bubble_err <= 0.02 && std::fabs(best.max_total_ms - ideal_ms) <= 0.03 * ideal_ms) break;
    }
    EXPECT_NEAR(best.stats.theoretical_bubble, double(p - 1) / (m + p - 1), 1e-12);
    EXPECT_LE(best.max_bubble_err, 0.02) << "measured bubble on some stage is off the theory by "
                                         << best.max_bubble_err;
    EXPECT_NEAR(best.max_total_ms, ideal_ms, 0.03 * ideal_ms);
  }
}

// ---- interleaved 1F1B -----------------------------------------------------------------------------------------------

// Exact values through v = 2 and 3 chunks per rank, m = p and 2p, small and large (rendezvous) activations, three
// steps on the same buffers, over the MPI transport (the chunk is in the tag: at p = 2 rank 0 -> rank 1 carries every
// chunk's activations and, across the wrap, the gradients too) and over the link transport with the wrap link
// (tag 0: matched by order, as NCCL). A chunk handed another virtual stage's or micro-batch's data counts it wrong.
TEST(PipelineInterleaved, PassesExactValuesThroughEveryVirtualStage) {
  ParallelContext pc(1, world_size(), "tp-dp-pp", comm::CommOptions{60.0}, "test_pipeline_mpi");
  auto& pp = dynamic_cast<comm::MpiCommunicator&>(pc.pp_group());
  const int s = pp.rank(), p = pp.size();
  ASSERT_GE(p, 2);
  PipelineLinks links = split_pipeline_links(pp, /*wrap=*/true);
  ASSERT_EQ(links.wrap != nullptr, s == 0 || s == p - 1);
  if (links.wrap) {
    EXPECT_EQ(links.wrap->name(), fmt::format("pp link {}-0 (wrap)", p - 1));
    EXPECT_EQ(links.wrap->rank(), s == p - 1 ? 0 : 1);  // the sender of activations is rank 0
  }
  for (int v : {2, 3}) {
    MpiPipelineTransport mpi(pp, v);
    LinkPipelineTransport link(pp, links.to_prev(), links.to_prev(), links.to_next(), links.to_next(), v);
    for (PipelineTransport* transport : {static_cast<PipelineTransport*>(&mpi), static_cast<PipelineTransport*>(&link)})
      for (int m : {p, 2 * p})
        for (int64_t numel : {int64_t{5}, int64_t{1} << 16}) {
          SCOPED_TRACE(fmt::format("{} v {} m {} numel {}", transport->describe(), v, m, numel));
          const auto schedule = make_schedule(ScheduleKind::OneFOneB, p, s, m, v);
          SyntheticStage stage(s, p, numel, 0.0, DType::F32, v);
          PipelineBuffers buffers(schedule, numel);
          EXPECT_EQ(buffers.virtual_stages(), v);
          for (int step = 0; step < 3; ++step) {
            const PipelineStats st = run_schedule(
                schedule, stage, *transport, buffers,
                {.barrier = step != 1, .before_last_backward = {}, .before_backward = {}});
            EXPECT_NEAR(st.theoretical_bubble, double(p - 1) / (v * m + p - 1), 1e-12);
          }
          EXPECT_EQ(stage.wrong(), 0);
          EXPECT_EQ(stage.forwards(), 3 * v * m);
          EXPECT_EQ(stage.backwards(), 3 * v * m);
        }
  }
  // bf16 activations through the wrap: the rounded chain over 2p virtual stages
  MpiPipelineTransport mpi(pp, 2);
  const auto schedule = make_schedule(ScheduleKind::OneFOneB, p, s, p, 2);
  SyntheticStage stage(s, p, 7, 0.0, DType::BF16, 2);
  PipelineBuffers buffers(schedule, 7, Device::CPU, DType::BF16);
  run_schedule(schedule, stage, mpi, buffers);
  EXPECT_EQ(stage.wrong(), 0);
  // the run_schedule overload over the pp group builds its MPI transport for the schedule's chunks
  SyntheticStage again(s, p, 5, 0.0, DType::F32, 2);
  PipelineBuffers b5(schedule, 5);
  run_schedule(schedule, again, pp, b5);
  EXPECT_EQ(again.wrong(), 0);
  EXPECT_EQ(again.forwards(), 2 * p);
}

// ParallelContext built for v chunks per rank gives the transport for them (on the CPU the MPI one); its schedule runs
// through pipeline_transport() with exact values.
TEST(PipelineInterleaved, ParallelContextBuildsTheTransportForItsVirtualStages) {
  ParallelContext pc(1, world_size(), "tp-dp-pp", comm::CommOptions{60.0}, "test_pipeline_mpi", {}, 0, 3);
  PipelineTransport& transport = pc.pipeline_transport();
  EXPECT_EQ(transport.virtual_stages(), 3);
  EXPECT_NE(transport.describe().find("3 virtual stages per rank"), std::string::npos) << transport.describe();
  const int s = pc.pp_rank(), p = pc.pp_size();
  const auto schedule = make_schedule(ScheduleKind::OneFOneB, p, s, 2 * p, 3);
  SyntheticStage stage(s, p, 9, 0.0, DType::F32, 3);
  PipelineBuffers buffers(schedule, 9);
  run_schedule(schedule, stage, transport, buffers);
  EXPECT_EQ(stage.wrong(), 0);
  EXPECT_EQ(stage.forwards(), 3 * 2 * p);
}

// Refused on every rank before any transfer (no rank is left waiting): m not a multiple of p, with a message naming
// the values and what to do; a transport without the wrap (built for one chunk per rank) under an interleaved
// schedule.
TEST(PipelineInterleaved, RefusesMicroBatchesNotAMultipleOfTheRanksAndATransportWithoutTheWrap) {
  ParallelContext pc(1, world_size(), "tp-dp-pp", comm::CommOptions{60.0}, "test_pipeline_mpi");
  comm::Communicator& pp = pc.pp_group();
  const int s = pp.rank(), p = pp.size();
  std::string what;
  try {
    make_schedule(ScheduleKind::OneFOneB, p, s, p + 1, 2);
  } catch (const UsageError& e) {
    what = e.what();
  }
  EXPECT_NE(what.find(fmt::format("{} micro-batches, not a multiple of {}", p + 1, p)), std::string::npos) << what;
  EXPECT_NE(what.find("parallel.virtual_stages = 1"), std::string::npos) << what;
  const auto schedule = make_schedule(ScheduleKind::OneFOneB, p, s, p, 2);
  SyntheticStage stage(s, p, 5, 0.0, DType::F32, 2);
  PipelineBuffers buffers(schedule, 5);
  MpiPipelineTransport plain(pp);  // one chunk per rank
  EXPECT_THROW(run_schedule(schedule, stage, plain, buffers), Error);
  EXPECT_EQ(stage.forwards(), 0);
  pp.barrier("after the refusals");
}

// The interleaved bubble (p - 1) / (v m + p - 1) at v = 2, m = 8, F = 24 ms per rank (12 ms per chunk, B twice that):
// the same measurement and best-of-3 as MeasuredBubbleMatchesTheory. Each chunk hands off twice as often as a whole
// stage, so the hand-off cost (about 1 ms, the communicator's back-off) weighs twice as much: 0.03 here.
TEST(PipelineInterleaved, MeasuredBubbleMatchesTheory) {
  const int m = 8, v = 2;
  const double f_ms = 24.0;
  const int p = world_size();
  const double ideal_ms = (v * m + p - 1) * 3.0 * f_ms / v;
  Measured best;
  for (int attempt = 0; attempt < 3; ++attempt) {
    const Measured r = run_timed(ScheduleKind::OneFOneB, m, f_ms, v);
    if (attempt == 0 || r.max_bubble_err < best.max_bubble_err) best = r;
    if (best.max_bubble_err <= 0.03 && std::fabs(best.max_total_ms - ideal_ms) <= 0.05 * ideal_ms) break;
  }
  EXPECT_NEAR(best.stats.theoretical_bubble, double(p - 1) / (v * m + p - 1), 1e-12);
  EXPECT_LE(best.max_bubble_err, 0.03) << "measured bubble on some rank is off the theory by " << best.max_bubble_err;
  EXPECT_NEAR(best.max_total_ms, ideal_ms, 0.05 * ideal_ms);
}
