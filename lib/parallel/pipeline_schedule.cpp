#include "parallel/pipeline_schedule.hpp"

#include <algorithm>

#include "core/timer.hpp"

namespace hpct::parallel {

ScheduleKind parse_schedule_kind(const std::string& s) {
  if (s == "gpipe") return ScheduleKind::GPipe;
  if (s == "1f1b") return ScheduleKind::OneFOneB;
  HPCT_USAGE_FAIL("parallel.schedule = \"{}\": use \"gpipe\" or \"1f1b\"", s);
}

const char* schedule_kind_name(ScheduleKind k) {
  switch (k) {
    case ScheduleKind::None: return "none";
    case ScheduleKind::GPipe: return "gpipe";
    case ScheduleKind::OneFOneB: return "1f1b";
  }
  return "?";
}

ScheduleKind schedule_kind_for(int pp_size, ScheduleKind requested) {
  return pp_size == 1 ? ScheduleKind::None : requested;
}

namespace {

std::vector<Action> sequential_schedule(int n_micro) {
  std::vector<Action> a;
  a.reserve(2 * static_cast<size_t>(n_micro));
  for (int j = 0; j < n_micro; ++j) {
    a.push_back({Action::Forward, j});
    a.push_back({Action::Backward, j});
  }
  return a;
}

std::vector<Action> gpipe_schedule(int n_micro) {
  std::vector<Action> a;
  a.reserve(2 * static_cast<size_t>(n_micro));
  for (int j = 0; j < n_micro; ++j) a.push_back({Action::Forward, j});
  for (int j = n_micro - 1; j >= 0; --j) a.push_back({Action::Backward, j});  // reverse, as autograd walks back
  return a;
}

std::vector<Action> one_f_one_b_schedule(int pp_size, int pp_rank, int n_micro) {
  std::vector<Action> a;
  a.reserve(2 * static_cast<size_t>(n_micro));
  const int warmup = std::min(pp_size - pp_rank - 1, n_micro);
  const int steady = n_micro - warmup;
  // warm-up: fill the pipe below this stage
  for (int j = 0; j < warmup; ++j) a.push_back({Action::Forward, j});
  // steady 1F1B: each forward is followed by the backward of the oldest micro-batch in flight
  for (int i = 0; i < steady; ++i) {
    a.push_back({Action::Forward, warmup + i});
    a.push_back({Action::Backward, i});
  }
  // cool-down: drain the micro-batches still in flight
  for (int j = steady; j < n_micro; ++j) a.push_back({Action::Backward, j});
  return a;
}

}  // namespace

std::vector<Action> make_schedule(ScheduleKind kind, int pp_size, int pp_rank, int n_micro) {
  HPCT_CHECK(pp_size >= 1 && pp_rank >= 0 && pp_rank < pp_size, "pipeline stage {} of {}", pp_rank, pp_size);
  HPCT_CHECK(n_micro >= 1, "n_micro = {} (at least 1 micro-batch)", n_micro);
  switch (kind) {
    case ScheduleKind::None:
      HPCT_CHECK(pp_size == 1, "schedule \"none\" is the schedule of one stage, not of {} stages", pp_size);
      return sequential_schedule(n_micro);
    case ScheduleKind::GPipe: return gpipe_schedule(n_micro);
    case ScheduleKind::OneFOneB: return one_f_one_b_schedule(pp_size, pp_rank, n_micro);
  }
  HPCT_FAIL("unknown schedule kind {}", static_cast<int>(kind));
}

std::string format_schedule(const std::vector<Action>& schedule) {
  std::string s;
  for (const Action& a : schedule) {
    if (!s.empty()) s += ' ';
    s += fmt::format("{}{}", a.op == Action::Forward ? 'F' : 'B', a.micro);
  }
  return s;
}

int schedule_micro_batches(const std::vector<Action>& schedule) {
  HPCT_CHECK(!schedule.empty() && schedule.size() % 2 == 0, "schedule of {} actions: {}", schedule.size(),
             format_schedule(schedule));
  const int m = static_cast<int>(schedule.size() / 2);
  std::vector<int> fwd(static_cast<size_t>(m), 0), bwd(static_cast<size_t>(m), 0);
  for (const Action& a : schedule) {
    HPCT_CHECK(a.micro >= 0 && a.micro < m, "micro-batch {} out of range [0, {}) in schedule {}", a.micro, m,
               format_schedule(schedule));
    if (a.op == Action::Forward) {
      HPCT_CHECK(++fwd[a.micro] == 1, "micro-batch {} forwarded twice in schedule {}", a.micro,
                 format_schedule(schedule));
    } else {
      HPCT_CHECK(fwd[a.micro] == 1, "micro-batch {} backwarded before its forward in schedule {}", a.micro,
                 format_schedule(schedule));
      HPCT_CHECK(++bwd[a.micro] == 1, "micro-batch {} backwarded twice in schedule {}", a.micro,
                 format_schedule(schedule));
    }
  }
  return m;  // m forwards and m backwards, none twice: each exactly once
}

int max_in_flight(const std::vector<Action>& schedule) {
  schedule_micro_batches(schedule);
  int live = 0, peak = 0;
  for (const Action& a : schedule) {
    live += a.op == Action::Forward ? 1 : -1;
    peak = std::max(peak, live);
  }
  return peak;
}

double theoretical_bubble(int pp_size, int n_micro) {
  return static_cast<double>(pp_size - 1) / static_cast<double>(n_micro + pp_size - 1);
}

PipelineBuffers::PipelineBuffers(const std::vector<Action>& schedule, int64_t activation_numel, Device device,
                                 DType dtype)
    : schedule_(schedule), numel_(activation_numel), dtype_(dtype), slab_("pipeline_buffers", device) {
  HPCT_CHECK(activation_numel >= 0, "activation_numel = {}", activation_numel);
  HPCT_CHECK(dtype == DType::F32 || dtype == DType::BF16 || dtype == DType::F16,
             "pipeline buffers of {} elements: stages exchange f32, bf16 or f16 activations", dtype_name(dtype));
  const int m = schedule_micro_batches(schedule_);
  slots_ = max_in_flight(schedule_);
  // A micro-batch takes the lowest free slot at its forward and frees it at its backward.
  slot_of_.assign(static_cast<size_t>(m), -1);
  next_in_slot_.assign(static_cast<size_t>(m), -1);
  prev_in_slot_.assign(static_cast<size_t>(m), -1);
  first_in_slot_.assign(static_cast<size_t>(slots_), -1);
  std::vector<int> last_in_slot(static_cast<size_t>(slots_), -1);
  std::vector<bool> busy(static_cast<size_t>(slots_), false);
  for (const Action& a : schedule_) {
    if (a.op == Action::Forward) {
      const int k = static_cast<int>(std::find(busy.begin(), busy.end(), false) - busy.begin());
      HPCT_CHECK(k < slots_, "no free pipeline slot for micro-batch {}", a.micro);  // cannot: slots_ = peak
      busy[k] = true;
      slot_of_[a.micro] = k;
      if (last_in_slot[k] < 0) first_in_slot_[k] = a.micro;
      else
        next_in_slot_[last_in_slot[k]] = a.micro;
      prev_in_slot_[a.micro] = last_in_slot[k];
      last_in_slot[k] = a.micro;
      fwd_order_.push_back(a.micro);
    } else {
      busy[slot_of_[a.micro]] = false;
      bwd_order_.push_back(a.micro);
    }
  }
  if (numel_ > 0) {  // a single stage (activation_numel 0) exchanges nothing
    act_in_ = &slab_.add("act_in", {slots_, numel_}, dtype_);
    act_out_ = &slab_.add("act_out", {slots_, numel_}, dtype_);
    grad_in_ = &slab_.add("grad_in", {slots_, numel_}, dtype_);
    grad_out_ = &slab_.add("grad_out", {slots_, numel_}, dtype_);
    slab_.allocate();
  }
  HPCT_CHECK(slab_.bytes() == planned_bytes(schedule_, numel_, dtype_), "pipeline buffers of {} bytes, planned {}",
             slab_.bytes(), planned_bytes(schedule_, numel_, dtype_));
  recv_act_.resize(static_cast<size_t>(slots_));
  send_act_.resize(static_cast<size_t>(slots_));
  recv_grad_.resize(static_cast<size_t>(slots_));
  send_grad_.resize(static_cast<size_t>(slots_));
}

size_t PipelineBuffers::planned_bytes(const std::vector<Action>& schedule, int64_t activation_numel, DType dtype) {
  if (activation_numel == 0) return 0;
  const size_t slot_bytes = static_cast<size_t>(max_in_flight(schedule) * activation_numel) * dtype_size(dtype);
  return 4 * slab_aligned(slot_bytes);  // act_in, act_out, grad_in, grad_out
}

// The executor's state for one call of run_schedule (a friend of PipelineBuffers).
struct PipelineRunner {
  PipelineBuffers& b;
  PipelineTransport& tr;
  PipelineStats& st;
  const int stage, last;
  std::vector<bool> forwarded;  // micro -> its forward has run
  size_t act_cursor = 0;        // next activation receive to post: b.fwd_order_[act_cursor]
  size_t grad_cursor = 0;       // next gradient receive to post: b.bwd_order_[grad_cursor]

