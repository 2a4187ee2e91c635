// CPU backend: the convolutional layers of a ResNet, NCHW. Legend: N images, C input channels, H W input size,
// OC output channels, KH KW kernel, OH OW output size, CK = C*KH*KW (im2col rows), OHW = OH*OW, HW = H*W.
// Forward and backward are paired; parameter grads (dweight, dbias, dgamma, dbeta) +=, activation grads (dinp) =.
// Storage A = float or bf16 (kernels.hpp): activations, their gradients and the parameters read are A; parameter
// gradients and statistics are float. A bf16 value is widened to fp32 when loaded, all arithmetic is fp32 (double where
// noted), and every A output is rounded once, when stored (from_f32<A>, tensor/bf16.hpp); with A = float these are
// no-ops and every result is bitwise what it was before bf16 existed.
//
// Conv2d: through oneDNN's convolution primitives when built with it and the workspace holds their share
// (cpu_conv_dnnl.hpp: direct AVX-512 / AMX convolutions, 2-3x faster than im2col here, and what PyTorch uses; bf16
// storage runs oneDNN's bf16 kernels where the CPU has bf16 instructions); otherwise im2col + sgemm, one image per
// task:
//   forward   col (CK,OHW) = im2col(inp[n]);  out[n] (OC,OHW) = weight (OC,CK) @ col + bias
//   backward  weight phase: col = im2col(inp[n]);  dweight (OC,CK) += dout[n] (OC,OHW) @ col^T
//             data phase:   dcol (CK,OHW) = weight^T (CK,OC) @ dout[n];  dinp[n] = col2im(dcol)
// (two passes over the images, so that the profile, kernels.hpp, can time the phases apart; the same work)
// With T threads the images are split into T contiguous blocks, each thread calling single-threaded OpenBLAS
// (omp_in_parallel(), cpu_gemm.hpp) on its own column buffer and its own dweight partial, which are then added to
// dweight in thread order (deterministic for a fixed thread count, like the GEMMs). A 1x1, stride-1, unpadded
// fp32 convolution is a plain GEMM on the image itself (no im2col). With one thread (or one image) the images run in
// turn and each GEMM may be split by sgemm_rowmajor, never from inside a team of one (cpu_gemm.hpp explains why).
// bf16 storage on the im2col path: im2col widens while it copies, the weight is widened once per call into the
// workspace, and each thread widens dout[n] and rounds out[n] / dinp[n] through fp32 buffers of its own (Im2col).
//
// BatchNorm2d: one channel per task; statistics two-pass in double (mean, then M2 = sum (x - mean)^2), the
// backward's sums in double. Every per-channel reduction walks (n, hw) in order: bitwise reproducible.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

#include "core/error.hpp"
#include "core/test_fault.hpp"
#include "kernels/batchnorm_stats.hpp"
#include "kernels/cpu/cpu_conv_common.hpp"
#include "kernels/cpu/cpu_conv_dnnl.hpp"
#include "kernels/cpu/cpu_gemm.hpp"
#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/cpu_math.hpp"
#include "kernels/cpu/cpu_profile.hpp"

namespace hpct::kernels::cpu {
namespace {

template <typename A>
constexpr bool kF32 = std::is_same_v<A, float>;
template <typename A>
constexpr DType act_of() {
  return kF32<A> ? DType::F32 : DType::BF16;
}

// dst = src as fp32 (exact); dst = src rounded to A.
template <typename A>
void widen(float* dst, const A* src, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; i++) dst[i] = to_f32(src[i]);
}
template <typename A>
void narrow(A* dst, const float* src, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; i++) dst[i] = from_f32<A>(src[i]);
}

struct ConvDims {
  int N, C, H, W, OC, KH, KW, stride, pad, OH, OW;
  int64_t CK() const { return static_cast<int64_t>(C) * KH * KW; }
  int64_t OHW() const { return static_cast<int64_t>(OH) * OW; }
  int64_t HW() const { return static_cast<int64_t>(H) * W; }
  bool pointwise() const { return KH == 1 && KW == 1 && stride == 1 && pad == 0; }
  dnnl_conv::Shape shape(bool nhwc = false) const { return {N, C, H, W, OC, KH, KW, stride, pad, nhwc}; }
};

// The im2col path's workspace: `shared` floats, then one slot per thread:
//   float  slot = col (CK,OHW) | dweight partial (OC,CK)
//   bf16   shared = the weight widened (OC,CK);  slot = col | dweight partial | y (OC,OHW) | x (C,HW), fp32 buffers
//          of dout[n] / out[n] and of dinp[n] before they are rounded
struct Im2col {
  int64_t shared, slot;
  // offsets within a slot
  int64_t col, dw, y, x;
};
Im2col im2col_plan(const ConvDims& d, DType act) {
  const int64_t col = d.CK() * d.OHW(), dw = static_cast<int64_t>(d.OC) * d.CK();
  if (act == DType::F32) return {0, col + dw, 0, col, 0, 0};
  const int64_t y = static_cast<int64_t>(d.OC) * d.OHW(), x = static_cast<int64_t>(d.C) * d.HW();
  return {dw, col + dw + y + x, 0, col, col + dw, col + dw + y};
}

// The shape was checked by the dispatch (kernels/op_checks.hpp).
ConvDims conv_dims(int N, int C, int H, int W, int OC, int KH, int KW, int stride, int pad) {
  ConvDims d{N, C, H, W, OC, KH, KW, stride, pad, (H + 2 * pad - KH) / stride + 1, (W + 2 * pad - KW) / stride + 1};
  return d;
}

// The output columns ow whose input column iw = ow*stride - pad + kw lies in [0, W): [lo, hi).
inline void valid_range(int k, int pad, int stride, int in, int out, int& lo, int& hi) {
  const int first = pad - k;  // ow*stride >= first
  lo = first <= 0 ? 0 : (first + stride - 1) / stride;
  const int last = in - 1 + pad - k;  // ow*stride <= last
  hi = last < 0 ? 0 : std::min(out, last / stride + 1);
  if (hi < lo) hi = lo;
}

