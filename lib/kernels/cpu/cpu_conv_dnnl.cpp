// Conv2d through oneDNN (cpu_conv_dnnl.hpp says what and why). Legend: N images, C input channels, H W input size,
// OC output channels, KH KW kernel, OH OW output size; x input, w weight, b bias, y output, dx dw dy their gradients.
//
// Per shape, storage type and OpenMP thread count one Entry, built once: the three primitives (forward,
// backward-data, backward-weights), each with user-managed scratchpad, and for every tensor a View: our plain
// NCHW/OIHW memory, the primitive's memory (the same object when layout and data type agree) and the reorder between
// them (which also converts bf16 <-> fp32 when the primitives compute on fp32). The workspace is five regions, each
// shared by the three primitives (they never run at once):
//   [ X: x or dx in the primitive's layout | W: w or dw | Y: y or dy | B: bias (bf16 storage only) | S: scratchpad ]
// A call points the memories at this call's tensors (set_data_handle), reorders the inputs in, executes, and
// reorders the output back; dweight += goes through a reorder with a sum post-op (dst = reorder(src) + dst).
#include "kernels/cpu/cpu_conv_dnnl.hpp"

#if HPCT_HAVE_DNNL

#include <omp.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <type_traits>
#include <unordered_map>

#include <dnnl.hpp>

