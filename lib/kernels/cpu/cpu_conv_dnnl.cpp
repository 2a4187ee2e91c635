// Conv2d through oneDNN (cpu_conv_dnnl.hpp says what and why). Legend: N images, C input channels, H W input size,
// OC output channels, KH KW kernel, OH OW output size; x input, w weight, y output, dx dw dy their gradients.
//
// Per shape (and OpenMP thread count) one Entry, built once: the three primitives (forward, backward-data,
// backward-weights), each with user-managed scratchpad, and for every tensor a View: our plain NCHW/OIHW memory,
// the primitive's memory (the same object when the layouts agree) and the reorder between them. The workspace is
// four regions, each shared by the three primitives (they never run at once):
//   [ X: x or dx in the primitive's layout | W: w or dw | Y: y or dy | S: scratchpad ]
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
#include <unordered_map>

#include <dnnl.hpp>

namespace hpct::kernels::cpu::dnnl_conv {
namespace {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

constexpr int64_t kAlignFloats = 16;  // 64-byte aligned regions
int64_t round_up(int64_t floats) { return (floats + kAlignFloats - 1) / kAlignFloats * kAlignFloats; }
int64_t floats_of(const memory::desc& md) { return round_up(static_cast<int64_t>(md.get_size() / sizeof(float))); }

bool enabled() {
  static const bool on = [] {
    const char* v = std::getenv("HPCT_CONV");
    return !(v && std::strcmp(v, "im2col") == 0);
  }();
  return on;
}

dnnl::engine& engine() {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
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
void bind(View& v, const float* user, float* ws) {
  v.user.set_data_handle(const_cast<float*>(user));
  if (v.buffered) v.prim.set_data_handle(ws + v.off);
}

struct Entry {
  dnnl::convolution_forward fwd;
  dnnl::convolution_backward_data bwd_data;
  dnnl::convolution_backward_weights bwd_weight;
  View f_x, f_w, f_y;    // forward: x, w in; y out
  View d_dy, d_w, d_dx;  // backward-data: dy, w in; dx out
  View w_x, w_dy, w_dw;  // backward-weights: x, dy in; dw out (+=)
  memory f_s, d_s, w_s;  // scratchpads (region S), null memories when a primitive needs none
  int64_t off_s = 0, total = 0;
};

// A primitive attribute with the scratchpad in our workspace.
dnnl::primitive_attr user_scratchpad() {
  dnnl::primitive_attr a;
  a.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return a;
}

std::unique_ptr<Entry> build(const Shape& s) {
  const int OH = (s.H + 2 * s.pad - s.KH) / s.stride + 1, OW = (s.W + 2 * s.pad - s.KW) / s.stride + 1;
  const memory::dims xd{s.N, s.C, s.H, s.W}, wd{s.OC, s.C, s.KH, s.KW}, yd{s.N, s.OC, OH, OW};
  const memory::dims strides{s.stride, s.stride}, pad{s.pad, s.pad};
  const memory::desc x_md(xd, dt::f32, tag::nchw), w_md(wd, dt::f32, tag::oihw), y_md(yd, dt::f32, tag::nchw);
  const memory::desc x_any(xd, dt::f32, tag::any), w_any(wd, dt::f32, tag::any), y_any(yd, dt::f32, tag::any);
  const auto alg = dnnl::algorithm::convolution_direct;
  const dnnl::convolution_forward::primitive_desc fpd(
      dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, alg, x_any, w_any, y_any, strides, pad, pad),
      user_scratchpad(), engine());
  const dnnl::convolution_backward_data::primitive_desc dpd(
      dnnl::convolution_backward_data::desc(alg, x_any, w_any, y_any, strides, pad, pad), user_scratchpad(), engine(),
      fpd);
  const dnnl::convolution_backward_weights::primitive_desc wpd(
      dnnl::convolution_backward_weights::desc(alg, x_any, w_any, y_any, strides, pad, pad), user_scratchpad(),
      engine(), fpd);

  auto e = std::make_unique<Entry>();
  e->fwd = dnnl::convolution_forward(fpd);
  e->bwd_data = dnnl::convolution_backward_data(dpd);
  e->bwd_weight = dnnl::convolution_backward_weights(wpd);
  // region sizes: the largest buffered view of each
  auto need = [&](const memory::desc& user, const memory::desc& prim, bool acc = false) {
    return acc || prim != user ? floats_of(prim) : int64_t{0};
  };
  const int64_t nx = std::max(
      {need(x_md, fpd.src_desc()), need(x_md, dpd.diff_src_desc()), need(x_md, wpd.src_desc())});
  const int64_t nw = std::max(
      {need(w_md, fpd.weights_desc()), need(w_md, dpd.weights_desc()), need(w_md, wpd.diff_weights_desc(), true)});
  const int64_t ny = std::max(
      {need(y_md, fpd.dst_desc()), need(y_md, dpd.diff_dst_desc()), need(y_md, wpd.diff_dst_desc())});
  const int64_t ns = std::max(
      {floats_of(fpd.scratchpad_desc()), floats_of(dpd.scratchpad_desc()), floats_of(wpd.scratchpad_desc())});
  const int64_t ox = 0, ow = ox + nx, oy = ow + nw;
  e->off_s = oy + ny;
  e->total = e->off_s + ns;
  e->f_x = make_view(x_md, fpd.src_desc(), ox, true);
  e->f_w = make_view(w_md, fpd.weights_desc(), ow, true);
  e->f_y = make_view(y_md, fpd.dst_desc(), oy, false);
  e->d_dy = make_view(y_md, dpd.diff_dst_desc(), oy, true);
  e->d_w = make_view(w_md, dpd.weights_desc(), ow, true);
  e->d_dx = make_view(x_md, dpd.diff_src_desc(), ox, false);
  e->w_x = make_view(x_md, wpd.src_desc(), ox, true);
  e->w_dy = make_view(y_md, wpd.diff_dst_desc(), oy, true);
  e->w_dw = make_view(w_md, wpd.diff_weights_desc(), ow, false, /*accumulate=*/true);
  auto scratch = [&](const memory::desc& md) {
    return md.get_size() ? memory(md, engine(), DNNL_MEMORY_NONE) : memory();
  };
  e->f_s = scratch(fpd.scratchpad_desc());
  e->d_s = scratch(dpd.scratchpad_desc());
  e->w_s = scratch(wpd.scratchpad_desc());
  return e;
}

// The Entry of a shape at the current thread count (built on first use; null when oneDNN has no primitive for it).
Entry* entry(const Shape& s) {
  static std::mutex mu;
  static std::map<std::array<int, 10>, std::unique_ptr<Entry>> cache;
  const std::array<int, 10> key{s.N, s.C, s.H, s.W, s.OC, s.KH, s.KW, s.stride, s.pad, omp_get_max_threads()};
  const std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(key);
  if (it == cache.end()) {
    std::unique_ptr<Entry> e;
    try {
      e = build(s);
    } catch (const dnnl::error&) {
      e = nullptr;  // e.g. a shape no implementation takes: the im2col path serves it
    }
    it = cache.emplace(key, std::move(e)).first;
  }
  return it->second.get();
}

// The Entry to run with, or null (off, no primitive, or a workspace too small for it).
Entry* usable(const Shape& s, const float* ws, int64_t ws_floats) {
  if (!enabled() || !ws) return nullptr;
  Entry* e = entry(s);
  return e && ws_floats >= e->total ? e : nullptr;
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

}  // namespace

int64_t workspace_floats(const Shape& s) {
  if (!enabled()) return -1;
  const Entry* e = entry(s);
  return e ? e->total : -1;
}

bool forward(float* out, const float* inp, const float* weight, float* ws, int64_t ws_floats, const Shape& s) {
  Entry* e = usable(s, ws, ws_floats);
  if (!e) return false;
  bind(e->f_x, inp, ws);
  bind(e->f_w, weight, ws);
  bind(e->f_y, out, ws);
  reorder_in(e->f_x);
  reorder_in(e->f_w);
  e->fwd.execute(stream(),
                 args({{DNNL_ARG_SRC, e->f_x.prim}, {DNNL_ARG_WEIGHTS, e->f_w.prim}, {DNNL_ARG_DST, e->f_y.prim}},
                      e->f_s, ws, e->off_s));
  reorder_out(e->f_y);
  stream().wait();
  return true;
}

bool backward_data(float* dinp, const float* dout, const float* weight, float* ws, int64_t ws_floats, const Shape& s) {
  Entry* e = usable(s, ws, ws_floats);
  if (!e) return false;
  bind(e->d_dy, dout, ws);
  bind(e->d_w, weight, ws);
  bind(e->d_dx, dinp, ws);
  reorder_in(e->d_dy);
  reorder_in(e->d_w);
  e->bwd_data.execute(
      stream(),
      args({{DNNL_ARG_DIFF_DST, e->d_dy.prim}, {DNNL_ARG_WEIGHTS, e->d_w.prim}, {DNNL_ARG_DIFF_SRC, e->d_dx.prim}},
           e->d_s, ws, e->off_s));
  reorder_out(e->d_dx);
  stream().wait();
  return true;
}

bool backward_weight(float* dweight, const float* dout, const float* inp, float* ws, int64_t ws_floats,
                     const Shape& s) {
  Entry* e = usable(s, ws, ws_floats);
  if (!e) return false;
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
  return true;
}

}  // namespace hpct::kernels::cpu::dnnl_conv

#else  // no oneDNN: the im2col path serves every shape

namespace hpct::kernels::cpu::dnnl_conv {
int64_t workspace_floats(const Shape&) { return -1; }
bool forward(float*, const float*, const float*, float*, int64_t, const Shape&) { return false; }
bool backward_data(float*, const float*, const float*, float*, int64_t, const Shape&) { return false; }
bool backward_weight(float*, const float*, const float*, float*, int64_t, const Shape&) { return false; }
}  // namespace hpct::kernels::cpu::dnnl_conv

#endif
