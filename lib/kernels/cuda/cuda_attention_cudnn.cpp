// CUDA backend: causal self-attention through cuDNN's fused scaled-dot-product attention (train.attention = cudnn),
// written against the cuDNN frontend's graph API (header-only; scripts/setup.sh installs it, CMake finds it). A build
// without the frontend compiles the functions below as an error that says so.
//
// One graph per (host thread, device, direction, B, T, NH, HS, storage type), built at the first call of its shape
// and kept, like the convolutions' plans (cuda_resnet.cu). q, k and v are read in place from the qkv rows
// [q (NH,HS) | k (NH,HS) | v (NH,HS)] (dims (B,NH,T,HS), strides (3CT, HS, 3C, 1)), out and dout are (B,T,C)
// (strides (CT, HS, C, 1)), and dq, dk, dv are written in place into dqkv the same way: no transposes. The scale is
// 1/sqrt(HS), the mask causal with the diagonal at the top left (query t sees keys j <= t), as the own kernels.
// The stats cuDNN keeps for backward are its softmax statistics, one float per row, (B,NH,T): the size the own
// kernels keep, so the model's plan does not change with the choice (only the backward's scratch does). Only cuDNN's
// own backward reads them: a run never pairs one implementation's forward with the other's backward.
//
// Determinism: cuDNN's forward has no reduction across blocks; the backward runs with the frontend's deterministic
// algorithm (on Hopper the dP-workspace path: dQ from the stored dP in one GEMM, no atomics), so a rerun gives the
// same bits. The plan is cuDNN's first heuristic choice (mode A) for the shape, device and cuDNN version: the same
// on every run of them. Its bits are not the own kernels' (another order of the same sums; within bf16 rounding of
// them, which check_cuda_run.py and the GPU tests hold it to).
#include "kernels/cuda/cuda_attention_cudnn.hpp"

#include <cuda_runtime.h>
#include <cudnn.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <unordered_map>

#include "core/cuda_check.hpp"
#include "core/error.hpp"
#include "core/format.hpp"
#include "core/log.hpp"
#include "kernels/cuda/cuda_cudnn.hpp"
#include "kernels/kernels.hpp"

#if defined(HPCT_HAVE_CUDNN_FRONTEND)
// The frontend's experimental Blackwell RMSNorm + SiLU engine compiles its kernels with NVRTC at run time. This file
// builds attention graphs only, which never reach it, so NVRTC's functions are weak references here: the apps load
// without libnvrtc (which a GPU machine may lack); a call would jump to a null address, which no attention graph makes.
#pragma weak nvrtcCreateProgram
#pragma weak nvrtcCompileProgram
#pragma weak nvrtcDestroyProgram
#pragma weak nvrtcGetProgramLogSize
#pragma weak nvrtcGetProgramLog
#pragma weak nvrtcGetCUBINSize
#pragma weak nvrtcGetCUBIN
#include <cudnn_frontend.h>
#endif

