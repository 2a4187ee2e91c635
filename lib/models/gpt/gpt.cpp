#include "models/gpt/gpt.hpp"

#include <algorithm>
#include <string>
#include <tuple>
#include <utility>

#include <cmath>

#include "core/rng.hpp"
#include "core/test_fault.hpp"
#include "kernels/kernels.hpp"
#include "models/compute_copy.hpp"
#include "models/gpt/gpt_layout.hpp"

namespace hpct::gpt {

namespace k = hpct::kernels;
namespace par = hpct::parallel;

// ---- configuration ---------------------------------------------------------------------------

void GptConfig::validate(const std::string& where) const {
  HPCT_USAGE_CHECK(n_layer >= 1 && n_head >= 1 && n_embd >= 1 && seq_len >= 1 && vocab_size >= 2,
                   "{}: model sizes must be positive (n_layer={}, n_head={}, n_embd={}, seq_len={}, vocab_size={})",
                   where, n_layer, n_head, n_embd, seq_len, vocab_size);
  HPCT_USAGE_CHECK(n_embd % n_head == 0,
                   "{}: model.n_embd={} is not divisible by model.n_head={}; choose n_head dividing n_embd", where,
                   n_embd, n_head);
  HPCT_USAGE_CHECK(vocab_size <= 65536, "{}: model.vocab_size={} exceeds 65536, the limit of uint16 token shards",
                   where, vocab_size);
  HPCT_USAGE_CHECK(padded_vocab % 128 == 0 && padded_vocab >= vocab_size, "{}: internal vocabulary padding error",
                   where);
}

std::vector<ParamSpec> parameter_layout(const GptConfig& c) {
  const int64_t C = c.n_embd, NH = c.n_head, HS = c.head_size();
  std::vector<ParamSpec> out;
  out.push_back({"wte", {c.padded_vocab, C}, Init::Normal, true});  // (Vp, C), tied with the output head
  out.push_back({"wpe", {c.seq_len, C}, Init::Normal, true});       // (T, C)
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    out.push_back({h + "ln1.weight", {C}, Init::Ones, false});
    if (c.bias) out.push_back({h + "ln1.bias", {C}, Init::Zeros, false});
    out.push_back({h + "attn.qkv.weight", {3, NH, HS, C}, Init::Normal, true});  // (3, NH, HS, C) = (3C, C)
    if (c.bias) out.push_back({h + "attn.qkv.bias", {3, NH, HS}, Init::Zeros, false});
    out.push_back({h + "attn.proj.weight", {C, C}, Init::ScaledNormal, true});
    if (c.bias) out.push_back({h + "attn.proj.bias", {C}, Init::Zeros, false});
    out.push_back({h + "ln2.weight", {C}, Init::Ones, false});
    if (c.bias) out.push_back({h + "ln2.bias", {C}, Init::Zeros, false});
    out.push_back({h + "mlp.fc.weight", {4 * C, C}, Init::Normal, true});
    if (c.bias) out.push_back({h + "mlp.fc.bias", {4 * C}, Init::Zeros, false});
    out.push_back({h + "mlp.proj.weight", {C, 4 * C}, Init::ScaledNormal, true});
    if (c.bias) out.push_back({h + "mlp.proj.bias", {C}, Init::Zeros, false});
  }
  out.push_back({"lnf.weight", {C}, Init::Ones, false});
  if (c.bias) out.push_back({"lnf.bias", {C}, Init::Zeros, false});
  return out;
}

std::vector<std::pair<int, int>> grad_write_groups(const std::vector<ParamSpec>& layout) {
  const int n = static_cast<int>(layout.size());
  auto block_of = [&](int i) {  // "h.<l>.*" -> l, else -1
    const std::string& s = layout[static_cast<size_t>(i)].name;
    return s.rfind("h.", 0) == 0 ? std::stoi(s.substr(2)) : -1;
  };
  std::vector<std::pair<int, int>> groups;
  int end = n;
  while (end > 0 && layout[static_cast<size_t>(end) - 1].name.rfind("lnf.", 0) == 0) --end;
  if (end < n) groups.emplace_back(end, n);
  while (end > 0 && block_of(end - 1) >= 0) {
    int first = end - 1;
    while (first > 0 && block_of(first - 1) == block_of(end - 1)) --first;
    groups.emplace_back(first, end);
    end = first;
  }
  if (end > 0) groups.emplace_back(0, end);
  return groups;
}

std::vector<bool> grad_pinned(const std::vector<ParamSpec>& layout) {
  std::vector<bool> pinned;
  for (const ParamSpec& p : layout) pinned.push_back(p.name == "wte");
  return pinned;
}

