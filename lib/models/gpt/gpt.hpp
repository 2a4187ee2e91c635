#pragma once
// GPT-2 (learned positions, pre-LayerNorm, GELU MLP of width 4C, tied input/output embeddings, optional
// biases), forward and backward over kernels/ in llm.c's style.
//
// Legend: L layers, B micro-batch, T seq_len, C n_embd, NH heads, HS = C/NH, V vocab, Vp padded vocab
// (multiple of 128, docs/parallelism.md; padded logits are masked out of the loss), N = B*T.
// Gradients: parameter gradients accumulate (+=) over micro-batches (kernels.hpp convention); the
// caller zeroes them once per optimizer step (zero_grad). Nothing here reads device data on the host.
//
// Storage (train.precision, docs/precision.md): the activation type A is float, bf16 or fp16 (the constructor's `act`;
// fp16 on CUDA only). Parameters, gradients and the optimizer state are fp32 whatever A is. Under bf16 and fp16 the
// kernels read a compute copy of the parameters in A, cast from the fp32 masters by refresh_compute_params() once per
// step; every activation the model keeps between forward and backward (and every activation gradient, the logits) is
// of type A; LayerNorm mean and rstd, attention's log-sum-exp, the losses and the cross-entropy statistics stay
// fp32. Under fp16 the loss gradient dloss carries the loss scale, so the activation gradients are scaled.
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "kernels/exec_context.hpp"
#include "models/recompute.hpp"
#include "parallel/data_parallel.hpp"
#include "parallel/grid.hpp"
#include "parallel/tp_layers.hpp"
#include "tensor/tensor.hpp"

namespace hpct::gpt {

struct GptConfig {
  int n_layer = 0, n_head = 0, n_embd = 0, seq_len = 0;
  int vocab_size = 0;    // true vocabulary (V)
  int padded_vocab = 0;  // Vp = V rounded up to a multiple of 128
  bool bias = true;      // biases in Linear and LayerNorm layers
  float init_std = 0.02f;