// col (CK,OHW), row (c,kh,kw), column (oh,ow) = img[c, oh*s-pad+kh, ow*s-pad+kw] as fp32, or 0 in the padding.
template <typename A>
void im2col(float* col, const A* img /*(C,H,W)*/, const ConvDims& d) {
  const int64_t OHW = d.OHW();
  for (int c = 0; c < d.C; c++)
    for (int kh = 0; kh < d.KH; kh++)
      for (int kw = 0; kw < d.KW; kw++) {
        float* row = col + ((static_cast<int64_t>(c) * d.KH + kh) * d.KW + kw) * OHW;  // (OH,OW)
        int lo, hi;
        valid_range(kw, d.pad, d.stride, d.W, d.OW, lo, hi);
        for (int oh = 0; oh < d.OH; oh++) {
          float* r = row + static_cast<int64_t>(oh) * d.OW;
          const int ih = oh * d.stride - d.pad + kh;
          if (ih < 0 || ih >= d.H) {
            std::fill(r, r + d.OW, 0.0f);
            continue;
          }
          const A* src = img + (static_cast<int64_t>(c) * d.H + ih) * d.W - d.pad + kw;  // src[ow*s] = x[ih, iw]
          std::fill(r, r + lo, 0.0f);
          if (d.stride == 1) {
#pragma omp simd
            for (int ow = lo; ow < hi; ow++) r[ow] = to_f32(src[ow]);
          } else {
            for (int ow = lo; ow < hi; ow++) r[ow] = to_f32(src[static_cast<int64_t>(ow) * d.stride]);
          }
          std::fill(r + hi, r + d.OW, 0.0f);
        }
      }
}

// img (C,H,W) = the sum of every col entry that im2col copied from each pixel (assigned).
void col2im(float* img, const float* col, const ConvDims& d) {
  const int64_t OHW = d.OHW();
  std::fill(img, img + static_cast<int64_t>(d.C) * d.HW(), 0.0f);
  for (int c = 0; c < d.C; c++)
    for (int kh = 0; kh < d.KH; kh++)
      for (int kw = 0; kw < d.KW; kw++) {
        const float* row = col + ((static_cast<int64_t>(c) * d.KH + kh) * d.KW + kw) * OHW;
        int lo, hi;
        valid_range(kw, d.pad, d.stride, d.W, d.OW, lo, hi);
        for (int oh = 0; oh < d.OH; oh++) {
          const int ih = oh * d.stride - d.pad + kh;
          if (ih < 0 || ih >= d.H) continue;
          const float* r = row + static_cast<int64_t>(oh) * d.OW;
          float* dst = img + (static_cast<int64_t>(c) * d.H + ih) * d.W - d.pad + kw;
          if (d.stride == 1) {
#pragma omp simd
            for (int ow = lo; ow < hi; ow++) dst[ow] += r[ow];
          } else {
            for (int ow = lo; ow < hi; ow++) dst[static_cast<int64_t>(ow) * d.stride] += r[ow];
          }
        }
      }
}

// "op KHxKWsS C>OC @H", e.g. "conv2d_forward 3x3s1 16>16 @28": a profile row per layer shape.
std::string conv_label(const char* op, const ConvDims& d) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "%s %dx%ds%d %d>%d @%d", op, d.KH, d.KW, d.stride, d.C, d.OC, d.H);
  return buf;
}

// Threads for an image loop: at most one per image and one per workspace slot.
int conv_threads(const char* op, const ConvDims& d, const Im2col& p, DType act, const float* workspace,
                 int64_t workspace_floats) {
  const int64_t slots = workspace && workspace_floats > p.shared ? (workspace_floats - p.shared) / p.slot : 0;
  HPCT_CHECK(slots >= 1,
             "{}: workspace of {} floats is smaller than one thread's share ({} floats with {} storage); size it with "
             "conv2d_workspace_floats for the same shape and storage type",
             op, workspace_floats, p.shared + p.slot, dtype_name(act));
  return static_cast<int>(std::min<int64_t>({slots, omp_get_max_threads(), d.N}));
}

// Runs body(n, slot) for every image: in turn with slot 0 (GEMMs may split themselves), or over `threads` contiguous
// blocks of images with one slot per thread. after_blocks(threads) runs inside the team after a barrier.
template <typename Body, typename After>
void for_each_image(int threads, int N, Body&& body, After&& after_blocks) {
  if (threads <= 1) {
    for (int n = 0; n < N; n++) body(n, 0);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int lo = static_cast<int>(static_cast<int64_t>(N) * t / nt);
    const int hi = static_cast<int>(static_cast<int64_t>(N) * (t + 1) / nt);
    for (int n = lo; n < hi; n++) body(n, t);
#pragma omp barrier
    after_blocks(nt);
  }
}

// The weight as fp32 for the im2col GEMMs: itself, or (bf16) widened into the workspace's shared part.
template <typename A>
const float* weight_f32(const A* weight, float* workspace, const ConvDims& d) {
  if constexpr (kF32<A>) {
    return weight;
  } else {
    widen(workspace, weight, static_cast<int64_t>(d.OC) * d.CK());
    return workspace;
  }
}

}  // namespace

// ---- Conv2d ---------------------------------------------------------------------------------------------
int64_t conv2d_workspace_floats(int N, int C, int H, int W, int OC, int KH, int KW, int stride, int pad, DType act) {
  HPCT_CHECK(act == DType::F32 || act == DType::BF16,
             "conv2d_workspace_floats: storage type {} is not an activation type; pass DType::F32 or DType::BF16",
             dtype_name(act));
  const ConvDims d = conv_dims(N, C, H, W, OC, KH, KW, stride, pad);
  const Im2col p = im2col_plan(d, act);
  const int64_t im2col = p.shared + std::min<int64_t>(omp_get_max_threads(), N) * p.slot;
  return std::max(im2col, dnnl_conv::workspace_floats(d.shape(), act));
}

