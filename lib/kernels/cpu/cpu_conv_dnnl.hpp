#pragma once
// Conv2d through oneDNN's convolution primitives (built when CMake finds oneDNN: HPCT_HAVE_DNNL), used by
// cpu_conv.cpp ahead of its im2col + sgemm path. Legend as cpu_conv.cpp: N images, C input channels, H W input
// size, OC output channels, KH KW kernel, OH OW output size. Our tensors stay NCHW / OIHW; each call reorders them
// into the layouts the primitive picked (nChw16c and friends on AVX-512) inside the caller's workspace, runs the
// primitive with its scratchpad in the workspace too, and reorders the result back. Nothing is allocated per call
// once a shape's primitives exist (they are built and cached by workspace_floats, i.e. when the model plans).
//
// Every function returns false (or -1) when it does not run: oneDNN not built, HPCT_CONV=im2col in the
// environment (read once), or a workspace smaller than workspace_floats(shape); the caller then runs im2col.
// Determinism: oneDNN's CPU convolutions split work statically over the OpenMP threads and reduce the
// weight-gradient partials in thread order: run to run bitwise identical at a fixed thread count (tested).
#include <cstdint>

namespace hpct::kernels::cpu::dnnl_conv {

struct Shape {
  int N, C, H, W, OC, KH, KW, stride, pad;
};

// Floats of workspace the oneDNN path needs for this shape (reorder buffers + scratchpad), or -1 when it is off.
int64_t workspace_floats(const Shape& s);
// out (N,OC,OH,OW) = conv(inp (N,C,H,W), weight (OC,C,KH,KW)), assigned; no bias (the caller adds it).
bool forward(float* out, const float* inp, const float* weight, float* ws, int64_t ws_floats, const Shape& s);
// dinp (N,C,H,W) = conv_transpose(dout (N,OC,OH,OW), weight), assigned.
bool backward_data(float* dinp, const float* dout, const float* weight, float* ws, int64_t ws_floats, const Shape& s);
// dweight (OC,C,KH,KW) += dout (*) inp.
bool backward_weight(float* dweight, const float* dout, const float* inp, float* ws, int64_t ws_floats, const Shape& s);

}  // namespace hpct::kernels::cpu::dnnl_conv
