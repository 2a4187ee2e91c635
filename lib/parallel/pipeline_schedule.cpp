#include "parallel/pipeline_schedule.hpp"

#include <algorithm>
#include <utility>

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

// Megatron's interleaved 1F1B (see the header): the v m (chunk, micro) pairs numbered k in groups of p micro-batches
// per chunk; forward k and backward k are the same micro-batch, the backward walking the chunks from the last.
std::vector<Action> interleaved_schedule(int pp_size, int pp_rank, int n_micro, int chunks) {
  const int p = pp_size, total = chunks * n_micro;
  auto chunk_of = [&](int k) { return (k % (p * chunks)) / p; };
  auto micro_of = [&](int k) { return (k / (p * chunks)) * p + k % p; };
  auto fwd = [&](int k) { return Action{Action::Forward, micro_of(k), chunk_of(k)}; };
  auto bwd = [&](int k) { return Action{Action::Backward, micro_of(k), chunks - 1 - chunk_of(k)}; };
  std::vector<Action> a;
  a.reserve(2 * static_cast<size_t>(total));
  // warm-up: fill the pipe below this rank twice over (its forwards run a chunk ahead of the next rank's) plus a
  // whole round of the other chunks
  const int warmup = std::min((p - pp_rank - 1) * 2 + (chunks - 1) * p, total);
  const int steady = total - warmup;
  for (int k = 0; k < warmup; ++k) a.push_back(fwd(k));
  // steady 1F1B: forward warmup + i, then backward i
  for (int i = 0; i < steady; ++i) {
    a.push_back(fwd(warmup + i));
    a.push_back(bwd(i));
  }
  // cool-down: the backwards still owed
  for (int k = steady; k < total; ++k) a.push_back(bwd(k));
  return a;
}

// (n_micro, chunks) of a schedule after checking that every (chunk, micro) of [0, chunks) x [0, n_micro) is forwarded
// once and backwarded once, after its forward.
std::pair<int, int> checked_shape(const std::vector<Action>& schedule) {
  HPCT_CHECK(!schedule.empty() && schedule.size() % 2 == 0, "schedule of {} actions: {}", schedule.size(),
             format_schedule(schedule));
  int chunks = 1;
  for (const Action& a : schedule) {
    HPCT_CHECK(a.chunk >= 0, "chunk {} in schedule {}", a.chunk, format_schedule(schedule));
    chunks = std::max(chunks, a.chunk + 1);
  }
  HPCT_CHECK(schedule.size() % (2 * static_cast<size_t>(chunks)) == 0,
             "schedule of {} actions over {} chunks: not one forward and one backward per (chunk, micro-batch): {}",
             schedule.size(), chunks, format_schedule(schedule));
  const int m = static_cast<int>(schedule.size() / (2 * static_cast<size_t>(chunks)));
  std::vector<int> fwd(static_cast<size_t>(m * chunks), 0), bwd(static_cast<size_t>(m * chunks), 0);
  for (const Action& a : schedule) {
    HPCT_CHECK(a.micro >= 0 && a.micro < m, "micro-batch {} out of range [0, {}) in schedule {}", a.micro, m,
               format_schedule(schedule));
    const size_t key = static_cast<size_t>(a.chunk * m + a.micro);
    if (a.op == Action::Forward) {
      HPCT_CHECK(++fwd[key] == 1, "micro-batch {} of chunk {} forwarded twice in schedule {}", a.micro, a.chunk,
                 format_schedule(schedule));
    } else {
      HPCT_CHECK(fwd[key] == 1, "micro-batch {} of chunk {} backwarded before its forward in schedule {}", a.micro,
                 a.chunk, format_schedule(schedule));
      HPCT_CHECK(++bwd[key] == 1, "micro-batch {} of chunk {} backwarded twice in schedule {}", a.micro, a.chunk,
                 format_schedule(schedule));
    }
  }
  return {m, chunks};  // m * chunks forwards and as many backwards, none twice: each exactly once
}

}  // namespace