template <typename A>
void conv2d_forward(A* out, const A* inp, const A* weight, const A* bias, float* workspace, int64_t workspace_floats,
                    int N, int C, int H, int W, int OC, int KH, int KW, int stride, int pad) {
  const ConvDims d = conv_dims(N, C, H, W, OC, KH, KW, stride, pad);
  const std::string label = profile_on() ? conv_label("conv2d_forward", d) : std::string();
  const ProfileScope ps(label);
  if (dnnl_conv::forward(out, inp, weight, bias, workspace, workspace_floats, d.shape())) return;
  const int64_t CK = d.CK(), OHW = d.OHW();
  const Im2col p = im2col_plan(d, act_of<A>());
  const int threads = conv_threads("conv2d_forward", d, p, act_of<A>(), workspace, workspace_floats);
  const float* wf = weight_f32(weight, workspace, d);  // (OC,CK)
  auto body = [&](int n, int t) {
    const A* x = inp + static_cast<int64_t>(n) * C * d.HW();  // (C,H,W)
    A* o = out + static_cast<int64_t>(n) * OC * OHW;          // (OC,OHW)
    float* slot = workspace + p.shared + t * p.slot;
    if constexpr (kF32<A>) {
      const float* col = x;  // (CK,OHW)
      if (!d.pointwise()) {
        im2col(slot + p.col, x, d);
        col = slot + p.col;
      }
      if (bias)
        for (int oc = 0; oc < OC; oc++) std::fill(o + oc * OHW, o + (oc + 1) * OHW, bias[oc]);
      sgemm_rowmajor(false, false, OC, static_cast<int>(OHW), static_cast<int>(CK), 1.0f, wf, static_cast<int>(CK), col,
                     static_cast<int>(OHW), bias ? 1.0f : 0.0f, o, static_cast<int>(OHW));
    } else {
      float* col = slot + p.col;  // (CK,OHW)
      float* y = slot + p.y;      // (OC,OHW)
      im2col(col, x, d);
      if (bias)
        for (int oc = 0; oc < OC; oc++) std::fill(y + oc * OHW, y + (oc + 1) * OHW, to_f32(bias[oc]));
      sgemm_rowmajor(false, false, OC, static_cast<int>(OHW), static_cast<int>(CK), 1.0f, wf, static_cast<int>(CK), col,
                     static_cast<int>(OHW), bias ? 1.0f : 0.0f, y, static_cast<int>(OHW));
      narrow(o, y, OC * OHW);
    }
  };
  for_each_image(threads, N, body, [](int) {});
}

template <typename A>
void conv2d_backward(A* dinp, float* dweight, float* dbias, const A* dout, const A* inp, const A* weight,
                     float* workspace, int64_t workspace_floats, int N, int C, int H, int W, int OC, int KH, int KW,
                     int stride, int pad) {
  const ConvDims d = conv_dims(N, C, H, W, OC, KH, KW, stride, pad);
  const int64_t CK = d.CK(), OHW = d.OHW(), WN = OC * CK;
  const int iCK = static_cast<int>(CK), iOHW = static_cast<int>(OHW);
  const Im2col p = im2col_plan(d, act_of<A>());
  // oneDNN's primitives when they run (the same workspace check for both phases), else im2col
  const int64_t dnnl_floats = dnnl_conv::workspace_floats(d.shape(), act_of<A>());
  const bool dnnl_ok = workspace && dnnl_floats >= 0 && workspace_floats >= dnnl_floats;
  if (dnnl_ok) {
    const std::string label = profile_on() ? conv_label("conv2d_backward/weight", d) : std::string();
    const ProfileScope ps(label);
    HPCT_CHECK(dnnl_conv::backward_weight(dweight, dout, inp, workspace, workspace_floats, d.shape()),
               "conv2d_backward: oneDNN backward-weights did not run");
  } else {
    const int threads = conv_threads("conv2d_backward", d, p, act_of<A>(), workspace, workspace_floats);
    // weight: dweight (OC,CK) += sum_n dout[n] (OC,OHW) @ im2col(inp[n])^T
    const std::string label = profile_on() ? conv_label("conv2d_backward/weight", d) : std::string();
    const ProfileScope ps(label);
    // with several threads each accumulates its images into its own partial (OC,CK), zeroed here
    if (threads > 1)
      for (int t = 0; t < threads; t++) {
        float* part = workspace + p.shared + t * p.slot + p.dw;
        std::fill(part, part + WN, 0.0f);
      }
    auto body = [&](int n, int t) {
      const A* x = inp + static_cast<int64_t>(n) * C * d.HW();  // (C,H,W)
      const A* dy = dout + static_cast<int64_t>(n) * OC * OHW;  // (OC,OHW)
      float* slot = workspace + p.shared + t * p.slot;
      float* dw = threads > 1 ? slot + p.dw : dweight;  // (OC,CK)
      if constexpr (kF32<A>) {
        const float* col = x;
        if (!d.pointwise()) {
          im2col(slot + p.col, x, d);
          col = slot + p.col;
        }
        sgemm_rowmajor(false, true, OC, iCK, iOHW, 1.0f, dy, iOHW, col, iOHW, 1.0f, dw, iCK);
      } else {
        im2col(slot + p.col, x, d);
        widen(slot + p.y, dy, OC * OHW);
        sgemm_rowmajor(false, true, OC, iCK, iOHW, 1.0f, slot + p.y, iOHW, slot + p.col, iOHW, 1.0f, dw, iCK);
      }
    };
    auto reduce_partials = [&](int nt) {
    // dweight += partial_0 + partial_1 + ... in thread order; elements split over the team
#pragma omp for schedule(static)
      for (int64_t i = 0; i < WN; i++) {
        float s = 0.0f;
        for (int t = 0; t < nt; t++) s += workspace[p.shared + t * p.slot + p.dw + i];
        dweight[i] += s;
      }
    };
    for_each_image(threads, N, body, reduce_partials);
  }
  if (dinp && dnnl_ok) {
    const std::string label = profile_on() ? conv_label("conv2d_backward/data", d) : std::string();
    const ProfileScope ps(label);
    // the weight phase above just left dout in the workspace, in the primitives' layout
    HPCT_CHECK(dnnl_conv::backward_data(dinp, dout, weight, workspace, workspace_floats, d.shape(),
                                        /*dout_in_workspace=*/true),
               "conv2d_backward: oneDNN backward-data did not run");
  } else if (dinp) {
    // data: dinp[n] = col2im(weight^T (CK,OC) @ dout[n] (OC,OHW))
    const std::string label = profile_on() ? conv_label("conv2d_backward/data", d) : std::string();
    const ProfileScope ps(label);
    const int threads = conv_threads("conv2d_backward", d, p, act_of<A>(), workspace, workspace_floats);
    const float* wf = weight_f32(weight, workspace, d);  // (OC,CK)
    auto body = [&](int n, int t) {
      const A* dy = dout + static_cast<int64_t>(n) * OC * OHW;  // (OC,OHW)
      A* dx = dinp + static_cast<int64_t>(n) * C * d.HW();      // (C,H,W)
      float* slot = workspace + p.shared + t * p.slot;
      if constexpr (kF32<A>) {
        if (d.pointwise()) {
          sgemm_rowmajor(true, false, iCK, iOHW, OC, 1.0f, wf, iCK, dy, iOHW, 0.0f, dx, iOHW);
        } else {
          float* buf = slot + p.col;  // dcol (CK,OHW)
          sgemm_rowmajor(true, false, iCK, iOHW, OC, 1.0f, wf, iCK, dy, iOHW, 0.0f, buf, iOHW);
          col2im(dx, buf, d);
        }
      } else {
        widen(slot + p.y, dy, OC * OHW);
        sgemm_rowmajor(true, false, iCK, iOHW, OC, 1.0f, wf, iCK, slot + p.y, iOHW, 0.0f, slot + p.col, iOHW);
        col2im(slot + p.x, slot + p.col, d);
        narrow(dx, slot + p.x, C * d.HW());
      }
    };
    for_each_image(threads, N, body, [](int) {});
  }
  if (dbias) {
    // double over the N*OHW terms of each channel, in (n, ohw) order
#pragma omp parallel for schedule(static) if (static_cast <int64_t>(N) * OC * OHW >= kMinParallel)
    for (int oc = 0; oc < OC; oc++) {
      double acc = 0.0;
      for (int n = 0; n < N; n++) {
        const A* dy = dout + (static_cast<int64_t>(n) * OC + oc) * OHW;
#pragma omp simd reduction(+ : acc)
        for (int64_t i = 0; i < OHW; i++) acc += to_f32(dy[i]);
      }
      dbias[oc] += static_cast<float>(acc);
    }
  }
}

