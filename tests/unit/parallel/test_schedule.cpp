// Pipeline schedules (pure): exact GPipe and 1F1B listings, every micro-batch forwarded and backwarded once per
// stage (backward after forward), 1F1B's activation bound min(p - r, m), the buffer plan, and a global
// simulation of all stages with the point-to-point dependencies F(s,j) <- F(s-1,j) and
// B(s,j) <- B(s+1,j), F(s,j): no deadlock for p in 1..8, m in 1..16, and with forward time 1 and backward
// time 2 the step takes exactly (m + p - 1) * 3, i.e. the bubble (p - 1) / (m + p - 1).
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <set>

#include "core/error.hpp"
#include "parallel/pipeline_schedule.hpp"

using namespace hpct;
using namespace hpct::parallel;

namespace {

constexpr ScheduleKind kKinds[] = {ScheduleKind::GPipe, ScheduleKind::OneFOneB};

// Runs every stage's schedule as soon as its dependencies allow (each stage one action at a time, no
// communication cost). Returns the makespan, or nullopt on deadlock (no stage can take its next action).
std::optional<double> simulate(const std::vector<std::vector<Action>>& stages, double tf, double tb,
                               std::vector<double>* busy = nullptr) {
  const int p = static_cast<int>(stages.size());
  const int m = static_cast<int>(stages[0].size() / 2);
  std::vector<std::vector<double>> f_end(p, std::vector<double>(m, -1)), b_end(p, std::vector<double>(m, -1));
  std::vector<size_t> next(p, 0);
  std::vector<double> free_at(p, 0.0);
  if (busy) busy->assign(p, 0.0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < p; ++s) {
      while (next[s] < stages[s].size()) {
        const Action a = stages[s][next[s]];
        double ready = free_at[s];
        if (a.op == Action::Forward) {
          if (s > 0) {
            if (f_end[s - 1][a.micro] < 0) break;
            ready = std::max(ready, f_end[s - 1][a.micro]);
          }
          f_end[s][a.micro] = free_at[s] = ready + tf;
          if (busy) (*busy)[s] += tf;
        } else {
          if (f_end[s][a.micro] < 0) break;
          if (s < p - 1) {
            if (b_end[s + 1][a.micro] < 0) break;
            ready = std::max(ready, b_end[s + 1][a.micro]);
          }
          b_end[s][a.micro] = free_at[s] = ready + tb;
          if (busy) (*busy)[s] += tb;
        }
        ++next[s];
        progress = true;
      }
    }
  }
  for (int s = 0; s < p; ++s)
    if (next[s] != stages[s].size()) return std::nullopt;
  return *std::max_element(free_at.begin(), free_at.end());
}

std::vector<std::vector<Action>> all_stages(ScheduleKind kind, int p, int m) {
  std::vector<std::vector<Action>> v;
  for (int r = 0; r < p; ++r) v.push_back(make_schedule(kind, p, r, m));
  return v;
}

}  // namespace

TEST(Schedule, ParseKind) {
  EXPECT_EQ(parse_schedule_kind("gpipe"), ScheduleKind::GPipe);
  EXPECT_EQ(parse_schedule_kind("1f1b"), ScheduleKind::OneFOneB);
  EXPECT_STREQ(schedule_kind_name(ScheduleKind::GPipe), "gpipe");
  EXPECT_STREQ(schedule_kind_name(ScheduleKind::OneFOneB), "1f1b");
  EXPECT_THROW(parse_schedule_kind("1F1B"), UsageError);
  EXPECT_THROW(parse_schedule_kind("interleaved"), UsageError);
}

// No pipeline is a schedule too: the one stage's forward and backward of each micro-batch back to back, the order of
// plain gradient accumulation; any kind asked for at pp = 1 becomes it, and it is refused for several stages.
TEST(Schedule, NoneIsTheSingleStageSchedule) {
  EXPECT_STREQ(schedule_kind_name(ScheduleKind::None), "none");
  EXPECT_EQ(format_schedule(make_schedule(ScheduleKind::None, 1, 0, 3)), "F0 B0 F1 B1 F2 B2");
  EXPECT_EQ(max_in_flight(make_schedule(ScheduleKind::None, 1, 0, 4)), 1);
  EXPECT_EQ(schedule_kind_for(1, ScheduleKind::GPipe), ScheduleKind::None);
  EXPECT_EQ(schedule_kind_for(1, ScheduleKind::OneFOneB), ScheduleKind::None);
  EXPECT_EQ(schedule_kind_for(2, ScheduleKind::GPipe), ScheduleKind::GPipe);
  EXPECT_THROW(make_schedule(ScheduleKind::None, 2, 0, 3), Error);
  // a single stage exchanges nothing: no communication buffers
  const PipelineBuffers none(make_schedule(ScheduleKind::None, 1, 0, 3), 0);
  EXPECT_EQ(none.bytes(), 0u);
  EXPECT_EQ(none.slots(), 1);
}

