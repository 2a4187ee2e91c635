// The pipeline's link transport, its pure parts (no MPI launch):
//  - pipeline_link_plan(): which stages pair into which link, with which colours in the even and the odd
//    MPI_Comm_split of a pp group, at pp = 1, 2, 3, 4 exactly and as properties up to pp = 9 (pp = 1 has no links);
//  - the property the link transport relies on (NCCL and the link communicators match by order): every stage of
//    make_schedule()'s schedules forwards in the same micro-batch order and backwards in the same order;
//  - the executor over a recording transport, one stage at a time: on every link and direction the receive order of
//    one stage is the send order of its neighbour, each receive is issued before the action that consumes it, and the
//    buffer a receive fills is not reused before its micro-batch's action has read it; with fp32 and with bf16
//    activations (the transfers carry the stage's activation_dtype(), the buffers hold elements of that type); and the
//    same for the interleaved 1F1B (virtual stages), where the last rank's activations wrap to rank 0.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "tensor/bf16.hpp"
#include "parallel/pipeline_schedule.hpp"
#include "parallel/pipeline_transport.hpp"

using namespace hpct;
using namespace hpct::parallel;

namespace {

constexpr ScheduleKind kKinds[] = {ScheduleKind::GPipe, ScheduleKind::OneFOneB};

PipelineLinkPlan plan(int even_colour, int odd_colour, int prev_link, int next_link, bool prev_in_even,
                      bool next_in_even) {
  PipelineLinkPlan p;
  p.even_colour = even_colour;
  p.odd_colour = odd_colour;
  p.prev_link = prev_link;
  p.next_link = next_link;
  p.prev_in_even = prev_in_even;
  p.next_in_even = next_in_even;
  return p;
}

TEST(PipelineLinks, PlanAtOneToFourStages) {
  // pp = 1: no links at all (the NCCL transport builds nothing)
  EXPECT_EQ(pipeline_link_plan(1, 0), plan(-1, -1, -1, -1, false, false));
  // pp = 2: link 0 = (0, 1) in the even split, colour 0
  EXPECT_EQ(pipeline_link_plan(2, 0), plan(0, -1, -1, 0, false, true));
  EXPECT_EQ(pipeline_link_plan(2, 1), plan(0, -1, 0, -1, true, false));
  // pp = 3: link 0 = (0, 1) even colour 0; link 1 = (1, 2) odd colour 0
  EXPECT_EQ(pipeline_link_plan(3, 0), plan(0, -1, -1, 0, false, true));
  EXPECT_EQ(pipeline_link_plan(3, 1), plan(0, 0, 0, 1, true, false));
  EXPECT_EQ(pipeline_link_plan(3, 2), plan(-1, 0, 1, -1, false, false));
  // pp = 4: links 0 = (0, 1) even 0, 1 = (1, 2) odd 0, 2 = (2, 3) even 1
  EXPECT_EQ(pipeline_link_plan(4, 0), plan(0, -1, -1, 0, false, true));
  EXPECT_EQ(pipeline_link_plan(4, 1), plan(0, 0, 0, 1, true, false));
  EXPECT_EQ(pipeline_link_plan(4, 2), plan(1, 0, 1, 2, false, true));
  EXPECT_EQ(pipeline_link_plan(4, 3), plan(1, -1, 2, -1, true, false));
  EXPECT_THROW(pipeline_link_plan(4, 4), Error);
  EXPECT_THROW(pipeline_link_plan(0, 0), Error);
}

// Every link (s, s+1) is exactly the two stages of one colour of one split; no stage is in two links of one split; the
// link to the previous stage and the link to the next stage come from different splits.
TEST(PipelineLinks, EveryLinkIsOneColourOfOneSplit) {
  for (int p = 1; p <= 9; ++p) {
    SCOPED_TRACE(fmt::format("pp {}", p));
    std::vector<PipelineLinkPlan> plans;
    for (int s = 0; s < p; ++s) plans.push_back(pipeline_link_plan(p, s));
    for (int l = 0; l + 1 < p; ++l) {
      const bool even = l % 2 == 0;
      const int colour = even ? plans[l].even_colour : plans[l].odd_colour;
      ASSERT_GE(colour, 0) << "link " << l;
      std::vector<int> members;
      for (int s = 0; s < p; ++s)
        if ((even ? plans[s].even_colour : plans[s].odd_colour) == colour) members.push_back(s);
      EXPECT_EQ(members, (std::vector<int>{l, l + 1})) << "link " << l;
      EXPECT_EQ(plans[l].next_link, l);
      EXPECT_EQ(plans[l + 1].prev_link, l);
      EXPECT_EQ(plans[l].next_in_even, even);
      EXPECT_EQ(plans[l + 1].prev_in_even, even);
    }
    for (int s = 0; s < p; ++s) {
      EXPECT_EQ(plans[s].prev_link >= 0, s > 0);
      EXPECT_EQ(plans[s].next_link >= 0, s + 1 < p);
      if (s > 0 && s + 1 < p) {
        EXPECT_NE(plans[s].prev_in_even, plans[s].next_in_even);
      }
      const int links = (s > 0) + (s + 1 < p);
      EXPECT_EQ((plans[s].even_colour >= 0) + (plans[s].odd_colour >= 0), links);
    }
  }
}

std::vector<int> order_of(const std::vector<Action>& s, Action::Op op) {
  std::vector<int> o;
  for (const Action& a : s)
    if (a.op == op) o.push_back(a.micro);
  return o;
}

TEST(PipelineLinks, EveryStageForwardsAndBackwardsInTheSameOrder) {
  for (ScheduleKind kind : kKinds)
    for (int p = 1; p <= 8; ++p)
      for (int m = 1; m <= 12; ++m) {
        const auto s0 = make_schedule(kind, p, 0, m);
        for (int r = 1; r < p; ++r) {
          const auto s = make_schedule(kind, p, r, m);
          EXPECT_EQ(order_of(s, Action::Forward), order_of(s0, Action::Forward)) << schedule_kind_name(kind) << p << r;
          EXPECT_EQ(order_of(s, Action::Backward), order_of(s0, Action::Backward)) << schedule_kind_name(kind) << p;
        }
      }
}

// ---- the executor over a recording transport ----------------------------------------------------------------------

struct DoneWork final : comm::Work {
  void wait() override {}
  bool test() override { return true; }
};

enum Kind { SendAct, RecvAct, SendGrad, RecvGrad };

// A (chunk, micro-batch) as one small number (chunks < 4, micro-batches < 32).
int id(int chunk, int micro) { return chunk * 32 + micro; }

// Element i of a buffer of `dtype` (f32 or bf16) set to / compared with v (small integers: exact in both).
void fill(void* buf, DType dtype, int64_t n, float v) {
  for (int64_t i = 0; i < n; ++i)
    if (dtype == DType::F32) static_cast<float*>(buf)[i] = v;
    else
      static_cast<bf16*>(buf)[i] = to_bf16(v);
}
int64_t count_not(const void* buf, DType dtype, int64_t n, float v) {
  int64_t wrong = 0;
  for (int64_t i = 0; i < n; ++i)
    wrong += (dtype == DType::F32 ? static_cast<const float*>(buf)[i] : to_f32(static_cast<const bf16*>(buf)[i])) != v;
  return wrong;
}
// What a stage hands on for (chunk, micro) (below 256: exact in bf16, distinct from every id).
float sent_value(int chunk, int micro) { return static_cast<float>(100 + id(chunk, micro)); }

// A transfer as both sides see it: the lower virtual stage of the boundary it crosses and the micro-batch.
using Transfer = std::pair<int, int>;

// Completes everything at once; a receive writes its (chunk, micro-batch) id into the buffer (every element), so the
// stage can check that the buffer it is handed holds its own data. Every transfer must carry `dtype`. The logs hold the
// transfers (lower virtual stage, micro): the sender's chunk c of rank r crosses boundary c p + r, the receiver's
// chunk c of rank r boundary c p + r - 1 (for activations; the reverse for gradients).
class RecordingTransport final : public PipelineTransport {
 public:
  RecordingTransport(int stage, int stages, DType dtype = DType::F32, int chunks = 1)
      : stage_(stage), stages_(stages), chunks_(chunks), dtype_(dtype) {}
  Device device() const override { return Device::CPU; }
  int stage() const override { return stage_; }
  int stages() const override { return stages_; }
  int virtual_stages() const override { return chunks_; }
  comm::WorkPtr send_activation(const void* buf, int64_t n, DType dtype, int chunk, int micro,
                                const std::string&) override {
    check_sent(buf, n, dtype, chunk, micro);
    log[SendAct].emplace_back(chunk * stages_ + stage_, micro);
    return std::make_unique<DoneWork>();
  }
  comm::WorkPtr recv_activation(void* buf, int64_t n, DType dtype, int chunk, int micro, const std::string&) override {
    receive(buf, n, dtype, chunk, micro);
    log[RecvAct].emplace_back(chunk * stages_ + stage_ - 1, micro);
    return std::make_unique<DoneWork>();
  }
  comm::WorkPtr send_gradient(const void* buf, int64_t n, DType dtype, int chunk, int micro,
                              const std::string&) override {
    check_sent(buf, n, dtype, chunk, micro);
    log[SendGrad].emplace_back(chunk * stages_ + stage_ - 1, micro);
    return std::make_unique<DoneWork>();
  }
  comm::WorkPtr recv_gradient(void* buf, int64_t n, DType dtype, int chunk, int micro, const std::string&) override {
    receive(buf, n, dtype, chunk, micro);
    log[RecvGrad].emplace_back(chunk * stages_ + stage_, micro);
    return std::make_unique<DoneWork>();
  }
  void progress() override {}
  void barrier(const std::string&) override {}
  std::string describe() const override { return "recording"; }