  int head_size() const { return n_embd / n_head; }
  void validate(const std::string& where) const;
};

enum class Init { Normal, ScaledNormal, Zeros, Ones };

// This rank's place in the model-parallel part of the grid, as the ParallelContext hands it to the model
// (parallel/grid.hpp; data parallelism does not change the layout).
using ModelParallel = parallel::ModelParallel;

// The part of the model one pipeline stage holds (stage_plan() in gpt_layout.hpp): with virtual stages, one model
// chunk of a rank (chunk_plans()).
struct StagePlan {
  int first_layer = 0, end_layer = 0;
  bool has_embedding = false;  // wte + wpe: the first stage
  bool has_head = false;       // lnf + the (tied) wte: the last stage
  int num_layers() const { return end_layer - first_layer; }
};

// One logical parameter tensor: name, logical shape (the serial model's), initialisation and whether
// AdamW's decoupled weight decay applies (2-D weights and embeddings only, as nanoGPT / torch recipes).
struct ParamSpec {
  std::string name;
  std::vector<int64_t> shape;
  Init init = Init::Normal;
  bool decay = false;
};

// The parameter layout, in a fixed order: wte, wpe, h.<l>.{ln1,attn.qkv,attn.proj,ln2,mlp.fc,mlp.proj}.*, lnf.*.
// The fused QKV weight is the logical (3, NH, HS, C) tensor (docs/parallelism.md).
std::vector<ParamSpec> parameter_layout(const GptConfig& cfg);

// The ranges of layout indices a stage's backward writes, in its order (Gpt::set_grad_write_hook), for any stage's
// layout (the serial one or a shard's): lnf.* on the stage with the head, the blocks from the last to the first, then
// what precedes the first block (wte and wpe on the first stage, the tied wte on the last). wte is also written by
// the head, before everything else, and under pipelining summed over the embedding group after the schedule: a
// gradient sync that reuses gradient memory keeps it whole (grad_pinned).
std::vector<std::pair<int, int>> grad_write_groups(const std::vector<ParamSpec>& layout);
std::vector<bool> grad_pinned(const std::vector<ParamSpec>& layout);

// What the model keeps for backward (models/recompute.hpp) and for how many micro-batches at once: sets[c] activation
// sets for model chunk c, one per micro-batch whose forward of that chunk has run and whose backward has not (a pipeline
// stage's activations in flight, GptStage::kept_sets; one chunk with 1 set without pipelining). A set holds the chunk's
// input and its blocks' activations; every chunk has as many blocks (virtual stages need n_layer % (pp v) == 0), so
// the sets of all chunks share one layout and are numbered back to back, chunk 0's first. Under full recompute a set is
// the blocks' inputs; the activations of the block being recomputed exist once, as do the head's, the backward scratch
// and the forward's projection scratch.
using models::Recompute;
struct ActivationPlan {
  Recompute recompute = Recompute::None;
  std::vector<int> sets = {1};  // per model chunk
  // The attention kernels the run calls (ExecContext::attention, after kernels::effective_attention): the backend sizes
  // what they keep for backward and their backward scratch for this choice.
  AttentionImpl attention = AttentionImpl::Own;
  int total_sets() const {
    int n = 0;
    for (int k : sets) n += k;
    return n;
  }
};

// Sizes of the planned slabs for one rank (docs/invariants.md, invariant 7), callable from tests.
struct MemoryPlan {
  int64_t num_params = 0;         // all parameters, padding rows of wte included
  int64_t num_params_no_wpe = 0;  // N of the PaLM flop count (padding rows of wte excluded too)
  size_t param_bytes = 0, grad_bytes = 0, optim_bytes = 0;
  size_t compute_param_bytes = 0;    // the bf16 / fp16 compute copy of the parameters (0 in fp32)
  size_t activation_bytes = 0;       // forward activations kept for backward, for one micro-batch, at their stored size
  size_t activation_grad_bytes = 0;  // backward scratch (one layer at a time + residual stream)
  size_t total() const {
    return param_bytes + grad_bytes + optim_bytes + compute_param_bytes + activation_bytes + activation_grad_bytes;
  }
};
// device: the backend whose attention sizes apply (kernels.hpp: both keep a log-sum-exp per row today, so the plans
// agree); the CPU's by default. act: the activation storage type (DType::F32, DType::BF16 or, with
// device CUDA, DType::F16).
MemoryPlan memory_plan(const GptConfig& cfg, int micro_batch, Device device = Device::CPU, DType act = DType::F32,
                       const ActivationPlan& kept = {});

// Activation tensors of one micro-batch, planned in one place so the model, memory_plan() and the memory plan of
// `--plan` agree (models/gpt/gpt_layout.hpp lists them). dtype: the activation type for what the kernels store as such,
// F32 for statistics and losses, U8 for the attention buffers whose size the backend gives in bytes.
struct ActSpec {
  std::string name;
  std::vector<int64_t> shape;
  DType dtype;
};
// cfg.n_layer blocks per activation set (a pipeline stage passes the blocks of one of its chunks); t: tensor-parallel size (local head, MLP and vocabulary
// widths are / t; the residual stream is full width); device: the backend, which sizes what attention keeps for backward
// and its backward scratch (kernels.hpp); head: whether the stage holds the head (lnf, logits, losses, and the
// vocabulary-parallel cross-entropy's statistics under TP); kept: the recompute mode and the sets (all chunks'). Set k's
// tensors are named as set 0's with the prefix "mb<k>." (k > 0); the one copy of what full or selective recompute
// recomputes is named "block.*" (full) or "recomputed.*" (selective).
// sp: sequence parallelism (t > 1): the residual stream, the LayerNorm outputs and their statistics hold this rank's
// rows only (micro_batch x seq_len / t), and one (B, T, C) buffer receives the gathered LayerNorm output ("gathered").
std::vector<ActSpec> activation_layout(const GptConfig& cfg, int micro_batch, int t, Device device, DType act,
                                       bool head, const ActivationPlan& kept = {}, bool sp = false);
// sp: the residual stream's gradient holds this rank's rows, beside its gathered whole ("dresidual_full"), the
// reduce-scattered LayerNorm input gradient ("dln_shard") and one block's LayerNorm weight gradients ("ln_grads", the
// partial sums the TP group adds).
// attention: as ActivationPlan's, for the backward's attention scratch.
std::vector<ActSpec> activation_grad_layout(const GptConfig& cfg, int micro_batch, int t, Device device, DType act,
                                            bool sp = false, AttentionImpl attention = AttentionImpl::Own);
// The bytes a slab of these tensors takes (alignment included).
size_t planned_bytes(const std::vector<ActSpec>& specs);

// The elements of the activation at a pipeline stage boundary for b sequences: (b, T, C), or this rank's rows of it
// under sequence parallelism, (b T / tp, C).
int64_t boundary_numel(const GptConfig& cfg, const ModelParallel& mp, int b);

// Training flops per token, PaLM count: 6 N + 12 L C T with N = parameters except the position embedding.
double flops_per_token(const GptConfig& cfg);

class Gpt final : public parallel::DataParallelModel {
 public:
  // act: the activation storage type, DType::F32, DType::BF16 or (CUDA only) DType::F16 (the header comment).
  Gpt(const GptConfig& cfg, int micro_batch, Device device, DType act = DType::F32);
  // Tensor-parallel: this rank holds its shards of every tensor (models/gpt/gpt_layout.hpp) and tp_comm is
  // its TP group (size mp.tp); the TP and SP layers' collectives (parallel/tp_layers.hpp) run on it inside forward
  // and backward (Megatron: column-parallel QKV and fc, row-parallel proj layers, vocabulary-parallel embedding and
  // cross-entropy).
  // Pipeline parallelism (mp.pp > 1): this rank holds only its stage's tensors (stage_plan; forward with in_act,
  // backward_stage); with mp.virtual_stages = v > 1 the blocks of its v chunks (chunk_plans), each run on its own by
  // forward / backward_stage given the chunk.
  // allocate_grads = false: the gradient slab is planned, not allocated; its owner binds it (Slab::bind: ZeRO-2 places
  // gradients in the gradient sync's buckets) before the first backward, and zero_grad() leaves it to that owner.
  // shard_params = true (ZeRO-3): neither the fp32 parameters nor the 16-bit compute copy is allocated; the tensors the
  // kernels read (read_params()) are bound by their owner (parallel/param_gather.hpp) to its gather buffers, which it
  // fills in the read hook (set_param_read_hook) the forward and backward call before they read a layer;
  // init_parameters then stores through its `store` argument, and refresh_compute_params() is the owner's.
  // kept: the recompute mode and how many micro-batches' activations the model holds at once (ActivationPlan); the
  // activation-set arguments below choose one of the chunk's (0 <= set < kept.sets[chunk]).
  Gpt(const GptConfig& cfg, int micro_batch, Device device, const ModelParallel& mp, comm::Communicator* tp_comm,
      DType act = DType::F32, bool allocate_grads = true, bool shard_params = false, const ActivationPlan& kept = {});
  Gpt(const Gpt&) = delete;
  Gpt& operator=(const Gpt&) = delete;

