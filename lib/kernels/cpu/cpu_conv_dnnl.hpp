#pragma once
// Conv2d through oneDNN's convolution primitives (built when CMake finds oneDNN: HPCT_HAVE_DNNL), used by
// cpu_conv.cpp ahead of its im2col + sgemm path. Legend as cpu_conv.cpp: N images, C input channels, H W input
// size, OC output channels, KH KW kernel, OH OW output size. NCHW activations (and OIHW weights) are reordered by
// each call into the layouts the primitive picked (nChw16c on AVX-512, nhwc for the AMX kernels) inside the caller's
// workspace; the primitive runs with its scratchpad in the workspace too, and the result is reordered back.
// Channels-last activations (Shape::nhwc) are the primitives' own layout: only the weights are reordered. Nothing is
// allocated per call once a shape's primitives exist (they are built and cached by workspace_floats, i.e. when the
// model plans).
//
// Storage A (kernels.hpp): float, or bf16 for activations and the weights' compute copy; dweight is float either
// way (+=). With A = bf16 the primitives take bf16 src / weights / dst and accumulate in fp32 when oneDNN has a
// kernel using the CPU's bf16 instructions (AVX512_BF16, AMX: an implementation name like
// "brgconv:avx512_core_amx_bf16" or "jit_bf16:avx512_core_bf16"); without them (its emulated bf16 kernels run several
// times slower than fp32, its "ref" ones far slower than im2col) the fp32 primitives run instead, the reorders widening
// bf16 to fp32 on the way in and rounding once on the way out: the same arithmetic (bf16 x bf16 products are exact in
// fp32, fp32 sums), only the kernels differ. fp32 primitives whose implementation is "ref" are not used either.
//
// HPCT_CONV=fp32 in the environment (read once) makes bf16 storage take the fp32 primitives always: oneDNN's bf16
// kernels for AVX512_BF16 without AMX ran slower than its fp32 ones on the Intel CPU this was tuned on (the AMX ones
// 2-3x faster); on another CPU compare the two with validation/bench_resnet.
//
// Every function returns false (or -1) when it does not run: oneDNN not built, HPCT_CONV=im2col in the
// environment, no usable implementation for the shape, or a workspace smaller than workspace_floats(shape, act); the
// caller then runs im2col.
// Determinism: oneDNN's CPU convolutions split work statically over the OpenMP threads and reduce the
// weight-gradient partials in thread order: run to run bitwise identical at a fixed thread count (tested).
#include <cstdint>
#include <string>

#include "tensor/bf16.hpp"
#include "tensor/tensor.hpp"

namespace hpct::kernels::cpu::dnnl_conv {

// nhwc: the activations x, y and their gradients are (N,H,W,C) / (N,OH,OW,OC) instead of NCHW (the weights stay OIHW);
// the primitives then run on them in place, without the reorders of the activations. Channels-last needs OC and C to be
// multiples of 16, except a first layer's few image channels (C <= 4 under a spatial kernel): oneDNN 2.6's nxc
// kernels mishandle channel tails (docs/platform.md).
struct Shape {
  int N, C, H, W, OC, KH, KW, stride, pad;
  bool nhwc = false;
};

// Floats of workspace the oneDNN path needs for this shape and storage type (reorder buffers + scratchpad), or -1
// when it is off for them.
int64_t workspace_floats(const Shape& s, DType act);
// out (N,OC,OH,OW) = conv(inp (N,C,H,W), weight (OC,C,KH,KW)) + bias (OC, or null), assigned. A = float: the bias is
// added to the stored output afterwards, as the fp32 path always did; A = bf16: inside the primitive, before the one
// rounding.
template <typename A>
bool forward(A* out, const A* inp, const A* weight, const A* bias, float* ws, int64_t ws_floats, const Shape& s);
// dweight (OC,C,KH,KW) += dout (*) inp.
template <typename A>
bool backward_weight(float* dweight, const A* dout, const A* inp, float* ws, int64_t ws_floats, const Shape& s);
// dinp (N,C,H,W) = conv_transpose(dout (N,OC,OH,OW), weight), assigned. dout_in_workspace: the previous call on this
// workspace was backward_weight with the same dout and shape (conv2d_backward's order), so dout may still be there in
// the primitive's layout; then its reorder is skipped when both primitives use the same layout.
template <typename A>
bool backward_data(A* dinp, const A* dout, const A* weight, float* ws, int64_t ws_floats, const Shape& s,
                   bool dout_in_workspace);

// The implementations oneDNN picked for the shape, e.g. "bf16 fwd brgconv:avx512_core_amx_bf16 | bwd-data
// jit:avx512_core_amx_bf16 | bwd-weights jit:avx512_core_amx_bf16", "fp32 compute of bf16 storage: ..." when the
// bf16 kernels were refused, or why the oneDNN path is off. For benchmarks and test logs.
std::string describe(const Shape& s, DType act);

}  // namespace hpct::kernels::cpu::dnnl_conv
