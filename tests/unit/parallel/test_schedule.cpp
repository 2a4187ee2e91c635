// Pipeline schedules (pure): exact GPipe, 1F1B and interleaved 1F1B listings, every (chunk, micro-batch) forwarded and
// backwarded once per rank (backward after forward), 1F1B's activation bound min(p - r, m) and the interleaved one,
// the buffer plan, and a global simulation of all ranks with the point-to-point dependencies between virtual stages
// F(s,j) <- F(s-1,j) and B(s,j) <- B(s+1,j), F(s,j), virtual stage s = chunk * p + rank: no deadlock for p in 1..8,
// m in 1..16 (v = 1) and p in 2..4, v in 1..3, m multiples of p (interleaved), and with forward time 1 and backward
// time 2 per chunk the step takes exactly (v m + p - 1) * 3, i.e. the bubble (p - 1) / (v m + p - 1).
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

// Runs every rank's schedule as soon as its dependencies allow (each rank one action at a time, no communication
// cost; chunk c of rank r is virtual stage c * p + r, v = 1 + the largest chunk). tf and tb are the times of one
// chunk's forward and backward. Returns the makespan, or nullopt on deadlock (no rank can take its next action).
std::optional<double> simulate(const std::vector<std::vector<Action>>& ranks, double tf, double tb,
                               std::vector<double>* busy = nullptr) {
  const int p = static_cast<int>(ranks.size());
  int v = 1;
  for (const auto& r : ranks)
    for (const Action& a : r) v = std::max(v, a.chunk + 1);
  const int n = v * p;  // virtual stages
  const int m = static_cast<int>(ranks[0].size() / (2 * static_cast<size_t>(v)));
  std::vector<std::vector<double>> f_end(n, std::vector<double>(m, -1)), b_end(n, std::vector<double>(m, -1));
  std::vector<size_t> next(p, 0);
  std::vector<double> free_at(p, 0.0);
  if (busy) busy->assign(p, 0.0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < p; ++r) {
      while (next[r] < ranks[r].size()) {
        const Action a = ranks[r][next[r]];
        const int s = a.chunk * p + r;
        double ready = free_at[r];
        if (a.op == Action::Forward) {
          if (s > 0) {
            if (f_end[s - 1][a.micro] < 0) break;
            ready = std::max(ready, f_end[s - 1][a.micro]);
          }
          f_end[s][a.micro] = free_at[r] = ready + tf;
          if (busy) (*busy)[r] += tf;
        } else {
          if (f_end[s][a.micro] < 0) break;
          if (s < n - 1) {
            if (b_end[s + 1][a.micro] < 0) break;
            ready = std::max(ready, b_end[s + 1][a.micro]);
          }
          b_end[s][a.micro] = free_at[r] = ready + tb;
          if (busy) (*busy)[r] += tb;
        }
        ++next[r];
        progress = true;
      }
    }
  }
  for (int r = 0; r < p; ++r)
    if (next[r] != ranks[r].size()) return std::nullopt;
  return *std::max_element(free_at.begin(), free_at.end());
}