  const GptConfig& config() const { return cfg_; }
  int micro_batch() const { return B_; }
  DType activation_dtype() const { return act_; }
  const ActivationPlan& kept() const { return kept_; }

  // Counter-based initialisation keyed by (seed, parameter name, logical element index) (invariant 1). store (given
  // with sharded parameters): receives each tensor's whole fp32 values on the host, by layout index, instead of the
  // model's own tensors.
  using ParamStore = std::function<void(int tensor, const float* host)>;
  void init_parameters(const ExecContext& ctx, uint64_t seed, const ParamStore& store = {}) override;
  // Under bf16 and fp16: casts the fp32 masters into the compute copy the kernels read (models/compute_copy.hpp). Call
  // it after every change of the masters and before the next forward (once per step: GptStage::begin_step; evaluation
  // and sampling call it too).
  // A no-op in fp32, where the kernels read the masters, and after the first cast once the optimizer keeps the copy.
  void refresh_compute_params(const ExecContext& ctx);
  // The 16-bit compute copy (empty in fp32; planned only under ZeRO-3, whose gather fills it).
  Slab& compute_params() { return compute_; }
  // The optimizer stores every update into the compute copy too (optim::Optimizer::keep_compute_copy), so
  // refresh_compute_params casts only once more (the initial or loaded masters). Valid while nothing but the optimizer
  // changes the masters after that cast: the training loop loads and initialises before the first step.
  void set_compute_copy_kept() { copy_kept_ = true; }