  // Waits for w (if any) and releases it; the time blocked counts as wait.
  void finish(comm::WorkPtr& w) {
    if (!w) return;
    Timer t;
    w->wait();
    st.wait_ms += t.ms();
    w.reset();
  }
  void post_act_recv(int micro) {
    const int k = b.slot_of(micro);
    HPCT_CHECK(!b.recv_act_[k], "pipeline slot {} still receiving", k);
    b.recv_act_[k] = tr.recv_activation(b.act_in(k), b.numel_, b.dtype_, micro,
                                        fmt::format("pipeline activation of micro-batch {} from stage {}", micro,
                                                    stage - 1));
  }
  void post_grad_recv(int micro) {
    const int k = b.slot_of(micro);
    HPCT_CHECK(!b.recv_grad_[k], "pipeline slot {} still receiving", k);
    b.recv_grad_[k] = tr.recv_gradient(b.grad_in(k), b.numel_, b.dtype_, micro,
                                       fmt::format("pipeline gradient of micro-batch {} from stage {}", micro,
                                                   stage + 1));
  }
  // Activation receives in forward order (the previous stage's send order), each once its slot's input is free: the
  // micro-batch before it in the slot has been forwarded (the stage copied what it needs of its input).
  void post_ready_act_recvs() {
    if (stage == 0) return;
    while (act_cursor < b.fwd_order_.size()) {
      const int j = b.fwd_order_[act_cursor];
      const int before = b.prev_in_slot_[static_cast<size_t>(j)];
      if (before >= 0 && !forwarded[static_cast<size_t>(before)]) break;
      post_act_recv(j);
      ++act_cursor;
    }
  }
  // Gradient receives in backward order (the next stage's send order), each once its micro-batch has been forwarded
  // (its slot's previous gradient was consumed by the backward that freed the slot).
  void post_ready_grad_recvs() {
    if (stage == last) return;
    while (grad_cursor < b.bwd_order_.size()) {
      const int j = b.bwd_order_[grad_cursor];
      if (!forwarded[static_cast<size_t>(j)]) break;
      post_grad_recv(j);
      ++grad_cursor;
    }
  }