namespace {
int64_t numel(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

}  // namespace

namespace {
// The activations of one block, in the order the layout lists them: name, width in units of the row (C, C/t, 3C/t,
// 4C/t: `cols`, or 0 for what has a backend-given size), whether it is a per-row fp32 statistic, and whether it is of
// the residual stream's rows (the LayerNorms' inputs, outputs and statistics: this rank's rows under sequence
// parallelism) rather than the TP region's (every row, this rank's heads or MLP columns).
struct BlockAct {
  const char* name;
  int64_t cols;
  bool stat;
  bool stream;
};
std::vector<BlockAct> block_acts(int64_t C, int64_t Cl) {
  return {{"ln1", C, false, true},       {"ln1_mean", 1, true, true},   {"ln1_rstd", 1, true, true},
          {"qkv", 3 * Cl, false, false}, {"atty", Cl, false, false},    {"att_stats", 0, false, false},
          {"residual2", C, false, true}, {"ln2", C, false, true},       {"ln2_mean", 1, true, true},
          {"ln2_rstd", 1, true, true},   {"fch", 4 * Cl, false, false}, {"fch_gelu", 4 * Cl, false, false},
          {"residual3", C, false, true}};
}
// Whether backward reads the block activation `name` from the set of its micro-batch (else it recomputes it into the
// one shared copy). Selective recomputes the LayerNorm outputs (from their inputs, which are kept anyway: the block's
// input and residual2) and the GELU output (from fch); full keeps only each block's output, the next block's input.
bool kept_per_set(const std::string& name, Recompute r) {
  switch (r) {
    case Recompute::None: return true;
    case Recompute::Selective: return name != "ln1" && name != "ln2" && name != "fch_gelu";
    case Recompute::Full: return name == "residual3";
  }
  return true;
}
// The shared copy's name: selective's ln1 and ln2 share one buffer (each is recomputed right before the GEMM that
// reads it), full has one block of everything.
std::string shared_name(const std::string& name, Recompute r) {
  if (r == Recompute::Full) return "block." + name;
  return "recomputed." + (name == "ln1" || name == "ln2" ? std::string("ln") : name);
}
std::string set_prefix(int set) { return set == 0 ? std::string() : "mb" + std::to_string(set) + "."; }
}  // namespace

std::vector<ActSpec> activation_layout(const GptConfig& c, int B, int t, Device device, DType act, bool head,
                                       const ActivationPlan& kept, bool sp) {
  for (int k : kept.sets) HPCT_CHECK(k >= 1, "a GPT chunk keeps at least one activation set, not {}", k);
  const int64_t T = c.seq_len, C = c.n_embd, NH = c.n_head / t, Vp = c.padded_vocab / t, Cl = C / t;
  // the rows of the residual stream and the LayerNorms this rank holds: all, or its 1/t under sequence parallelism
  const int64_t Tr = sp && t > 1 ? T / t : T;
  ExecContext ctx{device, nullptr};
  ctx.attention = kept.attention;
  // what attention keeps for backward, the backend's choice: the log-sum-exp (B,NH,T) float on the CPU and on CUDA
  // (flash attention or cuDNN's, kernels.hpp)
  const int64_t att_stats = k::attention_stats_bytes(ctx, B, static_cast<int>(T), static_cast<int>(Cl),
                                                     static_cast<int>(NH), act);
  const DType f32 = DType::F32;
  auto spec = [&](const std::string& name, const BlockAct& b) -> ActSpec {
    if (b.cols == 0) return {name, {att_stats}, DType::U8};
    if (b.stat) return {name, {B, Tr}, f32};
    return {name, {B, b.stream ? Tr : T, b.cols}, act};
  };
  const std::vector<BlockAct> block = block_acts(C, Cl);
  std::vector<ActSpec> a;
  for (int set = 0; set < kept.total_sets(); ++set) {
    const std::string m = set_prefix(set);
    a.push_back({m + "encoded", {B, Tr, C}, act});
    for (int l = 0; l < c.n_layer; ++l) {
      const std::string h = m + "h." + std::to_string(l) + ".";
      for (const BlockAct& b : block)
        if (kept_per_set(b.name, kept.recompute)) a.push_back(spec(h + b.name, b));
    }
  }
  if (c.n_layer > 0)  // the one copy of what backward recomputes
    for (const BlockAct& b : block) {
      if (kept_per_set(b.name, kept.recompute)) continue;
      const std::string n = shared_name(b.name, kept.recompute);
      const bool listed = std::any_of(a.begin(), a.end(), [&](const ActSpec& s) { return s.name == n; });
      if (!listed) a.push_back(spec(n, b));
    }
  if (Tr != T) a.push_back({"gathered", {B, T, C}, act});
  if (head) {
    a.push_back({"lnf", {B, Tr, C}, act});
    a.push_back({"lnf_mean", {B, Tr}, f32});
    a.push_back({"lnf_rstd", {B, Tr}, f32});
    a.push_back({"logits", {B, T, Vp}, act});
    a.push_back({"losses", {B, T}, f32});
  }
  a.push_back({"scratch", {B, T, C}, act});
  if (head && t > 1) {
    a.push_back({"ce_max", {B, T}, f32});
    a.push_back({"ce_stats", {2, B, T}, f32});
  }
  return a;
}
std::vector<ActSpec> activation_grad_layout(const GptConfig& c, int B, int t, Device device, DType act, bool sp,
                                            AttentionImpl attention) {
  const int64_t T = c.seq_len, C = c.n_embd, NH = c.n_head / t, Cl = C / t;
  const int64_t Tr = sp && t > 1 ? T / t : T;
  ExecContext ctx{device, nullptr};
  ctx.attention = attention;
  // attention backward's scratch, shared by every layer: D (B,NH,T) float on the CPU and on CUDA with the own kernels,
  // cuDNN's workspace with its fused attention (kernels::cudnn_attention_scratch_bytes)
  const int64_t att_scratch = k::attention_scratch_bytes(ctx, B, static_cast<int>(T), static_cast<int>(Cl),
                                                         static_cast<int>(NH), act);
  std::vector<ActSpec> g = {{"dresidual", {B, Tr, C}, act},
                            {"dln", {B, T, C}, act},
                            {"dqkv", {B, T, 3 * Cl}, act},
                            {"datty", {B, T, Cl}, act},
                            {"att_scratch", {att_scratch}, DType::U8},
                            {"dfch", {B, T, 4 * Cl}, act},
                            {"dfch_gelu", {B, T, 4 * Cl}, act}};
  if (Tr != T) {
    g.push_back({"dresidual_full", {B, T, C}, act});
    g.push_back({"dln_shard", {B, Tr, C}, act});
    g.push_back({"ln_grads", {4, C}, DType::F32});  // a block's [ln2.weight, ln2.bias, ln1.weight, ln1.bias]
  }
  return g;
}
size_t planned_bytes(const std::vector<ActSpec>& specs) {
  size_t n = 0;
  for (const ActSpec& a : specs) n += slab_aligned(static_cast<size_t>(numel(a.shape)) * dtype_size(a.dtype));
  return n;
}

MemoryPlan memory_plan(const GptConfig& c, int B, Device device, DType act, const ActivationPlan& kept) {
  MemoryPlan m;
  for (const auto& p : parameter_layout(c)) {
    const int64_t n = numel(p.shape);
    m.num_params += n;
    if (p.name != "wpe") m.num_params_no_wpe += n;
    m.param_bytes += slab_aligned(n * 4);
    if (act != DType::F32) m.compute_param_bytes += slab_aligned(static_cast<size_t>(n) * dtype_size(act));
  }
  m.num_params_no_wpe -= static_cast<int64_t>(c.padded_vocab - c.vocab_size) * c.n_embd;
  m.grad_bytes = m.param_bytes;
  m.optim_bytes = 2 * m.param_bytes;  // AdamW exp_avg and exp_avg_sq
  m.activation_bytes = planned_bytes(activation_layout(c, B, 1, device, act, true, kept));
  m.activation_grad_bytes = planned_bytes(activation_grad_layout(c, B, 1, device, act, false, kept.attention));
  return m;
}

double flops_per_token(const GptConfig& c) {
  const MemoryPlan m = memory_plan(c, 1);
  return 6.0 * static_cast<double>(m.num_params_no_wpe) + 12.0 * c.n_layer * c.n_embd * c.seq_len;
}

// ---- model -------------------------------------------------------------------------------------

const Tensor& Gpt::logits() const {
  HPCT_CHECK(logits_ != nullptr, "GPT stage {} of {} has no head: its logits do not exist", mp_.pp_rank, mp_.pp);
  return *logits_;
}

MemoryPlan Gpt::memory() const {
  MemoryPlan m;
  // sharded (ZeRO-3): the masters and the gathers are the parameter gather's
  m.param_bytes = shard_params_ ? 0 : params_.bytes();
  m.grad_bytes = grads_.bound() ? 0 : grads_.bytes();  // bound: in the gradient sync's buckets (ZeRO-2)
  m.compute_param_bytes = shard_params_ ? 0 : compute_.bytes();
  m.activation_bytes = acts_.bytes();
  m.activation_grad_bytes = dacts_.bytes();
  return m;
}

Gpt::Gpt(const GptConfig& cfg, int micro_batch, Device device, DType act)
    : Gpt(cfg, micro_batch, device, ModelParallel{}, nullptr, act) {}

namespace {
std::vector<ParamSpec> local_layout(const GptConfig& cfg, const ModelParallel& mp) {
  if (mp.tp == 1 && mp.pp == 1) return parameter_layout(cfg);
  std::vector<ParamSpec> out;
  for (const ShardSpec& s : parameter_layout(cfg, mp)) out.push_back(s.spec);
  return out;
}
}  // namespace

Gpt::Gpt(const GptConfig& cfg, int micro_batch, Device device, const ModelParallel& mp, comm::Communicator* tp_comm,
         DType act, bool allocate_grads, bool shard_params, const ActivationPlan& kept)
    : cfg_(cfg),
      mp_(mp),
      B_(micro_batch),
      shard_params_(shard_params),
      device_(device),
      act_(act),
      kept_(kept),
      layout_(local_layout(cfg, mp)),
      params_("params", device),
      grads_("grads", device),
      compute_(fmt::format("params ({} compute copy)", dtype_name(act)), device),
      acts_("activations", device),
      dacts_("activation_grads", device) {
  HPCT_CHECK(micro_batch >= 1, "micro_batch must be >= 1, is {}", micro_batch);
  HPCT_CHECK(act == DType::F32 || act == DType::BF16 || act == DType::F16,
             "GPT activations are f32, bf16 or f16, not {}", dtype_name(act));
  HPCT_CHECK(act != DType::F16 || device == Device::CUDA,
             "GPT with f16 activations on {}: fp16 storage is CUDA-only; use train.precision=fp32 or bf16 on the CPU",
             device_name(device));
  HPCT_CHECK(mp.tp == 1 || (tp_comm != nullptr && tp_comm->size() == mp.tp && tp_comm->rank() == mp.tp_rank),
             "tensor parallelism needs the TP group communicator (tp = {})", mp.tp);
  validate_model_parallel(cfg, mp.tp, mp.pp, "GPT model", mp.virtual_stages);
  chunks_ = chunk_plans(cfg, mp.pp, mp.pp_rank, mp.virtual_stages);
  HPCT_CHECK(kept.sets.size() == chunks_.size(), "GPT stage {}: activation sets planned for {} chunks, it holds {}",
             mp.pp_rank, kept.sets.size(), chunks_.size());
  std::vector<int> layers;  // the global index of each local block, chunk by chunk
  chunk_first_.push_back(0);
  for (const StagePlan& ch : chunks_) {
    HPCT_CHECK(ch.num_layers() == chunks_.front().num_layers(), "GPT stage {}: chunks of {} and {} blocks", mp.pp_rank,
               chunks_.front().num_layers(), ch.num_layers());
    for (int l = ch.first_layer; l < ch.end_layer; ++l) layers.push_back(l);
    chunk_first_.push_back(static_cast<int>(layers.size()));
  }
  const int Ls = static_cast<int>(layers.size());
  GptConfig local_cfg = cfg;  // activations of one chunk's blocks per set (indexed locally, h.0 .. h.<Lc-1>)
  local_cfg.n_layer = chunks_.front().num_layers();
  for (const auto& p : layout_) {
    params_.add(p.name, p.shape);
    grads_.add(p.name, p.shape);
    if (act != DType::F32) compute_.add(p.name, p.shape, act);
  }
  // layout index of local block i's first tensor; [Ls] = lnf's on the last stage, else the end of the layout
  for (int i = 0; i <= Ls; ++i) {
    if (i == Ls && !has_head()) {
      layer_first_.push_back(static_cast<int>(layout_.size()));
      break;
    }
    const std::string prefix = i < Ls ? "h." + std::to_string(layers[static_cast<size_t>(i)]) + "." : "lnf.";
    int k = 0;
    while (k < static_cast<int>(layout_.size()) && layout_[k].name.rfind(prefix, 0) != 0) ++k;
    HPCT_CHECK(k < static_cast<int>(layout_.size()), "no parameter starts with {}", prefix);
    layer_first_.push_back(k);
  }
  sp_ = mp.sp && mp.tp > 1;
  tp_ = par::TensorParallelLayers(tp_comm, mp.tp, mp.tp_rank, sp_);
  HPCT_CHECK(!sp_ || cfg.seq_len % mp.tp == 0, "sequence parallelism: seq_len {} is not divisible by tp {}",
             cfg.seq_len, mp.tp);
  for (const auto& a : activation_layout(local_cfg, B_, mp.tp, device, act, has_head(), kept, sp_))
    acts_.add(a.name, a.shape, a.dtype);
  for (const auto& a : activation_grad_layout(local_cfg, B_, mp.tp, device, act, sp_, kept.attention))
    dacts_.add(a.name, a.shape, a.dtype);
  for (size_t i = 0; i < layout_.size(); ++i)
    if (layout_[i].name == "wte") wte_index_ = static_cast<int>(i);
  HPCT_CHECK(!has_head() || wte_index_ >= 0, "GPT stage {}: the head's stage has no wte", mp.pp_rank);
  if (!shard_params) params_.allocate();
  if (allocate_grads) grads_.allocate();
  if (act != DType::F32 && !shard_params) compute_.allocate();
  Slab& read = act != DType::F32 ? compute_ : params_;  // what the kernels read
  acts_.allocate();
  dacts_.allocate();

  if (has_embedding() || has_head()) {
    wte_ = &read.get("wte");
    dwte_ = &grads_.get("wte");
  }
  if (has_embedding()) {
    wpe_ = &read.get("wpe");
    dwpe_ = &grads_.get("wpe");
  }
  if (has_head()) {
    lnfw_ = &read.get("lnf.weight");
    lnfb_ = cfg.bias ? &read.get("lnf.bias") : nullptr;
    dlnfw_ = &grads_.get("lnf.weight");
    dlnfb_ = cfg.bias ? &grads_.get("lnf.bias") : nullptr;
  }
  for (int l : layers) {
    p_.push_back(layer_params(read, l));
    g_.push_back(layer_params(grads_, l));
  }
  for (int set = 0; set < kept.total_sets(); ++set) {
    const std::string m = set_prefix(set);
    std::vector<LayerActs>& acts = a_.emplace_back();
    for (int l = 0; l < local_cfg.n_layer; ++l) {
      const std::string h = m + "h." + std::to_string(l) + ".";
      auto A = [&](const char* n) {
        return &acts_.get(kept_per_set(n, kept.recompute) ? h + n : shared_name(n, kept.recompute));
      };
      acts.push_back({A("ln1"), A("ln1_mean"), A("ln1_rstd"), A("qkv"), A("atty"), A("att_stats"), A("residual2"),
                      A("ln2"), A("ln2_mean"), A("ln2_rstd"), A("fch"), A("fch_gelu"), A("residual3")});
    }
    encoded_.push_back(&acts_.get(m + "encoded"));
  }
  last_inputs_.assign(static_cast<size_t>(kept.total_sets()), nullptr);
  scratch_ = &acts_.get("scratch");
  if (has_head()) {  // the head's activations exist on the stage that has it only
    lnf_ = &acts_.get("lnf");
    lnf_mean_ = &acts_.get("lnf_mean");
    lnf_rstd_ = &acts_.get("lnf_rstd");
    logits_ = &acts_.get("logits");
    losses_ = &acts_.get("losses");
    if (mp.tp > 1) {
      ce_max_ = &acts_.get("ce_max");
      ce_stats_ = &acts_.get("ce_stats");
    }
  }
  dresidual_ = &dacts_.get("dresidual");
  dln_ = &dacts_.get("dln");
  dqkv_ = &dacts_.get("dqkv");
  datty_ = &dacts_.get("datty");
  att_scratch_ = &dacts_.get("att_scratch");
  dfch_ = &dacts_.get("dfch");
  dfch_gelu_ = &dacts_.get("dfch_gelu");
  if (sp_) {
    gathered_ = &acts_.get("gathered");
    dres_full_ = &dacts_.get("dresidual_full");
    dln_shard_ = &dacts_.get("dln_shard");
    ln_grads_ = &dacts_.get("ln_grads");
  }
}

int64_t boundary_numel(const GptConfig& cfg, const ModelParallel& mp, int b) {
  return static_cast<int64_t>(b) * cfg.seq_len * cfg.n_embd / (mp.sp && mp.tp > 1 ? mp.tp : 1);
}

int64_t Gpt::boundary_numel(int b) const { return gpt::boundary_numel(cfg_, mp_, b); }

template <typename A>
const A* Gpt::whole_rows(const A* ln, int b, const char* what) {
  return tp_.column_input(ln, sp_ ? gathered_->as<A>() : nullptr, boundary_numel(b), what);
}

template <typename A>
const A* Gpt::column_parallel_input_grad(int b, const char* what) {
  return tp_.column_input_grad(dln_->as<A>(), sp_ ? dln_shard_->as<A>() : nullptr, boundary_numel(b),
                               static_cast<int64_t>(b) * cfg_.seq_len * cfg_.n_embd, what);
}

void Gpt::add_ln_grads(const ExecContext& ctx, std::initializer_list<Tensor*> dst) {
  const int64_t C = cfg_.n_embd;
  tp_.sum_sequence_parallel_grads(ln_grads_->f32(), static_cast<int64_t>(dst.size()) * C,
                                  "SP LayerNorm weight gradients");
  int i = 0;
  for (Tensor* g : dst) {
    const float* part = ln_grads_->f32() + static_cast<int64_t>(i++) * C;
    if (g) k::residual_forward(ctx, g->f32(), g->f32(), part, C);
  }
}

Gpt::LayerParams Gpt::layer_params(Slab& s, int l) {
  const std::string h = "h." + std::to_string(l) + ".";
  auto P = [&](const char* n) { return &s.get(h + n); };
  auto Pb = [&](const char* n) { return cfg_.bias ? &s.get(h + n) : nullptr; };
  return {P("ln1.weight"),       Pb("ln1.bias"),       P("attn.qkv.weight"), Pb("attn.qkv.bias"),
          P("attn.proj.weight"), Pb("attn.proj.bias"), P("ln2.weight"),      Pb("ln2.bias"),
          P("mlp.fc.weight"),    Pb("mlp.fc.bias"),    P("mlp.proj.weight"), Pb("mlp.proj.bias")};
}

void Gpt::init_parameters(const ExecContext& ctx, uint64_t seed, const ParamStore& store) {
  HPCT_CHECK(!shard_params_ || store, "GPT with sharded parameters: init_parameters needs the shards' store");
  auto put = [&](size_t index, const float* host) {  // index: the layout index of tensor params_.tensors()[index]
    if (store) {
      store(static_cast<int>(index), host);
      return;
    }
    const Tensor& t = params_.tensors()[index];
    k::copy_from_host(ctx, t.data, host, static_cast<int64_t>(t.bytes()));
    k::synchronize(ctx);  // `host` is refilled for the next tensor: the (asynchronous on CUDA) copy must be done
  };
  // Generated on the host from the counter-based RNG, then copied explicitly (works for every backend).
  const float proj_std = cfg_.init_std / std::sqrt(2.0f * static_cast<float>(cfg_.n_layer));  // GPT-2 residual scaling
  std::vector<float> host;
  if (mp_.tp > 1 || mp_.pp > 1) {  // each shard: exactly the serial values at its global positions
    const std::vector<ShardSpec> shards = parameter_layout(cfg_, mp_);  // the local layout's order
    for (size_t i = 0; i < shards.size(); ++i) {
      host.assign(static_cast<size_t>(params_.tensors()[i].numel()), 0.0f);
      init_shard(host.data(), shards[i], cfg_, seed);
      put(i, host.data());
    }
    return;
  }
  for (size_t i = 0; i < layout_.size(); ++i) {
    const ParamSpec& spec = layout_[i];
    Tensor& t = params_.get(spec.name);
    host.assign(static_cast<size_t>(t.numel()), 0.0f);
    switch (spec.init) {
      case Init::Normal:
        rng::fill_normal(host.data(), t.numel(), 0.0f, cfg_.init_std, seed, rng::stream_of(spec.name), 0);
        break;
      case Init::ScaledNormal:
        rng::fill_normal(host.data(), t.numel(), 0.0f, proj_std, seed, rng::stream_of(spec.name), 0);
        break;
      case Init::Zeros: break;
      case Init::Ones: std::fill(host.begin(), host.end(), 1.0f); break;
    }
    if (spec.name == "wte")  // padding rows never receive a gradient through the loss: keep them zero
      std::fill(host.begin() + static_cast<int64_t>(cfg_.vocab_size) * cfg_.n_embd, host.end(), 0.0f);
    put(i, host.data());
  }
}

void Gpt::refresh_compute_params(const ExecContext& ctx) {
  if (shard_params_) return;             // the gather's refresh()
  if (copy_kept_ && copy_cast_) return;  // the optimizer's steps keep the copy equal to the masters
  models::refresh_compute_copy(ctx, compute_, params_);
  copy_cast_ = copy_kept_;
}

void Gpt::reading_block(int l, bool backward, int chunk) {
  const int n = static_cast<int>(layout_.size());
  const int lo = chunk_first_[static_cast<size_t>(chunk)], hi = chunk_first_[static_cast<size_t>(chunk) + 1];
  const bool head = chunks_[static_cast<size_t>(chunk)].has_head;
  int nf = 0, ne = 0;  // the next range the pass reads (within the chunk: the next chunk runs another time)
  if (!backward && l + 1 < hi) std::tie(nf, ne) = std::make_pair(layer_first_[l + 1], layer_first_[l + 2]);
  if (!backward && l + 1 == hi && head) std::tie(nf, ne) = std::make_pair(layer_first_[l + 1], n);
  if (backward && l > lo) std::tie(nf, ne) = std::make_pair(layer_first_[l - 1], layer_first_[l]);
  reading(layer_first_[l], layer_first_[l + 1], nf, ne);
}

void Gpt::zero_grad(const ExecContext& ctx) {
  if (grads_.bound()) return;  // bound to the gradient sync's buckets, which it zeroes as they fill (ZeRO-2)
  k::fill_zero(ctx, grads_.base(), static_cast<int64_t>(grads_.bytes()));
}

// Tensor parallelism (t = mp_.tp > 1; gpt_layout.hpp states each layer's split, docs/parallelism.md the rules): the
// residual stream and the LayerNorms are replicated; QKV, fc and the tied head are column-parallel (local output
// widths 3C/t, 4C/t, Vp/t; their input enters through copy_to_tp_region: identity forward, allreduce of dX
// backward); proj and mlp.proj are row-parallel (their partial output leaves through reduce_from_tp_region:
// allreduce forward, identity backward) with their replicated bias added on tp_rank 0 only, so the sum holds it
// once; wte is vocabulary-parallel (embedding: reduce_from_tp_region of the partial rows; head: local logit
// columns, cross-entropy over them with allreduced statistics). parallel/tp_layers.hpp holds the layers' collectives
// (over the conjugate pairs of parallel/tp_collectives.hpp): whole_rows, column_parallel_input_grad, row_parallel_output
// and the calls on tp_ below are their communicating sides (the identities are named in comments). At t = 1 the calls
// are the serial ones.
int Gpt::global_set(int set, int chunk) const {
  HPCT_CHECK(chunk >= 0 && chunk < num_chunks(), "GPT stage {}: model chunk {} of {}", mp_.pp_rank, chunk,
             num_chunks());
  const int k = kept_.sets[static_cast<size_t>(chunk)];
  HPCT_CHECK(set >= 0 && set < k, "GPT activation set {} of a chunk that keeps {}", set, k);
  int g = set;
  for (int c = 0; c < chunk; ++c) g += kept_.sets[static_cast<size_t>(c)];
  return g;
}

void Gpt::forward(const ExecContext& ctx, const int32_t* inputs, int b, const void* in_act, int set, int chunk) {
  const int g = global_set(set, chunk);
  with_activation_type(act_, [&](auto type) {
    using A = typename decltype(type)::type;
    forward_impl<A>(ctx, inputs, b, static_cast<const A*>(in_act), g, chunk);
  });
}

template <typename A>
A* Gpt::row_parallel_output(A* partial, int b, const char* what) {
  // under SP reduce-scattered in place: this rank's rows end up at its block of the partial sums
  return tp_.row_output(partial, boundary_numel(b), static_cast<int64_t>(b) * cfg_.seq_len * cfg_.n_embd, what);
}

// set: the global activation set (global_set)
template <typename A>
void Gpt::forward_impl(const ExecContext& ctx, const int32_t* inputs, int b, const A* in_act, int set, int chunk) {
  HPCT_CHECK(b >= 1 && b <= B_, "forward of {} sequences on a model planned for micro_batch {}", b, B_);
  const int t = mp_.tp;
  const int T = cfg_.seq_len, C = cfg_.n_embd, Vl = cfg_.padded_vocab / t, N = b * T;
  const int Nr = sp_ ? N / t : N;  // the residual stream's rows on this rank
  const bool tp = t > 1, lead = mp_.tp_rank == 0;
  last_inputs_[static_cast<size_t>(set)] = inputs;
  A* encoded = encoded_[static_cast<size_t>(set)]->as<A>();
  const StagePlan& plan = chunks_[static_cast<size_t>(chunk)];
  const bool embedding = plan.has_embedding, head = plan.has_head;
  const int lo = chunk_first_[static_cast<size_t>(chunk)], hi = chunk_first_[static_cast<size_t>(chunk) + 1];

  if (embedding)  // wte and wpe, then block 0
    reading(0, layer_first_[0], layer_first_[0], layer_first_.size() > 1 ? layer_first_[1] : layer_first_[0]);
  if (!embedding) {  // a later (virtual) stage: its input is the previous one's residual stream
    HPCT_CHECK(in_act != nullptr, "pipeline stage {} chunk {} needs its input activation", mp_.pp_rank, chunk);
    k::copy_device(ctx, encoded, in_act, boundary_numel(b) * static_cast<int64_t>(sizeof(A)));
  } else if (tp) {  // the partial rows of this rank's vocabulary (and wpe once), summed over the group
    A* partial = sp_ ? scratch_->as<A>() : encoded;
    k::encoder_forward_vocab_parallel(ctx, partial, inputs, wte_->as<A>(), lead ? wpe_->as<A>() : nullptr,
                                      mp_.tp_rank * Vl, Vl, b, T, C);
    const A* mine = row_parallel_output(partial, b, "TP embedding");
    if (sp_) k::copy_device(ctx, encoded, mine, boundary_numel(b) * static_cast<int64_t>(sizeof(A)));
  } else {
    k::encoder_forward(ctx, encoded, inputs, wte_->as<A>(), wpe_->as<A>(), b, T, C);  // (b,T,C)
  }
  const A* residual = encoded;
  for (int l = lo; l < hi; ++l) {  // l: the rank's block index; l - lo: the chunk's (its activations in the set)
    reading_block(l, false, chunk);
    const LayerActs& a = a_[static_cast<size_t>(set)][static_cast<size_t>(l - lo)];
    block_forward<A>(ctx, l, a, residual, b);
    residual = a.residual3->as<A>();
  }
  if (!head) return;  // the chunk's output is residual3 of its last block (stage_output())
  reading(layer_first_[p_.size()], static_cast<int>(layout_.size()));  // lnf.*
  reading(wte_index_, wte_index_ + 1);                                 // the tied head
  k::layernorm_forward(ctx, lnf_->as<A>(), lnf_mean_->f32(), lnf_rstd_->f32(), residual, lnfw_->as<A>(), ptr<A>(lnfb_),
                       Nr, C);
  // column-parallel tied head: lnf enters through copy_to_tp_region (identity forward), or gathered under SP
  k::matmul_forward(ctx, logits_->as<A>(), whole_rows(lnf_->as<A>(), b, "SP head input"), wte_->as<A>(),
                    static_cast<const A*>(nullptr), N, C, Vl);  // tied head, (N, Vp/t)
}

template <typename A>
void Gpt::block_forward(const ExecContext& ctx, int l, const LayerActs& a, const A* residual, int b) {
  const int t = mp_.tp;
  const int T = cfg_.seq_len, C = cfg_.n_embd, NH = cfg_.n_head / t, N = b * T;
  const int Cl = C / t;  // this rank's channels of the attention heads; 4 Cl of the MLP
  const bool lead = mp_.tp_rank == 0;
  const int Nr = sp_ ? N / t : N;  // the residual stream's rows on this rank
  const int64_t NrC = static_cast<int64_t>(Nr) * C;
  const LayerParams& p = p_[static_cast<size_t>(l)];
  A* scratch = scratch_->as<A>();
  // attention block: residual2 = residual + proj(attn(qkv(ln1(residual))))
  k::layernorm_forward(ctx, a.ln1->as<A>(), a.ln1_mean->f32(), a.ln1_rstd->f32(), residual, p.ln1w->as<A>(),
                       ptr<A>(p.ln1b), Nr, C);
  // column-parallel QKV: ln1 enters through copy_to_tp_region (identity forward), or gathered under SP
  k::matmul_forward(ctx, a.qkv->as<A>(), whole_rows(a.ln1->as<A>(), b, "SP attention input"), p.qkvw->as<A>(),
                    ptr<A>(p.qkvb), N, C, 3 * Cl);  // (N, 3C/t)
  k::attention_forward(ctx, a.atty->as<A>(), a.att_stats->data, a.qkv->as<A>(), b, T, Cl, NH);
  k::matmul_forward(ctx, scratch, a.atty->as<A>(), p.projw->as<A>(), lead ? ptr<A>(p.projb) : nullptr, N, Cl, C);
  // row-parallel proj: summed over the group (reduce-scattered to this rank's rows under SP); the residual add and
  // the MLP block's LayerNorm in one op. MLP block: residual3 = residual2 + proj(gelu(fc(ln2(residual2))))
  k::residual_layernorm_forward(ctx, a.residual2->as<A>(), a.ln2->as<A>(), a.ln2_mean->f32(), a.ln2_rstd->f32(),
                                residual, row_parallel_output(scratch, b, "TP attention proj"), p.ln2w->as<A>(),
                                ptr<A>(p.ln2b), Nr, C);
  // column-parallel fc
  k::matmul_gelu_forward(ctx, a.fch_gelu->as<A>(), a.fch->as<A>(), whole_rows(a.ln2->as<A>(), b, "SP MLP input"),
                         p.fcw->as<A>(), ptr<A>(p.fcb), N, C, 4 * Cl);  // (N, 4C/t), and its GELU
  k::matmul_forward(ctx, scratch, a.fch_gelu->as<A>(), p.fcprojw->as<A>(), lead ? ptr<A>(p.fcprojb) : nullptr, N,
                    4 * Cl, C);
  // row-parallel mlp.proj
  k::residual_forward(ctx, a.residual3->as<A>(), a.residual2->as<A>(), row_parallel_output(scratch, b, "TP MLP proj"),
                      NrC);
}

// Vocabulary-parallel cross-entropy over this rank's logit columns: local max -> allreduce(MAX) -> local
// sum of exp and target logit -> one allreduce(SUM) of both -> losses (and dlogits in place). The reductions are
// statistics, not a conjugate pair (the backward is local): parallel::allreduce_tp_stats.
template <typename A>
const float* Gpt::vp_loss(const ExecContext& ctx, const int32_t* targets, int b, bool backward, float dloss) {
  const int N = b * cfg_.seq_len, Vl = cfg_.padded_vocab / mp_.tp, v0 = mp_.tp_rank * Vl, V = cfg_.vocab_size;
  float* mx = ce_max_->f32();
  float* sumexp = ce_stats_->f32();                                         // (N) at the start of the (2, B, T) buffer
  float* tgt = ce_stats_->f32() + static_cast<int64_t>(B_) * cfg_.seq_len;  // (N) in the second half
  A* logits = logits_->as<A>();
  k::crossentropy_vp_local_max(ctx, mx, logits, v0, Vl, V, N);
  tp_.allreduce_stats(mx, N, comm::ReduceOp::Max, "TP cross-entropy max");
  k::crossentropy_vp_local_sumexp(ctx, sumexp, tgt, logits, mx, targets, v0, Vl, V, N);
  if (N == B_ * cfg_.seq_len) {
    tp_.allreduce_stats(sumexp, 2 * static_cast<int64_t>(N), comm::ReduceOp::Sum, "TP cross-entropy sums");
  } else {
    tp_.allreduce_stats(sumexp, N, comm::ReduceOp::Sum, "TP cross-entropy sum of exp");
    tp_.allreduce_stats(tgt, N, comm::ReduceOp::Sum, "TP cross-entropy target logit");
  }
  if (backward)
    k::crossentropy_vp_loss_backward(ctx, losses_->f32(), logits, mx, sumexp, tgt, targets, dloss, v0, Vl, V, N);
  else
    k::crossentropy_vp_loss(ctx, losses_->f32(), mx, sumexp, tgt, N);
  return losses_->f32();
}

const float* Gpt::loss(const ExecContext& ctx, const int32_t* targets, int b) {
  return with_activation_type(act_, [&](auto type) {
    using A = typename decltype(type)::type;
    if (mp_.tp > 1) return vp_loss<A>(ctx, targets, b, false, 0.0f);
    k::crossentropy_forward(ctx, losses_->f32(), logits_->as<A>(), targets, b * cfg_.seq_len, cfg_.vocab_size,
                            cfg_.padded_vocab);
    return static_cast<const float*>(losses_->f32());
  });
}

const float* Gpt::loss_and_backward(const ExecContext& ctx, const int32_t* targets, float dloss, int b, void* din,
                                    int set) {
  const int chunk = num_chunks() - 1;  // the head's
  const int g = global_set(set, chunk);
  // fused softmax cross-entropy: logits now hold dlogits = dloss * (softmax - onehot), padding masked
  // Under fp16 dloss carries the loss scale (train/loop/loss_scaling.hpp), so the dlogits stored here and every activation
  // gradient below are scaled: what keeps small gradients above fp16's subnormal range. The losses stay unscaled fp32.
  const int N = b * cfg_.seq_len;
  with_activation_type(act_, [&](auto type) {
    using A = typename decltype(type)::type;
    if (mp_.tp > 1) vp_loss<A>(ctx, targets, b, true, dloss);
    else
      k::crossentropy_forward_backward(ctx, losses_->f32(), logits_->as<A>(), targets, dloss, N, cfg_.vocab_size,
                                       cfg_.padded_vocab);
  });
  backward(ctx, b, nullptr, din, g, chunk);
  return losses_->f32();
}

void Gpt::backward_stage(const ExecContext& ctx, const void* dout, void* din, int b, int set, int chunk) {
  const int g = global_set(set, chunk);  // checks the chunk too
  HPCT_CHECK(!chunks_[static_cast<size_t>(chunk)].has_head,
             "backward_stage is for chunks without the head (use loss_and_backward)");
  backward(ctx, b, dout, din, g, chunk);
}

void Gpt::backward(const ExecContext& ctx, int b, const void* dout, void* din, int set, int chunk) {
  with_activation_type(act_, [&](auto type) {
    using A = typename decltype(type)::type;
    backward_impl<A>(ctx, b, static_cast<const A*>(dout), static_cast<A*>(din), set, chunk);
  });
}

// Recompute (models/recompute.hpp) inserts forward kernels into the backward, on the inputs the forward had and with
// the same kernels, so what they produce is bitwise what the forward produced: full reruns block l's forward right
// after the read hook has made its parameters resident (between ZeRO-3's backward gather and the block's backward);
// selective recomputes the GELU output right before the GEMM that reads it, and each LayerNorm output (into one shared
// buffer) right before the GEMM whose weight gradient reads it (its statistics are recomputed identically too).
// set: the global activation set (global_set); chunk: whose blocks, in reverse
template <typename A>
void Gpt::backward_impl(const ExecContext& ctx, int b, const A* dout, A* din, int set, int chunk) {
  const int t = mp_.tp;
  const int T = cfg_.seq_len, C = cfg_.n_embd, NH = cfg_.n_head / t, Vl = cfg_.padded_vocab / t, N = b * T;
  const int L = static_cast<int>(p_.size()), Cl = C / t;
  const int Nr = sp_ ? N / t : N;  // the residual stream's rows on this rank
  const bool tp = t > 1;
  const int64_t Nr_bytes = boundary_numel(b) * static_cast<int64_t>(sizeof(A));
  const std::vector<LayerActs>& acts = a_[static_cast<size_t>(set)];
  const bool selective = kept_.recompute == Recompute::Selective, full = kept_.recompute == Recompute::Full;
  const StagePlan& plan = chunks_[static_cast<size_t>(chunk)];
  const bool embedding = plan.has_embedding, head = plan.has_head;
  const int lo = chunk_first_[static_cast<size_t>(chunk)], hi = chunk_first_[static_cast<size_t>(chunk) + 1];
  // gradient of the residual stream, (b, T, C) the same on every TP rank, or under SP this rank's rows
  A* dres = dresidual_->as<A>();
  A* dln = dln_->as<A>();
  // the whole rows of dres, the dY of a row-parallel GEMM (all-gathered under SP: reduce-scatter's backward)
  auto whole_dres = [&](const char* what) -> const A* {
    return tp_.row_output_grad<A>(dres, sp_ ? dres_full_->as<A>() : nullptr, boundary_numel(b), what);
  };
  // where a LayerNorm backward accumulates its weight gradient: the model's gradient, or under SP slot `i` of the
  // partial sums (add_ln_grads sums them over the group into the gradients)
  auto ln_grad = [&](Tensor* g, int i) -> float* {
    if (!g) return nullptr;
    return sp_ ? ln_grads_->f32() + static_cast<int64_t>(i) * C : g->f32();
  };
  auto zero_ln_grads = [&] {
    if (sp_) k::fill_zero(ctx, ln_grads_->data, static_cast<int64_t>(ln_grads_->bytes()));
  };

  if (head) {  // the last chunk: its last block is the rank's, L - 1
    // head and final LayerNorm, in reverse (under TP the head's dX is a partial sum over vocabulary columns); the head
    // writes wte's gradient too, which the gradient sync keeps whole (grad_write_groups)
    writing(layer_first_[L], static_cast<int>(layout_.size()));
    reading(layer_first_[L], static_cast<int>(layout_.size()), L > 0 ? layer_first_[L - 1] : 0,
            L > 0 ? layer_first_[L] : 0);
    reading(wte_index_, wte_index_ + 1);
    k::matmul_backward(ctx, dln, dwte_->f32(), static_cast<float*>(nullptr), logits_->as<A>(),
                       whole_rows(lnf_->as<A>(), b, "SP head input"), wte_->as<A>(), N, C, Vl);
    const A* dlnf = column_parallel_input_grad<A>(b, "TP head dX");
    k::fill_zero(ctx, dres, Nr_bytes);
    zero_ln_grads();
    const A* last_residual = acts[static_cast<size_t>(hi - lo) - 1].residual3->as<A>();
    k::layernorm_backward(ctx, dres, ln_grad(dlnfw_, 0), ln_grad(dlnfb_, 1), dlnf, last_residual, lnfw_->as<A>(),
                          lnf_mean_->f32(), lnf_rstd_->f32(), Nr, C);
    if (sp_) add_ln_grads(ctx, {dlnfw_, dlnfb_});
    ready(layer_first_[L], static_cast<int>(layout_.size()));  // lnf.*
  } else {                                                     // the next stage's gradient w.r.t. this stage's output
    HPCT_CHECK(dout != nullptr, "pipeline stage {} chunk {} needs the gradient of its output", mp_.pp_rank, chunk);
    k::copy_device(ctx, dres, dout, Nr_bytes);
  }

  for (int l = hi - 1; l >= lo; --l) {  // l: the rank's block index; l - lo: the chunk's
    const LayerParams& p = p_[l];
    const LayerParams& g = g_[l];
    const LayerActs& a = acts[static_cast<size_t>(l - lo)];
    const A* residual = l == lo ? encoded_[static_cast<size_t>(set)]->as<A>()
                                : acts[static_cast<size_t>(l - lo) - 1].residual3->as<A>();
    writing(layer_first_[l], layer_first_[l + 1]);
    reading_block(l, true, chunk);
    if (full) block_forward<A>(ctx, l, a, residual, b);
    if (selective) k::gelu_forward(ctx, a.fch_gelu->as<A>(), a.fch->as<A>(), static_cast<int64_t>(N) * 4 * Cl);
    zero_ln_grads();
    // MLP block backward (residual3 = residual2 + ...: dres flows through unchanged). Row-parallel proj:
    // reduce_from_tp_region's backward is the identity (its replicated bias gradient is computed alike on every
    // rank, from the whole rows of dres).
    k::matmul_dgelu_backward(ctx, dfch_->as<A>(), dfch_gelu_->as<A>(), g.fcprojw->f32(), ptr<float>(g.fcprojb),
                             whole_dres("SP MLP dY"), a.fch_gelu->as<A>(), a.fch->as<A>(), p.fcprojw->as<A>(), N,
                             4 * Cl, C);
    if (selective)
      k::layernorm_forward(ctx, a.ln2->as<A>(), a.ln2_mean->f32(), a.ln2_rstd->f32(), a.residual2->as<A>(),
                           p.ln2w->as<A>(), ptr<A>(p.ln2b), Nr, C);
    k::matmul_backward(ctx, dln, g.fcw->f32(), ptr<float>(g.fcb), dfch_->as<A>(),
                       whole_rows(a.ln2->as<A>(), b, "SP MLP input"), p.fcw->as<A>(), N, C, 4 * Cl);
    k::layernorm_backward(ctx, dres, ln_grad(g.ln2w, 0), ln_grad(g.ln2b, 1),
                          column_parallel_input_grad<A>(b, "TP MLP fc dX"), a.residual2->as<A>(), p.ln2w->as<A>(),
                          a.ln2_mean->f32(), a.ln2_rstd->f32(), Nr, C);
    ready(0, 0);  // progress point
    // attention block backward (residual2 = residual + ...)
    k::matmul_backward(ctx, datty_->as<A>(), g.projw->f32(), ptr<float>(g.projb), whole_dres("SP attention dY"),
                       a.atty->as<A>(), p.projw->as<A>(), N, Cl, C);
    k::attention_backward(ctx, dqkv_->as<A>(), att_scratch_->data, datty_->as<A>(), a.qkv->as<A>(), a.atty->as<A>(),
                          a.att_stats->data, b, T, Cl, NH);
    if (selective)
      k::layernorm_forward(ctx, a.ln1->as<A>(), a.ln1_mean->f32(), a.ln1_rstd->f32(), residual, p.ln1w->as<A>(),
                           ptr<A>(p.ln1b), Nr, C);
    k::matmul_backward(ctx, dln, g.qkvw->f32(), ptr<float>(g.qkvb), dqkv_->as<A>(),
                       whole_rows(a.ln1->as<A>(), b, "SP attention input"), p.qkvw->as<A>(), N, C, 3 * Cl);
    if (mp_.tp > 1 && fault_active(FaultKind::TpGradScale, mp_.tp_rank))  // test hook (core/test_fault.hpp)
      k::scale(ctx, g.qkvw->f32(), 1.0f + 1e-3f, g.qkvw->numel());
    k::layernorm_backward(ctx, dres, ln_grad(g.ln1w, 2), ln_grad(g.ln1b, 3),
                          column_parallel_input_grad<A>(b, "TP attention qkv dX"), residual, p.ln1w->as<A>(),
                          a.ln1_mean->f32(), a.ln1_rstd->f32(), Nr, C);
    if (sp_) add_ln_grads(ctx, {g.ln2w, g.ln2b, g.ln1w, g.ln1b});
    ready(layer_first_[l], layer_first_[l + 1]);  // h.<l>.*
  }
  if (!embedding) {  // hand the gradient of the chunk's input to the previous (virtual) stage
    HPCT_CHECK(din != nullptr, "pipeline stage {} chunk {} needs a buffer for the gradient of its input", mp_.pp_rank,
               chunk);
    k::copy_device(ctx, din, dres, Nr_bytes);
    return;
  }
  writing(0, layer_first_[0]);
  if (tp)  // the embedding's output was reduced over the group: its rows' gradients are whole on every rank
    k::encoder_backward_vocab_parallel(ctx, dwte_->f32(), dwpe_->f32(), whole_dres("SP embedding dY"),
                                       last_inputs_[static_cast<size_t>(set)], mp_.tp_rank * Vl, Vl, b, T, C);
  else
    k::encoder_backward(ctx, dwte_->f32(), dwpe_->f32(), static_cast<const A*>(dres),
                        last_inputs_[static_cast<size_t>(set)], b, T, C);
  ready(0, layer_first_[0]);  // wte (head and encoder), wpe
}

}  // namespace hpct::gpt