  const ModelParallel& model_parallel() const { return mp_; }
  // Milliseconds the host spent in TP collectives since the last reset (forward, loss and backward). On CUDA their
  // waits are stream-ordered (the compute stream waits, the host does not), so this is the time to issue them.
  double tp_comm_ms() const { return tp_.comm_ms(); }
  void reset_tp_comm_ms() { tp_.reset_comm_ms(); }

  // Forward of b <= micro_batch sequences: inputs (b, T) on the device. Leaves logits (b, T, Vp) (under TP:
  // this rank's vocabulary columns, (b, T, Vp/tp)).
  // Pipeline stages (mp.pp > 1): the first stage starts from inputs; a later stage from in_act, the previous
  // stage's output (b, T, C) on ctx.device (copied in, stream-ordered: in_act may be reused once the copy has run);
  // a stage without the head leaves its output in stage_output(). Stage activations and their gradients are of the
  // activation type (activation_dtype()).
  // set: the activation set the forward keeps what backward needs in; the backward of this micro-batch names the same
  // set, and no other forward may use it in between (the stage's slot of the micro-batch).
  // chunk: the model chunk to run (virtual stages): only its blocks, the embedding only in chunk 0 of the first rank,
  // the head only in the last chunk of the last rank; inputs is read by the embedding only, in_act by the others.
  void forward(const ExecContext& ctx, const int32_t* inputs, int b, const void* in_act = nullptr, int set = 0,
               int chunk = 0);
  // (b, T, C), or under sequence parallelism this rank's rows of it, (b T / tp, C): the output of `chunk`'s forward
  const void* stage_output(int set = 0, int chunk = 0) const {
    return a_[static_cast<size_t>(global_set(set, chunk))].back().residual3->data;
  }
  // The elements of the stage boundary's activation for b sequences (what stage_output() and in_act hold).
  int64_t boundary_numel(int b) const;
  // Backward of a stage without the head, after its forward of the same micro-batch into `set`: dout (b, T, C) is the
  // gradient of its output; din (b, T, C) receives the gradient of its input (null on the first); both on ctx.device.
  // chunk: as forward's (every chunk but the head's: that one is loss_and_backward's).
  void backward_stage(const ExecContext& ctx, const void* dout, void* din, int b, int set = 0, int chunk = 0);
  // This rank's model chunks in order (one without virtual stages), and the rank's ends of the model.
  const std::vector<StagePlan>& chunks() const { return chunks_; }
  int num_chunks() const { return static_cast<int>(chunks_.size()); }
  bool has_embedding() const { return chunks_.front().has_embedding; }
  bool has_head() const { return chunks_.back().has_head; }
  // Per-token losses (b, T) of the last forward against targets (b, T); logits are kept.
  const float* loss(const ExecContext& ctx, const int32_t* targets, int b);
  // Fused loss + backward of the last forward: losses (b*T) are computed, then every parameter
  // gradient accumulates dloss * d(sum of losses)/d(param). Overwrites the logits with their gradient.
  // din: on the last stage of a pipeline, receives the gradient of the stage's input (b, T, C, on ctx.device).
  // set: the activation set of that forward (of the last chunk, the one with the head).
  const float* loss_and_backward(const ExecContext& ctx, const int32_t* targets, float dloss, int b,
                                 void* din = nullptr, int set = 0);

  void zero_grad(const ExecContext& ctx);