namespace hpct::kernels::cpu::dnnl_conv {
namespace {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

constexpr int64_t kMinParallel = 1 << 14;  // below this many elements a pointwise loop stays serial (cpu_conv.cpp)
constexpr int64_t kAlignFloats = 16;       // 64-byte aligned regions
int64_t round_up(int64_t floats) { return (floats + kAlignFloats - 1) / kAlignFloats * kAlignFloats; }
// whole floats covering the bytes of md (bf16 buffers are counted in floats too)
int64_t floats_of(const memory::desc& md) {
  return round_up(static_cast<int64_t>((md.get_size() + sizeof(float) - 1) / sizeof(float)));
}

// HPCT_CONV in the environment (read once): "im2col" turns this path off, "fp32" keeps bf16 storage on oneDNN's fp32
// primitives (for comparing them with its bf16 ones on a new CPU); unset or anything else: automatic.
enum class Mode { automatic, im2col, fp32 };
Mode mode() {
  static const Mode m = [] {
    const char* v = std::getenv("HPCT_CONV");
    if (v && std::strcmp(v, "im2col") == 0) return Mode::im2col;
    if (v && std::strcmp(v, "fp32") == 0) return Mode::fp32;
    return Mode::automatic;
  }();
  return m;
}
bool enabled() { return mode() != Mode::im2col; }

dnnl::engine& engine() {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

template <typename A>
constexpr DType act_of() {
  return std::is_same_v<A, float> ? DType::F32 : DType::BF16;
}

// One tensor as a primitive sees it. `buffered`: prim lives in the workspace (at region offset `off`) and `re`
// converts user -> prim (an input) or prim -> user (an output); otherwise prim is user itself.
struct View {
  memory user, prim;
  dnnl::reorder re;
  bool buffered = false;
  int64_t off = 0;
};

// accumulate: an output added into the user's tensor (a buffer and a reorder with a sum post-op, always)
View make_view(const memory::desc& user_md, const memory::desc& prim_md, int64_t off, bool input,
               bool accumulate = false) {
  View v;
  v.user = memory(user_md, engine(), DNNL_MEMORY_NONE);
  v.buffered = accumulate || prim_md != user_md;
  if (!v.buffered) {
    v.prim = v.user;
    return v;
  }
  v.off = off;
  v.prim = memory(prim_md, engine(), DNNL_MEMORY_NONE);
  if (input) {
    v.re = dnnl::reorder(v.user, v.prim);
  } else {
    dnnl::primitive_attr attr;
    if (accumulate) {
      dnnl::post_ops po;
      po.append_sum(1.0f);
      attr.set_post_ops(po);
    }
    v.re = dnnl::reorder(dnnl::reorder::primitive_desc(v.prim, v.user, attr));
  }
  return v;
}

// Points a view at this call's user tensor and workspace.
void bind(View& v, const void* user, float* ws) {
  v.user.set_data_handle(const_cast<void*>(user));
  if (v.buffered) v.prim.set_data_handle(ws + v.off);
}

struct Entry {
  dnnl::convolution_forward fwd;
  dnnl::convolution_backward_data bwd_data;
  dnnl::convolution_backward_weights bwd_weight;
  View f_x, f_w, f_b, f_y;  // forward: x, w (, b) in; y out
  View d_dy, d_w, d_dx;     // backward-data: dy, w in; dx out
  View w_x, w_dy, w_dw;     // backward-weights: x, dy in; dw out (+=)
  memory f_s, d_s, w_s;     // scratchpads (region S), null memories when a primitive needs none
  bool with_bias = false;   // the forward primitive adds the bias (bf16 storage)
  bool share_dy = false;    // backward-data reads dy in the layout backward-weights left in region Y
  int64_t off_b = 0, off_s = 0, total = 0;
  std::string info;  // describe()
};

// A primitive attribute with the scratchpad in our workspace.
dnnl::primitive_attr user_scratchpad() {
  dnnl::primitive_attr a;
  a.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return a;
}

// An implementation worth running instead of im2col: not oneDNN's reference loops, and for bf16 compute one that uses
// the CPU's bf16 instructions (its ISA, after the last ':', names them: avx512_core_bf16, avx512_core_amx_bf16);
// oneDNN's bf16 kernels for plain AVX-512 emulate the products and run slower than its fp32 ones.
bool fast_impl(const std::string& impl, bool bf16_compute) {
  if (impl.find("ref") != std::string::npos) return false;
  if (!bf16_compute) return true;
  const std::string isa = impl.substr(impl.rfind(':') + 1);
  return isa.find("bf16") != std::string::npos || isa.find("amx") != std::string::npos;
}

// The primitives of a shape for storage `act` computing in `compute`, or null when oneDNN has none or only slow ones
// (dnnl::error is thrown when no implementation takes the shape).
std::unique_ptr<Entry> build(const Shape& s, DType act, dt compute, std::string& why) {
  const int OH = (s.H + 2 * s.pad - s.KH) / s.stride + 1, OW = (s.W + 2 * s.pad - s.KW) / s.stride + 1;
  const memory::dims xd{s.N, s.C, s.H, s.W}, wd{s.OC, s.C, s.KH, s.KW}, yd{s.N, s.OC, OH, OW}, bd{s.OC};
  const memory::dims strides{s.stride, s.stride}, pad{s.pad, s.pad};
  const dt user = act == DType::BF16 ? dt::bf16 : dt::f32;
  const bool with_bias = act == DType::BF16;
  // channels-last activations are also the primitives' layout (oneDNN's nxc kernels), so that they run on our
  // tensors in place; NCHW ones are reordered into the layout the primitive picks
  const tag act_tag = s.nhwc ? tag::nhwc : tag::nchw, prim_tag = s.nhwc ? tag::nhwc : tag::any;
  const memory::desc x_md(xd, user, act_tag), w_md(wd, user, tag::oihw), y_md(yd, user, act_tag);
  const memory::desc b_md(bd, user, tag::x), dw_md(wd, dt::f32, tag::oihw);
  const memory::desc x_any(xd, compute, prim_tag), w_any(wd, compute, tag::any), y_any(yd, compute, prim_tag);
  const memory::desc b_prim(bd, compute, tag::x), dw_any(wd, dt::f32, tag::any);
  const auto alg = dnnl::algorithm::convolution_direct;
  const auto fdesc = with_bias ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, alg, x_any, w_any,
                                                                 b_prim, y_any, strides, pad, pad)
                               : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, alg, x_any, w_any,
                                                                 y_any, strides, pad, pad);
  const dnnl::convolution_forward::primitive_desc fpd(fdesc, user_scratchpad(), engine());
  const dnnl::convolution_backward_data::primitive_desc dpd(
      dnnl::convolution_backward_data::desc(alg, x_any, w_any, y_any, strides, pad, pad), user_scratchpad(), engine(),
      fpd);
  const dnnl::convolution_backward_weights::primitive_desc wpd(
      dnnl::convolution_backward_weights::desc(alg, x_any, dw_any, y_any, strides, pad, pad), user_scratchpad(),
      engine(), fpd);
  const bool bf16_compute = compute == dt::bf16;
  const std::string info = std::string("fwd ") + fpd.impl_info_str() + " | bwd-data " + dpd.impl_info_str() +
                           " | bwd-weights " + wpd.impl_info_str();
  if (!fast_impl(fpd.impl_info_str(), bf16_compute) || !fast_impl(dpd.impl_info_str(), bf16_compute) ||
      !fast_impl(wpd.impl_info_str(), bf16_compute)) {
    why = info;
    return nullptr;
  }