// ---- Conv2d on channels-last activations: oneDNN's nxc primitives on the tensors themselves -----------------------
namespace {
[[noreturn]] void no_nhwc_conv(const char* op, const ConvDims& d, DType act) {
  HPCT_FAIL("{}: channels-last activations need oneDNN's convolutions, which do not run for {} ({} storage): {}; "
            "size the workspace with conv2d_workspace_floats under the same ExecContext, or run the model with "
            "model.memory_format = nchw",
            op, conv_label("conv", d), dtype_name(act), dnnl_conv::describe(d.shape(true), act));
}
}  // namespace

int64_t conv2d_workspace_floats_nhwc(int N, int C, int H, int W, int OC, int KH, int KW, int stride, int pad,
                                     DType act) {
  HPCT_CHECK(act == DType::F32 || act == DType::BF16,
             "conv2d_workspace_floats: storage type {} is not an activation type; pass DType::F32 or DType::BF16",
             dtype_name(act));
  const ConvDims d = conv_dims(N, C, H, W, OC, KH, KW, stride, pad);
  return dnnl_conv::workspace_floats(d.shape(true), act);
}

template <typename A>
void conv2d_forward_nhwc(A* out, const A* inp, const A* weight, const A* bias, float* workspace,
                         int64_t workspace_floats, int N, int C, int H, int W, int OC, int KH, int KW, int stride,
                         int pad) {
  const ConvDims d = conv_dims(N, C, H, W, OC, KH, KW, stride, pad);
  const std::string label = profile_on() ? conv_label("conv2d_forward", d) : std::string();
  const ProfileScope ps(label);
  if (!dnnl_conv::forward(out, inp, weight, bias, workspace, workspace_floats, d.shape(true)))
    no_nhwc_conv("conv2d_forward", d, act_of<A>());
}

template <typename A>
void conv2d_backward_nhwc(A* dinp, float* dweight, float* dbias, const A* dout, const A* inp, const A* weight,
                          float* workspace, int64_t workspace_floats, int N, int C, int H, int W, int OC, int KH,
                          int KW, int stride, int pad) {
  const ConvDims d = conv_dims(N, C, H, W, OC, KH, KW, stride, pad);
  {
    const std::string label = profile_on() ? conv_label("conv2d_backward/weight", d) : std::string();
    const ProfileScope ps(label);
    if (!dnnl_conv::backward_weight(dweight, dout, inp, workspace, workspace_floats, d.shape(true)))
      no_nhwc_conv("conv2d_backward", d, act_of<A>());
  }
  if (dinp) {
    const std::string label = profile_on() ? conv_label("conv2d_backward/data", d) : std::string();
    const ProfileScope ps(label);
    if (!dnnl_conv::backward_data(dinp, dout, weight, workspace, workspace_floats, d.shape(true),
                                  /*dout_in_workspace=*/true))
      no_nhwc_conv("conv2d_backward", d, act_of<A>());
  }
  if (dbias) {
    // double over the N*OHW terms of each channel, in (n, ohw) order, as the NCHW path
    const int64_t positions = static_cast<int64_t>(N) * d.OHW();
#pragma omp parallel for schedule(static) if (positions * OC >= kMinParallel)
    for (int oc = 0; oc < OC; oc++) {
      double acc = 0.0;
      for (int64_t p = 0; p < positions; p++) acc += to_f32(dout[p * OC + oc]);
      dbias[oc] += static_cast<float>(acc);
    }
  }
}