  // Called by backward when the gradients of parameter tensors [first, end) (layout indices) are final
  // for this micro-batch, layer by layer in reverse, and with an empty range (first == end) as a
  // progress point inside a layer. Data parallelism launches gradient buckets from it
  // (parallel/grad_sync.hpp); the model knows nothing of communication.
  using GradReadyHook = std::function<void(int first, int end)>;
  void set_grad_ready_hook(GradReadyHook hook) override { hook_ = std::move(hook); }
  // Called by backward right before it writes (accumulates into) the gradients of tensors [first, end), one call per
  // range of grad_write_groups() in that order: ZeRO-2 readies the buckets those gradients live in.
  void set_grad_write_hook(GradReadyHook hook) override { write_hook_ = std::move(hook); }
  // Called right before the forward or the backward reads the parameters of tensors [first, end) (a layer, the
  // embedding or the head, and wte alone where the head reads it), with [next_first, next_end) the range it reads
  // next (empty: none known): ZeRO-3 gathers the first and prefetches the second.
  using ParamReadHook = std::function<void(int first, int end, int next_first, int next_end)>;
  void set_param_read_hook(ParamReadHook hook) override { read_hook_ = std::move(hook); }
  // The tensors the kernels read: the 16-bit compute copy under bf16 / fp16, else the fp32 parameters.
  Slab& read_params() override { return act_ != DType::F32 ? compute_ : params_; }
  bool params_sharded() const { return shard_params_; }

  Slab& params() override { return params_; }
  Slab& grads() override { return grads_; }
  // The groups backward writes (grad_write_groups) and the tensors kept whole (grad_pinned), of this rank's layout.
  parallel::GradWriteOrder grad_write_order() const override {
    return {grad_write_groups(layout_), grad_pinned(layout_)};
  }
  // The slabs as allocated (num_params and optim_bytes left 0): what the memory record counts.
  MemoryPlan memory() const;
  const std::vector<ParamSpec>& layout() const { return layout_; }
  // (B, T, Vp) on the device, of the activation type; the stage with the head only (HPCT_CHECK)
  const Tensor& logits() const;

 private:
  struct LayerParams {
    Tensor *ln1w, *ln1b, *qkvw, *qkvb, *projw, *projb, *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
  };
  struct LayerActs {  // forward activations kept for backward
    Tensor *ln1, *ln1_mean, *ln1_rstd, *qkv, *atty, *att_stats, *residual2, *ln2, *ln2_mean, *ln2_rstd, *fch, *fch_gelu,
        *residual3;
  };
  LayerParams layer_params(Slab& slab, int l);
  template <typename A>
  static A* ptr(Tensor* t) {
    return t ? t->as<A>() : nullptr;
  }
  template <typename A>
  void forward_impl(const ExecContext& ctx, const int32_t* inputs, int b, const A* in_act, int set, int chunk);
  // Block l's forward from its input `residual` into `a` (the read hook is the caller's): the forward's, and full
  // recompute's right before the block's backward.
  template <typename A>
  void block_forward(const ExecContext& ctx, int l, const LayerActs& a, const A* residual, int b);
  template <typename A>
  void backward_impl(const ExecContext& ctx, int b, const A* dout, A* din, int set, int chunk);
  // Sequence parallelism: the whole (b T, C) LayerNorm output for a column-parallel GEMM (all-gathered into
  // gathered_; without SP, `ln` itself), and the input gradient of a column-parallel GEMM, dln_ (b T, C) partial, made
  // this rank's rows' complete gradient (reduce-scattered into dln_shard_; without SP, allreduced in place under TP).
  template <typename A>
  const A* whole_rows(const A* ln, int b, const char* what);
  // A row-parallel GEMM's partial output (b T, C) summed over the TP group: in place (allreduce), or this rank's rows
  // of the sum under SP (reduce-scattered into its block of `partial`); what is returned holds them.
  template <typename A>
  A* row_parallel_output(A* partial, int b, const char* what);
  template <typename A>
  const A* column_parallel_input_grad(int b, const char* what);
  // The LayerNorm weight gradients a backward computed into ln_grads_ (n floats; partial under sequence parallelism)
  // summed over the TP group and added to the gradients at `dst` (null entries skipped).
  void add_ln_grads(const ExecContext& ctx, std::initializer_list<Tensor*> dst);
  template <typename A>
  const float* vp_loss(const ExecContext& ctx, const int32_t* targets, int b, bool backward, float dloss);
  void backward(const ExecContext& ctx, int b, const void* dout, void* din, int set, int chunk);
  // the index of chunk `chunk`'s activation set `set` among all of them (a_, encoded_, last_inputs_); checks both
  int global_set(int set, int chunk) const;