std::vector<Action> make_schedule(ScheduleKind kind, int pp_size, int pp_rank, int n_micro, int virtual_stages) {
  HPCT_CHECK(pp_size >= 1 && pp_rank >= 0 && pp_rank < pp_size, "pipeline stage {} of {}", pp_rank, pp_size);
  HPCT_CHECK(n_micro >= 1, "n_micro = {} (at least 1 micro-batch)", n_micro);
  HPCT_USAGE_CHECK(virtual_stages >= 1, "parallel.virtual_stages = {}: at least 1 model chunk per pipeline rank",
                   virtual_stages);
  if (virtual_stages > 1) {
    HPCT_USAGE_CHECK(pp_size > 1,
                     "parallel.virtual_stages = {} with pp = 1: virtual stages interleave a pipeline of several ranks; "
                     "set parallel.virtual_stages = 1 or pp > 1",
                     virtual_stages);
    HPCT_USAGE_CHECK(kind == ScheduleKind::OneFOneB,
                     "parallel.virtual_stages = {} interleaves the 1f1b schedule (Megatron's interleaved 1F1B); "
                     "parallel.schedule = \"{}\" has no interleaved form: use parallel.schedule = \"1f1b\" or "
                     "parallel.virtual_stages = 1",
                     virtual_stages, schedule_kind_name(kind));
    HPCT_USAGE_CHECK(n_micro % pp_size == 0,
                     "the interleaved 1f1b schedule (parallel.virtual_stages = {}) runs the micro-batches in groups of "
                     "pp = {}, but a step has {} micro-batches, not a multiple of {}: choose the batch sizes so that "
                     "a step has a multiple of {} micro-batches (e.g. {}), or parallel.virtual_stages = 1",
                     virtual_stages, pp_size, n_micro, pp_size, pp_size, (n_micro / pp_size + 1) * pp_size);
    return interleaved_schedule(pp_size, pp_rank, n_micro, virtual_stages);
  }
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
  const bool chunked = std::any_of(schedule.begin(), schedule.end(), [](const Action& a) { return a.chunk != 0; });
  std::string s;
  for (const Action& a : schedule) {
    if (!s.empty()) s += ' ';
    s += fmt::format("{}{}", a.op == Action::Forward ? 'F' : 'B', a.micro);
    if (chunked) s += fmt::format(".{}", a.chunk);
  }
  return s;
}

int schedule_micro_batches(const std::vector<Action>& schedule) { return checked_shape(schedule).first; }

int schedule_virtual_stages(const std::vector<Action>& schedule) { return checked_shape(schedule).second; }

int max_in_flight(const std::vector<Action>& schedule, int chunk) {
  checked_shape(schedule);
  int live = 0, peak = 0;
  for (const Action& a : schedule) {
    if (chunk >= 0 && a.chunk != chunk) continue;
    live += a.op == Action::Forward ? 1 : -1;
    peak = std::max(peak, live);
  }
  return peak;
}

double theoretical_bubble(int pp_size, int n_micro, int virtual_stages) {
  return static_cast<double>(pp_size - 1) / static_cast<double>(virtual_stages * n_micro + pp_size - 1);
}