  auto e = std::make_unique<Entry>();
  e->fwd = dnnl::convolution_forward(fpd);
  e->bwd_data = dnnl::convolution_backward_data(dpd);
  e->bwd_weight = dnnl::convolution_backward_weights(wpd);
  e->with_bias = with_bias;
  e->info = (act == DType::F32 ? "fp32 " : bf16_compute ? "bf16 " : "fp32 compute of bf16 storage: ") + info;
  // region sizes: the largest buffered view of each
  auto need = [&](const memory::desc& u, const memory::desc& prim, bool acc = false) {
    return acc || prim != u ? floats_of(prim) : int64_t{0};
  };
  const int64_t nx = std::max(
      {need(x_md, fpd.src_desc()), need(x_md, dpd.diff_src_desc()), need(x_md, wpd.src_desc())});
  const int64_t nw = std::max(
      {need(w_md, fpd.weights_desc()), need(w_md, dpd.weights_desc()), need(dw_md, wpd.diff_weights_desc(), true)});
  const int64_t ny = std::max(
      {need(y_md, fpd.dst_desc()), need(y_md, dpd.diff_dst_desc()), need(y_md, wpd.diff_dst_desc())});
  // the bias region always exists with a bias: a call without one points the primitive at zeros there
  const int64_t nb = with_bias ? floats_of(fpd.bias_desc()) : 0;
  const int64_t ns = std::max(
      {floats_of(fpd.scratchpad_desc()), floats_of(dpd.scratchpad_desc()), floats_of(wpd.scratchpad_desc())});
  const int64_t ox = 0, ow = ox + nx, oy = ow + nw;
  e->off_b = oy + ny;
  e->off_s = e->off_b + nb;
  e->total = e->off_s + ns;
  e->f_x = make_view(x_md, fpd.src_desc(), ox, true);
  e->f_w = make_view(w_md, fpd.weights_desc(), ow, true);
  if (with_bias) e->f_b = make_view(b_md, fpd.bias_desc(), e->off_b, true);
  e->f_y = make_view(y_md, fpd.dst_desc(), oy, false);
  e->d_dy = make_view(y_md, dpd.diff_dst_desc(), oy, true);
  e->d_w = make_view(w_md, dpd.weights_desc(), ow, true);
  e->d_dx = make_view(x_md, dpd.diff_src_desc(), ox, false);
  e->w_x = make_view(x_md, wpd.src_desc(), ox, true);
  e->w_dy = make_view(y_md, wpd.diff_dst_desc(), oy, true);
  e->w_dw = make_view(dw_md, wpd.diff_weights_desc(), ow, false, /*accumulate=*/true);
  e->share_dy = e->d_dy.buffered && e->w_dy.buffered && dpd.diff_dst_desc() == wpd.diff_dst_desc();
  auto scratch = [&](const memory::desc& md) {
    return md.get_size() ? memory(md, engine(), DNNL_MEMORY_NONE) : memory();
  };
  e->f_s = scratch(fpd.scratchpad_desc());
  e->d_s = scratch(dpd.scratchpad_desc());
  e->w_s = scratch(wpd.scratchpad_desc());
  return e;
}

// The built Entries, and why a shape has none (describe()), per (shape, thread count, storage type).
using Key = std::array<int, 12>;
struct Cache {
  std::mutex mu;
  std::map<Key, std::unique_ptr<Entry>> entries;
  std::map<Key, std::string> refused;
};
Cache& cache() {
  static Cache c;
  return c;
}
Key key_of(const Shape& s, DType act) {
  return {s.N, s.C, s.H, s.W, s.OC, s.KH, s.KW, s.stride, s.pad, omp_get_max_threads(), static_cast<int>(act), s.nhwc};
}

dnnl::stream& stream() {
  static dnnl::stream st(engine());
  return st;
}

void reorder_in(View& v) {
  if (v.buffered) v.re.execute(stream(), v.user, v.prim);
}
void reorder_out(View& v) {
  if (v.buffered) v.re.execute(stream(), v.prim, v.user);
}

// The execute arguments, with the scratchpad when the primitive has one.
std::unordered_map<int, memory> args(std::initializer_list<std::pair<const int, memory>> list, memory& scratch,
                                     float* ws, int64_t off_s) {
  std::unordered_map<int, memory> a(list);
  if (scratch) {
    scratch.set_data_handle(ws + off_s);
    a.emplace(DNNL_ARG_SCRATCHPAD, scratch);
  }
  return a;
}

// The three passes of an Entry on our tensors (the public functions below, and the cross-check of channels-last
// entries, which runs Entries of its own).
template <typename A>
void run_forward(Entry* e, A* out, const A* inp, const A* weight, const A* bias, float* ws, const Shape& s) {
  bind(e->f_x, inp, ws);
  bind(e->f_w, weight, ws);
  bind(e->f_y, out, ws);
  reorder_in(e->f_x);
  reorder_in(e->f_w);
  auto a = args({{DNNL_ARG_SRC, e->f_x.prim}, {DNNL_ARG_WEIGHTS, e->f_w.prim}, {DNNL_ARG_DST, e->f_y.prim}}, e->f_s, ws,
                e->off_s);
  if (e->with_bias) {
    if (bias) {
      bind(e->f_b, bias, ws);
      reorder_in(e->f_b);
    } else {
      e->f_b.prim.set_data_handle(ws + e->off_b);
      std::memset(ws + e->off_b, 0, e->f_b.prim.get_desc().get_size());  // +0 in either data type
    }
    a.emplace(DNNL_ARG_BIAS, e->f_b.prim);
  }
  e->fwd.execute(stream(), a);
  reorder_out(e->f_y);
  stream().wait();
  if constexpr (std::is_same_v<A, float>) {
    if (bias && s.nhwc) {
      const int64_t positions = static_cast<int64_t>(s.N) * ((s.H + 2 * s.pad - s.KH) / s.stride + 1) *
                                ((s.W + 2 * s.pad - s.KW) / s.stride + 1);
      const int OC = s.OC;
#pragma omp parallel for schedule(static) if (positions * OC >= kMinParallel)
      for (int64_t p = 0; p < positions; p++) {
        float* o = out + p * OC;
#pragma omp simd
        for (int oc = 0; oc < OC; oc++) o[oc] += bias[oc];
      }
    } else if (bias) {
      const int64_t OHW = static_cast<int64_t>((s.H + 2 * s.pad - s.KH) / s.stride + 1) *
                          ((s.W + 2 * s.pad - s.KW) / s.stride + 1);
      const int N = s.N, OC = s.OC;
#pragma omp parallel for collapse(2) schedule(static) if (static_cast <int64_t>(N) * OC * OHW >= kMinParallel)
      for (int n = 0; n < N; n++)
        for (int oc = 0; oc < OC; oc++) {
          float* o = out + (static_cast<int64_t>(n) * OC + oc) * OHW;
          const float b = bias[oc];
#pragma omp simd
          for (int64_t i = 0; i < OHW; i++) o[i] += b;
        }
    }
  }
}

template <typename A>
void run_backward_weight(Entry* e, float* dweight, const A* dout, const A* inp, float* ws) {
  bind(e->w_x, inp, ws);
  bind(e->w_dy, dout, ws);
  bind(e->w_dw, dweight, ws);
  reorder_in(e->w_x);
  reorder_in(e->w_dy);
  e->bwd_weight.execute(
      stream(),
      args({{DNNL_ARG_SRC, e->w_x.prim}, {DNNL_ARG_DIFF_DST, e->w_dy.prim}, {DNNL_ARG_DIFF_WEIGHTS, e->w_dw.prim}},
           e->w_s, ws, e->off_s));
  reorder_out(e->w_dw);  // dweight = reorder(dw) + dweight
  stream().wait();
}

template <typename A>
void run_backward_data(Entry* e, A* dinp, const A* dout, const A* weight, float* ws, bool dout_in_workspace) {
  bind(e->d_dy, dout, ws);
  bind(e->d_w, weight, ws);
  bind(e->d_dx, dinp, ws);
  if (!(dout_in_workspace && e->share_dy)) reorder_in(e->d_dy);
  reorder_in(e->d_w);
  e->bwd_data.execute(
      stream(),
      args({{DNNL_ARG_DIFF_DST, e->d_dy.prim}, {DNNL_ARG_WEIGHTS, e->d_w.prim}, {DNNL_ARG_DIFF_SRC, e->d_dx.prim}},
           e->d_s, ws, e->off_s));
  reorder_out(e->d_dx);
  stream().wait();
}

// Whether oneDNN's channels-last primitives for shape s (storage act, computing in `compute`) agree with its
// blocked-layout ones: the three passes of both on a batch of seeded values at the same thread count (all N images
// where an activation of them holds at most kCheckValues values, else as many as fit, at least one), every output
// within 1e-3 (fp32 compute) or 3e-2 (bf16) of the blocked one's largest magnitude. Why: oneDNN
// 2.6's nxc kernels have layout-specific defects that its blocked kernels do not share (the AVX2 1x1 strided
// backward-weights kernel, with 4 input channels at 2 threads, returns a weight gradient unrelated to the true one,
// at some batch sizes and not others: hence the whole batch where that is cheap),
// and a layout must never change what a model computes beyond rounding. Off by an error of that size, the shape
// does not run channels-last (the model then stays NCHW, or model.memory_format = nhwc says why).
constexpr int64_t kCheckValues = int64_t{1} << 22;
template <typename A>
bool nxc_agrees(const Shape& s, DType act, dt compute, std::string& why) {
  const int64_t image = std::max<int64_t>(static_cast<int64_t>(s.C) * s.H * s.W,
                                          static_cast<int64_t>(s.OC) * ((s.H + 2 * s.pad - s.KH) / s.stride + 1) *
                                              ((s.W + 2 * s.pad - s.KW) / s.stride + 1));
  Shape small = s;  // the batch checked
  small.N = static_cast<int>(std::clamp<int64_t>(kCheckValues / image, 1, s.N));
  Shape blocked = small;
  blocked.nhwc = false;
  std::string slow;
  std::unique_ptr<Entry> e_nxc = build(small, act, compute, slow), e_ref = build(blocked, act, compute, slow);
  if (!e_nxc || !e_ref) {
    why = "no fast primitive for the cross-check against the blocked layout";
    return false;
  }
  const int OH = (s.H + 2 * s.pad - s.KH) / s.stride + 1, OW = (s.W + 2 * s.pad - s.KW) / s.stride + 1;
  const int64_t HW = static_cast<int64_t>(s.H) * s.W, OHW = static_cast<int64_t>(OH) * OW;
  const int64_t nx = small.N * s.C * HW, ny = small.N * s.OC * OHW, nw = static_cast<int64_t>(s.OC) * s.C * s.KH * s.KW;
  uint64_t state = 0x9e3779b97f4a7c15ull;
  auto fill = [&](std::vector<A>& v) {
    for (A& x : v) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      x = from_f32<A>(static_cast<float>(static_cast<int64_t>(state >> 40) % 2001 - 1000) / 1000.0f);
    }
  };
  // (N,C,HW) <-> (N,HW,C)
  auto nhwc_of = [&](const std::vector<A>& v, int C, int64_t P) {
    std::vector<A> t(v.size());
    for (int n = 0; n < small.N; n++)
      for (int c = 0; c < C; c++)
        for (int64_t i = 0; i < P; i++) t[(n * P + i) * C + c] = v[(static_cast<int64_t>(n) * C + c) * P + i];
    return t;
  };
  std::vector<A> x(static_cast<size_t>(nx)), w(static_cast<size_t>(nw)), dy(static_cast<size_t>(ny));
  fill(x);
  fill(w);
  fill(dy);
  const std::vector<A> x_l = nhwc_of(x, s.C, HW), dy_l = nhwc_of(dy, s.OC, OHW);
  std::vector<float> ws(static_cast<size_t>(std::max(e_nxc->total, e_ref->total)));
  std::vector<A> y_r(static_cast<size_t>(ny)), y_l(y_r.size()), dx_r(static_cast<size_t>(nx)), dx_l(dx_r.size());
  std::vector<float> dw_r(static_cast<size_t>(nw), 0.0f), dw_l(dw_r.size(), 0.0f);
  run_forward<A>(e_ref.get(), y_r.data(), x.data(), w.data(), nullptr, ws.data(), blocked);
  run_backward_weight<A>(e_ref.get(), dw_r.data(), dy.data(), x.data(), ws.data());
  run_backward_data<A>(e_ref.get(), dx_r.data(), dy.data(), w.data(), ws.data(), false);
  // each nxc pass on a workspace of huge values, as a model's shared one holds other layers' data: a kernel that
  // reads scratch it did not write shows (the AVX2 defect above does, so it also varies from call to call)
  const auto garbage = [&] { std::fill(ws.begin(), ws.end(), 3.0e30f); };
  garbage();
  run_forward<A>(e_nxc.get(), y_l.data(), x_l.data(), w.data(), nullptr, ws.data(), small);
  garbage();
  run_backward_weight<A>(e_nxc.get(), dw_l.data(), dy_l.data(), x_l.data(), ws.data());
  garbage();
  run_backward_data<A>(e_nxc.get(), dx_l.data(), dy_l.data(), w.data(), ws.data(), false);
  const double tol = compute == dt::bf16 || act == DType::BF16 ? 3e-2 : 1e-3;
  auto off = [&](const char* what, auto value_l, auto value_r, int64_t n) {
    double scale = 0.0, worst = 0.0;
    for (int64_t i = 0; i < n; i++) scale = std::max(scale, std::abs(static_cast<double>(value_r(i))));
    for (int64_t i = 0; i < n; i++)
      worst = std::max(worst, std::abs(static_cast<double>(value_l(i)) - static_cast<double>(value_r(i))));
    if (worst <= tol * std::max(scale, 1e-30)) return false;
    why = std::string("oneDNN's channels-last ") + what +
          " disagrees with its blocked-layout one (largest difference " + std::to_string(worst) + " of " +
          std::to_string(scale) + ")";
    return true;
  };
  // the nxc outputs at (n, c, i) against the blocked ones
  auto at_nhwc = [&](const std::vector<A>& t, int C, int64_t P) {
    return [&t, C, P](int64_t j) {  // j indexes (n, c, i) in NCHW order
      const int64_t n = j / (C * P), c = j / P % C, i = j % P;
      return to_f32(t[(n * P + i) * C + c]);
    };
  };
  return !(off(
               "forward", at_nhwc(y_l, s.OC, OHW), [&](int64_t j) { return to_f32(y_r[j]); }, ny) ||
           off(
               "backward-weights", [&](int64_t j) { return dw_l[j]; }, [&](int64_t j) { return dw_r[j]; }, nw) ||
           off(
               "backward-data", at_nhwc(dx_l, s.C, HW), [&](int64_t j) { return to_f32(dx_r[j]); }, nx));
}

