// kernel_screen: a static per-kernel report of one GPT-2 124M bf16 training step on an H100, computed on the host
// without a GPU. For every own kernel the step launches (forward, cross-entropy, backward, gradient norm, AdamW, the
// bf16 compute copy) it gives the launch geometry, taken from the very host functions the .cu files launch with (the
// *_kernels.cuh headers, compiled here as plain C++ against cuda_emu.hpp as the emulated tests compile them), ptxas'
// registers and static shared memory of the CUDA build, the blocks an SM can hold, the waves over 132 SMs, the bytes
// moved, a roofline estimate of the time, and flags for launches that leave SMs idle. The cuBLASLt GEMMs are not own
// kernels: their count and FLOPs are context. docs/cuda.md, "The per-kernel screen"; the report of the current code:
// validation/results/kernel_screen_gpt2_124m_bf16.md.
//
//   kernel_screen [--micro-batch B] [--accum M] [--eval-batches E] [--resources FILE] [--ptxas-log FILE]...
//                 [--markdown FILE] [--json FILE] [--check]
//
// --micro-batch B (default 16: the H100 profile's; the benchmark ran 32), --accum M micro-batches per optimizer step
// (default 1: validation/bench_gpu.py's), --eval-batches E evaluation micro-batches after the step (default 0; the H100
// profile of validation/results/gpu_nvidia_h100_80gb_hbm3_2026-11-26.md had 4). Registers and static shared memory:
// --ptxas-log takes the CUDA build's per-object ptxas logs (build/lib/kernels/CMakeFiles/hpct_kernels_cuda.dir/cuda/
// *.cu.o.ptxas.log: per template instantiation, matched by the demangled name), --resources the table gathered from
// them (build/lib/kernels/kernel_resources.txt: per kernel name, the largest over its instantiations); a kernel found in
// neither is marked "?" and its residency counts threads and shared memory only. --check (the ctest) also verifies that
// the screen reproduces what the H100 profile measured: its launch counts at B 16 with 4 evaluation micro-batches, and
// the narrow reductions it found flagged narrow.
//
// What is model and what is read from the code:
//   - shapes: the headers' host functions (layernorm_rows_shape, flash_tc::forward_shape, row_shape, ...), called with
//     the arguments the .cu op passes; the op's choice among instantiations (pack widths, the tensor-core attention)
//     is the .cu's logic, restated below next to each launch with the .cu function it mirrors;
//   - launch counts: the model's code paths (lib/models/gpt/gpt.cpp, gpt_stage.cpp, lib/optim, lib/models/
//     compute_copy.cpp), stated where each launch is added: read from the code, not observed, so a change in what the
//     model or the optimizer calls needs its twin here (--check pins the counts the H100 profile measured);
//   - bytes: each tensor a kernel reads or writes counted once (DRAM traffic if every re-read hits L1/L2), from the
//     shapes and dtypes (bf16 activations, fp32 master weights, gradients and AdamW moments, fp32 statistics);
//   - time: max(bytes / 3.35 TB/s, FLOPs / 989.5 TFLOP/s) per launch (the H100 SXM's HBM3 and dense bf16 peaks), the
//     ideal of a kernel that keeps the whole device busy; "at width" divides it by the fraction of the 132 SMs a
//     launch's blocks can occupy (bandwidth taken to scale with the busy SMs), the cost of a narrow grid;
//   - residency per SM: the CUDA occupancy calculator's rules for sm_90 (cuda_occupancy.h): registers allocated per
//     warp in units of 256 across 4 sub-partitions of 16K, shared memory in units of 128 bytes plus 1 KiB reserved per
//     block out of 228 KiB, at most 64 warps and 32 blocks.
#include "cuda_emu.hpp"  // first: the CUDA surface the kernel headers compile against
#include "kernels/cuda/cuda_core_kernels.cuh"
#include "kernels/cuda/cuda_flash_attention.cuh"
#include "kernels/cuda/cuda_flash_attention_tc.cuh"
#include "kernels/cuda/cuda_gpt_kernels.cuh"
#include "kernels/kernels.hpp"  // kCudaReducePartialsBytes: the partials buffer the column reductions are cut for
//
#include <cxxabi.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/device_peaks.hpp"

namespace {

namespace cu = hpct::kernels::cuda;
using cu::LaunchShape;
using hpct::kernels::kCudaReducePartialsBytes;
using S = __nv_bfloat16;                     // the kernels' storage type of bf16 activations
constexpr const char* kS = "__nv_bfloat16";  // ... as ptxas' demangled names spell it

// ---- the device ------------------------------------------------------------------------------------------------------
// H100 SXM5 (80 GB HBM3), compute capability 9.0. Per-block limits: launch_shape.hpp's kH100Limits; per SM: the CUDA
// occupancy calculator's sm_90 values (cuda_occupancy.h); peaks: the dense bf16 TFLOP/s of lib/core/device_peaks.hpp
// (set in main) and the datasheet's 3.35 TB/s of HBM3.
constexpr const char* kDeviceName = "NVIDIA H100 80GB HBM3";  // as the driver names it (the profile's device)
struct SmLimits {
  int sms = 132;
  int64_t registers = 64 * 1024;  // per SM, in 4 sub-partitions
  int sub_partitions = 4;
  int register_unit = 256;         // registers are allocated per warp in units of 256
  int64_t shared = 228 * 1024;     // per SM (the largest carveout)
  int64_t shared_reserved = 1024;  // per block, by the system (sm_80 on)
  int shared_unit = 128;
  int max_warps = 64;  // 2048 threads
  int max_blocks = 32;
  double hbm_bytes_per_s = 3.35e12;
  double bf16_flops_per_s = 0;  // device_peaks.hpp's
};
SmLimits kH100;

struct Residency {
  int blocks = 0;     // resident blocks per SM
  std::string limit;  // what limits it: warps, blocks, registers, shared
};

// Blocks of this launch one SM holds at once (cudaOccupancyMaxActiveBlocksPerMultiprocessor's rules for sm_90).
// registers = 0: unknown (not limiting).
Residency resident_blocks(const LaunchShape& s, int registers, int64_t static_shared, const SmLimits& d = kH100) {
  const int64_t threads = s.block.count();
  const int warps = static_cast<int>((threads + 31) / 32);
  std::vector<std::pair<int, std::string>> limits;
  limits.push_back({d.max_warps / warps, "warps"});
  limits.push_back({d.max_blocks, "blocks"});
  if (registers > 0) {
    const int per_warp = (registers * 32 + d.register_unit - 1) / d.register_unit * d.register_unit;
    const int warps_per_partition = static_cast<int>(d.registers / d.sub_partitions / per_warp);
    limits.push_back({warps_per_partition * d.sub_partitions / warps, "registers"});
  }
  const int64_t shared = static_shared + s.shared_bytes + d.shared_reserved;
  const int64_t allocated = (shared + d.shared_unit - 1) / d.shared_unit * d.shared_unit;
  limits.push_back({static_cast<int>(d.shared / allocated), "shared"});
  Residency r{limits[0].first, limits[0].second};
  for (const auto& [n, why] : limits)
    if (n < r.blocks) r = {n, why};
  return r;
}

// ---- ptxas' resources ------------------------------------------------------------------------------------------------
struct Resources {
  int registers = 0;
  int64_t static_shared = 0;
};

// "void hpct::kernels::cuda::(anonymous namespace)::layernorm_forward_kernel<__nv_bfloat16, 8>(__nv_bfloat16*, ...)"
// -> "layernorm_forward_kernel<__nv_bfloat16, 8>": no return type, namespaces or parameters.
std::string instance_of(const std::string& demangled) {
  std::string s = demangled;
  int depth = 0;
  for (size_t i = 0; i < s.size(); ++i) {  // the parameter list: the first '(' outside template brackets
    if (s[i] == '<') depth++;
    else if (s[i] == '>')
      depth--;
    else if (s[i] == '(' && depth == 0 && s.compare(i, 10, "(anonymous") != 0) {
      s.resize(i);
      break;
    }
  }
  size_t cut = 0;  // after the last "::" or ' ' outside template brackets (namespaces, a return type)
  depth = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '<') depth++;
    else if (s[i] == '>')
      depth--;
    else if (depth == 0 && s[i] == ' ')
      cut = i + 1;
    else if (depth == 0 && s.compare(i, 2, "::") == 0)
      cut = i + 2;
  }
  return s.substr(cut);
}
std::string base_of(const std::string& instance) { return instance.substr(0, instance.find('<')); }

