#pragma once
// Pipeline-parallel schedules and their executor (docs/architecture.md and docs/parallelism.md, docs/style.md
// "Parallelism like Megatron-Core"). Generic: a stage is anything that implements PipelineStage; the GPT model plugs in
// through GptStage (lib/models/gpt/gpt_stage.hpp).
//
// Virtual stages (Megatron-LM's interleaving): each of the p pipeline ranks holds v >= 1 model chunks, and chunk c of
// rank r is virtual stage c * p + r of the v * p the model is cut into (rank 0 holds virtual stages 0, p, 2p, ...). An
// activation goes from virtual stage s to s + 1: rank r's chunk c to rank (r + 1) % p, and the last rank's chunk
// c < v - 1 to rank 0's chunk c + 1 (the wrap, "last-to-first" link); gradients go back the same way. The first
// virtual stage (rank 0, chunk 0) has no input, the last (rank p - 1, chunk v - 1) no output. v = 1 is the plain
// pipeline: one chunk per rank, no wrap.
//
// Schedule: the ordered list of actions one rank performs in one optimizer step, over n_micro micro-batches (and, with
// v > 1, over its chunks: an action is (op, micro, chunk)).
//  - none: no pipeline (pp = 1): the one stage runs each micro-batch's forward and backward back to back,
//    F0 B0 F1 B1 ... (1F1B of a single stage; what plain gradient accumulation does). Every training step runs
//    through a schedule, so the training loop has one path for every layout.
//  - GPipe: all forwards F0 .. F(m-1), then all backwards in reverse order B(m-1) .. B0 (as in GPipe /
//    torchgpipe, where autograd walks the micro-batches back; the last micro-batch forwarded is the first one
//    whose gradient the next stage can return). Activations in flight: m.
//  - 1F1B (PipeDream-Flush, Megatron's non-interleaved schedule): warm-up of
//    min(pp_size - pp_rank - 1, m) forwards, then steady 1F1B (one forward, one backward) until every
//    micro-batch is forwarded, then cool-down backwards. Backwards run in micro-batch order. Activations in
//    flight: min(pp_size - pp_rank, m).
//  - 1F1B with v > 1 virtual stages: Megatron-LM's interleaved 1F1B (its forward_backward_pipelining_with_interleaving,
//    with one group of p micro-batches per chunk). As in Megatron, interleaving is not a schedule name of its own:
//    parallel.schedule = "1f1b" with virtual_stages > 1 selects it (Megatron's --virtual-pipeline-model-parallel-size
//    does the same), and GPipe has no interleaved form here. The v * m (chunk, micro) pairs are numbered k = 0 ..
//    v m - 1 in groups of p micro-batches per chunk: forward k is chunk (k mod p v) / p of micro-batch
//    (k / p v) * p + k mod p, backward k the same micro-batch of chunk v - 1 - (k mod p v) / p. warm-up of
//    min((p - r - 1) * 2 + (v - 1) * p, v m) forwards, steady 1F1B (forward warmup + i, backward i), cool-down
//    backwards. It needs m to be a multiple of p (a UsageError otherwise, as in Megatron: the numbering is one of whole
//    groups of p). Chunk activations in flight on rank r: min((p - r - 1) * 2 + (v - 1) * p + 1,
//    v m), each 1/v of a whole stage's.
// With uniform per-chunk times F/v (forward) and B/v (backward) and free communication, every schedule takes
// (v m + p - 1)(F + B) / v, so every rank idles for the fraction (p - 1) / (v m + p - 1) of the step (the bubble);
// v = 1 (GPipe and 1F1B): (p - 1) / (m + p - 1), 1F1B only lowers the activation memory; interleaving shrinks the
// bubble (nearly v-fold when m >> p) at the price of v times the point-to-point messages and more activations in
// flight.
//
// Executor (run_schedule): one call runs one rank's schedule; every rank of the pp group calls it with the
// schedule make_schedule() gives for its own rank (the same kind, n_micro and virtual_stages on all ranks). Point to
// point through a PipelineTransport (parallel/pipeline_transport.hpp: MPI over the pp group with host buffers, or one
// communicator per link and direction, NCCL with device buffers on CUDA), one tensor of activation_numel() elements of
// activation_dtype() per (chunk, micro-batch) in both directions (fp32, or bf16 / f16 under train.precision = bf16 /
// fp16: the activation gradient travels in the activation's type, docs/invariants.md "How the scale features
// compose"):
//  - forward of virtual stage s > 0:    its input is micro-batch j's activation received from virtual stage s-1;
//    forward of virtual stage s < last: its output is sent to virtual stage s+1;
//  - backward of virtual stage s < last: its dout is micro-batch j's gradient received from virtual stage s+1;
//    backward of virtual stage s > 0:    its din is sent to virtual stage s-1.
// So a rank receives activations only from rank r - 1 (mod p) and sends them only to r + 1, and the reverse for
// gradients: one incoming and one outgoing stream per kind.
// Sends are asynchronous (a rank never blocks on its own send); receives are posted ahead, in the order the peer
// sends (NCCL and the link transport match by order, not by tag): the activation receives in forward order, each as
// soon as the previous (chunk, micro-batch) of its buffer slot has consumed its input; the gradient receives in
// backward order, each as soon as its (chunk, micro-batch) has been forwarded (1F1B: right after its forward; GPipe,
// whose backwards run in reverse: all after the last forward); a (chunk, micro) without an input (the first virtual
// stage) or without an output (the last) is skipped in the order. Why the receive order of a rank is the send order of
// its peer: every rank of make_schedule()'s schedules forwards the (chunk, micro) pairs in the same order and
// backwards them in the same order (for v > 1 the numbering k above does not depend on the rank; for v = 1 the
// micro-batch orders 0 .. m-1 of GPipe's forwards and 1F1B, and m-1 .. 0 of GPipe's backwards, do not either).
//  - On a link r -> r+1 (r < p - 1) the sender sends activation (c, j) at its forward of (c, j), for every c (rank
//    r < p - 1 holds no last virtual stage), and the receiver receives it for its forward of (c, j), for every c (rank
//    r + 1 > 0 holds no first virtual stage): both walk the same forward order, unfiltered.
//  - On the wrap p-1 -> 0 the sender sends at its forwards of (c, j) with c < v - 1, the receiver receives for its
//    forwards of (c + 1, j). In the forward order, group g of p micro-batches runs chunk 0, 1, .., v-1 one after the
//    other, so the pairs with c < v - 1, each shifted to c + 1, come in exactly the order of the pairs with c >= 1.
//  - Gradients: the same with the backward order, whose groups run chunk v-1, .., 0: on r+1 -> r every backward
//    sends and every backward receives; on the wrap 0 -> p-1 rank 0's backwards of (c, j), c >= 1 send to rank p-1's
//    (c - 1, j), whose backwards of c < v - 1 receive: the pairs with c >= 1 shifted to c - 1 are, in order, the pairs
//    with c <= v - 2.
// The only waits on sends are wait-before-reuse (below): an activation slot is reused after its backward, which the
// next virtual stage could only return after receiving the activation; a gradient's receive was posted after the
// forward of that (chunk, micro), before its backward waits for it. So no wait depends on a receive not yet posted,
// and no schedule whose actions respect the data dependencies deadlocks (the classic 1F1B pitfall: two neighbours both
// blocked in a send to each other); test_schedule.cpp simulates all ranks against those dependencies. Every wait is the
// communicator's, bounded by comm.timeout_s, and names the micro-batch and peer. Sends of large activations (rendezvous
// protocol) progress only inside MPI calls (docs/platform.md): the executor calls the transport's progress() between
// actions.
// With stream-ordered waits (NCCL, docs/cuda.md) the same waits happen on the GPU: a receive starts after the
// kernels queued before it on the compute stream (so it cannot overwrite a slot still being read), a send after the
// kernels that produced its buffer, and wait() makes the compute stream wait; the host runs through the whole schedule
// without blocking. The stage's buffers are then device memory (PipelineBuffers on transport.device()).
//
// Memory (docs/invariants.md, invariant 7): PipelineBuffers is planned from the schedule before the step: one slot per
// (chunk, micro-batch) in flight (max_in_flight(): m for GPipe, min(p - r, m) for 1F1B, see above for v > 1), each
// slot holding the received input, the output being sent, the received gradient and the gradient being sent of one
// (chunk, micro-batch). A slot is taken at the forward and released at the backward; a send buffer is reused only
// after its Work has completed (wait-before-reuse). Nothing is allocated per action apart from the communicator's
// Work handles and their labels.
//
// Buffer lifetimes seen by the stage: `in` is valid during forward() only and `dout` during backward() only
// (a stage that needs its input in backward keeps its own copy); `out` and `din` are written by the call.
//
// Bubble (PipelineStats): compute_ms is the time spent inside forward()/backward(), total_ms the wall time of
// the step, measured_bubble = 1 - compute_ms / total_ms. These are host times: with a stream-ordered transport (NCCL)
// forward()/backward() only queue kernels and the waits do not block, so the figures measure the host's issue, not
// the GPU's bubble. With options.barrier (default), total_ms runs from
// the end of an entry barrier over the pp group to the end of an exit barrier, so all stages measure the
// same window and the idle of the stages that finish early (the last stage's cool-down) is counted; without
// it, total_ms runs from entry to the completion of this stage's last send.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "parallel/pipeline_transport.hpp"
#include "tensor/tensor.hpp"

