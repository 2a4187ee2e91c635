// Sharded GPT-2 layout (models/gpt/gpt_layout.hpp): TP hyperslabs, PP stages, sharded init, memory per rank.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "kernels/kernels.hpp"
#include "models/gpt/gpt.hpp"
#include "models/gpt/gpt_layout.hpp"
#include "models/gpt/gpt_stage.hpp"
#include "parallel/pipeline_schedule.hpp"

using namespace hpct;
using namespace hpct::gpt;

namespace {
GptConfig make(int L, int NH, int C, int T, int V, bool bias = true) {
  GptConfig c;
  c.n_layer = L;
  c.n_head = NH;
  c.n_embd = C;
  c.seq_len = T;
  c.vocab_size = V;
  c.padded_vocab = (V + 127) / 128 * 128;
  c.bias = bias;
  c.validate("test");
  return c;
}
GptConfig small(bool bias) { return make(2, 4, 32, 16, 200, bias); }  // Vp = 256
GptConfig gpt2_124m() { return make(12, 12, 768, 1024, 50257); }      // Vp = 50304

int64_t numel(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

// The UsageError message of f(), or "" when it does not throw one.
template <typename F>
std::string usage_error(F&& f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.cause();
  }
  return "";
}

const ShardSpec& find(const std::vector<ShardSpec>& layout, const std::string& name) {
  for (const auto& s : layout)
    if (s.spec.name == name) return s;
  throw std::runtime_error("no shard " + name);
}
}  // namespace

TEST(GptShardLayout, EqualsSerialLayoutAtTp1Pp1) {
  for (const GptConfig& c : {small(true), small(false), gpt2_124m()}) {
    const auto serial = parameter_layout(c);
    const auto sharded = parameter_layout(c, ModelParallel{});
    ASSERT_EQ(serial.size(), sharded.size());
    for (size_t i = 0; i < serial.size(); ++i) {
      const ShardSpec& s = sharded[i];
      EXPECT_EQ(s.spec.name, serial[i].name);
      EXPECT_EQ(s.spec.shape, serial[i].shape) << serial[i].name;
      EXPECT_EQ(s.spec.init, serial[i].init) << serial[i].name;
      EXPECT_EQ(s.spec.decay, serial[i].decay) << serial[i].name;
      EXPECT_EQ(s.global_shape, serial[i].shape) << serial[i].name;
      EXPECT_EQ(s.offset, std::vector<int64_t>(serial[i].shape.size(), 0)) << serial[i].name;
      EXPECT_FALSE(s.is_tied_copy) << serial[i].name;
      EXPECT_TRUE(is_primary_replica(s, ModelParallel{})) << serial[i].name;
    }
  }
}

TEST(GptShardLayout, TensorParallelSplitAxesAndOffsets) {
  const GptConfig c = small(true);  // L2 NH4 HS8 C32 T16 Vp256
  const ModelParallel mp{2, 1, 1, 0};
  const auto layout = parameter_layout(c, mp);
  struct Want {
    const char* name;
    std::vector<int64_t> shape, offset;
    int axis;
  };
  const std::vector<Want> want = {
      {"wte", {128, 32}, {128, 0}, 0},                          // vocab-parallel rows
      {"wpe", {16, 32}, {0, 0}, -1},                            // replicated
      {"h.0.ln1.weight", {32}, {0}, -1},                        // replicated
      {"h.0.attn.qkv.weight", {3, 2, 8, 32}, {0, 2, 0, 0}, 1},  // heads 2, 3
      {"h.0.attn.qkv.bias", {3, 2, 8}, {0, 2, 0}, 1},
      {"h.0.attn.proj.weight", {32, 16}, {0, 16}, 1},  // row-parallel: input channels of heads 2, 3
      {"h.0.attn.proj.bias", {32}, {0}, -1},           // added once after the allreduce
      {"h.1.mlp.fc.weight", {64, 32}, {64, 0}, 0},     // column-parallel
      {"h.1.mlp.fc.bias", {64}, {64}, 0},
      {"h.1.mlp.proj.weight", {32, 64}, {0, 64}, 1},  // row-parallel
      {"h.1.mlp.proj.bias", {32}, {0}, -1},
      {"lnf.bias", {32}, {0}, -1},
  };
  for (const Want& w : want) {
    const ShardSpec& s = find(layout, w.name);
    EXPECT_EQ(s.spec.shape, w.shape) << w.name;
    EXPECT_EQ(s.offset, w.offset) << w.name;
    EXPECT_EQ(s.split_axis, w.axis) << w.name;
    EXPECT_EQ(s.replicated_in_tp, w.axis < 0) << w.name;
    EXPECT_FALSE(is_primary_replica(s, mp) && w.axis < 0) << w.name << ": tp_rank 1 holds a replica";
  }
  // same serial order and the same number of tensors at every TP size
  EXPECT_EQ(layout.size(), parameter_layout(c).size());
}

