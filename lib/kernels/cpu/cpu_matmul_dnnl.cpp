// bf16 products through oneDNN's matmul primitive (cpu_matmul_dnnl.hpp says what and why).
// Per product shape (and OpenMP thread count) one Entry, built once: the primitive with user-managed scratchpad and
// its memory objects, created without data (DNNL_MEMORY_NONE) and pointed at each call's tensors.
#include "kernels/cpu/cpu_matmul_dnnl.hpp"

#include <omp.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "core/error.hpp"

#if HPCT_HAVE_DNNL

#include <array>
#include <bit>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <dnnl.hpp>

namespace hpct::kernels::cpu {
namespace dnnl_gemm {
namespace {

using dnnl::memory;
using dt = memory::data_type;

bool env_forces_fp32() {
  const char* v = std::getenv("HPCT_BF16_GEMM");
  return v && std::strcmp(v, "fp32") == 0;
}

bool isa_has_bf16() {
  // the ISA values are nested bit sets: avx512_core_amx contains every bit of avx512_core_bf16
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  const auto bf16 = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_bf16);
  return (isa & bf16) == bf16;
}

const char* isa_name() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core: return "avx512_core";
    case dnnl::cpu_isa::avx2_vnni: return "avx2_vnni";
    case dnnl::cpu_isa::avx2: return "avx2";
    default: return "older than avx2";
  }
}

dnnl::engine& engine() {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}
dnnl::stream& stream() {
  static dnnl::stream st(engine());
  return st;
}

// A plain product is 2-D, a batched one 4-D even when batch0 = 1: oneDNN 2.6's fast (brgemm) matmul takes neither
// 4-D shapes with stride-0 unit batch dimensions (the plain products) nor a 3-D (NH, T, HS) result whose heads are
// interleaved in rows, (T, NH HS), which is what the 4-D (1, NH, T, HS) layout of the same memory is accepted as.
// It also wants A and B dense (rows of exactly K, or N, elements, possibly transposed) and C dense up to a permutation
// of its dimensions; anything else runs its much slower gemm:jit or reference implementations (the callers lay their
// operands out accordingly: cpu_attention.cpp).
memory::dims shape_of(const Product& p, int64_t rows, int64_t cols) {
  if (p.batch0 > 1 || p.batch1 > 1) return {p.batch0, p.batch1, rows, cols};
  return {rows, cols};
}
memory::desc desc_of(const Product& p, const Operand& o, int rows, int cols) {
  const memory::dims strides = p.batch0 > 1 || p.batch1 > 1 ? memory::dims{o.s0, o.s1, o.rs, o.cs}
                                                            : memory::dims{o.rs, o.cs};
  return memory::desc(shape_of(p, rows, cols), o.bf16 ? dt::bf16 : dt::f32, strides);
}

struct Entry {
  dnnl::matmul prim;
  memory a, b, c, bias, scratch;  // scratch: a null memory when the primitive needs none
  size_t scratch_bytes = 0;
  std::string impl;
};

using Key = std::array<int64_t, 24>;
Key key_of(const Product& p) {
  return {p.batch0, p.batch1,     p.M,
          p.N,      p.K,          p.a.bf16,
          p.a.s0,   p.a.s1,       p.a.rs,
          p.a.cs,   p.b.bf16,     p.b.s0,
          p.b.s1,   p.b.rs,       p.b.cs,
          p.c.bf16, p.c.s0,       p.c.s1,
          p.c.rs,   p.c.cs,       std::bit_cast<int32_t>(p.alpha),
          p.bias,   p.accumulate, omp_get_max_threads()};
}

std::unique_ptr<Entry> build(const Product& p) {
  HPCT_CHECK(p.a.bf16 && p.b.bf16, "dnnl_gemm: the operands of a bf16 product must be bf16");
  HPCT_CHECK(!p.accumulate || !p.c.bf16, "dnnl_gemm: accumulation (C +=) is for float results only");
  const memory::desc a = desc_of(p, p.a, p.M, p.K), b = desc_of(p, p.b, p.K, p.N), c = desc_of(p, p.c, p.M, p.N);
  memory::desc bias;
  if (p.bias) {
    // (1, ..., 1, N): broadcast over the batch and the rows
    memory::dims dims(shape_of(p, 1, p.N).size(), 1), strides(dims.size(), p.N);
    dims.back() = p.N;
    strides.back() = 1;
    bias = memory::desc(dims, dt::bf16, strides);
  }
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (p.alpha != 1.0f) attr.set_output_scales(0, {p.alpha});
  if (p.accumulate) {
    dnnl::post_ops po;
    po.append_sum(1.0f);  // C = product + 1 * C, in fp32 (C is float)
    attr.set_post_ops(po);
  }
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, bias, c), attr, engine());
  auto e = std::make_unique<Entry>();
  e->prim = dnnl::matmul(pd);
  e->a = memory(a, engine(), DNNL_MEMORY_NONE);
  e->b = memory(b, engine(), DNNL_MEMORY_NONE);
  e->c = memory(c, engine(), DNNL_MEMORY_NONE);
  if (p.bias) e->bias = memory(bias, engine(), DNNL_MEMORY_NONE);
  e->scratch_bytes = pd.scratchpad_desc().get_size();
  if (e->scratch_bytes) e->scratch = memory(pd.scratchpad_desc(), engine(), DNNL_MEMORY_NONE);
  e->impl = pd.impl_info_str();
  return e;
}

