#pragma once
// bf16 products through oneDNN's matmul primitive (built when CMake finds oneDNN: HPCT_HAVE_DNNL), for the Linear
// layers (cpu_matmul.cpp) and attention (cpu_attention.cpp) under train.precision = bf16: bf16 operands, fp32
// accumulation, the result rounded once to bf16 or added in fp32 to a float tensor (parameter gradients +=).
// On a CPU with AVX-512 BF16 or AMX this is several times the fp32 GEMM throughput (validation/bench_gemm).
//
// Primitives are built on the first call of each product shape (and OpenMP thread count) and cached: the steady
// training step creates none. Their scratchpad is one buffer of ours, grown when a primitive that needs more is built,
// i.e. during the first step (DESIGN invariant 7 allows nothing later). Calls must come from outside any OpenMP
// parallel region: oneDNN runs its own team of omp_get_max_threads() threads.
//
// When bf16_native() is false (a build without oneDNN, a CPU without bf16 instructions, or HPCT_BF16_GEMM=fp32 in the
// environment) the callers widen their bf16 operands to fp32 and run the fp32 GEMMs (OpenBLAS) instead.
#include <cstdint>
#include <string>

namespace hpct::kernels::cpu {

// One sentence naming how this backend multiplies bf16 tensors (kernels::cpu_bf16_arithmetic, logged by the trainer).
std::string bf16_arithmetic();

namespace dnnl_gemm {

// bf16 products through oneDNN: built with it, the CPU has bf16 instructions (oneDNN's effective ISA is
// avx512_core_bf16 or avx512_core_amx; DNNL_MAX_CPU_ISA lowers it), and HPCT_BF16_GEMM is not "fp32". Decided once.
bool bf16_native();

// A strided operand, strides in elements of its type: element (b0, b1, i, j) lies at b0 s0 + b1 s1 + i rs + j cs.
struct Operand {
  bool bf16 = true;  // else float
  int64_t s0 = 0, s1 = 0, rs = 0, cs = 1;
};

// C (M,N) [+]= alpha A (M,K) B (K,N) [+ bias (N)], for every (b0, b1) of batch0 x batch1. A and B bf16; C bf16
// (rounded once) or float; accumulate: C += the product, in fp32 (float C only); bias: bf16 (N), added in fp32
// before the rounding.
struct Product {
  int batch0 = 1, batch1 = 1, M = 0, N = 0, K = 0;
  Operand a, b, c;
  float alpha = 1.0f;
  bool bias = false;
  bool accumulate = false;
};
void run(const Product& p, const void* a, const void* b, void* c, const void* bias = nullptr);

}  // namespace dnnl_gemm
}  // namespace hpct::kernels::cpu