TEST(GptShardLayout, StagePlanBalancedAndContiguous) {
  for (int L : {1, 2, 3, 5, 7, 12, 13}) {
    const GptConfig c = make(L, 4, 32, 16, 200);
    for (int p = 1; p <= L; ++p) {
      int next = 0, lo = L, hi = 0;
      for (int r = 0; r < p; ++r) {
        const StagePlan s = stage_plan(c, p, r);
        EXPECT_EQ(s.first_layer, next) << L << " " << p << " " << r;
        EXPECT_GE(s.num_layers(), 1);
        lo = std::min(lo, s.num_layers());
        hi = std::max(hi, s.num_layers());
        EXPECT_EQ(s.has_embedding, r == 0);
        EXPECT_EQ(s.has_head, r == p - 1);
        next = s.end_layer;
      }
      EXPECT_EQ(next, L);
      EXPECT_LE(hi - lo, 1) << L << " layers on " << p << " stages";
    }
  }
  // Extra blocks: interior stages first, then the first stage, the last stage last.
  auto counts = [](int L, int p) {
    std::vector<int> n;
    for (int r = 0; r < p; ++r) n.push_back(stage_plan(make(L, 4, 32, 16, 200), p, r).num_layers());
    return n;
  };
  EXPECT_EQ(counts(5, 4), (std::vector<int>{1, 2, 1, 1}));
  EXPECT_EQ(counts(7, 4), (std::vector<int>{2, 2, 2, 1}));
  EXPECT_EQ(counts(3, 2), (std::vector<int>{2, 1}));
  EXPECT_EQ(counts(12, 5), (std::vector<int>{2, 3, 3, 2, 2}));
}

TEST(GptShardLayout, PipelineStagesHoldTheirLayersAndTiedEmbedding) {
  const GptConfig c = make(3, 4, 32, 16, 200);  // stages of 2 and 1 blocks
  const auto serial = parameter_layout(c);
  auto names = [](const std::vector<ShardSpec>& v) {
    std::vector<std::string> n;
    for (const auto& s : v) n.push_back(s.spec.name);
    return n;
  };
  auto serial_where = [&](auto pred) {
    std::vector<std::string> n;
    for (const auto& s : serial)
      if (pred(s.name)) n.push_back(s.name);
    return n;
  };
  auto starts = [](const std::string& n, const char* p) { return n.rfind(p, 0) == 0; };
  const auto first = parameter_layout(c, ModelParallel{1, 0, 2, 0});
  const auto last = parameter_layout(c, ModelParallel{1, 0, 2, 1});
  EXPECT_EQ(names(first), serial_where([&](const std::string& n) {
              return n == "wte" || n == "wpe" || starts(n, "h.0.") || starts(n, "h.1.");
            }));
  EXPECT_EQ(names(last),
            serial_where([&](const std::string& n) { return n == "wte" || starts(n, "h.2.") || starts(n, "lnf."); }));
  EXPECT_FALSE(find(first, "wte").is_tied_copy);
  EXPECT_TRUE(find(last, "wte").is_tied_copy);
  EXPECT_FALSE(is_primary_replica(find(last, "wte"), ModelParallel{1, 0, 2, 1}));
  // a middle stage holds blocks only
  const auto mid = parameter_layout(c, ModelParallel{1, 0, 3, 1});
  EXPECT_EQ(names(mid), serial_where([&](const std::string& n) { return starts(n, "h.1."); }));
}

// Virtual stages: chunk c of rank r is virtual stage c p + r of p v equal ones; the chunks of all ranks tile the layers
// once, in virtual-stage order; the embedding is rank 0 chunk 0's, the head rank p-1 chunk v-1's.
TEST(GptShardLayout, ChunkPlansInterleaveVirtualStages) {
  const GptConfig c = make(8, 4, 32, 16, 200);
  for (auto [p, v] : {std::pair{2, 2}, std::pair{2, 4}, std::pair{4, 2}, std::pair{2, 1}, std::pair{3, 1}}) {
    std::vector<int> owner(8, -1);  // virtual stage of each layer
    for (int r = 0; r < p; ++r) {
      const std::vector<StagePlan> ch = chunk_plans(c, p, r, v);
      ASSERT_EQ(static_cast<int>(ch.size()), v);
      for (int k = 0; k < v; ++k) {
        if (v > 1) {
          EXPECT_EQ(ch[k].num_layers(), 8 / (p * v)) << p << " " << v;
        }
        EXPECT_EQ(ch[k].has_embedding, r == 0 && k == 0);
        EXPECT_EQ(ch[k].has_head, r == p - 1 && k == v - 1);
        for (int l = ch[k].first_layer; l < ch[k].end_layer; ++l) {
          EXPECT_EQ(owner[l], -1) << "layer " << l << " held twice";
          owner[l] = k * p + r;
        }
      }
    }
    for (int l = 1; l < 8; ++l) EXPECT_LE(owner[l - 1], owner[l]) << p << " " << v;  // contiguous, in order
    EXPECT_EQ(owner.front(), 0);
    EXPECT_EQ(owner.back(), p * v - 1);
  }
  // v = 1 is the plain stage plan
  EXPECT_EQ(chunk_plans(make(7, 4, 32, 16, 200), 4, 1, 1).front().num_layers(),
            stage_plan(make(7, 4, 32, 16, 200), 4, 1).num_layers());
}