struct ResourceTables {
  std::map<std::string, Resources> by_instance;  // from ptxas logs
  std::map<std::string, Resources> by_name;      // from kernel_resources.txt: the largest over the instantiations
  std::vector<std::string> sources;

  // The newest architecture's entries of ptxas -v logs: "Compiling entry function '<mangled>' for 'sm_NN'" followed by
  // "Used R registers, ... S bytes smem" (cmake/ptxas_resources.py reads the same lines).
  void read_ptxas_logs(const std::vector<std::string>& paths) {
    struct Entry {
      std::string mangled;
      int arch;
      Resources res;
    };
    std::vector<Entry> entries;
    // the integer that follows `key` in `line` (after spaces), or -1
    auto number_after = [](const std::string& line, const std::string& key, bool before = false) -> long long {
      const size_t at = line.find(key);
      if (at == std::string::npos) return -1;
      if (before) {  // "... 8192 bytes smem": the number before the key
        size_t end = at;
        while (end > 0 && line[end - 1] == ' ') end--;
        size_t begin = end;
        while (begin > 0 && std::isdigit(static_cast<unsigned char>(line[begin - 1]))) begin--;
        return begin < end ? std::stoll(line.substr(begin, end - begin)) : -1;
      }
      size_t begin = at + key.size();
      while (begin < line.size() && line[begin] == ' ') begin++;
      size_t end = begin;
      while (end < line.size() && std::isdigit(static_cast<unsigned char>(line[end]))) end++;
      return begin < end ? std::stoll(line.substr(begin, end - begin)) : -1;
    };
    for (const std::string& path : paths) {
      std::ifstream in(path);
      if (!in) {  // as cmake/ptxas_resources.py: an object without kernels may leave none
        std::fprintf(stderr, "kernel_screen: no ptxas log %s (skipped)\n", path.c_str());
        continue;
      }
      sources.push_back(path);
      std::string line, mangled;
      int arch = 0;
      const std::string entry = "Compiling entry function '";
      while (std::getline(in, line)) {
        if (const size_t at = line.find(entry); at != std::string::npos) {
          const size_t begin = at + entry.size(), end = line.find('\'', begin);
          const long long sm = number_after(line, "for 'sm_");
          if (end == std::string::npos || sm < 0) continue;
          mangled = line.substr(begin, end - begin);
          arch = static_cast<int>(sm);
        } else if (const long long regs = number_after(line, "Used");
                   !mangled.empty() && regs >= 0 && line.find(" registers") != std::string::npos) {
          const long long smem = number_after(line, "bytes smem", true);
          entries.push_back({mangled, arch, {static_cast<int>(regs), smem > 0 ? smem : 0}});
          mangled.clear();
        }
      }
    }
    int newest = 0;
    for (const Entry& e : entries) newest = std::max(newest, e.arch);
    for (const Entry& e : entries) {
      if (e.arch != newest) continue;
      int status = 0;
      std::unique_ptr<char, void (*)(void*)> name(abi::__cxa_demangle(e.mangled.c_str(), nullptr, nullptr, &status),
                                                  std::free);
      if (status != 0 || !name) continue;
      by_instance[instance_of(name.get())] = e.res;
    }
  }
  // kernel_resources.txt: "<kernel name> <registers> <static shared bytes>" per instantiation, names without template
  // arguments (the emulation's table); the largest per name.
  void read_table(const std::string& path) {
    std::ifstream in(path);
    if (!in) throw std::runtime_error("kernel_screen: cannot read the resource table " + path);
    sources.push_back(path);
    std::string name;
    Resources r;
    while (in >> name >> r.registers >> r.static_shared) {
      Resources& e = by_name[name];
      e.registers = std::max(e.registers, r.registers);
      e.static_shared = std::max(e.static_shared, r.static_shared);
    }
  }
  // the resources of an instantiation and where they come from: "ptxas" (this instantiation), "max" (the table: the
  // largest over the kernel's instantiations) or "" (unknown)
  std::pair<Resources, std::string> find(const std::string& instance) const {
    if (auto it = by_instance.find(instance); it != by_instance.end()) return {it->second, "ptxas"};
    if (auto it = by_name.find(base_of(instance)); it != by_name.end()) return {it->second, "max"};
    return {{}, ""};
  }
};

// ---- the launches of a step ------------------------------------------------------------------------------------------
struct Launch {
  std::string instance;    // e.g. "layernorm_forward_kernel<__nv_bfloat16, 8>" (ptxas' demangled spelling)
  std::string op;          // the kernels.hpp op and the model's use of it
  std::string count_from;  // where the count comes from
  LaunchShape shape;
  int64_t launches = 0;
  double bytes = 0;  // per launch
  double flops = 0;  // per launch (the tensor-core attention only)
};

// The instantiation's name as ptxas' demangled names spell it; `kernel` (unused) makes a renamed or removed kernel a
// compile error here.
template <typename Kernel>
std::string instance(const char* name, const std::string& targs, Kernel* /*kernel*/) {
  return targs.empty() ? std::string(name) : std::string(name) + "<" + targs + ">";
}

struct Model {  // GPT-2 124M (inputs/gpt2_124m.toml): L 12, C 768, NH 12, T 1024, vocabulary 50257 padded to 50304
  int L = 12, C = 768, NH = 12, T = 1024, V = 50257, Vp = 50304;
  int HS() const { return C / NH; }
};

