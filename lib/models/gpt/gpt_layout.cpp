#include "models/gpt/gpt_layout.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "kernels/kernels.hpp"

namespace hpct::gpt {

namespace {
int64_t numel(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

// The values of parallel.tp that satisfy every TP constraint, for the error messages.
std::string valid_tps(const GptConfig& c) {
  std::string s;
  for (int d = 1; d <= c.n_head; ++d)
    if (c.n_head % d == 0 && c.padded_vocab % d == 0 && (4 * c.n_embd) % d == 0)
      s += (s.empty() ? "" : ", ") + std::to_string(d);
  return s;
}

// The TP split axis of a parameter, by its name (the rules of gpt_layout.hpp, stated once here).
int tp_split_axis(const std::string& name) {
  auto ends_with = [&](const char* suffix) {
    const std::string s(suffix);
    return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
  };
  if (name == "wte") return 0;                                               // (Vp, C) vocab-parallel
  if (ends_with("attn.qkv.weight") || ends_with("attn.qkv.bias")) return 1;  // (3, NH, HS[, C]) heads
  if (ends_with("attn.proj.weight")) return 1;                               // (C, C) row-parallel
  if (ends_with("mlp.fc.weight") || ends_with("mlp.fc.bias")) return 0;      // (4C[, C]) column-parallel
  if (ends_with("mlp.proj.weight")) return 1;                                // (C, 4C) row-parallel
  return -1;  // wpe, LayerNorms, attn.proj.bias, mlp.proj.bias: replicated
}

// Layer index of "h.<l>.*", -1 for the others (wte, wpe, lnf.*).
int layer_of(const std::string& name) {
  if (name.rfind("h.", 0) != 0) return -1;
  return std::stoi(name.substr(2, name.find('.', 2) - 2));
}

// Calls fn(local_flat, global_flat, len) for each contiguous run of the hyperslab [offset, offset+local)
// of a row-major tensor of shape global. Trailing axes the slab spans whole merge into one run.
template <typename Fn>
void for_each_run(const std::vector<int64_t>& global, const std::vector<int64_t>& offset,
                  const std::vector<int64_t>& local, Fn&& fn) {
  const int nd = static_cast<int>(global.size());
  HPCT_CHECK(nd >= 1 && offset.size() == global.size() && local.size() == global.size(), "bad hyperslab rank {}", nd);
  if (numel(local) == 0) return;
  // Run = the innermost axes k.. where every axis > k is whole (offset 0 follows from local == global
  // inside the bounds init_shard checks); the run length is local[k] * prod(global[>k]).
  int k = nd - 1;
  int64_t inner = 1;  // prod(global[>k])
  while (k > 0 && local[k] == global[k] && offset[k] == 0) {
    inner *= global[k];
    --k;
  }
  const int64_t run = local[k] * inner;
  std::vector<int64_t> stride(nd, 1);  // global strides
  for (int d = nd - 2; d >= 0; --d) stride[d] = stride[d + 1] * global[d + 1];
  std::vector<int64_t> idx(k, 0);  // multi-index over the outer axes [0, k)
  const int64_t outer = numel(std::vector<int64_t>(local.begin(), local.begin() + k));
  for (int64_t o = 0; o < outer; ++o) {
    int64_t g = offset[k] * stride[k];
    for (int d = 0; d < k; ++d) g += (offset[d] + idx[d]) * stride[d];
    fn(o * run, g, run);
    for (int d = k - 1; d >= 0; --d) {  // odometer
      if (++idx[d] < local[d]) break;
      idx[d] = 0;
    }
  }
}
}  // namespace

void validate_model_parallel(const GptConfig& c, int tp, int pp, const std::string& where, int v) {
  HPCT_USAGE_CHECK(tp >= 1 && pp >= 1, "{}: parallel.tp = {} and parallel.pp = {} must be >= 1", where, tp, pp);
  HPCT_USAGE_CHECK(c.n_head % tp == 0,
                   "{}: model.n_head = {} is not divisible by parallel.tp = {} (each TP rank holds whole attention "
                   "heads): choose parallel.tp among {}",
                   where, c.n_head, tp, valid_tps(c));
  HPCT_USAGE_CHECK(c.padded_vocab % tp == 0,
                   "{}: the vocabulary (model.vocab_size = {}) is padded to {} rows, a multiple of 128 independent "
                   "of TP, and {} is not divisible by parallel.tp = {} (the embedding is split by vocabulary rows): "
                   "choose parallel.tp among {}",
                   where, c.vocab_size, c.padded_vocab, c.padded_vocab, tp, valid_tps(c));
  HPCT_USAGE_CHECK((4 * c.n_embd) % tp == 0,
                   "{}: the MLP width 4 * model.n_embd = {} is not divisible by parallel.tp = {}: choose "
                   "parallel.tp among {}",
                   where, 4 * c.n_embd, tp, valid_tps(c));
  HPCT_USAGE_CHECK(c.n_layer >= pp,
                   "{}: fewer layers ({}) than pipeline stages ({}): every stage needs at least one transformer "
                   "block; choose parallel.pp <= model.n_layer = {} (or more layers)",
                   where, c.n_layer, pp, c.n_layer);
  HPCT_USAGE_CHECK(v >= 1 && (v == 1 || pp > 1),
                   "{}: parallel.virtual_stages = {} with parallel.pp = {}: virtual stages interleave the chunks of a "
                   "pipeline of several ranks; set parallel.virtual_stages = 1, or parallel.pp > 1",
                   where, v, pp);
  if (v > 1) {
    std::string fits;  // the virtual_stages that divide the layers at this pp
    for (int d = 2; d * pp <= c.n_layer; ++d)
      if (c.n_layer % (pp * d) == 0) fits += (fits.empty() ? "" : ", ") + std::to_string(d);
    HPCT_USAGE_CHECK(c.n_layer % (pp * v) == 0,
                     "{}: model.n_layer = {} is not divisible by parallel.pp x parallel.virtual_stages = {} x {} = {} "
                     "(every model chunk holds as many blocks): choose parallel.virtual_stages among 1{}{} at pp = {}, "
                     "or n_layer a multiple of {}",
                     where, c.n_layer, pp, v, pp * v, fits.empty() ? "" : ", ", fits, pp, pp * v);
  }
}

StagePlan stage_plan(const GptConfig& c, int pp, int pp_rank) {
  HPCT_CHECK(pp >= 1 && pp_rank >= 0 && pp_rank < pp, "pp_rank {} outside [0, {})", pp_rank, pp);
  HPCT_CHECK(c.n_layer >= pp, "{} layers cannot fill {} pipeline stages (validate_model_parallel first)", c.n_layer,
             pp);
  // Preference order for the L % p extra blocks: interior stages, then the first, then the last (header).
  std::vector<int> order;
  for (int s = 1; s < pp - 1; ++s) order.push_back(s);
  order.push_back(0);
  if (pp > 1) order.push_back(pp - 1);
  std::vector<int> count(pp, c.n_layer / pp);
  for (int i = 0; i < c.n_layer % pp; ++i) ++count[order[i]];
  StagePlan s;
  for (int r = 0; r < pp_rank; ++r) s.first_layer += count[r];
  s.end_layer = s.first_layer + count[pp_rank];
  s.has_embedding = pp_rank == 0;
  s.has_head = pp_rank == pp - 1;
  return s;
}

std::vector<StagePlan> chunk_plans(const GptConfig& c, int pp, int pp_rank, int v) {
  HPCT_CHECK(v >= 1, "{} virtual stages per rank", v);
  if (v == 1) return {stage_plan(c, pp, pp_rank)};
  std::vector<StagePlan> chunks;
  for (int k = 0; k < v; ++k) chunks.push_back(stage_plan(c, pp * v, k * pp + pp_rank));
  return chunks;
}

std::vector<ShardSpec> parameter_layout(const GptConfig& c, const ModelParallel& mp) {
  validate_model_parallel(c, mp.tp, mp.pp, "parameter_layout", mp.virtual_stages);
  HPCT_CHECK(mp.tp_rank >= 0 && mp.tp_rank < mp.tp, "tp_rank {} outside [0, {})", mp.tp_rank, mp.tp);
  const std::vector<StagePlan> chunks = chunk_plans(c, mp.pp, mp.pp_rank, mp.virtual_stages);
  StagePlan st;  // the rank's ends of the model (its chunks' layers are checked one by one)
  st.has_embedding = chunks.front().has_embedding;
  st.has_head = chunks.back().has_head;
  auto in_chunk = [&](int l) {
    return std::any_of(chunks.begin(), chunks.end(),
                       [&](const StagePlan& ch) { return l >= ch.first_layer && l < ch.end_layer; });
  };
  std::vector<ShardSpec> out;
  for (const ParamSpec& p : parameter_layout(c)) {
    const int l = layer_of(p.name);
    const bool held = l >= 0            ? in_chunk(l)
                      : p.name == "wte" ? (st.has_embedding || st.has_head)
                      : p.name == "wpe" ? st.has_embedding
                                        : st.has_head;  // lnf.*
    if (!held) continue;
    ShardSpec s;
    s.spec = p;
    s.global_shape = p.shape;
    s.offset.assign(p.shape.size(), 0);
    s.split_axis = tp_split_axis(p.name);
    s.replicated_in_tp = s.split_axis < 0;
    s.is_tied_copy = p.name == "wte" && !st.has_embedding;
    if (s.split_axis >= 0) {
      const int a = s.split_axis;
      HPCT_CHECK(p.shape[a] % mp.tp == 0, "{} axis {} of size {} does not split {} ways", p.name, a, p.shape[a], mp.tp);
      s.spec.shape[a] = p.shape[a] / mp.tp;
      s.offset[a] = s.spec.shape[a] * mp.tp_rank;
    }
    out.push_back(std::move(s));
  }
  return out;
}

bool is_primary_replica(const ShardSpec& s, const ModelParallel& mp) {
  return !s.is_tied_copy && (!s.replicated_in_tp || mp.tp_rank == 0);
}

void init_shard(float* out, const ShardSpec& s, const GptConfig& c, uint64_t seed) {
  const ParamSpec& p = s.spec;
  const int64_t n = numel(p.shape);
  HPCT_CHECK(p.shape.size() == s.global_shape.size() && s.offset.size() == s.global_shape.size(),
             "{}: local shape, offset and global shape differ in rank", p.name);
  for (size_t d = 0; d < p.shape.size(); ++d)
    HPCT_CHECK(s.offset[d] >= 0 && p.shape[d] >= 0 && s.offset[d] + p.shape[d] <= s.global_shape[d],
               "{}: axis {}: [{}, {}) is outside the global extent {}", p.name, d, s.offset[d],
               s.offset[d] + p.shape[d], s.global_shape[d]);
  // The serial model's std for residual projections, computed the same way (float) as Gpt::init_parameters.
  const float proj_std = c.init_std / std::sqrt(2.0f * static_cast<float>(c.n_layer));
  const uint64_t stream = rng::stream_of(p.name);
  switch (p.init) {
    case Init::Normal:
    case Init::ScaledNormal: {
      const float stddev = p.init == Init::Normal ? c.init_std : proj_std;
      // Philox draws one normal per counter (no Box-Muller pairing across elements), so any run of the
      // global tensor, odd start included, reproduces the serial values.
      for_each_run(s.global_shape, s.offset, p.shape, [&](int64_t lo, int64_t g, int64_t len) {
        rng::fill_normal(out + lo, len, 0.0f, stddev, seed, stream, static_cast<uint64_t>(g));
      });
      break;
    }
    case Init::Zeros: std::fill(out, out + n, 0.0f); break;
    case Init::Ones: std::fill(out, out + n, 1.0f); break;
  }
  if (p.name == "wte") {  // padding rows (global row >= V) stay zero, as in the serial model
    const int64_t C = p.shape[1], rows = p.shape[0], row0 = s.offset[0];
    for (int64_t r = std::max<int64_t>(0, c.vocab_size - row0); r < rows; ++r)
      std::fill(out + r * C, out + (r + 1) * C, 0.0f);
  }
}

MemoryPlan memory_plan(const GptConfig& c, const ModelParallel& mp, int B, Device device, DType act,
                       const ActivationPlan& kept) {
  HPCT_CHECK(B >= 1, "micro_batch must be >= 1, is {}", B);
  const std::vector<ShardSpec> layout = parameter_layout(c, mp);  // validates mp
  const std::vector<StagePlan> chunks = chunk_plans(c, mp.pp, mp.pp_rank, mp.virtual_stages);
  MemoryPlan m;
  for (const ShardSpec& s : layout) {
    const int64_t n = numel(s.spec.shape);
    m.num_params += n;
    if (s.spec.name == "wpe") continue;
    m.num_params_no_wpe += n;
    if (s.spec.name == "wte") {  // minus this shard's padding rows
      const int64_t rows = s.spec.shape[0], row0 = s.offset[0];
      const int64_t pad = rows - std::clamp<int64_t>(c.vocab_size - row0, 0, rows);
      m.num_params_no_wpe -= pad * c.n_embd;
    }
  }
  for (const ShardSpec& s : layout) {
    m.param_bytes += slab_aligned(static_cast<size_t>(numel(s.spec.shape)) * 4);
    if (act != DType::F32)
      m.compute_param_bytes += slab_aligned(static_cast<size_t>(numel(s.spec.shape)) * dtype_size(act));
  }
  m.grad_bytes = m.param_bytes;
  m.optim_bytes = 2 * m.param_bytes;  // AdamW exp_avg and exp_avg_sq

  // Activations: the model's own layout (gpt.hpp) for one chunk's blocks per set and the head
  GptConfig local = c;
  local.n_layer = chunks.front().num_layers();  // every chunk's (validate_model_parallel)
  HPCT_CHECK(kept.sets.size() == chunks.size(), "activation sets planned for {} chunks, stage {} holds {}",
             kept.sets.size(), mp.pp_rank, chunks.size());
  m.activation_bytes = planned_bytes(
      activation_layout(local, B, mp.tp, device, act, chunks.back().has_head, kept, mp.sp));
  m.activation_grad_bytes = planned_bytes(activation_grad_layout(local, B, mp.tp, device, act, mp.sp, kept.attention));
  return m;
}

}  // namespace hpct::gpt