namespace hpct::kernels::cuda {

#if defined(HPCT_HAVE_CUDNN_FRONTEND)
namespace {
namespace fe = cudnn_frontend;

// cuDNN 9's runtime fusion engines carry the deterministic fused attention backward on Hopper; older libraries have
// no deterministic path the frontend can ask for.
constexpr int64_t kMinCudnnVersion = 90000;

enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV };

struct GraphKey {
  int device;
  bool backward;
  int B, T, NH, HS;
  DType act;
  auto operator<=>(const GraphKey&) const = default;
};

std::string describe(const GraphKey& k) {
  return fmt::format("{} B={} T={} NH={} HS={} {}", k.backward ? "backward" : "forward", k.B, k.T, k.NH, k.HS,
                     k.act == DType::BF16 ? "bf16" : "fp16");
}

// A failed frontend step: what failed, for which shape, cuDNN's words, and the way out.
void check_fe(fe::error_object e, const char* step, const GraphKey& k) {
  HPCT_CHECK(e.is_good(),
             "cuDNN fused attention ({}): {} failed: {}; this shape, GPU or cuDNN {} has no such plan: set "
             "train.attention = own (the own flash kernels)",
             describe(k), step, e.get_message(), cudnnGetVersion());
}

void check_version() {
  const int64_t v = static_cast<int64_t>(cudnnGetVersion());
  HPCT_CHECK(v >= kMinCudnnVersion,
             "train.attention = cudnn needs cuDNN >= {}.{} for the deterministic fused attention backward; this "
             "process loaded cuDNN {}: set train.attention = own, or put a newer libcudnn first in LD_LIBRARY_PATH",
             kMinCudnnVersion / 10000, kMinCudnnVersion / 100 % 100, v);
}

void check_aligned(const void* p, const char* what, const GraphKey& k) {
  HPCT_CHECK(reinterpret_cast<uintptr_t>(p) % 16 == 0,
             "cuDNN fused attention ({}): {} at {} is not 16-byte aligned (C * the storage size must be a multiple of "
             "16); set train.attention = own",
             describe(k), what, p);
}

// The graph of the op for key k, described (tensors, the SDPA node, the outputs) but not yet validated or built; for
// a device of compute capability sm_version, or (-1) the current device's, asked when the graph is built. The nodes
// take the graph's context when they are made, so the version is set first.
std::shared_ptr<fe::graph::Graph> describe_graph(const GraphKey& k, int sm_version = -1) {
  auto g = std::make_shared<fe::graph::Graph>();
  if (sm_version > 0) g->set_sm_version(sm_version);
  g->set_io_data_type(k.act == DType::BF16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  const int64_t B = k.B, T = k.T, NH = k.NH, HS = k.HS, C = NH * HS;
  const std::vector<int64_t> dims{B, NH, T, HS}, in_qkv{3 * C * T, HS, 3 * C, 1}, in_rows{C * T, HS, C, 1};
  const std::vector<int64_t> stats_dims{B, NH, T, 1}, stats_strides{NH * T, T, 1, 1};
  auto tensor = [&](const char* name, int64_t uid, const std::vector<int64_t>& strides) {
    return g->tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(dims).set_stride(strides));
  };
  auto q = tensor("q", kQ, in_qkv), kk = tensor("k", kK, in_qkv), v = tensor("v", kV, in_qkv);
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  if (!k.backward) {
    auto options = fe::graph::SDPA_attributes()
                       .set_name("attention_forward")
                       .set_generate_stats(true)
                       .set_causal_mask(true)
                       .set_attn_scale(scale);
    auto [o, stats] = g->sdpa(q, kk, v, options);
    o->set_output(true).set_uid(kO).set_dim(dims).set_stride(in_rows);
    stats->set_output(true)
        .set_uid(kStats)
        .set_data_type(fe::DataType_t::FLOAT)
        .set_dim(stats_dims)
        .set_stride(stats_strides);
  } else {
    auto o = tensor("o", kO, in_rows), dout = tensor("dout", kDO, in_rows);
    auto stats = g->tensor(fe::graph::Tensor_attributes()
                               .set_name("stats")
                               .set_uid(kStats)
                               .set_dim(stats_dims)
                               .set_stride(stats_strides)
                               .set_data_type(fe::DataType_t::FLOAT));
    auto options = fe::graph::SDPA_backward_attributes()
                       .set_name("attention_backward")
                       .set_deterministic_algorithm(true)
                       .set_causal_mask(true)
                       .set_attn_scale(scale);
    auto [dq, dk, dv] = g->sdpa_backward(q, kk, v, o, dout, stats, options);
    dq->set_output(true).set_uid(kDQ).set_dim(dims).set_stride(in_qkv);
    dk->set_output(true).set_uid(kDK).set_dim(dims).set_stride(in_qkv);
    dv->set_output(true).set_uid(kDV).set_dim(dims).set_stride(in_qkv);
  }
  return g;
}

std::shared_ptr<fe::graph::Graph> build_graph(cudnnHandle_t h, const GraphKey& k) {
  check_version();
  std::shared_ptr<fe::graph::Graph> g = describe_graph(k);
  check_fe(g->validate(), "validate", k);
  check_fe(g->build_operation_graph(h), "build_operation_graph", k);
  check_fe(g->create_execution_plans({fe::HeurMode_t::A}), "create_execution_plans", k);
  check_fe(g->check_support(h), "check_support", k);
  check_fe(g->build_plans(h), "build_plans", k);
  return g;
}

// The graph of this shape on the current device for this thread, built at its first call; `budget`: the workspace
// the caller has for it, checked (and reported, once per shape) when the graph is built.
const fe::graph::Graph& graph_for(cudnnHandle_t h, GraphKey k, int64_t budget) {
  CUDA_CHECK(cudaGetDevice(&k.device));
  thread_local std::map<GraphKey, std::shared_ptr<fe::graph::Graph>> graphs;  // never destroyed (cuda_cudnn.hpp)
  auto it = graphs.find(k);
  if (it != graphs.end()) return *it->second;
  std::shared_ptr<fe::graph::Graph> g = build_graph(h, k);
  const int64_t need = g->get_workspace_size();
  HPCT_CHECK(need <= budget,
             "cuDNN fused attention ({}): cuDNN {} asks for a workspace of {} bytes, more than the {} planned for it "
             "(kernels::cudnn_attention_scratch_bytes for the backward, the cuBLASLt workspace for the forward); set "
             "train.attention = own, and report the shape and the cuDNN version",
             describe(k), cudnnGetVersion(), need, budget);
  log_info("attention: cuDNN fused SDPA {} (cuDNN {}, frontend {}.{}.{}): workspace {} of the planned {} bytes",
           describe(k), cudnnGetVersion(), CUDNN_FRONTEND_MAJOR_VERSION, CUDNN_FRONTEND_MINOR_VERSION,
           CUDNN_FRONTEND_PATCH_VERSION, need, budget);
  return *graphs.emplace(k, std::move(g)).first->second;
}

void execute(cudnnHandle_t h, const fe::graph::Graph& g, std::unordered_map<int64_t, void*>& pack, void* workspace,
             const GraphKey& k) {
  check_fe(g.execute(h, pack, workspace), "execute", k);
}

void* mutable_ptr(const void* p) { return const_cast<void*>(p); }

GraphKey key_of(bool backward, DType act, int B, int T, int C, int NH) {
  HPCT_CHECK(act == DType::BF16 || act == DType::F16,
             "kernels::cuda: cuDNN fused attention takes bf16 or fp16 storage, not {}", dtype_name(act));
  return {0, backward, B, T, NH, C / NH, act};
}
}  // namespace

