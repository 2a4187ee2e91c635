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
//    the host computation with the same rounding.
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

// Forward: out = in * 2 + stage; backward: din = dout * 2, computed in fp32 and stored as the activation type (bf16:
// rounded once to nearest even, as the kernels store). Counts every value that is not the expected one.
class SyntheticStage final : public PipelineStage {
 public:
  SyntheticStage(int stage, int n_stages, int64_t numel, double fwd_ms, DType dtype = DType::F32)
      : stage_(stage), n_stages_(n_stages), numel_(numel), fwd_ms_(fwd_ms), dtype_(dtype) {}

  void forward(int micro, const void* in, void* out) override {
    sleep_ms(fwd_ms_);
    if ((stage_ == 0) != (in == nullptr) || (stage_ == n_stages_ - 1) != (out == nullptr)) ++wrong_;
    for (int64_t i = 0; i < numel_; ++i) {
      const float x = stage_ == 0 ? x0(micro, i) : load(in, i);
      if (x != expected_act(micro, i, stage_)) ++wrong_;
      if (out) store(out, i, x * 2.0f + static_cast<float>(stage_));
    }
    ++forwards_;
  }
  void backward(int micro, const void* dout, void* din) override {
    sleep_ms(2.0 * fwd_ms_);
    if ((stage_ == n_stages_ - 1) != (dout == nullptr) || (stage_ == 0) != (din == nullptr)) ++wrong_;
    for (int64_t i = 0; i < numel_; ++i) {
      const float g = dout ? load(dout, i) : g0(micro, i);
      if (g != expected_grad(micro, i, stage_)) ++wrong_;
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
  int stage_, n_stages_;
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

// One step of `kind` at p = world stages, m micro-batches, forward F ms; after one unmeasured warm-up step.
Measured run_timed(ScheduleKind kind, int m, double f_ms) {
  ParallelContext pc(1, world_size(), "tp-dp-pp", comm::CommOptions{60.0}, "test_pipeline_mpi");
  comm::Communicator& pp = pc.pp_group();
  const auto schedule = make_schedule(kind, pp.size(), pp.rank(), m);
  SyntheticStage warm(pp.rank(), pp.size(), 256, 0.0), stage(pp.rank(), pp.size(), 256, f_ms);
  PipelineBuffers buffers(schedule, stage.activation_numel());
  run_schedule(schedule, warm, pp, buffers);  // warm-up step without sleeps (connections, first touch)
  Measured r;
  r.stats = run_schedule(schedule, stage, pp, buffers);
  EXPECT_EQ(warm.wrong() + stage.wrong(), 0);
  EXPECT_EQ(stage.forwards(), m);
  EXPECT_EQ(stage.backwards(), m);
  double err = std::fabs(r.stats.measured_bubble - r.stats.theoretical_bubble);
  double vals[4] = {err, r.stats.total_ms, r.stats.measured_bubble, -r.stats.measured_bubble};
  MPI_Allreduce(MPI_IN_PLACE, vals, 4, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  r.max_bubble_err = vals[0];
  r.max_total_ms = vals[1];
  r.max_bubble = vals[2];
  r.min_bubble = -vals[3];
  if (pp.rank() == 0)
    std::printf("pipeline %-5s p %d m %2d F %4.1f ms | total %7.1f ms (ideal %7.1f) | bubble stage0 %.4f, "
                "stages [%.4f, %.4f], theory %.4f | compute %.1f wait %.1f ms\n",
                schedule_kind_name(kind), pp.size(), m, f_ms, r.max_total_ms, (m + pp.size() - 1) * 3.0 * f_ms,
                r.stats.measured_bubble, r.min_bubble, r.max_bubble, r.stats.theoretical_bubble, r.stats.compute_ms,
                r.stats.wait_ms);
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