  std::vector<Transfer> log[4];
  int64_t wrong = 0;
  int64_t wrong_dtype = 0;

 private:
  void receive(void* buf, int64_t n, DType dtype, int chunk, int micro) {
    wrong_dtype += dtype != dtype_;
    fill(buf, dtype_, n, static_cast<float>(id(chunk, micro)));
  }
  void check_sent(const void* buf, int64_t n, DType dtype, int chunk, int micro) {
    wrong_dtype += dtype != dtype_;
    wrong += count_not(buf, dtype_, n, sent_value(chunk, micro));
  }
  int stage_, stages_, chunks_;
  DType dtype_;
};

// Checks that its inputs hold its (chunk, micro-batch) id; writes sent_value(chunk, micro) into what it hands on.
class CheckingStage final : public PipelineStage {
 public:
  explicit CheckingStage(int64_t numel, DType dtype = DType::F32) : numel_(numel), dtype_(dtype) {}
  void forward(int chunk, int micro, const void* in, void* out) override {
    check(in, chunk, micro);
    if (out) fill(out, dtype_, numel_, sent_value(chunk, micro));
  }
  void backward(int chunk, int micro, const void* dout, void* din) override {
    check(dout, chunk, micro);
    if (din) fill(din, dtype_, numel_, sent_value(chunk, micro));
  }
  int64_t activation_numel() const override { return numel_; }
  DType activation_dtype() const override { return dtype_; }
  int64_t wrong = 0;

