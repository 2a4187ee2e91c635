// flat_range_to_boxes: a row-major flat range of a tensor as at most 2*ndim-1 hyperslabs, in order.
//
// Recursion over axes. At axis k the range lies inside one block of the axes k..ndim-1 (the earlier axes'
// indices are fixed in `prefix`); u = elements per index of axis k. With i0 = begin/u, i1 = end/u:
//   head:   begin not a multiple of u -> the partial index i0, recursively on axis k+1 (the head's end is
//           aligned, so each level below adds at most one full box and one more head);
//   middle: the whole indices [i0', i1) as one box, full on the later axes;
//   tail:   end not a multiple of u -> the partial index i1, recursively (mirror of the head).
// When begin and end fall in the same index of axis k, only that index is descended into. Hence at most
// (ndim-1) head boxes + 1 middle + (ndim-1) tail boxes.
#include "ckpt/checkpoint.hpp"
#include "core/error.hpp"

namespace hpct::ckpt {

int64_t Box::numel() const {
  int64_t n = 1;
  for (int64_t c : count) n *= c;
  return n;
}

namespace {

struct Decomposer {
  const std::vector<int64_t>& shape;
  std::vector<int64_t> inner;  // inner[k] = product of shape[k+1..]
  std::vector<Box> out;

  // [begin, end) relative to `base` (flat index of the block's first element); prefix = indices of axes < k.
  void run(size_t k, int64_t base, int64_t begin, int64_t end, std::vector<int64_t>& prefix) {
    if (begin >= end) return;
    const int64_t u = inner[k];
    const int64_t i0 = begin / u, i1 = end / u;
    const bool head = begin % u != 0, tail = end % u != 0;
    if (i0 == i1) {
      // begin and end inside the same index of axis k (then end % u != 0, else begin == end; and k is not
      // the last axis, where u == 1).
      prefix.push_back(i0);
      run(k + 1, base + i0 * u, begin - i0 * u, end - i0 * u, prefix);
      prefix.pop_back();
      return;
    }
    int64_t first_full = i0;
    if (head) {
      prefix.push_back(i0);
      run(k + 1, base + i0 * u, begin - i0 * u, u, prefix);
      prefix.pop_back();
      first_full = i0 + 1;
    }
    if (first_full < i1) {
      Box b;
      b.offset = prefix;
      b.count.assign(prefix.size(), 1);
      b.offset.push_back(first_full);
      b.count.push_back(i1 - first_full);
      for (size_t j = k + 1; j < shape.size(); ++j) {
        b.offset.push_back(0);
        b.count.push_back(shape[j]);
      }
      b.flat_begin = base + first_full * u;
      out.push_back(std::move(b));
    }
    if (tail) {
      prefix.push_back(i1);
      run(k + 1, base + i1 * u, 0, end - i1 * u, prefix);
      prefix.pop_back();
    }
  }
};

}  // namespace

std::vector<Box> flat_range_to_boxes(const std::vector<int64_t>& shape, int64_t begin, int64_t end) {
  HPCT_CHECK(!shape.empty(), "flat_range_to_boxes needs a tensor of at least one axis");
  int64_t n = 1;
  for (int64_t d : shape) {
    HPCT_CHECK(d >= 0, "negative extent in shape");
    n *= d;
  }
  HPCT_CHECK(0 <= begin && begin <= end && end <= n, "flat range [{}, {}) outside a tensor of {} elements", begin, end,
             n);
  Decomposer d{shape, std::vector<int64_t>(shape.size(), 1), {}};
  for (size_t k = shape.size() - 1; k > 0; --k) d.inner[k - 1] = d.inner[k] * shape[k];
  std::vector<int64_t> prefix;
  d.run(0, 0, begin, end, prefix);
  return std::move(d.out);
}

}  // namespace hpct::ckpt