// ---- BatchNorm2d ---------------------------------------------------------------------------------------
// Each thread takes a contiguous range of channels, in blocks of about kBnBlockBytes of input. A block's first pass
// (the sums of the statistics, or of the backward) reads image by image, each image's block of channels being one
// contiguous run: a channel alone is N runs of HW values C HW apart (392 bytes at 14x14 in bf16), too short for the
// hardware prefetchers, and that first pass reads from memory (2x slower channel by channel at 14x14). The block's
// later passes then find it in L2. Each channel's sum still adds its images in order, one plane sum at a time: the
// results depend neither on the blocking nor on the thread count (and are bitwise those of the channel-by-channel
// loops).
namespace {

constexpr int64_t kBnBlockBytes = 1 << 20;  // half of a 2 MB L2: measured best of 256 KB .. whole range, both types
constexpr int kBnBlock = 64;                // at most this many channels per block (the sums live on the stack)

bool bn_parallel(int N, int C, int HW) { return static_cast<int64_t>(N) * C * HW >= kMinParallel && C > 1; }

// fn(c0, c1) for every block [c0, c1) of channels, the channels split over the threads.
template <typename A, typename Fn>
void for_channel_blocks(int N, int C, int HW, Fn&& fn) {
  const int64_t channel_bytes = static_cast<int64_t>(N) * HW * static_cast<int64_t>(sizeof(A));
  const int per_block = static_cast<int>(std::clamp<int64_t>(kBnBlockBytes / channel_bytes, 1, kBnBlock));
#pragma omp parallel if (bn_parallel(N, C, HW))
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int lo = static_cast<int>(static_cast<int64_t>(C) * t / nt);
    const int hi = static_cast<int>(static_cast<int64_t>(C) * (t + 1) / nt);
    for (int c0 = lo; c0 < hi; c0 += per_block) fn(c0, std::min(hi, c0 + per_block));
  }
}

// mean[c - c0] = sum over (n, hw) of inp[n, c] / (N HW) for the block's channels, in double.
template <typename A>
void block_means(double* mean, const A* inp, int c0, int c1, int N, int C, int HW) {
  for (int c = c0; c < c1; c++) mean[c - c0] = 0.0;
  for (int n = 0; n < N; n++)
    for (int c = c0; c < c1; c++) {
      const A* x = inp + (static_cast<int64_t>(n) * C + c) * HW;
      double s = 0.0;
#pragma omp simd reduction(+ : s)
      for (int i = 0; i < HW; i++) s += to_f32(x[i]);
      mean[c - c0] += s;
    }
  for (int c = c0; c < c1; c++) mean[c - c0] /= static_cast<double>(N) * HW;
}

// M2 = sum (x - mean)^2 of channel c, the second pass in double.
template <typename A>
double channel_m2(const A* inp, double mean, int c, int N, int C, int HW) {
  double q = 0.0;
  for (int n = 0; n < N; n++) {
    const A* x = inp + (static_cast<int64_t>(n) * C + c) * HW;
    double qn = 0.0;
#pragma omp simd reduction(+ : qn)
    for (int i = 0; i < HW; i++) {
      const double dx = to_f32(x[i]) - mean;
      qn += dx * dx;
    }
    q += qn;
  }
  return q;
}

// out[:, c] = (x - mean) * (rstd * gamma) + beta; mean and rstd from the float stats row (count, mean, M2).
template <typename A>
void apply_channel(A* out, float* save_mean, float* save_rstd, const A* inp, const A* gamma, const A* beta,
                   const float* st /*(3)*/, int c, int N, int C, int HW, float eps) {
  const float mean = st[1];
  const float rstd = bn_rstd(st, eps);
  const float scale = rstd * to_f32(gamma[c]), shift = to_f32(beta[c]);
  for (int n = 0; n < N; n++) {
    const int64_t off = (static_cast<int64_t>(n) * C + c) * HW;
    const A* x = inp + off;
    A* o = out + off;
#pragma omp simd
    for (int i = 0; i < HW; i++) o[i] = from_f32<A>((to_f32(x[i]) - mean) * scale + shift);
  }
  save_mean[c] = mean;
  save_rstd[c] = rstd;
}

// sum_dy[c - c0] = sum dout, sum_dy_xhat[c - c0] = sum dout * xhat over (n, hw) for the block's channels, in double.
template <typename A>
void block_grad_sums(double* sum_dy, double* sum_dy_xhat, const A* dout, const A* inp, const float* save_mean,
                     const float* save_rstd, int c0, int c1, int N, int C, int HW) {
  for (int c = c0; c < c1; c++) sum_dy[c - c0] = sum_dy_xhat[c - c0] = 0.0;
  for (int n = 0; n < N; n++)
    for (int c = c0; c < c1; c++) {
      const int64_t off = (static_cast<int64_t>(n) * C + c) * HW;
      const A* x = inp + off;
      const A* dy = dout + off;
      const float mean = save_mean[c], rstd = save_rstd[c];
      double a = 0.0, b = 0.0;
#pragma omp simd reduction(+ : a, b)
      for (int i = 0; i < HW; i++) {
        const float g = to_f32(dy[i]);
        a += g;
        b += static_cast<double>(g) * ((to_f32(x[i]) - mean) * rstd);
      }
      sum_dy[c - c0] += a;
      sum_dy_xhat[c - c0] += b;
    }
}

// dinp[:, c] = gamma rstd (dout - mean_dy - xhat mean_dy_xhat)
template <typename A>
void dinp_channel(A* dinp, const A* dout, const A* inp, float mean, float rstd, float gamma, double sum_dy,
                  double sum_dy_xhat, double count, int c, int N, int C, int HW) {
  const float k0 = gamma * rstd;
  const float mdy = static_cast<float>(sum_dy / count), mdyx = static_cast<float>(sum_dy_xhat / count);
  for (int n = 0; n < N; n++) {
    const int64_t off = (static_cast<int64_t>(n) * C + c) * HW;
    const A* x = inp + off;
    const A* dy = dout + off;
    A* dx = dinp + off;
#pragma omp simd
    for (int i = 0; i < HW; i++) dx[i] = from_f32<A>(k0 * (to_f32(dy[i]) - mdy - (to_f32(x[i]) - mean) * rstd * mdyx));
  }
}

}  // namespace