// The Entry of a shape and storage type at the current thread count (built on first use; null when oneDNN has no
// fast primitive for it). bf16 storage tries bf16 compute first, then fp32 compute.
Entry* entry(const Shape& s, DType act) {
  Cache& c = cache();
  const Key key = key_of(s, act);
  const std::lock_guard<std::mutex> lock(c.mu);
  auto it = c.entries.find(key);
  if (it == c.entries.end()) {
    std::unique_ptr<Entry> e;
    std::string why;
    // bf16 storage: bf16 compute, else fp32 compute (only fp32 under HPCT_CONV=fp32); fp32 storage: fp32 compute
    const dt computes[] = {dt::bf16, dt::f32};
    std::span<const dt> tries = act == DType::BF16 && mode() == Mode::automatic
                                    ? std::span<const dt>(computes)
                                    : std::span<const dt>(computes).subspan(1);
    const bool image_stem = s.C <= 4 && s.KH * s.KW > 1;
    if (s.nhwc && (s.OC % 16 != 0 || (s.C % 16 != 0 && !image_stem))) {
      why = "channels " + std::to_string(s.C) + " > " + std::to_string(s.OC) +
            ": oneDNN 2.6's channels-last kernels mishandle channel counts that are not multiples of 16 (a 1x1 "
            "strided 4 > 8 computes a wrong weight gradient and hangs at 3 threads on AVX2: docs/platform.md)";
      tries = {};
    }
    for (const dt compute : tries) {
      try {
        std::string slow, disagrees;
        e = build(s, act, compute, slow);
        if (!e) why += (why.empty() ? "" : "; ") + std::string("slow implementations: ") + slow;
        const bool agrees = !e || !s.nhwc ||
                            (act == DType::F32 ? nxc_agrees<float>(s, act, compute, disagrees)
                                               : nxc_agrees<bf16>(s, act, compute, disagrees));
        if (!agrees) {
          why += (why.empty() ? "" : "; ") + disagrees + ": " + e->info;
          e.reset();
        }
      } catch (const dnnl::error& err) {
        why += (why.empty() ? "" : "; ") + std::string("no implementation: ") + err.what();
      }
      if (e) break;
    }
    if (!e) c.refused[key] = (s.nhwc ? "not channels-last (oneDNN: " : "im2col (oneDNN: ") + why + ")";
    it = c.entries.emplace(key, std::move(e)).first;
  }
  return it->second.get();
}