namespace hpct::parallel {

enum class ScheduleKind { None, GPipe, OneFOneB };
// "gpipe" | "1f1b" (deck key parallel.schedule); anything else is a UsageError naming the accepted values.
ScheduleKind parse_schedule_kind(const std::string& s);
const char* schedule_kind_name(ScheduleKind k);  // "none" | "gpipe" | "1f1b"
// The schedule a run uses: None for one stage (whatever the deck asks for: its order is then the only one), else
// the requested kind.
ScheduleKind schedule_kind_for(int pp_size, ScheduleKind requested);

struct Action {
  enum Op { Forward, Backward } op;
  int micro;
  int chunk = 0;  // the model chunk of this rank (virtual stage chunk * pp_size + pp_rank); 0 when v = 1
  bool operator==(const Action&) const = default;
};

// The actions of rank pp_rank (0 <= pp_rank < pp_size) over n_micro >= 1 micro-batches and virtual_stages >= 1 model
// chunks per rank (see above). Pure. virtual_stages > 1 is the interleaved 1F1B: it needs kind OneFOneB, pp_size > 1
// and n_micro a multiple of pp_size, a UsageError naming the values otherwise.
std::vector<Action> make_schedule(ScheduleKind kind, int pp_size, int pp_rank, int n_micro, int virtual_stages = 1);
// "F0 F1 B1 B0" (messages and tests); a schedule with several chunks writes every action F<micro>.<chunk>:
// "F0.0 F1.0 F0.1 F1.1 B0.1 ...".
std::string format_schedule(const std::vector<Action>& schedule);
// Number of micro-batches of the schedule. Checks that, with v = 1 + the largest chunk, every (chunk, micro-batch) of
// [0, v) x [0, m) is forwarded once and backwarded once, its backward after its forward; throws hpct::Error otherwise.
int schedule_micro_batches(const std::vector<Action>& schedule);
// Number of chunks (virtual stages per rank) of the schedule, after the same checks.
int schedule_virtual_stages(const std::vector<Action>& schedule);
// Peak number of (chunk, micro-batch) pairs forwarded and not yet backwarded (chunk activations the rank holds); with
// chunk >= 0, of that chunk's micro-batches only.
int max_in_flight(const std::vector<Action>& schedule, int chunk = -1);
// (p - 1) / (v m + p - 1): the idle fraction of every rank with uniform per-chunk times and free communication.
double theoretical_bubble(int pp_size, int n_micro, int virtual_stages = 1);

// One pipeline rank's part of the model: its v chunks (v = 1: its layers). Called by run_schedule in schedule order;
// `chunk` is the model chunk (virtual stage chunk * pp_size + pp_rank), always 0 when v = 1. The buffers are on the
// transport's device (device memory with NCCL: then read and write them with kernels on the compute stream, which the
// transfers are ordered with, and do not synchronize: the executor needs no host wait). Every buffer holds
// activation_numel() elements of activation_dtype() (float*, bf16* or fp16* as the stage's storage type A,
// kernels.hpp).
class PipelineStage {
 public:
  virtual ~PipelineStage() = default;
  // in: the activation from the previous virtual stage (nullptr on the first: rank 0, chunk 0);
  // out: the activation for the next virtual stage (nullptr on the last: rank p - 1, chunk v - 1).
  virtual void forward(int chunk, int micro, const void* in, void* out) = 0;
  // dout: gradient w.r.t. this chunk's output, from the next virtual stage (nullptr on the last virtual stage);
  // din: gradient w.r.t. this chunk's input, for the previous virtual stage (nullptr on the first virtual stage).
  virtual void backward(int chunk, int micro, const void* dout, void* din) = 0;
  // Elements of the activation exchanged between stages (the same on every virtual stage boundary).
  virtual int64_t activation_numel() const = 0;
  // The storage type of the activations and activation gradients exchanged (the same on every stage): F32 or BF16.
  virtual DType activation_dtype() const { return DType::F32; }
};

struct PipelineStats {
  double compute_ms = 0.0;          // inside forward() and backward()
  double wait_ms = 0.0;             // blocked in receive and send waits (and the exit barrier)
  double total_ms = 0.0;            // the step's window (see the header comment)
  double measured_bubble = 0.0;     // 1 - compute_ms / total_ms
  double theoretical_bubble = 0.0;  // (p - 1) / (v m + p - 1)
};

struct PipelineRunOptions {
  bool barrier = true;  // entry and exit barriers over pp: every stage measures the same window
  // Called right before the rank's last backward of the step (e.g. to arm the data-parallel gradient sync, whose
  // buckets can then go out while that backward produces the final gradients); empty: nothing.
  std::function<void()> before_last_backward;
  // Called right before every backward of the stage (e.g. ZeRO-2, which reduce-scatters every micro-batch), before
  // before_last_backward on the last; empty: nothing.
  std::function<void()> before_backward;
};

// The communication buffers of one stage for one schedule, planned before the step (see above), on `device` (the
// transport's), of elements of `dtype` (the stage's activation_dtype(): F32, BF16 or F16; a slot is activation_numel *
// dtype_size(dtype) bytes). activation_numel 0 (a single stage, which exchanges nothing): no buffers at all.
class PipelineBuffers {
 public:
  PipelineBuffers(const std::vector<Action>& schedule, int64_t activation_numel, Device device = Device::CPU,
                  DType dtype = DType::F32);
  PipelineBuffers(const PipelineBuffers&) = delete;
  PipelineBuffers& operator=(const PipelineBuffers&) = delete;
  // The bytes the constructor allocates for these arguments, without allocating (the memory plan of `--plan`).
  static size_t planned_bytes(const std::vector<Action>& schedule, int64_t activation_numel, DType dtype);
  // The transfers that can be in flight at once: an activation and a gradient received and sent per slot.
  static int planned_transfers(const std::vector<Action>& schedule) { return 4 * max_in_flight(schedule); }