 private:
  void check(const void* buf, int chunk, int micro) {
    if (buf) wrong += count_not(buf, dtype_, numel_, static_cast<float>(id(chunk, micro)));
  }
  int64_t numel_;
  DType dtype_;
};

TEST(PipelineLinks, ReceivesAreIssuedInTheNeighboursSendOrder) {
  for (ScheduleKind kind : kKinds)
    for (int p = 1; p <= 5; ++p)
      for (int m : {1, 2, 3, 5, 8, 13}) {
        for (DType dtype : {DType::F32, DType::BF16}) {
          SCOPED_TRACE(fmt::format("{} p {} m {} {}", schedule_kind_name(kind), p, m, dtype_name(dtype)));
          std::vector<RecordingTransport> tr;
          for (int s = 0; s < p; ++s) tr.emplace_back(s, p, dtype);
          for (int s = 0; s < p; ++s) {
            const auto schedule = make_schedule(kind, p, s, m);
            PipelineBuffers buffers(schedule, 7, Device::CPU, dtype);
            CheckingStage stage(7, dtype);
            for (int step = 0; step < 2; ++step) run_schedule(schedule, stage, tr[s], buffers);
            EXPECT_EQ(stage.wrong, 0) << "stage " << s << " read another micro-batch's data";
            EXPECT_EQ(tr[s].wrong, 0) << "stage " << s << " sent another micro-batch's data";
            EXPECT_EQ(tr[s].wrong_dtype, 0) << "stage " << s << " transferred another dtype than its activations'";
          }
          for (int s = 0; s < p; ++s) {
            const std::vector<Transfer> none;
            if (s > 0) {
              EXPECT_EQ(tr[s].log[RecvAct], tr[s - 1].log[SendAct]) << "activations " << s - 1 << " -> " << s;
              EXPECT_EQ(tr[s - 1].log[RecvGrad], tr[s].log[SendGrad]) << "gradients " << s << " -> " << s - 1;
              EXPECT_EQ(tr[s].log[RecvAct].size(), 2u * m);
            } else {
              EXPECT_EQ(tr[s].log[RecvAct], none);
              EXPECT_EQ(tr[s].log[SendGrad], none);
            }
            if (s == p - 1) {
              EXPECT_EQ(tr[s].log[SendAct], none);
              EXPECT_EQ(tr[s].log[RecvGrad], none);
            }
          }
        }
      }
}

// Buffers planned for another activation type than the stage's are refused before anything is transferred.
TEST(PipelineLinks, BuffersMustHoldTheStagesActivationType) {
  const auto schedule = make_schedule(ScheduleKind::OneFOneB, 2, 1, 3);
  PipelineBuffers f32(schedule, 5), b16(schedule, 5, Device::CPU, DType::BF16);
  CheckingStage bf16_stage(5, DType::BF16), f32_stage(5);
  RecordingTransport tr(1, 2, DType::BF16);
  EXPECT_THROW(run_schedule(schedule, bf16_stage, tr, f32), Error);
  EXPECT_THROW(run_schedule(schedule, f32_stage, tr, b16), Error);
  for (const auto& l : tr.log) EXPECT_TRUE(l.empty());
  run_schedule(schedule, bf16_stage, tr, b16);
  EXPECT_EQ(bf16_stage.wrong, 0);
  EXPECT_EQ(tr.wrong + tr.wrong_dtype, 0);
}

// before_last_backward runs once per step, right before the stage's last backward (the data-parallel sync is armed
// there), for every kind and stage; the single-stage schedule runs with no buffers and no transfers.
TEST(PipelineLinks, BeforeLastBackwardRunsOnceBeforeTheLastBackward) {
  struct OrderStage final : PipelineStage {
    std::vector<std::string> events;
    void forward(int, int micro, const void*, void*) override { events.push_back(fmt::format("F{}", micro)); }
    void backward(int, int micro, const void*, void*) override { events.push_back(fmt::format("B{}", micro)); }
    int64_t activation_numel() const override { return numel; }
    int64_t numel = 3;
  };
  for (ScheduleKind kind : {ScheduleKind::None, ScheduleKind::GPipe, ScheduleKind::OneFOneB})
    for (int p : {1, 3}) {
      if ((kind == ScheduleKind::None) != (p == 1)) continue;
      for (int s = 0; s < p; ++s) {
        const auto schedule = make_schedule(kind, p, s, 4);
        OrderStage stage;
        stage.numel = p == 1 ? 0 : 3;
        RecordingTransport tr(s, p);
        PipelineBuffers buffers(schedule, stage.numel);
        PipelineRunOptions opts;
        opts.before_last_backward = [&stage] { stage.events.push_back("arm"); };
        run_schedule(schedule, stage, tr, buffers, opts);
        std::vector<std::string> expected;
        for (const Action& a : schedule)
          expected.push_back(fmt::format("{}{}", a.op == Action::Forward ? 'F' : 'B', a.micro));
        const auto last_b = std::find_if(expected.rbegin(), expected.rend(),
                                         [](const std::string& e) { return e[0] == 'B'; });
        expected.insert(last_b.base() - 1, "arm");
        EXPECT_EQ(stage.events, expected) << schedule_kind_name(kind) << " stage " << s << " of " << p;
        if (p == 1) {
          for (const auto& l : tr.log) EXPECT_TRUE(l.empty()) << "a single stage transfers nothing";
        }
      }
    }
  // a stage without an activation cannot be one of several stages
  const auto two = make_schedule(ScheduleKind::OneFOneB, 2, 0, 2);
  PipelineBuffers none(two, 0);
  CheckingStage stage(0);
  RecordingTransport tr(0, 2);
  EXPECT_THROW(run_schedule(two, stage, tr, none), Error);
}

TEST(PipelineLinks, BuffersMustBeOnTheTransportsDevice) {
  const auto schedule = make_schedule(ScheduleKind::OneFOneB, 2, 0, 2);
  PipelineBuffers buffers(schedule, 4);
  CheckingStage stage(4);
  struct CudaRecording final : PipelineTransport {
    Device device() const override { return Device::CUDA; }
    int stage() const override { return 0; }
    int stages() const override { return 2; }
    int virtual_stages() const override { return 1; }
    comm::WorkPtr send_activation(const void*, int64_t, DType, int, int, const std::string&) override {
      return nullptr;
    }
    comm::WorkPtr recv_activation(void*, int64_t, DType, int, int, const std::string&) override { return nullptr; }
    comm::WorkPtr send_gradient(const void*, int64_t, DType, int, int, const std::string&) override { return nullptr; }
    comm::WorkPtr recv_gradient(void*, int64_t, DType, int, int, const std::string&) override { return nullptr; }
    void progress() override {}
    void barrier(const std::string&) override {}
    std::string describe() const override { return "cuda"; }
  } cuda;
  EXPECT_THROW(run_schedule(schedule, stage, cuda, buffers), Error);
}

// Interleaved 1F1B over the recording transport: every rank receives its activations from rank r - 1 modulo p (rank 0
// from the last rank's chunk c into its chunk c + 1: the wrap) and its gradients from rank r + 1 modulo p, and on each
// of those streams the receive order is the sender's send order, transfer by transfer (boundary and micro-batch);
// every buffer handed to the stage holds its own (chunk, micro-batch)'s data; the first virtual stage receives no
// activation and the last no gradient. A transport built for another number of chunks is refused.
TEST(PipelineLinks, InterleavedReceivesAreIssuedInTheNeighboursSendOrderAcrossTheWrap) {
  for (int p = 2; p <= 4; ++p)
    for (int v = 2; v <= 3; ++v)
      for (int m : {p, 2 * p, 3 * p})
        for (DType dtype : {DType::F32, DType::BF16}) {
          SCOPED_TRACE(fmt::format("p {} v {} m {} {}", p, v, m, dtype_name(dtype)));
          std::vector<RecordingTransport> tr;
          for (int s = 0; s < p; ++s) tr.emplace_back(s, p, dtype, v);
          for (int s = 0; s < p; ++s) {
            const auto schedule = make_schedule(ScheduleKind::OneFOneB, p, s, m, v);
            PipelineBuffers buffers(schedule, 5, Device::CPU, dtype);
            CheckingStage stage(5, dtype);
            run_schedule(schedule, stage, tr[s], buffers);
            EXPECT_EQ(stage.wrong, 0) << "rank " << s << " read another (chunk, micro-batch)'s data";
            EXPECT_EQ(tr[s].wrong + tr[s].wrong_dtype, 0) << "rank " << s;
          }
          for (int s = 0; s < p; ++s) {
            const int prev = (s + p - 1) % p;
            EXPECT_EQ(tr[s].log[RecvAct], tr[prev].log[SendAct]) << "activations " << prev << " -> " << s;
            EXPECT_EQ(tr[prev].log[RecvGrad], tr[s].log[SendGrad]) << "gradients " << s << " -> " << prev;
            // every chunk receives, but the first virtual stage's (rank 0 chunk 0) and sends, but the last's
            EXPECT_EQ(tr[s].log[RecvAct].size(), static_cast<size_t>(v * m - (s == 0 ? m : 0)));
            EXPECT_EQ(tr[s].log[SendAct].size(), static_cast<size_t>(v * m - (s == p - 1 ? m : 0)));
            EXPECT_EQ(tr[s].log[RecvGrad].size(), static_cast<size_t>(v * m - (s == p - 1 ? m : 0)));
            for (const auto& [lower, j] : tr[s].log[RecvAct]) EXPECT_GE(lower, 0);
          }
        }
  const auto schedule = make_schedule(ScheduleKind::OneFOneB, 2, 0, 2, 2);
  PipelineBuffers buffers(schedule, 3);
  CheckingStage stage(3);
  RecordingTransport plain(0, 2);  // built for one chunk per rank: no wrap
  EXPECT_THROW(run_schedule(schedule, stage, plain, buffers), Error);
  for (const auto& l : plain.log) EXPECT_TRUE(l.empty());
}

}  // namespace