// The Entry to run with, or null (off, no primitive, or a workspace too small for it).
Entry* usable(const Shape& s, DType act, const float* ws, int64_t ws_floats) {
  if (!enabled() || !ws) return nullptr;
  Entry* e = entry(s, act);
  return e && ws_floats >= e->total ? e : nullptr;
}

}  // namespace

int64_t workspace_floats(const Shape& s, DType act) {
  if (!enabled()) return -1;
  const Entry* e = entry(s, act);
  return e ? e->total : -1;
}

std::string describe(const Shape& s, DType act) {
  if (!enabled()) return "im2col (HPCT_CONV=im2col)";
  if (const Entry* e = entry(s, act)) return e->info;
  Cache& c = cache();
  const std::lock_guard<std::mutex> lock(c.mu);
  return c.refused[key_of(s, act)];
}

template <typename A>
bool forward(A* out, const A* inp, const A* weight, const A* bias, float* ws, int64_t ws_floats, const Shape& s) {
  Entry* e = usable(s, act_of<A>(), ws, ws_floats);
  if (e) run_forward(e, out, inp, weight, bias, ws, s);
  return e != nullptr;
}

template <typename A>
bool backward_weight(float* dweight, const A* dout, const A* inp, float* ws, int64_t ws_floats, const Shape& s) {
  Entry* e = usable(s, act_of<A>(), ws, ws_floats);
  if (e) run_backward_weight(e, dweight, dout, inp, ws);
  return e != nullptr;
}