namespace {
// The local half of the defect syncbn_naive plants (core/test_fault.hpp): the raw moments sum x and sum x^2 accumulated
// in fp32, as a naive SyncBN kernel does, handed on as (count, mean, M2 = sum x^2 - count mean^2) for the naive merge
// below: together they compute var = E[x^2] - mean^2 in fp32, which loses about eps (mean^2 / var) of the variance.
template <typename A>
void batchnorm2d_local_stats_naive(float* stats, const A* inp, int N, int C, int HW) {
  for (int c = 0; c < C; c++) {
    float sx = 0.0f, sxx = 0.0f;
    for (int n = 0; n < N; n++) {
      const A* x = inp + (static_cast<int64_t>(n) * C + c) * HW;
      for (int i = 0; i < HW; i++) {
        const float v = to_f32(x[i]);
        sx += v;
        sxx += v * v;
      }
    }
    const float count = static_cast<float>(static_cast<int64_t>(N) * HW), mean = sx / count;
    stats[3 * c + 0] = count;
    stats[3 * c + 1] = mean;
    stats[3 * c + 2] = std::max(0.0f, sxx - count * mean * mean);
  }
}
}  // namespace

template <typename A>
void batchnorm2d_local_stats(float* stats, const A* inp, int N, int C, int HW) {
  if (fault_active(FaultKind::SyncBnNaive)) return batchnorm2d_local_stats_naive(stats, inp, N, C, HW);
  for_channel_blocks<A>(N, C, HW, [&](int c0, int c1) {
    double mean[kBnBlock];
    block_means(mean, inp, c0, c1, N, C, HW);
    for (int c = c0; c < c1; c++)
      store_stats(stats + 3 * c, mean[c - c0], channel_m2(inp, mean[c - c0], c, N, C, HW), N, HW);
  });
}

namespace {
// The defect syncbn_naive plants (core/test_fault.hpp): the textbook merge through the raw moments in fp32,
// var = E[x^2] - mean^2, which cancels catastrophically when |mean| >> std (what Chan's formula avoids).
void batchnorm2d_merge_stats_naive(float* merged, const float* gathered, int R, int C) {
  for (int c = 0; c < C; c++) {
    float n = 0.0f, sx = 0.0f, sxx = 0.0f;
    for (int r = 0; r < R; r++) {
      const float* g = gathered + (static_cast<int64_t>(r) * C + c) * 3;
      n += g[0];
      sx += g[0] * g[1];
      sxx += g[2] + g[0] * g[1] * g[1];
    }
    const float mean = sx / n;
    merged[3 * c + 0] = n;
    merged[3 * c + 1] = mean;
    merged[3 * c + 2] = std::max(0.0f, (sxx / n - mean * mean) * n);
  }
}
}  // namespace

void batchnorm2d_merge_stats(float* merged, const float* gathered, int R, int C) {
  if (R > 1 && fault_active(FaultKind::SyncBnNaive)) return batchnorm2d_merge_stats_naive(merged, gathered, R, C);
  for (int c = 0; c < C; c++) {
    BnStats<double> acc{0.0, 0.0, 0.0};
    for (int r = 0; r < R; r++) {
      const float* g = gathered + (static_cast<int64_t>(r) * C + c) * 3;
      acc = batchnorm_merge_stats(acc, BnStats<double>{g[0], g[1], g[2]});
    }
    merged[3 * c + 0] = static_cast<float>(acc.count);
    merged[3 * c + 1] = static_cast<float>(acc.mean);
    merged[3 * c + 2] = static_cast<float>(acc.m2);
  }
}

template <typename A>
void batchnorm2d_forward_apply(A* out, float* save_mean, float* save_rstd, const A* inp, const A* gamma, const A* beta,
                               const float* stats, int N, int C, int HW, float eps) {
  for (int c = 0; c < C; c++)
    HPCT_CHECK(stats[3 * c] > 0, "batchnorm2d_forward_apply: channel {} has count {}", c, stats[3 * c]);
#pragma omp parallel for schedule(static) if (bn_parallel(N, C, HW))
  for (int c = 0; c < C; c++)
    apply_channel(out, save_mean, save_rstd, inp, gamma, beta, stats + 3 * c, c, N, C, HW, eps);
}

template <typename A>
void batchnorm2d_forward_train(A* out, float* stats, float* save_mean, float* save_rstd, const A* inp, const A* gamma,
                               const A* beta, int N, int C, int HW, float eps) {
  // the same float statistics and the same apply as the SyncBN path at one rank, fused per block of channels
  for_channel_blocks<A>(N, C, HW, [&](int c0, int c1) {
    double mean[kBnBlock];
    block_means(mean, inp, c0, c1, N, C, HW);
    for (int c = c0; c < c1; c++) {
      float* st = stats + 3 * c;
      store_stats(st, mean[c - c0], channel_m2(inp, mean[c - c0], c, N, C, HW), N, HW);
      apply_channel(out, save_mean, save_rstd, inp, gamma, beta, st, c, N, C, HW, eps);
    }
  });
}

void batchnorm2d_update_running(float* running_mean, float* running_var, const float* stats, int C, float momentum) {
  for (int c = 0; c < C; c++) {
    const double count = stats[3 * c], mean = stats[3 * c + 1], m2 = stats[3 * c + 2];
    HPCT_CHECK(count > 1, "batchnorm2d_update_running: channel {} has {} values; BatchNorm training needs more than 1",
               c, count);
    running_mean[c] = static_cast<float>((1.0 - momentum) * running_mean[c] + momentum * mean);
    running_var[c] = static_cast<float>((1.0 - momentum) * running_var[c] + momentum * (m2 / (count - 1.0)));
  }
}

template <typename A>
void batchnorm2d_forward_eval(A* out, const A* inp, const A* gamma, const A* beta, const float* running_mean,
                              const float* running_var, int N, int C, int HW, float eps) {
#pragma omp parallel for collapse(2) schedule(static) if (bn_parallel(N, C, HW))
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++) {
      const float mean = running_mean[c];
      const float scale = bn_eval_rstd(running_var[c], eps) * to_f32(gamma[c]);
      const float shift = to_f32(beta[c]);
      const int64_t off = (static_cast<int64_t>(n) * C + c) * HW;
      const A* x = inp + off;
      A* o = out + off;
#pragma omp simd
      for (int i = 0; i < HW; i++) o[i] = from_f32<A>((to_f32(x[i]) - mean) * scale + shift);
    }
}