  void ready(int first, int end) {
    if (hook_) hook_(first, end);
  }
  void writing(int first, int end) {
    if (write_hook_) write_hook_(first, end);
  }
  void reading(int first, int end, int next_first = 0, int next_end = 0) {
    if (read_hook_) read_hook_(first, end, next_first, next_end);
  }
  void reading_block(int l, bool backward, int chunk);  // block l's range, and the next the pass reads in the chunk
  GptConfig cfg_;
  ModelParallel mp_;
  std::vector<StagePlan> chunks_;  // this rank's model chunks (virtual stages), in order
  // local index (into p_, g_) of chunk c's first block; [v] = the number of blocks the rank holds
  std::vector<int> chunk_first_;
  parallel::TensorParallelLayers tp_;  // the TP and SP layers' collectives (parallel/tp_layers.hpp), their time
  int B_;
  GradReadyHook hook_, write_hook_;
  ParamReadHook read_hook_;
  bool shard_params_ = false;
  bool copy_kept_ = false;        // set_compute_copy_kept
  bool copy_cast_ = false;        // refresh_compute_params has cast the masters since the copy was kept
  int wte_index_ = -1;            // wte's layout index on a stage that holds it
  std::vector<int> layer_first_;  // layout index of local block i's first tensor; [L] = first of lnf (or the end)
  Device device_;
  DType act_;
  ActivationPlan kept_;
  std::vector<ParamSpec> layout_;
  Slab params_, grads_, compute_, acts_, dacts_;  // compute_: the 16-bit copy of params_ (empty in fp32)
  std::vector<LayerParams> p_, g_;  // p_: the parameters the kernels read (compute_'s under bf16 / fp16, else params_')
  // a_[set][l]: block l of its chunk's activations in activation set `set` (global_set: every chunk's, numbered back
  // to back); a tensor recomputed in backward points to its one shared copy in every set
  std::vector<std::vector<LayerActs>> a_;
  // the parameters the kernels read (compute_'s under bf16 / fp16) and their gradients; null where this pipeline stage
  // does not hold them
  Tensor *wte_ = nullptr, *wpe_ = nullptr, *lnfw_ = nullptr, *lnfb_ = nullptr, *dwte_ = nullptr, *dwpe_ = nullptr,
         *dlnfw_ = nullptr, *dlnfb_ = nullptr;
  std::vector<const int32_t*> last_inputs_;  // per set: (B, T) tokens of its forward (encoder backward)
  std::vector<Tensor*> encoded_;             // per set: the embedding output, or a later stage's input
  Tensor *lnf_ = nullptr, *lnf_mean_ = nullptr, *lnf_rstd_ = nullptr, *logits_ = nullptr, *losses_ = nullptr,
         *scratch_ = nullptr;
  Tensor *ce_max_ = nullptr,
         *ce_stats_ =
             nullptr;  // TP cross-entropy: (B,T) max; (2,B,T) sumexp, target logit  // scratch: (B,T,C) projections
  // backward scratch, reused by every layer (activation gradients are assigned, see kernels.hpp)
  Tensor *dresidual_, *dln_, *dqkv_, *datty_, *att_scratch_, *dfch_, *dfch_gelu_;
  // sequence parallelism only (null otherwise): the gathered LayerNorm output (acts), dresidual's whole rows, dln's
  // reduce-scattered rows and the LayerNorm weight gradients' partial sums (dacts)
  Tensor *gathered_ = nullptr, *dres_full_ = nullptr, *dln_shard_ = nullptr, *ln_grads_ = nullptr;
  bool sp_ = false;
};

}  // namespace hpct::gpt
