// flat_range_to_boxes, exhaustively on small shapes: for every [begin, end) the boxes are valid hyperslabs,
// at most 2*ndim-1, in order, each contiguous in the flat order, and together exactly [begin, end).
#include <gtest/gtest.h>

#include <vector>

#include "ckpt/checkpoint.hpp"
#include "core/error.hpp"

namespace hpct::ckpt {
namespace {

// Row-major flat indices of a box's elements, in the box's own row-major order.
std::vector<int64_t> box_elements(const std::vector<int64_t>& shape, const Box& b) {
  std::vector<int64_t> out;
  const size_t nd = shape.size();
  std::vector<int64_t> idx(nd, 0);
  if (b.numel() == 0) return out;
  for (;;) {
    int64_t flat = 0;
    for (size_t a = 0; a < nd; ++a) flat = flat * shape[a] + b.offset[a] + idx[a];
    out.push_back(flat);
    size_t a = nd;
    bool done = true;
    while (a > 0) {
      --a;
      if (++idx[a] < b.count[a]) {
        done = false;
        break;
      }
      idx[a] = 0;
    }
    if (done) return out;
  }
}

void check_all_ranges(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  const size_t max_boxes = 2 * shape.size() - 1;
  for (int64_t begin = 0; begin <= n; ++begin) {
    for (int64_t end = begin; end <= n; ++end) {
      const auto boxes = flat_range_to_boxes(shape, begin, end);
      ASSERT_LE(boxes.size(), max_boxes) << "range [" << begin << ", " << end << ")";
      int64_t next = begin;
      for (const Box& b : boxes) {
        ASSERT_EQ(b.offset.size(), shape.size());
        ASSERT_EQ(b.count.size(), shape.size());
        for (size_t a = 0; a < shape.size(); ++a) {
          ASSERT_GE(b.offset[a], 0);
          ASSERT_GE(b.count[a], 1) << "empty box in range [" << begin << ", " << end << ")";
          ASSERT_LE(b.offset[a] + b.count[a], shape[a]);
        }
        ASSERT_EQ(b.flat_begin, next) << "range [" << begin << ", " << end << ")";
        for (int64_t e : box_elements(shape, b)) ASSERT_EQ(e, next++) << "range [" << begin << ", " << end << ")";
      }
      ASSERT_EQ(next, end) << "range [" << begin << ", " << end << ")";
    }
  }
}

TEST(FlatRangeToBoxes, ExhaustiveSmallShapes) {
  for (const auto& shape : std::vector<std::vector<int64_t>>{{1},
                                                             {7},
                                                             {1, 1},
                                                             {3, 4},
                                                             {4, 1},
                                                             {1, 5},
                                                             {2, 3, 4},
                                                             {3, 1, 2},
                                                             {2, 2, 2, 2},
                                                             {2, 1, 3, 2},
                                                             {3, 2, 1, 2, 2}}) {
    SCOPED_TRACE(::testing::Message() << "shape of " << shape.size() << " axes, first " << shape[0]);
    check_all_ranges(shape);
  }
}

TEST(FlatRangeToBoxes, KnownDecomposition) {
  // (4, 5), [3, 17): the rest of row 0, rows 1-2, the start of row 3.
  const auto b = flat_range_to_boxes({4, 5}, 3, 17);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0].offset, (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(b[0].count, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(b[1].offset, (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(b[1].count, (std::vector<int64_t>{2, 5}));
  EXPECT_EQ(b[2].offset, (std::vector<int64_t>{3, 0}));
  EXPECT_EQ(b[2].count, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(b[2].flat_begin, 15);
  // The worst case reaches 2*ndim-1 boxes.
  EXPECT_EQ(flat_range_to_boxes({3, 3, 3}, 1, 25).size(), 5u);
  // A whole tensor is one box.
  EXPECT_EQ(flat_range_to_boxes({3, 4, 5}, 0, 60).size(), 1u);
}

TEST(FlatRangeToBoxes, RejectsBadRanges) {
  EXPECT_THROW(flat_range_to_boxes({3, 4}, 5, 13), Error);
  EXPECT_THROW(flat_range_to_boxes({3, 4}, 6, 5), Error);
  EXPECT_THROW(flat_range_to_boxes({3, 4}, -1, 5), Error);
  EXPECT_THROW(flat_range_to_boxes({}, 0, 0), Error);
}

}  // namespace
}  // namespace hpct::ckpt