template <typename A>
void batchnorm2d_backward(A* dinp, float* dgamma, float* dbeta, const A* dout, const A* inp, const float* save_mean,
                          const float* save_rstd, const A* gamma, int N, int C, int HW) {
  for_channel_blocks<A>(N, C, HW, [&](int c0, int c1) {
    double sdy[kBnBlock], sdyx[kBnBlock];
    block_grad_sums(sdy, sdyx, dout, inp, save_mean, save_rstd, c0, c1, N, C, HW);
    for (int c = c0; c < c1; c++) {
      dbeta[c] += static_cast<float>(sdy[c - c0]);
      dgamma[c] += static_cast<float>(sdyx[c - c0]);
      dinp_channel(dinp, dout, inp, save_mean[c], save_rstd[c], to_f32(gamma[c]), sdy[c - c0], sdyx[c - c0],
                   static_cast<double>(N) * HW, c, N, C, HW);
    }
  });
}

template <typename A>
void batchnorm2d_backward_local_sums(float* sums, float* dgamma, float* dbeta, const A* dout, const A* inp,
                                     const float* save_mean, const float* save_rstd, int N, int C, int HW) {
  for_channel_blocks<A>(N, C, HW, [&](int c0, int c1) {
    double sdy[kBnBlock], sdyx[kBnBlock];
    block_grad_sums(sdy, sdyx, dout, inp, save_mean, save_rstd, c0, c1, N, C, HW);
    for (int c = c0; c < c1; c++) {
      sums[2 * c + 0] = static_cast<float>(sdy[c - c0]);
      sums[2 * c + 1] = static_cast<float>(sdyx[c - c0]);
      dbeta[c] += static_cast<float>(sdy[c - c0]);
      dgamma[c] += static_cast<float>(sdyx[c - c0]);
    }
  });
}

template <typename A>
void batchnorm2d_backward_apply(A* dinp, const A* dout, const A* inp, const float* save_mean, const float* save_rstd,
                                const A* gamma, const float* global_sums, int64_t global_count, int N, int C, int HW) {
#pragma omp parallel for schedule(static) if (bn_parallel(N, C, HW))
  for (int c = 0; c < C; c++)
    dinp_channel(dinp, dout, inp, save_mean[c], save_rstd[c], to_f32(gamma[c]), global_sums[2 * c],
                 global_sums[2 * c + 1], static_cast<double>(global_count), c, N, C, HW);
}

// ---- ReLU (relu_keeps: cpu_math.hpp) ---------------------------------------------------------------------------

template <typename A>
void relu_forward(A* out, const A* inp, int64_t n) {
  if constexpr (kF32<A>) {
#pragma omp parallel for simd schedule(static) if (n >= kMinParallel)
    for (int64_t i = 0; i < n; i++) out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
  } else {
#pragma omp parallel for simd schedule(static) if (n >= kMinParallel)
    for (int64_t i = 0; i < n; i++) out[i].bits = relu_keeps(inp[i]) ? inp[i].bits : uint16_t{0};
  }
}

template <typename A>
void residual_relu_forward(A* out, const A* a, const A* b, int64_t n) {
  if constexpr (kF32<A>) {
#pragma omp parallel for simd schedule(static) if (n >= kMinParallel)
    for (int64_t i = 0; i < n; i++) {
      const float s = a[i] + b[i];
      out[i] = s > 0.0f ? s : 0.0f;
    }
  } else {
#pragma omp parallel for simd schedule(static) if (n >= kMinParallel)
    for (int64_t i = 0; i < n; i++) {
      const bf16 s = from_f32<A>(to_f32(a[i]) + to_f32(b[i]));  // residual_forward's one rounding
      out[i].bits = relu_keeps(s) ? s.bits : uint16_t{0};
    }
  }
}

template <typename A>
void relu_backward(A* dinp, const A* dout, const A* out, int64_t n) {
  if constexpr (kF32<A>) {
#pragma omp parallel for simd schedule(static) if (n >= kMinParallel)
    for (int64_t i = 0; i < n; i++) dinp[i] = out[i] > 0.0f ? dout[i] : 0.0f;
  } else {
#pragma omp parallel for simd schedule(static) if (n >= kMinParallel)
    for (int64_t i = 0; i < n; i++) dinp[i].bits = relu_keeps(out[i]) ? dout[i].bits : uint16_t{0};
  }
}

template <typename A>
void residual_relu_backward(A* dinp, const A* a, const A* b, const A* out, int64_t n) {
  if constexpr (kF32<A>) {
#pragma omp parallel for simd schedule(static) if (n >= kMinParallel)
    for (int64_t i = 0; i < n; i++) {
      const float s = a[i] + b[i];
      dinp[i] = out[i] > 0.0f ? s : 0.0f;
    }
  } else {
#pragma omp parallel for simd schedule(static) if (n >= kMinParallel)
    for (int64_t i = 0; i < n; i++) {
      const bf16 s = from_f32<A>(to_f32(a[i]) + to_f32(b[i]));  // residual_forward's one rounding
      dinp[i].bits = relu_keeps(out[i]) ? s.bits : uint16_t{0};
    }
  }
}

// ---- MaxPool2d ---------------------------------------------------------------------------------------------
template <typename A>
void maxpool2d_forward(A* out, int32_t* idx, const A* inp, int N, int C, int H, int W, int K, int stride, int pad) {
  const int OH = (H + 2 * pad - K) / stride + 1, OW = (W + 2 * pad - K) / stride + 1;
  const int64_t planes = static_cast<int64_t>(N) * C;
#pragma omp parallel for schedule(static) if (planes * OH * OW >= kMinParallel / 4)
  for (int64_t p = 0; p < planes; p++) {
    const A* x = inp + p * H * W;     // (H,W)
    A* o = out + p * OH * OW;         // (OH,OW)
    int32_t* id = idx + p * OH * OW;  // (OH,OW)
    for (int oh = 0; oh < OH; oh++)
      for (int ow = 0; ow < OW; ow++) {
        const int h0 = oh * stride - pad, w0 = ow * stride - pad;
        float best = -std::numeric_limits<float>::infinity();
        int32_t arg = -1;
        for (int ih = std::max(h0, 0); ih < std::min(h0 + K, H); ih++)
          for (int iw = std::max(w0, 0); iw < std::min(w0 + K, W); iw++) {
            const float v = to_f32(x[ih * W + iw]);
            if (v > best || arg < 0) {
              best = v;
              arg = ih * W + iw;
            }
          }
        o[oh * OW + ow] = from_f32<A>(best);  // exact: best is a stored value
        id[oh * OW + ow] = arg;
      }
  }
}