PipelineBuffers::PipelineBuffers(const std::vector<Action>& schedule, int64_t activation_numel, Device device,
                                 DType dtype)
    : schedule_(schedule), numel_(activation_numel), dtype_(dtype), slab_("pipeline_buffers", device) {
  HPCT_CHECK(activation_numel >= 0, "activation_numel = {}", activation_numel);
  HPCT_CHECK(dtype == DType::F32 || dtype == DType::BF16 || dtype == DType::F16,
             "pipeline buffers of {} elements: stages exchange f32, bf16 or f16 activations", dtype_name(dtype));
  std::tie(n_micro_, chunks_) = checked_shape(schedule_);
  slots_ = max_in_flight(schedule_);
  // A (chunk, micro) takes the lowest free slot at its forward and frees it at its backward.
  const size_t keys = static_cast<size_t>(n_micro_ * chunks_);
  slot_of_.assign(keys, -1);
  prev_in_slot_.assign(keys, -1);
  std::vector<int> last_in_slot(static_cast<size_t>(slots_), -1);
  std::vector<bool> busy(static_cast<size_t>(slots_), false);
  for (const Action& a : schedule_) {
    const int id = key(a.chunk, a.micro);
    if (a.op == Action::Forward) {
      const int k = static_cast<int>(std::find(busy.begin(), busy.end(), false) - busy.begin());
      HPCT_CHECK(k < slots_, "no free pipeline slot for micro-batch {} of chunk {}", a.micro, a.chunk);  // slots = peak
      busy[k] = true;
      slot_of_[id] = k;
      prev_in_slot_[id] = last_in_slot[k];
      last_in_slot[k] = id;
      fwd_order_.push_back(id);
    } else {
      busy[slot_of_[id]] = false;
      bwd_order_.push_back(id);
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

// The executor's state for one call of run_schedule (a friend of PipelineBuffers). Buffers and orders are indexed by
// key = chunk * m + micro.
struct PipelineRunner {
  PipelineBuffers& b;
  PipelineTransport& tr;
  PipelineStats& st;
  const int rank, ranks, chunks;
  std::vector<bool> forwarded;  // key -> its forward has run
  size_t act_cursor = 0;        // next activation receive to consider: b.fwd_order_[act_cursor]
  size_t grad_cursor = 0;       // next gradient receive to consider: b.bwd_order_[grad_cursor]

  int chunk_of(int key) const { return key / b.n_micro_; }
  int micro_of(int key) const { return key % b.n_micro_; }
  // The first virtual stage (rank 0, chunk 0) has no input, the last (rank p - 1, chunk v - 1) no output.
  bool has_input(int chunk) const { return rank > 0 || chunk > 0; }
  bool has_output(int chunk) const { return rank < ranks - 1 || chunk < chunks - 1; }
  // "stage 2" (v = 1) or "virtual stage 5 (rank 1, chunk 1)" for the virtual stage `offset` away from this rank's chunk.
  std::string peer(int chunk, int offset) const {
    const int s = chunk * ranks + rank + offset;
    if (chunks == 1) return fmt::format("stage {}", s);
    return fmt::format("virtual stage {} (rank {}, chunk {})", s, s % ranks, s / ranks);
  }

  // Waits for w (if any) and releases it; the time blocked counts as wait.
  void finish(comm::WorkPtr& w) {
    if (!w) return;
    Timer t;
    w->wait();
    st.wait_ms += t.ms();
    w.reset();
  }
  void post_act_recv(int chunk, int micro) {
    const int k = b.slot_of(chunk, micro);
    HPCT_CHECK(!b.recv_act_[k], "pipeline slot {} still receiving", k);
    b.recv_act_[k] = tr.recv_activation(b.act_in(k), b.numel_, b.dtype_, chunk, micro,
                                        fmt::format("pipeline activation of micro-batch {} from {}", micro,
                                                    peer(chunk, -1)));
  }
  void post_grad_recv(int chunk, int micro) {
    const int k = b.slot_of(chunk, micro);
    HPCT_CHECK(!b.recv_grad_[k], "pipeline slot {} still receiving", k);
    b.recv_grad_[k] = tr.recv_gradient(b.grad_in(k), b.numel_, b.dtype_, chunk, micro,
                                       fmt::format("pipeline gradient of micro-batch {} from {}", micro,
                                                   peer(chunk, +1)));
  }
  // Activation receives in forward order (the previous rank's send order, see the header), skipping the first virtual
  // stage's, each once its slot's input is free: the (chunk, micro) before it in the slot has been forwarded (the
  // stage copied what it needs of its input).
  void post_ready_act_recvs() {
    while (act_cursor < b.fwd_order_.size()) {
      const int id = b.fwd_order_[act_cursor];
      if (has_input(chunk_of(id))) {
        const int before = b.prev_in_slot_[static_cast<size_t>(id)];
        if (before >= 0 && !forwarded[static_cast<size_t>(before)]) break;
        post_act_recv(chunk_of(id), micro_of(id));
      }
      ++act_cursor;
    }
  }
  // Gradient receives in backward order (the next rank's send order), skipping the last virtual stage's, each once
  // its (chunk, micro) has been forwarded (its slot's previous gradient was consumed by the backward that freed the
  // slot).
  void post_ready_grad_recvs() {
    while (grad_cursor < b.bwd_order_.size()) {
      const int id = b.bwd_order_[grad_cursor];
      if (has_output(chunk_of(id))) {
        if (!forwarded[static_cast<size_t>(id)]) break;
        post_grad_recv(chunk_of(id), micro_of(id));
      }
      ++grad_cursor;
    }
  }

  void forward(PipelineStage& s, int c, int j) {
    const int k = b.slot_of(c, j);
    const bool in = has_input(c), out = has_output(c);
    if (in) {
      HPCT_CHECK(b.recv_act_[k], "pipeline rank {}: the activation receive of micro-batch {} chunk {} was not posted",
                 rank, j, c);
      finish(b.recv_act_[k]);
    }
    if (out) finish(b.send_act_[k]);  // wait-before-reuse of the output buffer
    {
      Timer t;
      s.forward(c, j, in ? b.act_in(k) : nullptr, out ? b.act_out(k) : nullptr);
      st.compute_ms += t.ms();
    }
    forwarded[static_cast<size_t>(b.key(c, j))] = true;
    post_ready_act_recvs();  // act_in(k) is free again
    if (out)
      b.send_act_[k] = tr.send_activation(b.act_out(k), b.numel_, b.dtype_, c, j,
                                          fmt::format("pipeline activation of micro-batch {} to {}", j, peer(c, +1)));
    post_ready_grad_recvs();  // posted before the next virtual stage can possibly send it
  }

  void backward(PipelineStage& s, int c, int j) {
    const int k = b.slot_of(c, j);
    const bool in = has_input(c), out = has_output(c);
    if (out) {
      HPCT_CHECK(b.recv_grad_[k], "pipeline rank {}: the gradient receive of micro-batch {} chunk {} was not posted",
                 rank, j, c);
      finish(b.recv_grad_[k]);
    }
    if (in) finish(b.send_grad_[k]);  // wait-before-reuse of the gradient buffer
    {
      Timer t;
      s.backward(c, j, out ? b.grad_in(k) : nullptr, in ? b.grad_out(k) : nullptr);
      st.compute_ms += t.ms();
    }
    if (in)
      b.send_grad_[k] = tr.send_gradient(b.grad_out(k), b.numel_, b.dtype_, c, j,
                                         fmt::format("pipeline gradient of micro-batch {} to {}", j, peer(c, -1)));
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
  HPCT_CHECK(transport.virtual_stages() == buffers.virtual_stages(),
             "the pipeline schedule has {} chunks per rank, the transport ({}) was built for {}: build it with the "
             "schedule's virtual stages (the wrap link from the last rank to the first exists only for v > 1)",
             buffers.virtual_stages(), transport.describe(), transport.virtual_stages());
  const int m = buffers.n_micro();
  for (size_t k = 0; k < static_cast<size_t>(buffers.slots()); ++k)
    HPCT_CHECK(!buffers.recv_act_[k] && !buffers.send_act_[k] && !buffers.recv_grad_[k] && !buffers.send_grad_[k],
               "pipeline buffers still hold operations of an unfinished run (slot {})", k);

  PipelineStats st;
  st.theoretical_bubble = theoretical_bubble(transport.stages(), m, buffers.virtual_stages());
  PipelineRunner r{buffers,
                   transport,
                   st,
                   transport.stage(),
                   transport.stages(),
                   buffers.virtual_stages(),
                   std::vector<bool>(buffers.fwd_order_.size(), false)};
  if (options.barrier) transport.barrier("pipeline step start");
  Timer total;
  r.post_ready_act_recvs();  // the first (chunk, micro) of every slot
  const int last_backward = r.b.bwd_order_.back();
  for (const Action& a : schedule) {
    transport.progress();  // drive the sends and receives in flight (MPI progresses only inside MPI calls)
    if (a.op == Action::Forward) {
      r.forward(stage, a.chunk, a.micro);
    } else {
      if (options.before_backward) options.before_backward();
      if (buffers.key(a.chunk, a.micro) == last_backward && options.before_last_backward)
        options.before_last_backward();
      r.backward(stage, a.chunk, a.micro);
    }
  }
  for (size_t k = 0; k < static_cast<size_t>(buffers.slots()); ++k) {
    r.finish(buffers.send_act_[k]);
    r.finish(buffers.send_grad_[k]);
    HPCT_CHECK(!buffers.recv_act_[k] && !buffers.recv_grad_[k], "pipeline receive left in slot {}", k);
  }
  HPCT_CHECK(r.act_cursor == buffers.fwd_order_.size() && r.grad_cursor == buffers.bwd_order_.size(),
             "pipeline rank {}: {} activation and {} gradient receives considered for {} (chunk, micro-batch) pairs",
             r.rank, r.act_cursor, r.grad_cursor, buffers.fwd_order_.size());
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
  MpiPipelineTransport transport(pp, buffers.virtual_stages());
  return run_schedule(schedule, stage, transport, buffers, options);
}

}  // namespace hpct::parallel