struct Config {
  Model m;
  int B = 16;     // micro-batch
  int accum = 1;  // micro-batches per optimizer step
  int eval = 0;   // evaluation micro-batches after the step
};

// The parameter tensors in their layout order (lib/models/gpt/gpt.cpp parameter_layout, model.bias = true): the
// optimizer, the gradient norm and the compute copy each launch once per tensor.
std::vector<std::pair<std::string, int64_t>> parameter_tensors(const Model& m) {
  const int64_t C = m.C;
  std::vector<std::pair<std::string, int64_t>> p{{"wte", int64_t{m.Vp} * C}, {"wpe", int64_t{m.T} * C}};
  for (int l = 0; l < m.L; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    for (const auto& [name, n] : std::vector<std::pair<const char*, int64_t>>{{"ln1.weight", C},
                                                                              {"ln1.bias", C},
                                                                              {"attn.qkv.weight", 3 * C * C},
                                                                              {"attn.qkv.bias", 3 * C},
                                                                              {"attn.proj.weight", C * C},
                                                                              {"attn.proj.bias", C},
                                                                              {"ln2.weight", C},
                                                                              {"ln2.bias", C},
                                                                              {"mlp.fc.weight", 4 * C * C},
                                                                              {"mlp.fc.bias", 4 * C},
                                                                              {"mlp.proj.weight", 4 * C * C},
                                                                              {"mlp.proj.bias", C}})
      p.push_back({h + name, n});
  }
  p.push_back({"lnf.weight", C});
  p.push_back({"lnf.bias", C});
  return p;
}

// Any 16-byte-aligned address: every tensor of the model lives in a slab at 64-byte offsets (tensor.hpp slab_aligned),
// so the ops' alignment tests (row_pack, vector_packs, tc_pointers_aligned) see aligned pointers.
const void* const kAligned = reinterpret_cast<const void*>(uintptr_t{1} << 20);

struct Gemms {
  int64_t launches = 0;
  double flops = 0;
};

struct Step {
  std::vector<Launch> launches;
  Gemms gemms;
  double memset_bytes = 0;  // fill_zero (cudaMemsetAsync): not own kernels
  int64_t memsets = 0;
  int64_t parameters = 0;
};

// The forward of one micro-batch of b sequences (gpt.cpp forward_impl, block_forward).
void add_forward(Step& st, const Model& m, int b, const std::string& phase, int64_t times) {
  const int64_t N = int64_t{b} * m.T, C = m.C, L = m.L;
  auto add = [&](Launch l) {
    l.op = phase + ": " + l.op;
    l.launches *= times;
    st.launches.push_back(std::move(l));
  };
  // encoder_forward (cuda_core.cu launch_encoder_forward): once, forward_impl
  add({instance("encoder_forward_kernel", kS, &cu::encoder_forward_kernel<S>), "encoder_forward", "forward_impl: 1",
       cu::elementwise_shape(N * C), 1, N * 4.0 + N * C * 2.0 + m.T * C * 2.0 + N * C * 2.0});
  // layernorm_forward (cuda_core.cu: with_row_pack<S>(row_pack<S>(C, {out, inp, weight, bias})), layernorm_rows_shape)
  // ln1 in each block_forward, lnf in forward_impl: L + 1; residual_layernorm_forward (the same pack width and shape,
  // the fused kernel since a and b are aligned too): residual2 = residual + attn.proj and ln2 of it, L
  cu::with_row_pack<S>(cu::row_pack<S>(C, {kAligned, kAligned, kAligned, kAligned}), [&](auto pack) {
    constexpr int P = decltype(pack)::value;
    add({instance("layernorm_forward_kernel", std::string(kS) + ", " + std::to_string(P),
                  &cu::layernorm_forward_kernel<S, P>),
         "layernorm_forward (ln1, lnf)", "block_forward L + forward_impl 1", cu::layernorm_rows_shape(N), L + 1,
         N * C * 2.0 * 2 + 2 * C * 2.0 + N * 8.0});
    add({instance("residual_layernorm_forward_kernel", std::string(kS) + ", " + std::to_string(P),
                  &cu::residual_layernorm_forward_kernel<S, P>),
         "residual_layernorm_forward (residual2, ln2)", "block_forward: L", cu::layernorm_rows_shape(N), L,
         N * C * 2.0 * 4 + 2 * C * 2.0 + N * 8.0});
  });
  // attention_forward (cuda_gpt.cu): the tensor-core kernel when attention_on_tensor_cores (16-bit storage, HS a
  // multiple of 16 up to 128, aligned tensors, an sm_80+ device: an H100), flash_tc::forward_shape; L (block_forward)
  const int HS = m.HS();
  if (!cu::flash_tc::tc_head_size(HS) || !cu::flash_tc::tc_pointers_aligned({kAligned}))
    throw std::runtime_error("kernel_screen: GPT-2's head size no longer takes the tensor-core attention");
  const double pairs = double(b) * m.NH * (double(m.T) * (m.T + 1) / 2);  // causal (query, key) pairs
  cu::flash_tc::with_tc_head_size(HS, [&](auto head_size) {
    constexpr int kHS = decltype(head_size)::value;
    add({instance("forward_tc_kernel", std::string(kS) + ", " + std::to_string(kHS),
                  &cu::flash_tc::forward_tc_kernel<S, kHS>),
         "attention_forward (tensor cores)", "block_forward: L", cu::flash_tc::forward_shape(b, m.T, m.NH, HS), L,
         3 * N * C * 2.0 + N * C * 2.0 + double(b) * m.NH * m.T * 4, pairs * HS * 2 * 2});  // S = Q K^T, O = P V
  });
  // gelu_forward (cuda_core.cu: pointwise_packs<S>(n, {out, inp}), pointwise_shape<S>); L (block_forward)
  const int64_t n4 = N * 4 * C;
  add({instance("gelu_forward_kernel", kS, &cu::gelu_forward_kernel<S>), "gelu_forward", "block_forward: L",
       cu::pointwise_shape<S>(n4, cu::pointwise_packs<S>(n4, {kAligned, kAligned})), L, n4 * 2.0 * 2});
  // residual_forward: residual3 of each block_forward (residual2 is fused above): L
  add({instance("residual_kernel", std::string(kS) + ", false", &cu::residual_kernel<S>), "residual_forward",
       "block_forward: L", cu::pointwise_shape<S>(N * C, cu::pointwise_packs<S>(N * C, {kAligned, kAligned, kAligned})),
       L, N * C * 2.0 * 3});
  // cuBLASLt (cuda_gpt.cu matmul_forward, bf16: lt_gemm_rm with the bias epilogue): qkv, attn.proj, mlp.fc, mlp.proj
  // per block and the tied head
  st.gemms.launches += (4 * L + 1) * times;
  st.gemms.flops += times * 2.0 * N * (L * (3 * C * C + C * C + 4 * C * C + 4 * C * C) + double(C) * m.Vp);
}