template <typename A>
void maxpool2d_backward(A* dinp, const A* dout, const int32_t* idx, int N, int C, int H, int W, int K, int stride,
                        int pad) {
  const int OH = (H + 2 * pad - K) / stride + 1, OW = (W + 2 * pad - K) / stride + 1;
  const int64_t planes = static_cast<int64_t>(N) * C;
  // Gathered per input pixel from the outputs whose window holds it, in output order: the sums a scatter of dout in
  // output order makes (0 + dy_j1 + dy_j2 ..., bitwise), computed in fp32 and rounded once per pixel.
#pragma omp parallel for schedule(static) if (planes * H * W >= kMinParallel)
  for (int64_t p = 0; p < planes; p++) {
    A* dx = dinp + p * H * W;
    const A* dy = dout + p * OH * OW;
    const int32_t* id = idx + p * OH * OW;
    for (int ih = 0; ih < H; ih++) {
      // outputs oh with oh*stride - pad <= ih < oh*stride - pad + K
      const int oh0 = std::max(0, (ih + pad - K + stride) / stride), oh1 = std::min(OH - 1, (ih + pad) / stride);
      for (int iw = 0; iw < W; iw++) {
        const int ow0 = std::max(0, (iw + pad - K + stride) / stride), ow1 = std::min(OW - 1, (iw + pad) / stride);
        const int32_t self = ih * W + iw;
        float s = 0.0f;
        for (int oh = oh0; oh <= oh1; oh++)
          for (int ow = ow0; ow <= ow1; ow++)
            if (id[oh * OW + ow] == self) s += to_f32(dy[oh * OW + ow]);
        dx[self] = from_f32<A>(s);
      }
    }
  }
}

// ---- global average pooling ------------------------------------------------------------------------------------
template <typename A>
void global_avgpool_forward(A* out, const A* inp, int N, int C, int HW) {
  const int64_t planes = static_cast<int64_t>(N) * C;
#pragma omp parallel for schedule(static) if (planes * HW >= kMinParallel)
  for (int64_t p = 0; p < planes; p++) {
    const A* x = inp + p * HW;
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (int i = 0; i < HW; i++) s += to_f32(x[i]);
    out[p] = from_f32<A>(static_cast<float>(s / HW));
  }
}

template <typename A>
void global_avgpool_backward(A* dinp, const A* dout, int N, int C, int HW) {
  const int64_t planes = static_cast<int64_t>(N) * C;
#pragma omp parallel for schedule(static) if (planes * HW >= kMinParallel)
  for (int64_t p = 0; p < planes; p++) {
    const A g = from_f32<A>(to_f32(dout[p]) / static_cast<float>(HW));
    std::fill(dinp + p * HW, dinp + (p + 1) * HW, g);
  }
}

// ---- both storage types ----------------------------------------------------------------------------------------
#define HPCT_CPU_CONV_INSTANTIATE(A)                                                                                   \
  template void conv2d_forward<A>(A*, const A*, const A*, const A*, float*, int64_t, int, int, int, int, int, int,     \
                                  int, int, int);                                                                      \
  template void conv2d_backward<A>(A*, float*, float*, const A*, const A*, const A*, float*, int64_t, int, int, int,   \
                                   int, int, int, int, int, int);                                                      \
  template void conv2d_forward_nhwc<A>(A*, const A*, const A*, const A*, float*, int64_t, int, int, int, int, int,     \
                                       int, int, int, int);                                                            \
  template void conv2d_backward_nhwc<A>(A*, float*, float*, const A*, const A*, const A*, float*, int64_t, int, int,   \
                                        int, int, int, int, int, int, int);                                            \
  template void batchnorm2d_forward_train<A>(A*, float*, float*, float*, const A*, const A*, const A*, int, int, int,  \
                                             float);                                                                   \
  template void batchnorm2d_local_stats<A>(float*, const A*, int, int, int);                                           \
  template void batchnorm2d_forward_apply<A>(A*, float*, float*, const A*, const A*, const A*, const float*, int, int, \
                                             int, float);                                                              \
  template void batchnorm2d_forward_eval<A>(A*, const A*, const A*, const A*, const float*, const float*, int, int,    \
                                            int, float);                                                               \
  template void batchnorm2d_backward<A>(A*, float*, float*, const A*, const A*, const float*, const float*, const A*,  \
                                        int, int, int);                                                                \
  template void batchnorm2d_backward_local_sums<A>(float*, float*, float*, const A*, const A*, const float*,           \
                                                   const float*, int, int, int);                                       \
  template void batchnorm2d_backward_apply<A>(A*, const A*, const A*, const float*, const float*, const A*,            \
                                              const float*, int64_t, int, int, int);                                   \
  template void relu_forward<A>(A*, const A*, int64_t);                                                                \
  template void residual_relu_forward<A>(A*, const A*, const A*, int64_t);                                             \
  template void relu_backward<A>(A*, const A*, const A*, int64_t);                                                     \
  template void residual_relu_backward<A>(A*, const A*, const A*, const A*, int64_t);                                  \
  template void maxpool2d_forward<A>(A*, int32_t*, const A*, int, int, int, int, int, int, int);                       \
  template void maxpool2d_backward<A>(A*, const A*, const int32_t*, int, int, int, int, int, int, int);                \
  template void global_avgpool_forward<A>(A*, const A*, int, int, int);                                                \
  template void global_avgpool_backward<A>(A*, const A*, int, int, int);
HPCT_CPU_CONV_INSTANTIATE(float)
HPCT_CPU_CONV_INSTANTIATE(bf16)
#undef HPCT_CPU_CONV_INSTANTIATE

}  // namespace hpct::kernels::cpu