std::string cudnn_attention_validate(int sm_version, bool backward, DType act, int B, int T, int C, int NH) {
  const GraphKey k = key_of(backward, act, B, T, C, NH);
  fe::error_object e = describe_graph(k, sm_version)->validate();
  return e.is_good() ? std::string() : e.get_message();
}

void cudnn_attention_forward(const ExecContext& ctx, DType act, void* out, float* stats, const void* qkv, int B, int T,
                             int C, int NH, void* workspace, int64_t workspace_bytes) {
  const GraphKey k = key_of(false, act, B, T, C, NH);
  const size_t esize = dtype_size(act);
  const char* base = static_cast<const char*>(qkv);
  const void *q = base, *kp = base + C * esize, *v = base + 2 * C * esize;
  for (auto [p, what] : {std::pair{q, "q"}, {kp, "k"}, {v, "v"}, {static_cast<const void*>(out), "out"}})
    check_aligned(p, what, k);
  const cudnnHandle_t h = cudnn_handle(static_cast<cudaStream_t>(ctx.stream));
  const fe::graph::Graph& g = graph_for(h, k, workspace_bytes);
  std::unordered_map<int64_t, void*> pack = {
      {kQ, mutable_ptr(q)}, {kK, mutable_ptr(kp)}, {kV, mutable_ptr(v)}, {kO, out}, {kStats, stats}};
  execute(h, g, pack, workspace, k);
}

void cudnn_attention_backward(const ExecContext& ctx, DType act, void* dqkv, void* scratch, const void* dout,
                              const void* qkv, const void* out, const float* stats, int B, int T, int C, int NH) {
  const GraphKey k = key_of(true, act, B, T, C, NH);
  const size_t esize = dtype_size(act);
  const char *in = static_cast<const char*>(qkv), *din = static_cast<char*>(dqkv);
  const void *q = in, *kp = in + C * esize, *v = in + 2 * C * esize;
  const void *dq = din, *dk = din + C * esize, *dv = din + 2 * C * esize;
  for (auto [p, what] : {std::pair{q, "q"},
                         {kp, "k"},
                         {v, "v"},
                         {dq, "dq"},
                         {dk, "dk"},
                         {dv, "dv"},
                         {out, "out"},
                         {dout, "dout"},
                         {static_cast<const void*>(scratch), "scratch"}})
    check_aligned(p, what, k);
  const cudnnHandle_t h = cudnn_handle(static_cast<cudaStream_t>(ctx.stream));
  const fe::graph::Graph& g = graph_for(h, k, cudnn_attention_scratch_bytes(B, T, NH, C / NH));
  std::unordered_map<int64_t, void*> pack = {{kQ, mutable_ptr(q)},     {kK, mutable_ptr(kp)},
                                             {kV, mutable_ptr(v)},     {kO, mutable_ptr(out)},
                                             {kDO, mutable_ptr(dout)}, {kStats, mutable_ptr(stats)},
                                             {kDQ, mutable_ptr(dq)},   {kDK, mutable_ptr(dk)},
                                             {kDV, mutable_ptr(dv)}};
  execute(h, g, pack, scratch, k);
}

#else  // a CUDA build without the cuDNN frontend's headers

namespace {
// The apps refuse train.attention = cudnn at start in such a build (kernels::cudnn_attention_built); a direct call
// of the op with ExecContext::attention = Cudnn ends here.
[[noreturn]] void not_built() {
  HPCT_FAIL("kernels::cuda: cuDNN's fused attention is not in this build (no cuDNN frontend when it was configured)");
}
}  // namespace

std::string cudnn_attention_validate(int, bool, DType, int, int, int, int) { not_built(); }
void cudnn_attention_forward(const ExecContext&, DType, void*, float*, const void*, int, int, int, int, void*,
                             int64_t) {
  not_built();
}
void cudnn_attention_backward(const ExecContext&, DType, void*, void*, const void*, const void*, const void*,
                              const float*, int, int, int, int) {
  not_built();
}

#endif

}  // namespace hpct::kernels::cuda