  void forward(PipelineStage& s, int j) {
    const int k = b.slot_of(j);
    if (stage > 0) finish(b.recv_act_[k]);
    if (stage < last) finish(b.send_act_[k]);  // wait-before-reuse of the output buffer
    {
      Timer t;
      s.forward(j, stage > 0 ? b.act_in(k) : nullptr, stage < last ? b.act_out(k) : nullptr);
      st.compute_ms += t.ms();
    }
    forwarded[static_cast<size_t>(j)] = true;
    post_ready_act_recvs();  // act_in(k) is free again
    if (stage < last) {
      b.send_act_[k] = tr.send_activation(b.act_out(k), b.numel_, b.dtype_, j,
                                          fmt::format("pipeline activation of micro-batch {} to stage {}", j,
                                                      stage + 1));
      post_ready_grad_recvs();  // posted before the next stage can possibly send it
    }
  }

  void backward(PipelineStage& s, int j) {
    const int k = b.slot_of(j);
    if (stage < last) {
      HPCT_CHECK(b.recv_grad_[k], "pipeline stage {}: the gradient receive of micro-batch {} was not posted", stage, j);
      finish(b.recv_grad_[k]);
    }
    if (stage > 0) finish(b.send_grad_[k]);  // wait-before-reuse of the gradient buffer
    {
      Timer t;
      s.backward(j, stage < last ? b.grad_in(k) : nullptr, stage > 0 ? b.grad_out(k) : nullptr);
      st.compute_ms += t.ms();
    }
    if (stage > 0)
      b.send_grad_[k] = tr.send_gradient(b.grad_out(k), b.numel_, b.dtype_, j,
                                         fmt::format("pipeline gradient of micro-batch {} to stage {}", j, stage - 1));
  }
};

PipelineStats run_schedule(const std::vector<Action>& schedule, PipelineStage& stage, PipelineTransport& transport,
                           PipelineBuffers& buffers, const PipelineRunOptions& options) {
  HPCT_CHECK(buffers.schedule() == schedule, "pipeline buffers were planned for schedule {}, run with {}",
             format_schedule(buffers.schedule()), format_schedule(schedule));
  HPCT_CHECK(stage.activation_numel() == buffers.activation_numel(),
             "pipeline buffers hold {} elements per activation, the stage exchanges {}", buffers.activation_numel(),
             stage.activation_numel());
  HPCT_CHECK(stage.activation_dtype() == buffers.dtype(),
             "pipeline buffers hold {} activations, the stage exchanges {}: plan PipelineBuffers with the stage's "
             "activation_dtype()",
             dtype_name(buffers.dtype()), dtype_name(stage.activation_dtype()));
  HPCT_CHECK(buffers.activation_numel() > 0 || transport.stages() == 1,
             "a stage that exchanges no activation (activation_numel 0) cannot run in a pipeline of {} stages",
             transport.stages());
  HPCT_CHECK(transport.device() == buffers.device(), "pipeline buffers are on {}; the transport ({}) takes {} buffers",
             device_name(buffers.device()), transport.describe(), device_name(transport.device()));
  const int m = buffers.n_micro();
  for (size_t k = 0; k < static_cast<size_t>(buffers.slots()); ++k)
    HPCT_CHECK(!buffers.recv_act_[k] && !buffers.send_act_[k] && !buffers.recv_grad_[k] && !buffers.send_grad_[k],
               "pipeline buffers still hold operations of an unfinished run (slot {})", k);

  PipelineStats st;
  st.theoretical_bubble = theoretical_bubble(transport.stages(), m);
  PipelineRunner r{buffers,
                   transport,
                   st,
                   transport.stage(),
                   transport.stages() - 1,
                   std::vector<bool>(static_cast<size_t>(m), false)};
  if (options.barrier) transport.barrier("pipeline step start");
  Timer total;
  r.post_ready_act_recvs();  // the first micro-batch of every slot
  const int last_backward = static_cast<int>(r.b.bwd_order_.back());
  for (const Action& a : schedule) {
    transport.progress();  // drive the sends and receives in flight (MPI progresses only inside MPI calls)
    if (a.op == Action::Forward) {
      r.forward(stage, a.micro);
    } else {
      if (options.before_backward) options.before_backward();
      if (a.micro == last_backward && options.before_last_backward) options.before_last_backward();
      r.backward(stage, a.micro);
    }
  }
  for (size_t k = 0; k < static_cast<size_t>(buffers.slots()); ++k) {
    r.finish(buffers.send_act_[k]);
    r.finish(buffers.send_grad_[k]);
    HPCT_CHECK(!buffers.recv_act_[k] && !buffers.recv_grad_[k], "pipeline receive left in slot {}", k);
  }
  HPCT_CHECK((r.stage == 0 || r.act_cursor == static_cast<size_t>(m)) &&
                 (r.stage == r.last || r.grad_cursor == static_cast<size_t>(m)),
             "pipeline stage {}: {} activation and {} gradient receives posted for {} micro-batches", r.stage,
             r.act_cursor, r.grad_cursor, m);
  if (options.barrier) {
    Timer t;
    transport.barrier("pipeline step end");
    st.wait_ms += t.ms();
  }
  st.total_ms = total.ms();
  st.measured_bubble = st.total_ms > 0.0 ? 1.0 - st.compute_ms / st.total_ms : 0.0;
  return st;
}

PipelineStats run_schedule(const std::vector<Action>& schedule, PipelineStage& stage, comm::Communicator& pp,
                           PipelineBuffers& buffers, const PipelineRunOptions& options) {
  MpiPipelineTransport transport(pp);
  return run_schedule(schedule, stage, transport, buffers, options);
}

}  // namespace hpct::parallel
