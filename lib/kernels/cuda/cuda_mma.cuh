#pragma once
// Warp-level tensor-core instructions for the 16-bit storage types: mma.sync m16n8k16 (bf16 or f16 inputs, fp32
// accumulation) and ldmatrix (8x8 matrices of 16-bit elements from shared memory into mma fragments). Under nvcc these
// are inline PTX (sm_80 and later; an older target traps: the host never launches the tensor-core kernels there, see
// cuda_gpt.cu's attention dispatch); under the host emulation (HPCT_CUDA_EMULATION, tests/cuda_emu/cuda_emu.hpp) a
// call into the emulator's warp-collective model of the same instruction. The fragment layouts are the PTX ISA's
// ("Matrix Fragments for mma.m16n8k16 with floating point type", and ldmatrix), restated in cuda_emu.hpp, which
// test_cuda_emu.cpp checks element by element.
//
// Fragments (groupID g = lane / 4, t = lane % 4; two 16-bit elements per 32-bit register, the lower index low):
//   A (16x16, row-major)  a[0] = (g, 2t..2t+1), a[1] = (g+8, 2t..), a[2] = (g, 2t+8..), a[3] = (g+8, 2t+8..)
//   B (16x8, "col")       b[0] = (rows 2t..2t+1, column g), b[1] = (rows 2t+8..2t+9, column g)
//   C, D (16x8, fp32)     c[0], c[1] = (g, 2t), (g, 2t+1); c[2], c[3] = (g+8, 2t), (g+8, 2t+1)
// so the accumulator of two adjacent n-tiles (columns 0..15) holds exactly the A fragment of a 16x16 product with
// those columns as its k: a score tile becomes the next product's A operand without leaving the registers.
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/cuda/cuda_device_common.cuh"

namespace hpct::kernels::cuda::mma {
namespace {  // internal linkage, as cuda_device_common.cuh

// Two floats rounded to the 16-bit type S (to nearest even, as from_float<S>) in one 32-bit register, `lo` in the low
// half: an A or B fragment register built from fp32 values (attention's P and dS).
template <typename S>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  static_assert(sizeof(S) == 2, "pack2 packs 16-bit storage types");
  const S l = from_float<S>(lo), h = from_float<S>(hi);
  uint16_t lb, hb;
  memcpy(&lb, &l, 2);
  memcpy(&hb, &h, 2);
  return static_cast<uint32_t>(lb) | (static_cast<uint32_t>(hb) << 16);
}

// d = a b + c over one 16x16x16 step (d and c may be the same registers), S = __nv_bfloat16 or __half.
template <typename S>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
                                             const float (&c)[4]) {
  static_assert(std::is_same_v<S, __nv_bfloat16> || std::is_same_v<S, __half>, "mma inputs are bf16 or f16");
#if defined(HPCT_CUDA_EMULATION)
  ::cuda_emu::mma_m16n8k16(std::is_same_v<S, __half> ? ::cuda_emu::MmaInput::F16 : ::cuda_emu::MmaInput::BF16, d, a, b,
                           c);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (std::is_same_v<S, __half>) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%10, %11, %12, %13};\n"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
                   "f"(c[3]));
  } else {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%10, %11, %12, %13};\n"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
                   "f"(c[3]));
  }
#elif defined(__CUDA_ARCH__)
  __trap();  // no mma.sync m16n8k16 for 16-bit inputs before sm_80: the host dispatch never launches this here
#endif
}

// d += a b
template <typename S>
__device__ __forceinline__ void mma_acc(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  mma_m16n8k16<S>(d, a, b, d);
}

// ldmatrix.sync.aligned.m8n8.x{N}{.trans}.shared.b16: N = 1, 2 or 4 matrices; lane l (l < 8N) gives `row`, the
// 16-byte aligned shared-memory address of row l % 8 of matrix l / 8 (other lanes' addresses are ignored); lane l gets
// in r[i] the elements (l / 4, 2(l % 4) .. +1) of matrix i, or with TRANS of its transpose.
template <int N, bool TRANS>
__device__ __forceinline__ void ldmatrix(uint32_t (&r)[N], const void* row) {
  static_assert(N == 1 || N == 2 || N == 4, "ldmatrix loads 1, 2 or 4 matrices");
#if defined(HPCT_CUDA_EMULATION)
  ::cuda_emu::ldmatrix(N, TRANS, r, row);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(row));
  if constexpr (N == 4 && TRANS) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
  } else if constexpr (N == 4) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
  } else if constexpr (N == 2 && TRANS) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(addr));
  } else if constexpr (N == 2) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
  } else if constexpr (TRANS) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(addr));
  } else {
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(addr));
  }
#elif defined(__CUDA_ARCH__)
  (void)row;
  __trap();  // ldmatrix needs sm_75; the tensor-core kernels that use it, sm_80
#endif
}

}  // namespace
}  // namespace hpct::kernels::cuda::mma