std::mutex g_mu;
std::map<Key, std::unique_ptr<Entry>> g_cache;
std::vector<unsigned char> g_scratch;  // shared by every primitive: calls are serialised by g_mu

}  // namespace

bool bf16_native() {
  static const bool on = !env_forces_fp32() && isa_has_bf16();
  return on;
}

void run(const Product& p, const void* a, const void* b, void* c, const void* bias) {
  HPCT_CHECK(!omp_in_parallel(), "dnnl_gemm::run called inside an OpenMP parallel region (oneDNN would run on one "
                                 "thread); call it from the host thread, outside any region");
  HPCT_CHECK(bf16_native(), "dnnl_gemm::run called without native bf16 GEMMs; the caller must take its fp32 path");
  HPCT_CHECK(!p.bias || bias, "dnnl_gemm::run: a product planned with a bias got a null bias");
  const std::lock_guard<std::mutex> lock(g_mu);
  auto& slot = g_cache[key_of(p)];
  if (!slot) {
    slot = build(p);
    if (slot->scratch_bytes > g_scratch.size()) g_scratch.resize(slot->scratch_bytes);  // first step only
  }
  Entry& e = *slot;
  e.a.set_data_handle(const_cast<void*>(a));
  e.b.set_data_handle(const_cast<void*>(b));
  e.c.set_data_handle(c);
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, e.a}, {DNNL_ARG_WEIGHTS, e.b}, {DNNL_ARG_DST, e.c}};
  if (p.bias) {
    e.bias.set_data_handle(const_cast<void*>(bias));
    args.emplace(DNNL_ARG_BIAS, e.bias);
  }
  if (e.scratch_bytes) {
    e.scratch.set_data_handle(g_scratch.data());
    args.emplace(DNNL_ARG_SCRATCHPAD, e.scratch);
  }
  e.prim.execute(stream(), args);
  stream().wait();
}

// The implementation oneDNN picks for a Linear-layer-like product (e.g. "brg:avx512_core_amx_bf16").
std::string probe_impl() {
  Product p;
  p.M = 64;
  p.N = 64;
  p.K = 64;
  p.a = {true, 0, 0, 64, 1};
  p.b = {true, 0, 0, 1, 64};
  p.c = {true, 0, 0, 64, 1};
  const std::lock_guard<std::mutex> lock(g_mu);
  auto& slot = g_cache[key_of(p)];
  if (!slot) slot = build(p);
  return slot->impl;
}

}  // namespace dnnl_gemm

std::string bf16_arithmetic() {
  const dnnl_version_t* v = dnnl_version();
  const std::string onednn = fmt::format("oneDNN {}.{}.{}", v->major, v->minor, v->patch);
  if (dnnl_gemm::bf16_native())
    return fmt::format("bf16 GEMMs with fp32 accumulation through {} matmul ({}); element-wise ops in fp32 on bf16 "
                       "storage",
                       onednn, dnnl_gemm::probe_impl());
  if (dnnl_gemm::env_forces_fp32())
    return "fp32 GEMMs (OpenBLAS) on bf16 storage, widened per call: HPCT_BF16_GEMM=fp32 is set";
  return fmt::format("fp32 GEMMs (OpenBLAS) on bf16 storage, widened per call: {} finds no bf16 instructions on this "
                     "CPU (ISA {}; avx512_core_bf16 or AMX needed)",
                     onednn, dnnl_gemm::isa_name());
}

}  // namespace hpct::kernels::cpu

#else  // no oneDNN: every bf16 product runs in fp32 through OpenBLAS

namespace hpct::kernels::cpu {
namespace dnnl_gemm {
bool bf16_native() { return false; }
void run(const Product&, const void*, const void*, void*, const void*) {
  HPCT_FAIL("dnnl_gemm::run: this build has no oneDNN (HPCT_KERNELS_DNNL=OFF or libdnnl-dev missing); the caller must "
            "take its fp32 path");
}
}  // namespace dnnl_gemm

std::string bf16_arithmetic() {
  return "fp32 GEMMs (OpenBLAS) on bf16 storage, widened per call: this build has no oneDNN (install libdnnl-dev, "
         "scripts/setup.sh, and reconfigure)";
}
}  // namespace hpct::kernels::cpu

#endif
