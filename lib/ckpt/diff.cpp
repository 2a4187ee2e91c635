// diff_checkpoints: two checkpoints of one model, tensor by tensor, read through their indexes in slabs of whole
// axis-0 rows (as export_consolidated copies), so that neither side's layout matters and memory stays bounded.
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "ckpt/checkpoint.hpp"
#include "ckpt/ckpt_internal.hpp"
#include "core/error.hpp"
#include "tensor/bf16.hpp"

namespace hpct::ckpt {

using detail::numel;

namespace {

constexpr int64_t kSlabBytes = 32 << 20;

// The box's values in double, whatever the stored type.
void read_as_double(const Reader& r, const std::string& name, const std::vector<int64_t>& off,
                    const std::vector<int64_t>& cnt, std::vector<unsigned char>& raw, std::vector<double>& out) {
  const DType dt = r.dtype(name);
  const size_t n = static_cast<size_t>(numel(cnt));
  raw.resize(n * dtype_size(dt));
  r.read(name, off, cnt, dt, raw.data());
  out.resize(n);
  auto convert = [&](auto tag) {
    using T = decltype(tag);
    for (size_t i = 0; i < n; ++i) {
      T v;
      std::memcpy(&v, raw.data() + i * sizeof(T), sizeof(T));
      if constexpr (std::is_same_v<T, bf16>) out[i] = to_f32(v);
      else
        out[i] = static_cast<double>(v);
    }
  };
  switch (dt) {
    case DType::F32: convert(float{}); break;
    case DType::F64: convert(double{}); break;
    case DType::BF16: convert(bf16{}); break;
    case DType::I32: convert(int32_t{}); break;
    case DType::I64: convert(int64_t{}); break;
    case DType::U8: convert(uint8_t{}); break;
    default: HPCT_USAGE_FAIL("{} of {}: dtype {} cannot be compared", name, r.dir(), dtype_name(dt));
  }
}

int64_t step_of(const Reader& r) { return r.attrs().ints.count("step") ? r.attrs().ints.at("step") : -1; }

}  // namespace

GroupDifference CheckpointDifference::group(const std::string& prefix) const {
  GroupDifference g;
  double d2 = 0, b2 = 0;
  for (const TensorDifference& t : tensors) {
    if (t.name.rfind(prefix, 0) != 0) continue;
    d2 += t.diff_l2 * t.diff_l2;
    b2 += t.norm_b * t.norm_b;
    g.values += t.values;
    g.unequal += t.unequal;
    if (t.relative() > (g.worst ? g.worst->relative() : 0.0)) g.worst = &t;
  }
  g.relative = b2 > 0 ? std::sqrt(d2 / b2) : std::sqrt(d2);
  return g;
}

CheckpointDifference diff_checkpoints(const std::string& step_dir_a, const std::string& step_dir_b,
                                      bool with_optimizer) {
  const Reader a(step_dir_a), b(step_dir_b);
  CheckpointDifference d;
  d.dir_a = a.dir();
  d.dir_b = b.dir();
  d.step_a = step_of(a);
  d.step_b = step_of(b);
  auto compared = [&](const std::string& n) {
    return n.rfind("model/", 0) == 0 || (with_optimizer && n.rfind("optim/", 0) == 0);
  };
  for (const auto& [x, y] : {std::pair{&a, &b}, std::pair{&b, &a}})
    for (const std::string& n : x->datasets())
      HPCT_USAGE_CHECK(
          !compared(n) || y->has(n),
          "ckpt_tool diff: {} holds {} but {} does not (checkpoints of two different models{})", x->dir(), n, y->dir(),
          n.rfind("optim/", 0) == 0 ? ", or two optimizers: compare the models alone, without --optimizer" : "");
  std::vector<unsigned char> raw;
  std::vector<double> va, vb;
  for (const std::string& n : a.datasets()) {
    if (!compared(n)) continue;
    const std::vector<int64_t> shape = a.shape(n);
    HPCT_USAGE_CHECK(shape == b.shape(n), "ckpt_tool diff: tensor {} has shape ({}) in {} but ({}) in {}", n,
                     fmt::join(shape, ", "), a.dir(), fmt::join(b.shape(n), ", "), b.dir());
    TensorDifference t;
    t.name = n;
    t.values = numel(shape);
    double a2 = 0, b2 = 0, d2 = 0;
    if (t.values > 0) {
      const std::vector<int64_t> whole = shape.empty() ? std::vector<int64_t>{} : shape;
      const int64_t rows = shape.empty() ? 1 : shape[0];
      const int64_t row = shape.empty() ? 1 : t.values / std::max<int64_t>(1, rows);
      const int64_t rows_per_slab = std::max<int64_t>(1, kSlabBytes / std::max<int64_t>(1, row * 8));
      for (int64_t r0 = 0; r0 < rows; r0 += rows_per_slab) {
        std::vector<int64_t> off(shape.size(), 0), cnt = whole;
        if (!shape.empty()) {
          off[0] = r0;
          cnt[0] = std::min(rows_per_slab, rows - r0);
        }
        read_as_double(a, n, off, cnt, raw, va);
        read_as_double(b, n, off, cnt, raw, vb);
        for (size_t i = 0; i < va.size(); ++i) {
          const double diff = va[i] - vb[i];
          a2 += va[i] * va[i];
          b2 += vb[i] * vb[i];
          d2 += diff * diff;
          t.max_abs = std::max(t.max_abs, std::fabs(diff));
          if (va[i] != vb[i] && !(std::isnan(va[i]) && std::isnan(vb[i]))) ++t.unequal;
        }
      }
    }
    t.norm_a = std::sqrt(a2);
    t.norm_b = std::sqrt(b2);
    t.diff_l2 = std::sqrt(d2);
    d.tensors.push_back(std::move(t));
  }
  return d;
}

}  // namespace hpct::ckpt