  const std::vector<Action>& schedule() const { return schedule_; }
  int n_micro() const { return n_micro_; }
  int virtual_stages() const { return chunks_; }
  int slots() const { return slots_; }
  int64_t activation_numel() const { return numel_; }
  DType dtype() const { return dtype_; }
  int slot_of(int chunk, int micro) const { return slot_of_[static_cast<size_t>(key(chunk, micro))]; }
  size_t bytes() const { return slab_.bytes(); }
  Device device() const { return slab_.device(); }

  // (numel) elements of dtype() each, slots numel * dtype_size(dtype()) bytes apart.
  void* act_in(int slot) { return slot_ptr(act_in_, slot); }
  void* act_out(int slot) { return slot_ptr(act_out_, slot); }
  void* grad_in(int slot) { return slot_ptr(grad_in_, slot); }
  void* grad_out(int slot) { return slot_ptr(grad_out_, slot); }

 private:
  friend struct PipelineRunner;
  friend PipelineStats run_schedule(const std::vector<Action>&, PipelineStage&, PipelineTransport&, PipelineBuffers&,
                                    const PipelineRunOptions&);
  void* slot_ptr(Tensor* t, int slot) {
    HPCT_CHECK(t != nullptr && slot >= 0 && slot < slots_, "pipeline buffers ({} slots of {} elements): no slot {}",
               slots_, numel_, slot);
    return static_cast<char*>(t->data) + static_cast<int64_t>(slot) * numel_ * static_cast<int64_t>(dtype_size(dtype_));
  }
  // A (chunk, micro-batch) pair as one index: chunk * n_micro + micro.
  int key(int chunk, int micro) const {
    HPCT_CHECK(chunk >= 0 && chunk < chunks_ && micro >= 0 && micro < n_micro_,
               "pipeline buffers of {} chunks x {} micro-batches: no chunk {} micro-batch {}", chunks_, n_micro_, chunk,
               micro);
    return chunk * n_micro_ + micro;
  }
  std::vector<Action> schedule_;
  int64_t numel_ = 0;
  DType dtype_ = DType::F32;
  int n_micro_ = 0, chunks_ = 1;
  int slots_ = 0;
  std::vector<int> slot_of_;                // key -> slot
  std::vector<int> prev_in_slot_;           // key -> the key forwarded before it in its slot (-1: none)
  std::vector<int> fwd_order_, bwd_order_;  // the keys in the order of their forwards / backwards
  Slab slab_;
  Tensor* act_in_ = nullptr;    // (slots, numel)
  Tensor* act_out_ = nullptr;   // (slots, numel)
  Tensor* grad_in_ = nullptr;   // (slots, numel)
  Tensor* grad_out_ = nullptr;  // (slots, numel)
  // Works in flight per slot (sized once; a completed Work is reset before its slot is reused)
  std::vector<comm::WorkPtr> recv_act_, send_act_, recv_grad_, send_grad_;
};

// Runs one rank's schedule (see the header comment) over `transport` (stage() == this rank, virtual_stages() == the
// schedule's). buffers must have been planned for this schedule, stage.activation_numel() and
// stage.activation_dtype(), on transport.device().
PipelineStats run_schedule(const std::vector<Action>& schedule, PipelineStage& stage, PipelineTransport& transport,
                           PipelineBuffers& buffers, const PipelineRunOptions& options = {});
// The same over MpiPipelineTransport(pp, the schedule's virtual stages): pp the pipeline group (host buffers).
PipelineStats run_schedule(const std::vector<Action>& schedule, PipelineStage& stage, comm::Communicator& pp,
                           PipelineBuffers& buffers, const PipelineRunOptions& options = {});

}  // namespace hpct::parallel