// The cross-entropy of one micro-batch (gpt.cpp loss_and_backward, or Gpt::loss for an evaluation) and its sum
// (gpt_stage.cpp GptStage::backward k::sum, GptEvaluator::loss_sum k::sum_to_host -> sum).
void add_loss(Step& st, const Model& m, int b, bool backward, const std::string& phase, int64_t times) {
  const int64_t N = int64_t{b} * m.T;
  auto add = [&](Launch l) {
    l.op = phase + ": " + l.op;
    l.launches *= times;
    st.launches.push_back(std::move(l));
  };
  // crossentropy_forward(_backward) (cuda_gpt.cu: with_row_pack<S>(row_pack<S>(Vp, {logits})), row_shape(N, V, P)):
  // one read of the row for the statistics (online softmax); fused with the backward, the row held in shared memory
  // (crossentropy_held_shape: GPT-2's bf16 row fits the H100's opt-in) and dlogits written in place from it
  cu::with_row_pack<S>(cu::row_pack<S>(m.Vp, {kAligned}), [&](auto pack) {
    constexpr int P = decltype(pack)::value;
    const std::string targs = std::string(backward ? "true" : "false") + ", " + kS + ", " + std::to_string(P);
    const double bytes = N * double(backward ? m.Vp : m.V) * 2 + (backward ? N * double(m.Vp) * 2 : 0.0) + N * 8.0;
    if (backward) {
      if (!cu::crossentropy_holds_row(m.Vp, sizeof(S), cu::kH100Limits.shared_optin_bytes))
        throw std::runtime_error("kernel_screen: GPT-2's logits row no longer fits the cross-entropy's shared memory");
      add({instance("crossentropy_kernel", targs + ", true", &cu::crossentropy_kernel<true, S, P, true>),
           "crossentropy_forward_backward (fused, the row held in shared memory, dlogits in place)",
           "loss_and_backward: 1", cu::crossentropy_held_shape(static_cast<int>(N), m.V, m.Vp, P, sizeof(S)), 1,
           bytes});
    } else
      add({instance("crossentropy_kernel", targs + ", false", &cu::crossentropy_kernel<false, S, P>),
           "crossentropy_forward", "Gpt::loss: 1", cu::row_shape(static_cast<int>(N), m.V, P), 1, bytes});
  });
  // sum of the losses (cuda_core.cu launch_reduce<false>: reduce_shape, one block)
  add({instance("reduce_kernel", "false", &cu::reduce_kernel<false>), "sum (of the losses)",
       backward ? "GptStage::backward: 1" : "GptEvaluator::loss_sum: 1", cu::reduce_shape(), 1, N * 4.0 + 4});
}

// The backward of one micro-batch (gpt.cpp backward_impl; recompute none).
void add_backward(Step& st, const Model& m, int b, int64_t times) {
  const int64_t N = int64_t{b} * m.T, C = m.C, L = m.L;
  auto add = [&](Launch l) {
    l.op = "backward: " + l.op;
    l.launches *= times;
    st.launches.push_back(std::move(l));
  };
  // matmul_backward (cuda_gpt.cu, bf16): two cuBLASLt GEMMs (dinp, dweight) per Linear (the head, then per block
  // mlp.proj, mlp.fc, attn.proj, attn.qkv), and for each Linear with a bias (all but the head: OC = C for attn.proj
  // and mlp.proj, 3C attn.qkv, 4C mlp.fc) bias_grad_partial_kernel<S, P> at bias_grad_launch (P = pack_width<S>(OC,
  // {dout})), then column_partials_kernel over its groups
  st.gemms.launches += 2 * (4 * L + 1) * times;
  st.gemms.flops += times * 4.0 * N * (L * (3 * C * C + C * C + 4 * C * C + 4 * C * C) + double(C) * m.Vp);
  for (const auto& [OC, what, count] : std::vector<std::tuple<int64_t, std::string, int64_t>>{
           {C, "attn.proj, mlp.proj", 2 * L}, {3 * C, "attn.qkv", L}, {4 * C, "mlp.fc", L}}) {
    const int P = cu::pack_width<S>(OC, {kAligned});
    const cu::BiasGradLaunch bias = cu::bias_grad_launch(N, static_cast<int>(OC), P, kCudaReducePartialsBytes);
    const std::string each = "backward_impl: " + std::string(count == L ? "L" : "2 x L");
    const double partials = double(bias.rows.groups) * OC * 8;
    cu::with_pack<S>(P, [&](auto p) {
      constexpr int kP = decltype(p)::value;
      add({instance("bias_grad_partial_kernel", std::string(kS) + ", " + std::to_string(kP),
                    &cu::bias_grad_partial_kernel<S, kP>),
           "matmul_backward dbias partials (" + what + ")", each, bias.shape, count, N * OC * 2.0 + partials});
    });
    add({instance("column_partials_kernel", "", &cu::column_partials_kernel),
         "matmul_backward dbias (" + what + ") from the partials", each,
         cu::column_partials_shape(static_cast<int>(OC), bias.rows.groups), count, partials + 2.0 * OC * 4});
  }
  // layernorm_backward (cuda_core.cu: layernorm_backward_kernel<S, P> at layernorm_backward_launch, P =
  // row_pack<S>(C, {dinp, dout, inp, weight}); then column_partials_kernel over 2C columns): lnf once, ln2 and ln1 per
  // block: 2L + 1
  const cu::LayernormBackwardLaunch ln = cu::layernorm_backward_launch(N, static_cast<int>(C),
                                                                       kCudaReducePartialsBytes);
  const double ln_partials = double(ln.rows.groups) * 2 * C * 8;
  cu::with_row_pack<S>(cu::row_pack<S>(C, {kAligned, kAligned, kAligned, kAligned}), [&](auto pack) {
    constexpr int P = decltype(pack)::value;
    add({instance("layernorm_backward_kernel", std::string(kS) + ", " + std::to_string(P),
                  &cu::layernorm_backward_kernel<S, P>),
         "layernorm_backward dinp (+= into dres), dweight and dbias partials", "backward_impl: 2 x L + 1", ln.shape,
         2 * L + 1, N * C * 2.0 * 4 + C * 2.0 + N * 8.0 + ln_partials});
  });
  add({instance("column_partials_kernel", "", &cu::column_partials_kernel),
       "layernorm_backward dweight, dbias from the partials", "backward_impl: 2 x L + 1",
       cu::column_partials_shape(static_cast<int>(2 * C), ln.rows.groups), 2 * L + 1, ln_partials + 2 * 2.0 * C * 4});
  // gelu_backward (cuda_core.cu: pointwise_packs<S>(n, {dinp, inp, dout})): L
  const int64_t n4 = N * 4 * C;
  add({instance("gelu_backward_kernel", kS, &cu::gelu_backward_kernel<S>), "gelu_backward", "backward_impl: L",
       cu::pointwise_shape<S>(n4, cu::pointwise_packs<S>(n4, {kAligned, kAligned, kAligned})), L, n4 * 2.0 * 3});
  // attention_backward (cuda_gpt.cu): rowdot_kernel at flash::rowdot_shape(B NH T), then the tensor-core dK/dV and dQ
  // kernels (flash_tc::backward_dkv_shape / backward_dq_shape): L each
  const int HS = m.HS();
  const double stats = double(b) * m.NH * m.T * 4;  // L or D, float (B, NH, T)
  const double pairs = double(b) * m.NH * (double(m.T) * (m.T + 1) / 2);
  add({instance("rowdot_kernel", kS, &cu::flash::rowdot_kernel<S>), "attention_backward D = rowsum(dout * out)",
       "backward_impl: L", cu::flash::rowdot_shape(int64_t{b} * m.NH * m.T), L, N * C * 2.0 * 2 + stats});
  cu::flash_tc::with_tc_head_size(HS, [&](auto head_size) {
    constexpr int kHS = decltype(head_size)::value;
    const std::string targs = std::string(kS) + ", " + std::to_string(kHS);
    // dK/dV: recomputes S = Q K^T, dP = dO V^T; dV += P^T dO, dK += dS^T Q (4 products)
    add({instance("backward_dkv_tc_kernel", targs, &cu::flash_tc::backward_dkv_tc_kernel<S, kHS>),
         "attention_backward dk, dv (tensor cores)", "backward_impl: L",
         cu::flash_tc::backward_dkv_shape(b, m.T, m.NH, HS), L,
         3 * N * C * 2.0 + N * C * 2.0 + 2 * stats + 2 * N * C * 2.0, pairs * HS * 2 * 4});
    // dQ: recomputes S and dP; dQ += dS K (3 products)
    add({instance("backward_dq_tc_kernel", targs, &cu::flash_tc::backward_dq_tc_kernel<S, kHS>),
         "attention_backward dq (tensor cores)", "backward_impl: L", cu::flash_tc::backward_dq_shape(b, m.T, m.NH, HS),
         L, 3 * N * C * 2.0 + N * C * 2.0 + 2 * stats + N * C * 2.0, pairs * HS * 2 * 3});
  });
  // encoder_backward (cuda_core.cu launch_encoder_backward): the wte kernel at encoder_wte_shape(C) (each block walks
  // all N tokens; dwte read-modify-written for at most N rows), the wpe kernel at elementwise_shape(T C): once each
  add({instance("encoder_backward_wte_kernel", kS, &cu::encoder_backward_wte_kernel<S>), "encoder_backward dwte",
       "backward_impl: 1", cu::encoder_wte_shape(static_cast<int>(C)), 1,
       N * C * 2.0 + N * 4.0 + 2.0 * std::min<int64_t>(N, m.Vp) * C * 4});
  add({instance("encoder_backward_wpe_kernel", kS, &cu::encoder_backward_wpe_kernel<S>), "encoder_backward dwpe",
       "backward_impl: 1", cu::elementwise_shape(int64_t{m.T} * C), 1, N * C * 2.0 + 2.0 * m.T * C * 4});
  // fill_zero (cudaMemsetAsync): dres before the head's LayerNorm backward
  st.memsets += times;
  st.memset_bytes += times * double(N) * C * 2;
}