TEST(Schedule, ExactListings) {
  // GPipe: all forwards, then backwards in reverse order (independent of the stage)
  EXPECT_EQ(format_schedule(make_schedule(ScheduleKind::GPipe, 4, 1, 3)), "F0 F1 F2 B2 B1 B0");
  // 1F1B, p 4: warm-up of p - r - 1 forwards, steady F/B pairs, cool-down backwards
  EXPECT_EQ(format_schedule(make_schedule(ScheduleKind::OneFOneB, 4, 0, 6)), "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5");
  EXPECT_EQ(format_schedule(make_schedule(ScheduleKind::OneFOneB, 4, 2, 6)), "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 B5");
  EXPECT_EQ(format_schedule(make_schedule(ScheduleKind::OneFOneB, 4, 3, 3)), "F0 B0 F1 B1 F2 B2");
  // fewer micro-batches than the warm-up: all forwards, then all backwards in order
  EXPECT_EQ(format_schedule(make_schedule(ScheduleKind::OneFOneB, 8, 0, 2)), "F0 F1 B0 B1");
  EXPECT_EQ(format_schedule(make_schedule(ScheduleKind::OneFOneB, 1, 0, 2)), "F0 B0 F1 B1");
  EXPECT_THROW(make_schedule(ScheduleKind::GPipe, 2, 2, 4), Error);
  EXPECT_THROW(make_schedule(ScheduleKind::OneFOneB, 2, 0, 0), Error);
}

TEST(Schedule, EveryMicroBatchOnceAndActivationBound) {
  for (ScheduleKind kind : kKinds)
    for (int p = 1; p <= 8; ++p)
      for (int r = 0; r < p; ++r)
        for (int m = 1; m <= 16; ++m) {
          const auto s = make_schedule(kind, p, r, m);
          SCOPED_TRACE(fmt::format("{} p {} r {} m {}: {}", schedule_kind_name(kind), p, r, m, format_schedule(s)));
          ASSERT_EQ(s.size(), 2u * m);
          // independent count: each micro-batch exactly one F and one B, the F first
          std::vector<int> fpos(m, -1), bpos(m, -1);
          for (size_t i = 0; i < s.size(); ++i) {
            auto& pos = s[i].op == Action::Forward ? fpos : bpos;
            ASSERT_GE(s[i].micro, 0);
            ASSERT_LT(s[i].micro, m);
            ASSERT_EQ(pos[s[i].micro], -1) << "twice";
            pos[s[i].micro] = static_cast<int>(i);
          }
          for (int j = 0; j < m; ++j) EXPECT_LT(fpos[j], bpos[j]) << "micro " << j;
          EXPECT_EQ(schedule_micro_batches(s), m);
          const int bound = kind == ScheduleKind::GPipe ? m : std::min(p - r, m);
          EXPECT_EQ(max_in_flight(s), bound);
          if (kind == ScheduleKind::OneFOneB) {
            // forwards before the first backward: warm-up min(p - r - 1, m), plus the first steady forward
            const int lead = static_cast<int>(
                std::find_if(s.begin(), s.end(), [](const Action& a) { return a.op == Action::Backward; }) - s.begin());
            EXPECT_EQ(lead, std::min(p - r - 1, m) + (m > p - r - 1 ? 1 : 0));
            // forwards and backwards each in micro-batch order
            int nf = 0, nb = 0;
            for (const Action& a : s) EXPECT_EQ(a.micro, a.op == Action::Forward ? nf++ : nb++);
          }
        }
}

TEST(Schedule, ValidationRejectsBrokenSchedules) {
  using A = Action;
  EXPECT_THROW(schedule_micro_batches({{A::Backward, 0}, {A::Forward, 0}}), Error);  // B before F
  EXPECT_THROW(schedule_micro_batches({{A::Forward, 0}, {A::Forward, 0}, {A::Backward, 0}, {A::Backward, 1}}), Error);
  EXPECT_THROW(schedule_micro_batches({{A::Forward, 0}, {A::Backward, 0}, {A::Forward, 2}}), Error);
  EXPECT_THROW(schedule_micro_batches({}), Error);
  EXPECT_EQ(schedule_micro_batches({{A::Forward, 1}, {A::Forward, 0}, {A::Backward, 0}, {A::Backward, 1}}), 2);
}