template <typename A>
bool backward_data(A* dinp, const A* dout, const A* weight, float* ws, int64_t ws_floats, const Shape& s,
                   bool dout_in_workspace) {
  Entry* e = usable(s, act_of<A>(), ws, ws_floats);
  if (e) run_backward_data(e, dinp, dout, weight, ws, dout_in_workspace);
  return e != nullptr;
}

}  // namespace hpct::kernels::cpu::dnnl_conv

#else  // no oneDNN: the im2col path serves every shape

namespace hpct::kernels::cpu::dnnl_conv {
int64_t workspace_floats(const Shape&, DType) { return -1; }
std::string describe(const Shape&, DType) { return "im2col (built without oneDNN)"; }
template <typename A>
bool forward(A*, const A*, const A*, const A*, float*, int64_t, const Shape&) {
  return false;
}
template <typename A>
bool backward_weight(float*, const A*, const A*, float*, int64_t, const Shape&) {
  return false;
}
template <typename A>
bool backward_data(A*, const A*, const A*, float*, int64_t, const Shape&, bool) {
  return false;
}
}  // namespace hpct::kernels::cpu::dnnl_conv

#endif

namespace hpct::kernels::cpu::dnnl_conv {
#define HPCT_DNNL_CONV_INSTANTIATE(A)                                                          \
  template bool forward<A>(A*, const A*, const A*, const A*, float*, int64_t, const Shape&);   \
  template bool backward_weight<A>(float*, const A*, const A*, float*, int64_t, const Shape&); \
  template bool backward_data<A>(A*, const A*, const A*, float*, int64_t, const Shape&, bool);
HPCT_DNNL_CONV_INSTANTIATE(float)
HPCT_DNNL_CONV_INSTANTIATE(bf16)
#undef HPCT_DNNL_CONV_INSTANTIATE
}  // namespace hpct::kernels::cpu::dnnl_conv