// The gradient norm (lib/optim/optimizer.cpp Optimizer::grad_sumsq: sum_squares_ranges over the planned table of
// 64K-element chunks of every tensor -> one squares_chunk_kernel block per chunk, then one partials_sum_kernel block)
// and AdamW (lib/optim/adamw.cpp AdamW::step: adamw_update_chunks over the table of every tensor's chunks, one
// adamw_chunks_kernel block per chunk, which also stores the bf16 compute copy: on one rank the optimizer keeps the
// copy, AdamW::keep_compute_copy, so no step or evaluation after the first casts the masters).
void add_parameter_passes(Step& st, const Model& m, const std::string& phase) {
  // both run over the same table of every tensor's chunks (kernels/chunk_tables.hpp)
  int64_t chunks = 0;
  double elements = 0;
  for (const auto& p : parameter_tensors(m)) {
    chunks += (p.second + hpct::kernels::kTableChunk - 1) / hpct::kernels::kTableChunk;
    elements += static_cast<double>(p.second);
  }
  const double table = static_cast<double>(chunks);
  st.launches.push_back({instance("squares_chunk_kernel", "", &cu::squares_chunk_kernel),
                         phase + ": sum_squares_ranges (gradient norm, chunks)", "Optimizer::grad_sumsq: 1",
                         cu::table_chunks_shape(chunks), 1, elements * 4.0 + table * 24.0});
  st.launches.push_back({instance("partials_sum_kernel", "", &cu::partials_sum_kernel),
                         phase + ": sum_squares_ranges (gradient norm, partials)", "Optimizer::grad_sumsq: 1",
                         cu::reduce_shape(), 1, table * 8.0 + 8.0});
  st.launches.push_back({instance("adamw_chunks_kernel", kS, &cu::adamw_chunks_kernel<S>),
                         phase + ": adamw_update_chunks (and the bf16 compute copy)", "AdamW::step: 1",
                         cu::table_chunks_shape(chunks), 1, elements * (4.0 * 7 + 2) + table * 56.0});
}

Step training_step(const Config& c) {
  Step st;
  for (const auto& p : parameter_tensors(c.m)) st.parameters += p.second;
  // GptStage::begin_step: refresh_compute_params (a no-op: AdamW keeps the copy), then per micro-batch (schedule at
  // pp 1: forward, then GptStage::backward = loss_and_backward + sum)
  add_forward(st, c.m, c.B, "forward", c.accum);
  add_loss(st, c.m, c.B, true, "loss", c.accum);
  add_backward(st, c.m, c.B, c.accum);
  // fill_zero (cudaMemsetAsync) once per step: the fp32 gradients (GptTrainer::begin_step: Gpt::zero_grad) and the
  // norm's accumulator (Optimizer::grad_sumsq)
  st.memsets += 2;
  st.memset_bytes += st.parameters * 4.0 + 8;
  // training_loop.cpp: grad_sumsq (the norm; logged, and used by the clipping), then the optimizer step
  add_parameter_passes(st, c.m, "step");
  if (c.eval >
      0) {  // GptEvaluator::loss_sum: refresh_compute_params (a no-op), then forward + loss + sum per micro-batch
    add_forward(st, c.m, c.B, "eval", c.eval);
    add_loss(st, c.m, c.B, false, "eval", c.eval);
  }
  return st;
}

// ---- the screen --------------------------------------------------------------------------------------------------
struct Row {  // the launches of one instantiation at one geometry
  std::string instance, kernel;
  std::vector<std::string> ops, count_from;
  LaunchShape shape;
  int64_t launches = 0;
  double bytes = 0, flops = 0;  // all launches
  Resources res;
  std::string res_source;
  Residency resident;
  double waves = 0, sm_fraction = 0;
  double est_s = 0, at_width_s = 0;  // all launches
  std::string bound;
  bool narrow = false, partial_wave = false;
  std::string problem;  // launch_problem against kH100Limits with the kernel's resources ("" = valid)
};