TEST(Schedule, BufferPlanNeverSharesASlot) {
  for (ScheduleKind kind : kKinds)
    for (int p = 1; p <= 8; ++p)
      for (int r = 0; r < p; ++r)
        for (int m = 1; m <= 16; m += 5) {
          const auto s = make_schedule(kind, p, r, m);
          PipelineBuffers buf(s, 3);
          SCOPED_TRACE(fmt::format("{} p {} r {} m {}", schedule_kind_name(kind), p, r, m));
          EXPECT_EQ(buf.slots(), max_in_flight(s));
          EXPECT_EQ(buf.n_micro(), m);
          EXPECT_GE(buf.bytes(), 4u * buf.slots() * 3 * sizeof(float));
          std::set<int> live;  // slots held by micro-batches forwarded and not yet backwarded
          for (const Action& a : s) {
            const int k = buf.slot_of(a.micro);
            ASSERT_GE(k, 0);
            ASSERT_LT(k, buf.slots());
            if (a.op == Action::Forward) EXPECT_TRUE(live.insert(k).second) << "slot " << k << " reused while live";
            else
              EXPECT_EQ(live.erase(k), 1u);
          }
          // the four buffers of a slot are distinct, non-overlapping ranges
          for (int k = 0; k < buf.slots(); ++k) {
            std::set<void*> ptrs{buf.act_in(k), buf.act_out(k), buf.grad_in(k), buf.grad_out(k)};
            EXPECT_EQ(ptrs.size(), 4u);
          }
        }
  EXPECT_THROW(PipelineBuffers(make_schedule(ScheduleKind::GPipe, 2, 0, 2), -1), Error);
  // no activation (a single stage exchanges nothing): no buffers; run_schedule refuses it with several stages
  EXPECT_EQ(PipelineBuffers(make_schedule(ScheduleKind::GPipe, 2, 0, 2), 0).bytes(), 0u);
}

// bf16 activations (train.precision = bf16): the same slots of 2-byte elements, numel * 2 bytes apart, so the four
// buffers take half the fp32 bytes; other dtypes are refused.
TEST(Schedule, Bf16BufferSlotsAreNumelTimesTwoBytesApart) {
  const auto s = make_schedule(ScheduleKind::GPipe, 2, 0, 3);
  const int64_t numel = 1024;  // 3 slots of 2 KiB (bf16): no padding from the slab's 64-byte alignment
  PipelineBuffers f32(s, numel), b16(s, numel, Device::CPU, DType::BF16);
  EXPECT_EQ(f32.dtype(), DType::F32);
  EXPECT_EQ(b16.dtype(), DType::BF16);
  EXPECT_EQ(b16.slots(), 3);
  EXPECT_EQ(b16.bytes(), 4u * 3 * numel * 2);
  EXPECT_EQ(f32.bytes(), 2 * b16.bytes());
  for (int k = 0; k + 1 < b16.slots(); ++k) {
    auto* a = static_cast<char*>(b16.act_in(k));
    EXPECT_EQ(static_cast<char*>(b16.act_in(k + 1)) - a, numel * 2);
    EXPECT_EQ(static_cast<char*>(b16.grad_out(k + 1)) - static_cast<char*>(b16.grad_out(k)), numel * 2);
    EXPECT_EQ(static_cast<char*>(f32.act_out(k + 1)) - static_cast<char*>(f32.act_out(k)), numel * 4);
  }
  EXPECT_THROW(b16.act_in(3), Error);  // no such slot
  EXPECT_THROW(PipelineBuffers(s, numel, Device::CPU, DType::F64), Error);
}

TEST(Schedule, GlobalSimulationCompletesWithTheTheoreticalBubble) {
  const double tf = 1.0, tb = 2.0;  // B = 2F, as in the MPI exactness test
  for (ScheduleKind kind : kKinds)
    for (int p = 1; p <= 8; ++p)
      for (int m = 1; m <= 16; ++m) {
        SCOPED_TRACE(fmt::format("{} p {} m {}", schedule_kind_name(kind), p, m));
        std::vector<double> busy;
        const auto makespan = simulate(all_stages(kind, p, m), tf, tb, &busy);
        ASSERT_TRUE(makespan.has_value()) << "deadlock";
        EXPECT_DOUBLE_EQ(*makespan, (m + p - 1) * (tf + tb));
        for (int s = 0; s < p; ++s) {
          EXPECT_DOUBLE_EQ(busy[s], m * (tf + tb));
          EXPECT_NEAR(1.0 - busy[s] / *makespan, theoretical_bubble(p, m), 1e-12) << "stage " << s;
        }
      }
}

TEST(Schedule, SimulationDetectsDeadlock) {
  using A = Action;
  // stage 0 wants B0 before F1, stage 1 wants F1 before B0: B(0,0) <- B(1,0) <- F(1,1) <- F(0,1) <- B(0,0)
  const std::vector<std::vector<Action>> stages = {
      {{A::Forward, 0}, {A::Backward, 0}, {A::Forward, 1}, {A::Backward, 1}},
      {{A::Forward, 0}, {A::Forward, 1}, {A::Backward, 0}, {A::Backward, 1}}};
  EXPECT_FALSE(simulate(stages, 1.0, 2.0).has_value());
  // mixing kinds across stages is fine as long as the dependencies allow it
  EXPECT_TRUE(
      simulate({make_schedule(ScheduleKind::GPipe, 2, 0, 4), make_schedule(ScheduleKind::OneFOneB, 2, 1, 4)}, 1.0, 2.0)
          .has_value());
}