std::vector<std::vector<Action>> all_stages(ScheduleKind kind, int p, int m, int v = 1) {
  std::vector<std::vector<Action>> all;
  for (int r = 0; r < p; ++r) all.push_back(make_schedule(kind, p, r, m, v));
  return all;
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
            const int k = buf.slot_of(a.chunk, a.micro);
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

// ---- interleaved 1F1B (virtual stages) ---------------------------------------------------------------------------

TEST(Schedule, InterleavedIsOneFOneBWithVirtualStages) {
  // v = 1 is the plain schedule, byte for byte
  for (ScheduleKind kind : kKinds)
    for (int p = 1; p <= 4; ++p)
      for (int r = 0; r < p; ++r)
        EXPECT_EQ(format_schedule(make_schedule(kind, p, r, 8, 1)), format_schedule(make_schedule(kind, p, r, 8)));
  EXPECT_EQ(format_schedule(make_schedule(ScheduleKind::OneFOneB, 4, 0, 6, 1)), "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5");
  // p 2, v 2, m 4: groups of 2 micro-batches per chunk; rank 0 warms up (2 - 0 - 1) * 2 + (2 - 1) * 2 = 4 forwards,
  // rank 1 (2 - 1 - 1) * 2 + 2 = 2; backwards start with the last chunk
  EXPECT_EQ(format_schedule(make_schedule(ScheduleKind::OneFOneB, 2, 0, 4, 2)),
            "F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 B2.1 B3.1 B2.0 B3.0");
  EXPECT_EQ(format_schedule(make_schedule(ScheduleKind::OneFOneB, 2, 1, 4, 2)),
            "F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 F2.0 B0.0 F3.0 B1.0 F2.1 B2.1 F3.1 B3.1 B2.0 B3.0");
  // p 4, v 2, m 4 (m = p): the first rank's warm-up (6 + 4) covers almost everything; the last rank warms up 4
  EXPECT_EQ(format_schedule(make_schedule(ScheduleKind::OneFOneB, 4, 3, 4, 2)),
            "F0.0 F1.0 F2.0 F3.0 F0.1 B0.1 F1.1 B1.1 F2.1 B2.1 F3.1 B3.1 B0.0 B1.0 B2.0 B3.0");
  // the listing writes every action with its chunk once there are several
  EXPECT_EQ(format_schedule({{Action::Forward, 0, 1}, {Action::Backward, 0, 1}}), "F0.1 B0.1");
}

// Megatron's requirements, as UsageErrors naming the values and what to do.
TEST(Schedule, InterleavedRefusesWhatItCannotRun) {
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("no UsageError");
  };
  const std::string not_multiple = message([] { make_schedule(ScheduleKind::OneFOneB, 4, 1, 6, 2); });
  EXPECT_NE(not_multiple.find("6 micro-batches, not a multiple of 4"), std::string::npos) << not_multiple;
  EXPECT_NE(not_multiple.find("parallel.virtual_stages = 2"), std::string::npos) << not_multiple;
  EXPECT_NE(not_multiple.find("(e.g. 8)"), std::string::npos) << not_multiple;
  EXPECT_THROW(make_schedule(ScheduleKind::OneFOneB, 2, 0, 3, 3), UsageError);
  const std::string gpipe = message([] { make_schedule(ScheduleKind::GPipe, 2, 0, 4, 2); });
  EXPECT_NE(gpipe.find("use parallel.schedule = \"1f1b\""), std::string::npos) << gpipe;
  EXPECT_THROW(make_schedule(ScheduleKind::None, 1, 0, 4, 2), UsageError);      // no pipeline to interleave
  EXPECT_THROW(make_schedule(ScheduleKind::OneFOneB, 1, 0, 4, 2), UsageError);  // (schedule_kind_for gives None)
  EXPECT_THROW(make_schedule(ScheduleKind::OneFOneB, 2, 0, 4, 0), UsageError);
  EXPECT_NO_THROW(make_schedule(ScheduleKind::OneFOneB, 4, 1, 8, 2));
}

TEST(Schedule, InterleavedEveryPairOnceInTheSameOrderOnEveryRank) {
  for (int p = 2; p <= 5; ++p)
    for (int v = 2; v <= 4; ++v)
      for (int m = p; m <= 4 * p; m += p) {
        const auto s0 = make_schedule(ScheduleKind::OneFOneB, p, 0, m, v);
        for (int r = 0; r < p; ++r) {
          const auto s = make_schedule(ScheduleKind::OneFOneB, p, r, m, v);
          SCOPED_TRACE(fmt::format("p {} r {} v {} m {}: {}", p, r, v, m, format_schedule(s)));
          ASSERT_EQ(s.size(), 2u * v * m);
          EXPECT_EQ(schedule_micro_batches(s), m);
          EXPECT_EQ(schedule_virtual_stages(s), v);
          // warm-up: the forwards before the first backward, Megatron's (p - r - 1) * 2 + (v - 1) p capped at v m,
          // plus the first steady forward
          const int warmup = std::min((p - r - 1) * 2 + (v - 1) * p, v * m);
          const int lead = static_cast<int>(
              std::find_if(s.begin(), s.end(), [](const Action& a) { return a.op == Action::Backward; }) - s.begin());
          EXPECT_EQ(lead, warmup + (warmup < v * m ? 1 : 0));
          EXPECT_EQ(max_in_flight(s), std::min(warmup + 1, v * m));
          // the forward order and the backward order do not depend on the rank (what order matching needs)
          std::vector<std::pair<int, int>> f, b, f0, b0;
          for (const Action& a : s) (a.op == Action::Forward ? f : b).emplace_back(a.chunk, a.micro);
          for (const Action& a : s0) (a.op == Action::Forward ? f0 : b0).emplace_back(a.chunk, a.micro);
          EXPECT_EQ(f, f0);
          EXPECT_EQ(b, b0);
          // within a chunk, micro-batches go forward and backward in order 0 .. m-1
          for (int c = 0; c < v; ++c) {
            int nf = 0, nb = 0;
            for (const auto& [ch, j] : f) {
              if (ch == c) {
                EXPECT_EQ(j, nf++);
              }
            }
            for (const auto& [ch, j] : b) {
              if (ch == c) {
                EXPECT_EQ(j, nb++);
              }
            }
          }
        }
      }
}