std::string dims(const cu::LaunchDim& d) {
  std::string s = std::to_string(d.x);
  if (d.y != 1 || d.z != 1) s += " x " + std::to_string(d.y);
  if (d.z != 1) s += " x " + std::to_string(d.z);
  return s;
}

std::vector<Row> screen(const Step& st, const ResourceTables& tables) {
  std::vector<Row> rows;
  std::map<std::string, size_t> index;
  for (const Launch& l : st.launches) {
    const std::string key = l.instance + "|" + dims(l.shape.grid) + "|" + dims(l.shape.block) + "|" +
                            std::to_string(l.shape.shared_bytes);
    auto [it, fresh] = index.emplace(key, rows.size());
    if (fresh) {
      Row r;
      r.instance = l.instance;
      r.kernel = base_of(l.instance);
      r.shape = l.shape;
      rows.push_back(r);
    }
    Row& r = rows[it->second];
    if (std::find(r.ops.begin(), r.ops.end(), l.op) == r.ops.end()) r.ops.push_back(l.op);
    if (std::find(r.count_from.begin(), r.count_from.end(), l.count_from) == r.count_from.end())
      r.count_from.push_back(l.count_from);
    r.launches += l.launches;
    r.bytes += l.launches * l.bytes;
    r.flops += l.launches * l.flops;
    const double t = std::max(l.bytes / kH100.hbm_bytes_per_s, l.flops / kH100.bf16_flops_per_s);
    r.est_s += l.launches * t;
  }
  for (Row& r : rows) {
    std::tie(r.res, r.res_source) = tables.find(r.instance);
    r.resident = resident_blocks(r.shape, r.res.registers, r.res.static_shared);
    const double blocks = static_cast<double>(r.shape.grid.count());
    r.waves = r.resident.blocks > 0 ? blocks / (double(kH100.sms) * r.resident.blocks) : INFINITY;
    r.sm_fraction = std::min(blocks, double(kH100.sms)) / kH100.sms;
    r.at_width_s = r.est_s / r.sm_fraction;
    r.bound = r.flops / kH100.bf16_flops_per_s > r.bytes / kH100.hbm_bytes_per_s ? "compute" : "memory";
    r.narrow = blocks < kH100.sms;
    r.partial_wave = r.waves < 1.0;
    r.problem = cu::launch_problem(r.shape, cu::kH100Limits, r.res.static_shared, r.res.registers);
  }
  std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.est_s > b.est_s; });
  return rows;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}
std::string grouped(int64_t v) {  // 1234567 -> 1,234,567
  std::string s = std::to_string(v), out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i > 0 && (s.size() - i) % 3 == 0) out += ',';
    out += s[i];
  }
  return out;
}
std::string join(const std::vector<std::string>& v, const std::string& sep) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + v[i];
  return s;
}
std::string flags(const Row& r) {
  std::vector<std::string> f;
  if (r.narrow) f.push_back(r.shape.grid.count() == 1 ? "**NARROW (1 block)**" : "**NARROW**");
  else if (r.partial_wave)
    f.push_back("<1 wave");
  if (r.res_source.empty()) f.push_back("regs?");
  if (!r.problem.empty()) f.push_back("INVALID: " + r.problem);
  return join(f, ", ");
}

struct Totals {
  double est_s = 0, bytes = 0;
  int64_t launches = 0;
};
Totals totals(const std::vector<Row>& rows) {
  Totals t;
  for (const Row& r : rows) {
    t.est_s += r.est_s;
    t.bytes += r.bytes;
    t.launches += r.launches;
  }
  return t;
}

std::string markdown(const Config& c, const Step& st, const std::vector<Row>& rows, const ResourceTables& tables) {
  std::ostringstream o;
  const Totals t = totals(rows);
  const double gemm_s = st.gemms.flops / kH100.bf16_flops_per_s;
  o << "GPT-2 124M (L " << c.m.L << ", C " << c.m.C << ", NH " << c.m.NH << ", T " << c.m.T << ", vocabulary " << c.m.V
    << " padded to " << c.m.Vp << "), bf16, micro-batch " << c.B << ", " << c.accum << " micro-batch(es) per step"
    << (c.eval ? ", plus " + std::to_string(c.eval) + " evaluation micro-batches" : std::string()) << "; "
    << grouped(st.parameters) << " parameters. H100 SXM: " << kH100.sms << " SMs, "
    << fmt("%.2f", kH100.hbm_bytes_per_s / 1e12) << " TB/s, " << fmt("%.1f", kH100.bf16_flops_per_s / 1e12)
    << " TFLOP/s dense bf16.\n";
  o << "Registers and static shared memory: "
    << (tables.sources.empty() ? "none given (residency from threads and shared memory only)"
                               : join(tables.sources, ", "))
    << ".\n\n";
  o << "Own kernels: " << grouped(t.launches) << " launches, " << fmt("%.2f", t.bytes / 1e9) << " GB moved, estimate "
    << fmt("%.2f", t.est_s * 1e3)
    << " ms at full width. cuBLASLt GEMMs (not own kernels, not in the table): " << grouped(st.gemms.launches)
    << " launches, " << fmt("%.1f", st.gemms.flops / 1e12) << " TFLOP, " << fmt("%.2f", gemm_s * 1e3)
    << " ms at the bf16 peak. cudaMemsetAsync (fill_zero): " << st.memsets << " calls, "
    << fmt("%.0f", st.memset_bytes / 1e6) << " MB.\n\n";
  o << "| # | kernel | op: where the count comes from | launches | grid | block | smem B dyn+static | regs | blocks/SM "
       "(limit) | waves | SMs | MB moved | est ms | share | ms at width | flags |\n";
  o << "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  int i = 0;
  for (const Row& r : rows) {
    std::vector<std::string> ops;
    for (size_t k = 0; k < r.ops.size(); ++k) ops.push_back(r.ops[k]);
    o << "| " << ++i << " | `" << r.instance << "` | " << join(ops, "; ") << " (" << join(r.count_from, "; ") << ") | "
      << r.launches << " | " << dims(r.shape.grid) << " | " << dims(r.shape.block) << " | " << r.shape.shared_bytes
      << "+" << r.res.static_shared << (r.res_source.empty() ? "?" : "") << " | "
      << (r.res_source.empty() ? std::string("?")
                               : std::to_string(r.res.registers) + (r.res_source == "max" ? " (max)" : ""))
      << " | " << r.resident.blocks << " (" << r.resident.limit << ") | " << fmt("%.2f", r.waves) << " | "
      << fmt("%.0f%%", 100 * r.sm_fraction) << " | " << fmt("%.1f", r.bytes / 1e6) << " | "
      << fmt("%.3f", r.est_s * 1e3) << (r.bound == "compute" ? " (FLOPs)" : "") << " | "
      << fmt("%.1f%%", 100 * r.est_s / t.est_s) << " | " << fmt("%.3f", r.at_width_s * 1e3) << " | " << flags(r)
      << " |\n";
  }
  std::vector<const Row*> idle;
  for (const Row& r : rows)
    if (r.narrow) idle.push_back(&r);
  std::stable_sort(idle.begin(), idle.end(), [](const Row* a, const Row* b) { return a->at_width_s > b->at_width_s; });
  o << "\nNarrow launches (fewer blocks than SMs), by the estimate at their width:\n\n";
  o << "| kernel | launches | blocks | SMs busy | est ms (full width) | ms at width |\n|---|---|---|---|---|---|\n";
  for (const Row* r : idle)
    o << "| `" << r->instance << "` | " << r->launches << " | " << r->shape.grid.count() << " | "
      << fmt("%.0f%%", 100 * r->sm_fraction) << " | " << fmt("%.3f", r->est_s * 1e3) << " | "
      << fmt("%.3f", r->at_width_s * 1e3) << " |\n";
  return o.str();
}