// A rank's layout with chunks: wte, wpe (rank 0), its chunks' blocks in layer order, then lnf and the tied wte on the
// last rank; the ranks' blocks tile the serial ones, and the write groups list them last chunk first.
TEST(GptShardLayout, VirtualStageLayoutsHoldTheirChunks) {
  const GptConfig c = make(8, 4, 32, 16, 200);
  auto names = [](const std::vector<ShardSpec>& v) {
    std::vector<std::string> n;
    for (const auto& s : v) n.push_back(s.spec.name);
    return n;
  };
  auto blocks = [](const std::vector<std::string>& n, int l) {
    return std::count_if(n.begin(), n.end(),
                         [&](const std::string& s) { return s.rfind("h." + std::to_string(l) + ".", 0) == 0; });
  };
  const ModelParallel r0{1, 0, 2, 0, false, 2}, r1{1, 0, 2, 1, false, 2};
  const auto first = names(parameter_layout(c, r0)), last = names(parameter_layout(c, r1));
  const auto serial = names(parameter_layout(c, ModelParallel{}));
  // p 2, v 2: virtual stages of 2 blocks; rank 0 holds 0-1 and 4-5, rank 1 holds 2-3 and 6-7
  for (int l = 0; l < 8; ++l) {
    const bool on_first = l < 2 || (l >= 4 && l < 6);
    EXPECT_EQ(blocks(first, l), on_first ? blocks(serial, l) : 0) << l;
    EXPECT_EQ(blocks(last, l), on_first ? 0 : blocks(serial, l)) << l;
  }
  EXPECT_EQ(first.front(), "wte");
  EXPECT_EQ(first[1], "wpe");
  EXPECT_EQ(first[2], "h.0.ln1.weight");
  EXPECT_EQ(first.back(), "h.5.mlp.proj.bias");
  EXPECT_EQ(last.front(), "wte");
  EXPECT_EQ(last[1], "h.2.ln1.weight");
  EXPECT_EQ(last.back(), "lnf.bias");
  EXPECT_TRUE(find(parameter_layout(c, r1), "wte").is_tied_copy);
  // backward order of the last rank: lnf, blocks 7, 6, 3, 2, then the tied wte
  std::vector<ParamSpec> specs;
  for (const ShardSpec& s : parameter_layout(c, r1)) specs.push_back(s.spec);
  std::vector<std::string> order;
  for (auto [a, b] : grad_write_groups(specs)) order.push_back(specs[static_cast<size_t>(a)].name);
  EXPECT_EQ(order, (std::vector<std::string>{"lnf.weight", "h.7.ln1.weight", "h.6.ln1.weight", "h.3.ln1.weight",
                                             "h.2.ln1.weight", "wte"}));
  // the memory plan counts one chunk's blocks per activation set, for the sets of every chunk
  const MemoryPlan one = memory_plan(c, r0, 1, Device::CPU, DType::F32, {Recompute::None, {1, 1}});
  const MemoryPlan three = memory_plan(c, r0, 1, Device::CPU, DType::F32, {Recompute::None, {2, 1}});
  EXPECT_GT(three.activation_bytes, one.activation_bytes);
  EXPECT_EQ(one.param_bytes, three.param_bytes);
}