TEST(Schedule, ValidationChecksEveryChunk) {
  using A = Action;
  // chunk 1 of micro-batch 0 forwarded twice, chunk 0's never
  EXPECT_THROW(
      schedule_micro_batches({{A::Forward, 0, 1}, {A::Forward, 0, 1}, {A::Backward, 0, 1}, {A::Backward, 0, 0}}),
      Error);
  // a chunk's backward before its forward
  EXPECT_THROW(
      schedule_micro_batches({{A::Forward, 0, 0}, {A::Backward, 0, 1}, {A::Forward, 0, 1}, {A::Backward, 0, 0}}),
      Error);
  EXPECT_THROW(schedule_micro_batches({{A::Forward, 0, -1}, {A::Backward, 0, -1}}), Error);
  // an odd number of pairs per chunk
  EXPECT_THROW(schedule_micro_batches({{A::Forward, 0, 1}, {A::Backward, 0, 1}}), Error);
  const std::vector<Action> ok = {{A::Forward, 0, 0}, {A::Forward, 0, 1}, {A::Backward, 0, 1}, {A::Backward, 0, 0}};
  EXPECT_EQ(schedule_micro_batches(ok), 1);
  EXPECT_EQ(schedule_virtual_stages(ok), 2);
  EXPECT_EQ(max_in_flight(ok), 2);
}

TEST(Schedule, InterleavedBufferPlanGivesEveryPairInFlightItsOwnSlot) {
  for (int p = 2; p <= 4; ++p)
    for (int v = 2; v <= 3; ++v)
      for (int r = 0; r < p; ++r)
        for (int m : {p, 2 * p}) {
          const auto s = make_schedule(ScheduleKind::OneFOneB, p, r, m, v);
          PipelineBuffers buf(s, 3);
          SCOPED_TRACE(fmt::format("p {} r {} v {} m {}", p, r, v, m));
          EXPECT_EQ(buf.slots(), max_in_flight(s));
          EXPECT_EQ(buf.n_micro(), m);
          EXPECT_EQ(buf.virtual_stages(), v);
          std::set<int> live;
          for (const Action& a : s) {
            const int k = buf.slot_of(a.chunk, a.micro);
            if (a.op == Action::Forward) EXPECT_TRUE(live.insert(k).second) << "slot " << k << " reused while live";
            else
              EXPECT_EQ(live.erase(k), 1u);
          }
          EXPECT_THROW(buf.slot_of(v, 0), Error);
        }
}

// The receive-posting contract and the absence of deadlock for the interleaved order: every rank against the data
// dependencies between virtual stages, and with one chunk's forward 1 and backward 2 (a whole stage's v and 2v) the
// step takes (v m + p - 1) * 3: the bubble (p - 1) / (v m + p - 1).
TEST(Schedule, InterleavedGlobalSimulationCompletesWithTheTheoreticalBubble) {
  const double tf = 1.0, tb = 2.0;
  for (int p = 2; p <= 4; ++p)
    for (int v = 1; v <= 3; ++v)
      for (int m = p; m <= 4 * p; m += p) {
        SCOPED_TRACE(fmt::format("p {} v {} m {}", p, v, m));
        std::vector<double> busy;
        const auto makespan = simulate(all_stages(ScheduleKind::OneFOneB, p, m, v), tf, tb, &busy);
        ASSERT_TRUE(makespan.has_value()) << "deadlock";
        EXPECT_DOUBLE_EQ(*makespan, (v * m + p - 1) * (tf + tb));
        for (int r = 0; r < p; ++r) {
          EXPECT_DOUBLE_EQ(busy[r], v * m * (tf + tb));
          EXPECT_NEAR(1.0 - busy[r] / *makespan, theoretical_bubble(p, m, v), 1e-12) << "rank " << r;
        }
      }
  EXPECT_DOUBLE_EQ(theoretical_bubble(4, 8, 2), 3.0 / 19.0);
  EXPECT_DOUBLE_EQ(theoretical_bubble(4, 8), 3.0 / 11.0);
}

// The simulation follows the wrap: at p 2, v 2 a rank 0 that wants chunk 0's backward of micro-batch 0 before its
// chunk-1 forward deadlocks: B(virtual 0) <- B(1) (rank 1) <- B(2) across the wrap (rank 0, chunk 1) <- F(3) <- F(2),
// which rank 0 runs only after B(virtual 0). Each rank's list on its own is a valid schedule.
TEST(Schedule, SimulationDetectsADeadlockAcrossTheWrap) {
  using A = Action;
  const std::vector<Action> rank0 = {{A::Forward, 0, 0}, {A::Forward, 1, 0},  {A::Backward, 0, 0}, {A::Forward, 0, 1},
                                     {A::Forward, 1, 1}, {A::Backward, 0, 1}, {A::Backward, 1, 1}, {A::Backward, 1, 0}};
  EXPECT_EQ(schedule_virtual_stages(rank0), 2);
  EXPECT_FALSE(simulate({rank0, make_schedule(ScheduleKind::OneFOneB, 2, 1, 2, 2)}, 1.0, 2.0).has_value());
  EXPECT_TRUE(simulate(all_stages(ScheduleKind::OneFOneB, 2, 2, 2), 1.0, 2.0).has_value());
}