std::string json_string(const std::string& s) {
  std::string o = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') o += '\\';
    o += ch;
  }
  return o + "\"";
}
std::string json_num(double v) { return std::isfinite(v) ? fmt("%.9g", v) : std::string("null"); }

std::string json(const Config& c, const Step& st, const std::vector<Row>& rows, const ResourceTables& tables) {
  std::ostringstream o;
  const Totals t = totals(rows);
  o << "{\n  \"model\": {\"name\": \"GPT-2 124M\", \"n_layer\": " << c.m.L << ", \"n_embd\": " << c.m.C
    << ", \"n_head\": " << c.m.NH << ", \"seq_len\": " << c.m.T << ", \"vocab_size\": " << c.m.V
    << ", \"padded_vocab\": " << c.m.Vp << ", \"parameters\": " << st.parameters << ", \"storage\": \"bf16\"},\n";
  o << "  \"run\": {\"micro_batch\": " << c.B << ", \"micro_batches_per_step\": " << c.accum
    << ", \"eval_micro_batches\": " << c.eval << "},\n";
  o << "  \"device\": {\"name\": \"H100 SXM\", \"sms\": " << kH100.sms
    << ", \"hbm_bytes_per_s\": " << json_num(kH100.hbm_bytes_per_s)
    << ", \"bf16_flops_per_s\": " << json_num(kH100.bf16_flops_per_s) << "},\n";
  o << "  \"resources\": [";
  for (size_t i = 0; i < tables.sources.size(); ++i) o << (i ? ", " : "") << json_string(tables.sources[i]);
  o << "],\n  \"totals\": {\"launches\": " << t.launches << ", \"bytes\": " << json_num(t.bytes)
    << ", \"est_s\": " << json_num(t.est_s) << "},\n";
  o << "  \"gemms\": {\"launches\": " << st.gemms.launches << ", \"flops\": " << json_num(st.gemms.flops)
    << ", \"est_s_at_peak\": " << json_num(st.gemms.flops / kH100.bf16_flops_per_s) << "},\n";
  o << "  \"memsets\": {\"calls\": " << st.memsets << ", \"bytes\": " << json_num(st.memset_bytes) << "},\n";
  o << "  \"kernels\": [\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    std::vector<std::string> ops, from;
    for (const auto& s : r.ops) ops.push_back(json_string(s));
    for (const auto& s : r.count_from) from.push_back(json_string(s));
    o << "    {\"kernel\": " << json_string(r.kernel) << ", \"instance\": " << json_string(r.instance) << ", \"ops\": ["
      << join(ops, ", ") << "], \"count_from\": [" << join(from, ", ") << "], \"launches\": " << r.launches
      << ", \"grid\": [" << r.shape.grid.x << ", " << r.shape.grid.y << ", " << r.shape.grid.z << "], \"block\": ["
      << r.shape.block.x << ", " << r.shape.block.y << ", " << r.shape.block.z
      << "], \"blocks\": " << r.shape.grid.count() << ", \"threads_per_block\": " << r.shape.block.count()
      << ", \"dynamic_shared_bytes\": " << r.shape.shared_bytes << ", \"static_shared_bytes\": " << r.res.static_shared
      << ", \"registers\": " << (r.res_source.empty() ? "null" : std::to_string(r.res.registers))
      << ", \"resources_from\": " << (r.res_source.empty() ? "null" : json_string(r.res_source))
      << ", \"resident_blocks_per_sm\": " << r.resident.blocks
      << ", \"residency_limit\": " << json_string(r.resident.limit) << ", \"waves\": " << json_num(r.waves)
      << ", \"sm_fraction\": " << json_num(r.sm_fraction) << ", \"bytes\": " << json_num(r.bytes)
      << ", \"flops\": " << json_num(r.flops) << ", \"bound\": " << json_string(r.bound)
      << ", \"est_s\": " << json_num(r.est_s) << ", \"share\": " << json_num(r.est_s / t.est_s)
      << ", \"at_width_s\": " << json_num(r.at_width_s) << ", \"narrow\": " << (r.narrow ? "true" : "false")
      << ", \"below_one_wave\": " << (r.partial_wave ? "true" : "false")
      << ", \"launch_problem\": " << json_string(r.problem) << "}" << (i + 1 < rows.size() ? "," : "") << "\n";
  }
  o << "  ]\n}\n";
  return o.str();
}