TEST(GptShardLayout, VirtualStagesValidation) {
  const GptConfig c = make(8, 4, 32, 16, 200);
  EXPECT_EQ(usage_error([&] { validate_model_parallel(c, 1, 2, "d", 2); }), "");
  EXPECT_EQ(usage_error([&] { validate_model_parallel(c, 1, 2, "d", 4); }), "");
  std::string m = usage_error([&] { validate_model_parallel(c, 1, 2, "deck v", 3); });
  EXPECT_NE(m.find("model.n_layer = 8 is not divisible by parallel.pp x parallel.virtual_stages = 2 x 3 = 6"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("choose parallel.virtual_stages among 1, 2, 4 at pp = 2"), std::string::npos) << m;
  EXPECT_NE(m.find("deck v"), std::string::npos) << m;
  m = usage_error([&] { validate_model_parallel(c, 1, 1, "d", 2); });
  EXPECT_NE(m.find("parallel.virtual_stages = 2 with parallel.pp = 1"), std::string::npos) << m;
  EXPECT_NE(usage_error([&] { parameter_layout(c, ModelParallel{1, 0, 4, 0, false, 3}); }), "");
}

TEST(GptShardLayout, ValidationNamesConstraintAndFix) {
  const GptConfig g = gpt2_124m();
  EXPECT_EQ(usage_error([&] { validate_model_parallel(g, 12, 12, "deck x"); }), "");
  std::string m = usage_error([&] { validate_model_parallel(g, 8, 1, "deck x"); });
  EXPECT_NE(m.find("model.n_head = 12 is not divisible by parallel.tp = 8"), std::string::npos) << m;
  EXPECT_NE(m.find("choose parallel.tp among 1, 2, 3, 4, 6, 12"), std::string::npos) << m;
  EXPECT_NE(m.find("deck x"), std::string::npos) << m;
  // n_head 6 allows tp 3, but Vp = 256 does not split 3 ways
  m = usage_error([&] { validate_model_parallel(make(2, 6, 48, 16, 200), 3, 1, "deck y"); });
  EXPECT_NE(m.find("padded to 256 rows"), std::string::npos) << m;
  EXPECT_NE(m.find("256 is not divisible by parallel.tp = 3"), std::string::npos) << m;
  EXPECT_NE(m.find("choose parallel.tp among 1, 2"), std::string::npos) << m;
  EXPECT_EQ(m.find("1, 2, 3"), std::string::npos) << m;  // 3 and 6 are not offered
  // V 300 -> Vp 384 = 3 * 128: tp 3 fine
  EXPECT_EQ(usage_error([&] { validate_model_parallel(make(2, 6, 48, 16, 300), 3, 1, "d"); }), "");
  m = usage_error([&] { validate_model_parallel(small(true), 1, 4, "deck z"); });
  EXPECT_NE(m.find("fewer layers (2) than pipeline stages (4)"), std::string::npos) << m;
  EXPECT_NE(m.find("parallel.pp <= model.n_layer = 2"), std::string::npos) << m;
  EXPECT_NE(usage_error([&] { validate_model_parallel(g, 0, 1, "d"); }), "");
  // parameter_layout and memory_plan validate too
  EXPECT_NE(usage_error([&] { parameter_layout(g, ModelParallel{8, 0, 1, 0}); }), "");
  EXPECT_NE(usage_error([&] { memory_plan(g, ModelParallel{1, 0, 13, 0}, 1); }), "");
}

// Every shard at every (t, p) equals the hyperslab of the serial model's init, bit for bit, and the shards
// tile each tensor: every global element is held t times (TP-replicated) or once (split), times 2 for wte
// under PP, and exactly one holder is the primary replica.
TEST(GptShardInit, EveryShardEqualsSerialHyperslab) {
  struct Case {
    GptConfig c;
    std::vector<int> tps;
  };
  // The second case has odd sizes (HS 5, C 15): qkv and row-parallel shards start at odd element indices.
  const std::vector<Case> cases = {
      {small(true), {1, 2, 4}}, {small(false), {1, 2, 4}}, {make(2, 3, 15, 16, 300), {1, 3}}};
  const uint64_t seed = 1234;
  for (const Case& k : cases) {
    const GptConfig& c = k.c;
    const ExecContext ctx;
    Gpt serial(c, 1, Device::CPU);
    serial.init_parameters(ctx, seed);
    for (int t : k.tps)
      for (int p : {1, 2}) {
        std::map<std::string, std::vector<int>> held, primary;  // per global element
        std::map<std::string, bool> repl;
        for (const auto& s : parameter_layout(c)) {
          held[s.name].assign(static_cast<size_t>(numel(s.shape)), 0);
          primary[s.name].assign(static_cast<size_t>(numel(s.shape)), 0);
        }
        for (int pr = 0; pr < p; ++pr)
          for (int tr = 0; tr < t; ++tr) {
            const ModelParallel mp{t, tr, p, pr};
            for (const ShardSpec& s : parameter_layout(c, mp)) {
              const Tensor& g = serial.params().get(s.spec.name);
              ASSERT_EQ(g.shape, s.global_shape);
              repl[s.spec.name] = s.replicated_in_tp;
              const int64_t n = numel(s.spec.shape);
              std::vector<float> local(static_cast<size_t>(n), -7.0f);
              init_shard(local.data(), s, c, seed);
              const int nd = static_cast<int>(s.spec.shape.size());
              for (int64_t i = 0; i < n; ++i) {
                // unravel the local index, shift by the offset, ravel in the global shape
                int64_t rem = i, gi = 0, gstride = 1;
                for (int d = nd - 1; d >= 0; --d) {
                  const int64_t idx = rem % s.spec.shape[d] + s.offset[d];
                  rem /= s.spec.shape[d];
                  ASSERT_LT(idx, s.global_shape[d]);
                  gi += idx * gstride;
                  gstride *= s.global_shape[d];
                }
                ASSERT_EQ(std::memcmp(&local[i], &g.f32()[gi], 4), 0)
                    << s.spec.name << " t=" << t << " p=" << p << " tp_rank=" << tr << " local " << i << " global "
                    << gi << ": " << local[i] << " vs " << g.f32()[gi];
                ++held[s.spec.name][gi];
                if (is_primary_replica(s, mp)) ++primary[s.spec.name][gi];
              }
            }
          }
        for (const auto& s : parameter_layout(c)) {
          const int want = (s.name == "wte" && p > 1 ? 2 : 1) * (repl.at(s.name) ? t : 1);
          for (size_t j = 0; j < held[s.name].size(); ++j) {
            ASSERT_EQ(held[s.name][j], want) << s.name << " element " << j << " t=" << t << " p=" << p;
            ASSERT_EQ(primary[s.name][j], 1) << s.name << " element " << j << " t=" << t << " p=" << p;
          }
        }
      }
  }
}

// A hand-made hyperslab with odd offsets and odd extents on every axis.
TEST(GptShardInit, ArbitraryOddHyperslab) {
  const GptConfig c = small(true);
  const uint64_t seed = 99;
  const ExecContext ctx;
  Gpt serial(c, 1, Device::CPU);
  serial.init_parameters(ctx, seed);
  for (const char* name : {"h.1.attn.qkv.weight", "h.1.mlp.proj.weight", "wte"}) {
    const Tensor& g = serial.params().get(name);
    ShardSpec s = find(parameter_layout(c, ModelParallel{}), name);
    const int nd = static_cast<int>(g.shape.size());
    for (int d = 0; d < nd; ++d) {
      s.offset[d] = d % 2 == 0 ? 1 : 3;
      s.spec.shape[d] = std::min<int64_t>(g.shape[d] - s.offset[d], 5 + 2 * d);
    }
    if (std::string(name) == "wte") {  // straddle the last true row (199) into the zero padding
      s.offset[0] = 195;
      s.spec.shape[0] = 9;
    }
    std::vector<float> local(static_cast<size_t>(numel(s.spec.shape)));
    init_shard(local.data(), s, c, seed);
    int zeros = 0;
    for (int64_t i = 0; i < static_cast<int64_t>(local.size()); ++i) {
      int64_t rem = i, gi = 0, gstride = 1;
      for (int d = nd - 1; d >= 0; --d) {
        gi += (rem % s.spec.shape[d] + s.offset[d]) * gstride;
        rem /= s.spec.shape[d];
        gstride *= g.shape[d];
      }
      ASSERT_EQ(std::memcmp(&local[i], &g.f32()[gi], 4), 0) << name << " local " << i;
      zeros += local[i] == 0.0f;
    }
    if (std::string(name) == "wte") EXPECT_EQ(zeros, 4 * s.spec.shape[1]);  // rows 200..203
    else
      EXPECT_EQ(zeros, 0);
  }
}

TEST(GptShardMemory, Tp1Pp1EqualsSerialPlan) {
  for (const GptConfig& c : {small(true), small(false), gpt2_124m()})
    for (int B : {1, 4}) {
      const MemoryPlan a = memory_plan(c, B), b = memory_plan(c, ModelParallel{}, B);
      EXPECT_EQ(a.num_params, b.num_params);
      EXPECT_EQ(a.num_params_no_wpe, b.num_params_no_wpe);
      EXPECT_EQ(a.param_bytes, b.param_bytes);
      EXPECT_EQ(a.grad_bytes, b.grad_bytes);
      EXPECT_EQ(a.optim_bytes, b.optim_bytes);
      EXPECT_EQ(a.activation_bytes, b.activation_bytes);
      EXPECT_EQ(a.activation_grad_bytes, b.activation_grad_bytes);
    }
}

// The attention buffers come from the backend (kernels.hpp); both run flash attention and keep a log-sum-exp
// (B,NH,T) per block and a (B,NH,T) scratch, so the plans are the same on either device, at every layout. The default
// device is the CPU, whose plan is the one of the other tests.
TEST(GptShardMemory, AttentionBuffersFollowTheDevice) {
  for (const GptConfig& c : {small(true), gpt2_124m()})
    for (int B : {1, 4}) {
      const MemoryPlan dflt = memory_plan(c, B), cpu = memory_plan(c, B, Device::CPU);
      EXPECT_EQ(dflt.activation_bytes, cpu.activation_bytes);
      EXPECT_EQ(dflt.activation_grad_bytes, cpu.activation_grad_bytes);
      EXPECT_EQ(memory_plan(c, ModelParallel{}, B).activation_bytes, cpu.activation_bytes);
#ifdef HPCT_HAVE_CUDA
      for (const ModelParallel& mp : {ModelParallel{}, ModelParallel{2, 1, 1, 0}, ModelParallel{1, 0, 2, 1}}) {
        SCOPED_TRACE("tp " + std::to_string(mp.tp) + " pp " + std::to_string(mp.pp));
        const MemoryPlan on_cpu = memory_plan(c, mp, B, Device::CPU), on_cuda = memory_plan(c, mp, B, Device::CUDA);
        EXPECT_EQ(on_cpu.activation_bytes, on_cuda.activation_bytes);
        EXPECT_EQ(on_cpu.activation_grad_bytes, on_cuda.activation_grad_bytes);
        EXPECT_EQ(on_cpu.param_bytes, on_cuda.param_bytes);
      }
      // at tp = pp = 1 the sharded plan is the serial one on either device
      const MemoryPlan serial = memory_plan(c, B, Device::CUDA);
      const MemoryPlan sharded = memory_plan(c, ModelParallel{}, B, Device::CUDA);
      EXPECT_EQ(serial.activation_bytes, sharded.activation_bytes);
      EXPECT_EQ(serial.activation_grad_bytes, sharded.activation_grad_bytes);
      EXPECT_EQ(cpu.activation_bytes, serial.activation_bytes);
#endif
    }
}

#ifdef HPCT_HAVE_CUDA
// train.attention = cudnn (CUDA, 16-bit storage): the same stats per block, and the backward's one attention scratch
// is cuDNN's bound (kernels::cudnn_attention_scratch_bytes) for this rank's heads instead of the own (B,NH,T) floats;
// nothing else moves, at TP 1 and 2, with and without pipelining. Size queries only: no GPU needed.
TEST(GptShardMemory, CudnnAttentionPlansItsBackwardScratch) {
  const GptConfig c = gpt2_124m();
  for (int B : {1, 4})
    for (const ModelParallel& mp : {ModelParallel{}, ModelParallel{2, 1, 1, 0}, ModelParallel{1, 0, 2, 1}}) {
      SCOPED_TRACE("B " + std::to_string(B) + " tp " + std::to_string(mp.tp) + " pp " + std::to_string(mp.pp));
      const std::vector<int> sets(1, 1);
      const MemoryPlan own = memory_plan(c, mp, B, Device::CUDA, DType::BF16, {Recompute::None, sets});
      const MemoryPlan cud = memory_plan(c, mp, B, Device::CUDA, DType::BF16,
                                         {Recompute::None, sets, AttentionImpl::Cudnn});
      const int NH = c.n_head / mp.tp, HS = c.n_embd / c.n_head;
      EXPECT_EQ(cud.activation_bytes, own.activation_bytes);
      EXPECT_EQ(cud.activation_grad_bytes - own.activation_grad_bytes,
                slab_aligned(static_cast<size_t>(kernels::cudnn_attention_scratch_bytes(B, c.seq_len, NH, HS))) -
                    slab_aligned(static_cast<size_t>(B) * NH * c.seq_len * 4));
      EXPECT_EQ(cud.param_bytes, own.param_bytes);
    }
}
#endif

TEST(GptShardMemory, ActivationsSplitAcrossStagesAndShrinkWithTp) {
  const GptConfig c = gpt2_124m();
  const int B = 2;
  const size_t btc = static_cast<size_t>(B) * c.seq_len * c.n_embd * 4;  // one (B,T,C) fp32 buffer
  const MemoryPlan serial = memory_plan(c, B);
  // pp = 2: the stages' activations sum to the serial ones plus stage 1's received input and stage 0's scratch
  const MemoryPlan s0 = memory_plan(c, ModelParallel{1, 0, 2, 0}, B), s1 = memory_plan(c, ModelParallel{1, 0, 2, 1}, B);
  EXPECT_EQ(s0.activation_bytes + s1.activation_bytes, serial.activation_bytes + 2 * btc);
  EXPECT_EQ(s0.activation_grad_bytes, serial.activation_grad_bytes);
  // PaLM N sums over stages to the serial one plus the tied copy of wte (less its padding rows)
  EXPECT_EQ(s0.num_params_no_wpe + s1.num_params_no_wpe,
            serial.num_params_no_wpe + static_cast<int64_t>(c.vocab_size) * c.n_embd);
  // tp = 4: per-head and MLP activations are a quarter; the residual stream is not split
  const MemoryPlan t4 = memory_plan(c, ModelParallel{4, 3, 1, 0}, B);
  const size_t att = static_cast<size_t>(B) * c.n_head * c.seq_len * 4;  // attention L (B,NH,T), as its scratch D
  const size_t per_layer_split = 3 * btc + btc + att + 2 * 4 * btc;      // qkv, atty, L, fch, fch_gelu
  const size_t logits = static_cast<size_t>(B) * c.seq_len * c.padded_vocab * 4;
  // ... and the vocabulary-parallel cross-entropy keeps its statistics: max (B,T), sum of exponentials and target logit
  // (2,B,T), fp32
  const size_t ce_stats = 3 * static_cast<size_t>(B) * c.seq_len * 4;
  EXPECT_EQ(serial.activation_bytes - t4.activation_bytes, (c.n_layer * per_layer_split + logits) * 3 / 4 - ce_stats);
  EXPECT_EQ(serial.activation_grad_bytes - t4.activation_grad_bytes, per_layer_split * 3 / 4);
}

// docs/parallelism.md: memory per rank at TP=t, PP=p is about block params / (t p) + embedding params / t on the
// first and last stages. block params = every per-layer tensor of the 12 blocks (LayerNorms and biases
// included, as if all were split t ways); embedding params = wte (Vp x C) + wpe (T x C), counted on both the
// first and the last stage and divided by t as if wpe were split too. What a rank really holds differs by
// replicated tensors (wpe, ln1/ln2/lnf, attn.proj.bias, mlp.proj.bias held whole: +(1 - 1/t) of them), by
// lnf on the last stage and by wpe missing there; the 10% slack covers it (largest at t = 12: 7.5%).
TEST(GptShardMemory, Gpt2PerRankParamsFollowTheDesignFormula) {
  const GptConfig c = gpt2_124m();
  int64_t block = 0, emb = 0, total = 0;
  std::map<std::string, int64_t> global_numel;
  for (const auto& s : parameter_layout(c)) {
    const int64_t n = numel(s.shape);
    global_numel[s.name] = n;
    total += n;
    if (s.name.rfind("h.", 0) == 0) block += n;
    if (s.name == "wte" || s.name == "wpe") emb += n;
  }
  EXPECT_EQ(block, 12 * (12LL * 768 * 768 + 13 * 768));
  EXPECT_EQ(emb, 50304LL * 768 + 1024 * 768);
  const std::vector<std::pair<int, int>> tps = {{1, 1}, {2, 1}, {4, 1}, {8, 1}, {1, 2}, {2, 2},
                                                {1, 4}, {4, 2}, {2, 4}, {3, 1}, {6, 2}, {12, 1}};
  std::printf("   t   p  max params/rank        formula   ratio\n");
  for (auto [t, p] : tps) {
    if (c.n_head % t != 0) {
      EXPECT_NE(usage_error([&] { validate_model_parallel(c, t, p, "gpt2_124m"); }).find("model.n_head = 12"),
                std::string::npos);
      EXPECT_NE(usage_error([&] { parameter_layout(c, ModelParallel{t, 0, p, 0}); }), "");
      std::printf("%4d%4d  UsageError (n_head 12 %% tp %d != 0)\n", t, p, t);
      continue;
    }
    const double formula = static_cast<double>(block) / (t * p) + static_cast<double>(emb) / t;
    int64_t max_params = 0;
    std::map<std::string, int64_t> sum_numel, primary_numel;
    std::map<std::string, bool> repl;
    for (int pr = 0; pr < p; ++pr) {
      std::map<std::string, std::vector<std::pair<int64_t, int64_t>>> stage_intervals;  // split-axis ranges
      std::map<std::string, int64_t> split_extent;
      for (int tr = 0; tr < t; ++tr) {
        const ModelParallel mp{t, tr, p, pr};
        int64_t n_rank = 0;
        for (const ShardSpec& s : parameter_layout(c, mp)) {
          const int64_t n = numel(s.spec.shape);
          n_rank += n;
          sum_numel[s.spec.name] += n;
          repl[s.spec.name] = s.replicated_in_tp;
          if (is_primary_replica(s, mp)) primary_numel[s.spec.name] += n;
          if (s.split_axis >= 0) {
            // a TP split cuts one axis; every other axis is whole
            for (size_t d = 0; d < s.global_shape.size(); ++d)
              if (static_cast<int>(d) != s.split_axis) {
                ASSERT_EQ(s.offset[d], 0) << s.spec.name;
                ASSERT_EQ(s.spec.shape[d], s.global_shape[d]) << s.spec.name;
              }
            split_extent[s.spec.name] = s.global_shape[s.split_axis];
            stage_intervals[s.spec.name].push_back(
                {s.offset[s.split_axis], s.offset[s.split_axis] + s.spec.shape[s.split_axis]});
          } else {
            ASSERT_EQ(s.spec.shape, s.global_shape) << s.spec.name;
          }
        }
        const MemoryPlan m = memory_plan(c, mp, 1);
        EXPECT_EQ(m.num_params, n_rank);
        EXPECT_GE(m.param_bytes, static_cast<size_t>(n_rank) * 4);
        EXPECT_EQ(m.optim_bytes, 2 * m.param_bytes);
        const StagePlan st = stage_plan(c, p, pr);
        const double rank_formula = static_cast<double>(block) / (t * p) +
                                    (st.has_embedding || st.has_head ? static_cast<double>(emb) / t : 0.0);
        EXPECT_LE(static_cast<double>(n_rank), 1.1 * rank_formula)
            << "t=" << t << " p=" << p << " rank " << tr << "," << pr;
        max_params = std::max(max_params, n_rank);
      }
      // the TP shards of each split tensor tile its split axis exactly, on every stage
      for (auto& [name, iv] : stage_intervals) {
        ASSERT_EQ(static_cast<int>(iv.size()), t) << name;
        std::sort(iv.begin(), iv.end());
        int64_t next = 0;
        for (auto [lo, hi] : iv) {
          EXPECT_EQ(lo, next) << name << " t=" << t;
          next = hi;
        }
        EXPECT_EQ(next, split_extent.at(name)) << name << " t=" << t;
      }
    }
    const double ratio = static_cast<double>(max_params) / formula;
    std::printf("%4d%4d  %15lld  %13.0f  %6.4f\n", t, p, static_cast<long long>(max_params), formula, ratio);
    EXPECT_LE(ratio, 1.1) << "t=" << t << " p=" << p;
    EXPECT_GE(ratio, 0.95) << "t=" << t << " p=" << p;  // sharded at all: an unsplit tensor would blow the bound
    // Each tensor: the shards hold numel x replication (t for TP-replicated, 2 for wte under PP), and the
    // primary replicas hold it exactly once (so the grad norm counts every element once).
    int64_t primary_total = 0;
    for (const auto& [name, n] : global_numel) {
      const int64_t factor = (repl.at(name) ? t : 1) * (name == "wte" && p > 1 ? 2 : 1);
      EXPECT_EQ(sum_numel[name], n * factor) << name << " t=" << t << " p=" << p;
      EXPECT_EQ(primary_numel[name], n) << name << " t=" << t << " p=" << p;
      primary_total += primary_numel[name];
    }
    EXPECT_EQ(primary_total, total);
  }
}

// GptStage's bookkeeping per chunk under the interleaved schedule: each chunk's slots are its own, no two micro-batches
// of a chunk in flight share one, and the sets a chunk keeps are its peak in flight (one for the chunk with the head).
TEST(GptStagePlan, SlotsAndSetsPerChunk) {
  const GptConfig c = make(8, 4, 32, 16, 200);
  for (int r = 0; r < 2; ++r) {
    const auto schedule = parallel::make_schedule(parallel::ScheduleKind::OneFOneB, 2, r, 4, 2);
    const auto chunks = chunk_plans(c, 2, r, 2);
    const std::vector<int> kept = GptStage::kept_sets(schedule, chunks);
    const std::vector<int> slot = GptStage::micro_slots(schedule);
    ASSERT_EQ(kept.size(), 2u);
    ASSERT_EQ(slot.size(), 8u);
    for (int k = 0; k < 2; ++k)
      EXPECT_EQ(kept[k], chunks[k].has_head ? 1 : parallel::max_in_flight(schedule, k)) << r << " " << k;
    std::vector<std::vector<int>> holder(2, std::vector<int>(8, -1));  // [chunk][slot] -> micro in it
    for (const parallel::Action& a : schedule) {
      const int s = slot[static_cast<size_t>(a.chunk * 4 + a.micro)];
      ASSERT_GE(s, 0);
      ASSERT_LT(s, parallel::max_in_flight(schedule, a.chunk));
      int& h = holder[a.chunk][s];
      if (a.op == parallel::Action::Forward) {
        EXPECT_EQ(h, -1) << "chunk " << a.chunk << " slot " << s << " taken twice";
        h = a.micro;
      } else {
        EXPECT_EQ(h, a.micro);
        h = -1;
      }
    }
  }
  // the stage buffers: the stash of the last rank sized by its head chunk's micro-batches in flight
  const auto last = parallel::make_schedule(parallel::ScheduleKind::OneFOneB, 2, 1, 4, 2);
  const ModelParallel mp{1, 0, 2, 1, false, 2};
  const size_t tokens = 4 * 2 * 16 * sizeof(int32_t);
  EXPECT_EQ(GptStage::planned_bytes(c, mp, last, 2, DType::F32),
            slab_aligned(tokens) + slab_aligned(4 * 4) +
                slab_aligned(static_cast<size_t>(parallel::max_in_flight(last, 1)) * 2 * 16 * 32 * 4));
}