// ---- --check: the screen's sanity, and what it must reproduce of the H100 profile -------------------------------
int check(const ResourceTables& tables) {
  int failures = 0;
  auto expect = [&](bool ok, const std::string& what) {
    if (!ok) {
      std::fprintf(stderr, "kernel_screen --check: FAILED: %s\n", what.c_str());
      failures++;
    }
  };
  // the H100 profile's step (validation/results/gpu_nvidia_h100_80gb_hbm3_2026-11-26.md, "Where a GPT-2 124M bf16 step
  // goes"): micro-batch 16, one training step plus four evaluation micro-batches; its launch counts per kernel
  Config c;
  c.B = 16;
  c.eval = 4;
  const Step st = training_step(c);
  const std::vector<Row> rows = screen(st, tables);
  std::map<std::string, int64_t> launches;
  std::map<std::string, std::vector<const Row*>> by_kernel;
  for (const Row& r : rows) {
    launches[r.kernel] += r.launches;
    by_kernel[r.kernel].push_back(&r);
    expect(r.shape.grid.count() > 0 && r.shape.block.count() > 0, r.instance + ": an empty grid or block");
    expect(r.launches > 0 && r.bytes > 0, r.instance + ": no launches or no bytes");
    expect(r.resident.blocks > 0, r.instance + ": no block fits an SM");
    expect(r.problem.empty(), r.instance + ": an H100 would refuse the launch: " + r.problem);
    // with ptxas' logs every instantiation named here must be one nvcc compiled (the names are spelled by hand)
    if (!tables.by_instance.empty())
      expect(r.res_source == "ptxas", r.instance + ": not among the ptxas logs' kernels (misspelled, or not compiled)");
    else if (!tables.by_name.empty())
      expect(!r.res_source.empty(), r.kernel + ": not in the resource table");
  }
  // (reduce_kernel: the profile counted 153, 148 one-block launches of the gradient norm, one per parameter tensor,
  // and 5 loss sums; the norm is the two-stage squares_chunk_kernel + partials_sum_kernel since, which leaves the 5)
  // (the profile's 25 layernorm_backward_dinp_kernel and 25 layernorm_backward_dweight_kernel launches are one
  // layernorm_backward_kernel each since, its 48 bias_grad_kernel launches bias_grad_partial_kernel; each of the 73
  // adds a column_partials_kernel; of its 120 residual_kernel and 125 layernorm_forward_kernel launches over the 5
  // forwards, 60 pairs are one residual_layernorm_forward_kernel each)
  const std::map<std::string, int64_t> profile{
      {"forward_tc_kernel", 60},        {"layernorm_backward_kernel", 25},
      {"crossentropy_kernel", 5},       {"reduce_kernel", 5},
      {"squares_chunk_kernel", 1},      {"partials_sum_kernel", 1},
      {"bias_grad_partial_kernel", 48}, {"column_partials_kernel", 73},
      {"backward_dkv_tc_kernel", 12},   {"gelu_forward_kernel", 60},
      {"backward_dq_tc_kernel", 12},    {"residual_kernel", 60},
      {"layernorm_forward_kernel", 65}, {"residual_layernorm_forward_kernel", 60}};
  for (const auto& [k, n] : profile)
    expect(launches[k] == n,
           k + ": " + std::to_string(launches[k]) + " launches, the profile counted " + std::to_string(n));
  expect(st.gemms.launches == 343,
         "cuBLASLt GEMMs: " + std::to_string(st.gemms.launches) + " launches, the profile counted 343");
  expect(st.parameters == 124475904, "parameters: " + std::to_string(st.parameters) + ", GPT-2 124M has 124,475,904");
  // the narrow reductions the profile found (24 to 96 blocks on 132 SMs; one block) are flagged narrow: of them, the
  // loss sums' reduce_kernel remains
  for (const char* k : {"reduce_kernel"}) {
    expect(!by_kernel[k].empty(), std::string(k) + ": not in the screen");
    for (const Row* r : by_kernel[k])
      expect(r->narrow, r->instance + " at " + std::to_string(r->shape.grid.count()) +
                            " blocks: not flagged narrow (widened on purpose? then this check and the H100 profile it "
                            "reproduces are out of date: rerun the profile)");
  }
  // the wide kernels of the profile are not
  for (const char* k : {"forward_tc_kernel", "crossentropy_kernel", "gelu_forward_kernel", "residual_kernel",
                        "layernorm_forward_kernel", "backward_dkv_tc_kernel", "backward_dq_tc_kernel",
                        "squares_chunk_kernel", "residual_layernorm_forward_kernel"})
    for (const Row* r : by_kernel[k])
      expect(!r->narrow && !r->partial_wave, r->instance + ": flagged narrow or below one wave");
  // and the full-grid column reductions that replaced the narrow ones give every SM work (some launches fill less
  // than one wave of resident blocks: 512 row groups at micro-batch 16, one column block of the smaller biases)
  for (const char* k : {"layernorm_backward_kernel", "bias_grad_partial_kernel", "column_partials_kernel"})
    for (const Row* r : by_kernel[k]) expect(!r->narrow, r->instance + ": flagged narrow");
  // the occupancy rule on known cases (cudaOccupancyMaxActiveBlocksPerMultiprocessor's for sm_90)
  expect(resident_blocks({{1, 1, 1}, {1024, 1, 1}, 0}, 32, 256).blocks == 2, "1024 threads x 32 registers: 2 blocks");
  expect(resident_blocks({{1, 1, 1}, {256, 1, 1}, 0}, 40, 0).blocks == 6, "256 threads x 40 registers: 6 blocks");
  expect(resident_blocks({{1, 1, 1}, {128, 1, 1}, 27648}, 0, 0).blocks == 8, "27 KiB of shared memory: 8 blocks");
  expect(resident_blocks({{1, 1, 1}, {32, 1, 1}, 0}, 0, 0).blocks == 32, "one warp: the 32-block limit");
  // output that parses as it is written: every row in the markdown, the JSON's braces balanced
  const std::string md = markdown(c, st, rows, tables), js = json(c, st, rows, tables);
  for (const Row& r : rows)
    expect(md.find("`" + r.instance + "`") != std::string::npos, r.instance + ": not in the table");
  expect(std::count(js.begin(), js.end(), '{') == std::count(js.begin(), js.end(), '}'), "JSON braces unbalanced");
  std::printf("kernel_screen --check: %zu kernel rows, %s resources; %s\n", rows.size(),
              tables.sources.empty() ? "no" : "with", failures ? "FAILED" : "VALID");
  return failures ? 1 : 0;
}

int usage(const char* why) {
  std::fprintf(stderr,
               "kernel_screen: %s\nusage: kernel_screen [--micro-batch B] [--accum M] [--eval-batches E] "
               "[--resources FILE] [--ptxas-log FILE]... [--markdown FILE] [--json FILE] [--check]\n",
               why);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Config c;
    std::string md_path, json_path, table_path;
    std::vector<std::string> logs;
    bool do_check = false;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      auto value = [&]() -> std::string {
        if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
        return argv[++i];
      };
      if (a == "--micro-batch") c.B = std::stoi(value());
      else if (a == "--accum")
        c.accum = std::stoi(value());
      else if (a == "--eval-batches")
        c.eval = std::stoi(value());
      else if (a == "--resources")
        table_path = value();
      else if (a == "--ptxas-log")
        logs.push_back(value());
      else if (a == "--markdown")
        md_path = value();
      else if (a == "--json")
        json_path = value();
      else if (a == "--check")
        do_check = true;
      else
        return usage(("unknown argument " + a).c_str());
    }
    if (c.B < 1 || c.accum < 1 || c.eval < 0) return usage("--micro-batch and --accum >= 1, --eval-batches >= 0");
    const std::optional<double> peak = hpct::peak_tflops(kDeviceName, "bf16");
    if (!peak) throw std::runtime_error(std::string("lib/core/device_peaks has no entry for ") + kDeviceName);
    kH100.bf16_flops_per_s = *peak * 1e12;
    ResourceTables tables;
    if (!logs.empty()) tables.read_ptxas_logs(logs);
    if (!table_path.empty()) tables.read_table(table_path);
    if (do_check && check(tables) != 0) return 1;
    const Step st = training_step(c);
    const std::vector<Row> rows = screen(st, tables);
    const std::string md = markdown(c, st, rows, tables);
    if (!json_path.empty()) std::ofstream(json_path) << json(c, st, rows, tables);
    if (!md_path.empty()) std::ofstream(md_path) << md;
    if (!do_check) std::fputs(md.c_str(), stdout);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kernel_screen: %s\n", e.what());
    return 1;
  }
}
