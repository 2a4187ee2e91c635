// Under mpirun at np 1, 2, 4: the tensor-parallel collectives of parallel/tp_collectives.hpp over every TP group size
// t dividing the world (ParallelContext's device TP group, MPI on the CPU). Values are small integers, so float sums
// are exact and checked with ==: reduce_from_tp_region forward and copy_to_tp_region backward sum (rank + 1), their
// duals are identities, scatter then gather along the last dimension is the identity, gather's backward is scatter's
// forward and scatter's backward gather's forward, and the cross-entropy statistics reduce with MAX and SUM. The same
// with bf16 activations: exact sums of small integers, bit-for-bit agreement with the plain bf16 allreduce and a
// bound against the fp32 sum, and every column moved bit for bit.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.hpp"
#include "parallel/parallel_context.hpp"
#include "parallel/tp_collectives.hpp"
#include "tensor/bf16.hpp"
#include "../mpi_test_util.hpp"

using namespace hpct;
using namespace hpct::parallel;

namespace {

using test::world_size;

// Every TP size dividing the world, with pp = 1 (the DP axis takes the rest).
template <class F>
void for_each_tp(F&& f) {
  const int n = world_size();
  for (int tp = 1; tp <= n; ++tp) {
    if (n % tp) continue;
    ParallelContext pc(tp, 1, "tp-dp-pp", comm::CommOptions{30.0}, "test");
    SCOPED_TRACE("tp " + std::to_string(tp));
    f(pc);
  }
}

// The full (rows, cols) tensor every rank agrees on: element (i, j) = 100 i + j (exact in float).
float full_value(int64_t i, int64_t j) { return static_cast<float>(100 * i + j); }

}  // namespace

TEST(TpCollectives, ReduceFromForwardSumsAndBackwardIsIdentity) {
  for_each_tp([](ParallelContext& pc) {
    comm::Communicator& tp = pc.device_tp_group();
    const int r = pc.tp_rank(), t = pc.tp_size();
    const int64_t n = 37;
    std::vector<float> y(n);
    for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>((r + 1) * (i + 1));
    EXPECT_GE(reduce_from_tp_region_forward(tp, y.data(), n, "test reduce_from forward"), 0.0);
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(y[i], static_cast<float>(t * (t + 1) / 2 * (i + 1))) << i;

    std::vector<float> dy(n);
    for (int64_t i = 0; i < n; ++i) dy[i] = static_cast<float>((r + 1) * 7 + i);
    const std::vector<float> before = dy;
    EXPECT_EQ(reduce_from_tp_region_backward(tp, dy.data(), n, "test reduce_from backward"), 0.0);
    EXPECT_EQ(dy, before);
  });
}

TEST(TpCollectives, CopyToForwardIsIdentityAndBackwardSums) {
  for_each_tp([](ParallelContext& pc) {
    comm::Communicator& tp = pc.device_tp_group();
    const int r = pc.tp_rank(), t = pc.tp_size();
    const int64_t n = 53;
    std::vector<float> x(n);
    for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(i - 20);
    const std::vector<float> before = x;
    EXPECT_EQ(copy_to_tp_region_forward(tp, x.data(), n, "test copy_to forward"), 0.0);
    EXPECT_EQ(x, before);

    std::vector<float> dx(n);
    for (int64_t i = 0; i < n; ++i) dx[i] = static_cast<float>((r + 1) * (i % 5 - 2));
    EXPECT_GE(copy_to_tp_region_backward(tp, dx.data(), n, "test copy_to backward"), 0.0);
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(dx[i], static_cast<float>(t * (t + 1) / 2 * (i % 5 - 2))) << i;
  });
}

// The renaming is bit-for-bit: the communicating sides are the plain allreduce on the same buffer, also for values
// whose float sum depends on the order of the terms.
TEST(TpCollectives, CommunicatingSidesAreThePlainAllreduceBitForBit) {
  for_each_tp([](ParallelContext& pc) {
    comm::Communicator& tp = pc.device_tp_group();
    const int r = pc.tp_rank();
    const int64_t n = 101;
    std::vector<float> a(n);
    for (int64_t i = 0; i < n; ++i) a[i] = 1.0f / static_cast<float>(3 + i + 17 * r) + 1e-3f * static_cast<float>(r);
    std::vector<float> raw = a, via_reduce = a, via_copy = a, via_stats = a;
    tp.allreduce(raw.data(), n, DType::F32, comm::ReduceOp::Sum, "test raw");
    reduce_from_tp_region_forward(tp, via_reduce.data(), n, "test reduce_from");
    copy_to_tp_region_backward(tp, via_copy.data(), n, "test copy_to");
    allreduce_tp_stats(tp, via_stats.data(), n, comm::ReduceOp::Sum, "test stats");
    EXPECT_EQ(std::memcmp(raw.data(), via_reduce.data(), n * sizeof(float)), 0);
    EXPECT_EQ(std::memcmp(raw.data(), via_copy.data(), n * sizeof(float)), 0);
    EXPECT_EQ(std::memcmp(raw.data(), via_stats.data(), n * sizeof(float)), 0);
  });
}

TEST(TpCollectives, CrossEntropyStatsReduceMaxAndSum) {
  for_each_tp([](ParallelContext& pc) {
    comm::Communicator& tp = pc.device_tp_group();
    const int r = pc.tp_rank(), t = pc.tp_size();
    const int64_t n = 16;
    std::vector<float> mx(n), sums(2 * n);
    // the max sits on rank i % t for row i
    for (int64_t i = 0; i < n; ++i) mx[i] = (i % t == r) ? static_cast<float>(i + 50) : static_cast<float>(-i - r);
    for (int64_t i = 0; i < 2 * n; ++i) sums[i] = static_cast<float>((r + 1) * (i + 1));
    EXPECT_GE(allreduce_tp_stats(tp, mx.data(), n, comm::ReduceOp::Max, "test max"), 0.0);
    EXPECT_GE(allreduce_tp_stats(tp, sums.data(), 2 * n, comm::ReduceOp::Sum, "test sums"), 0.0);
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(mx[i], static_cast<float>(i + 50)) << i;
    for (int64_t i = 0; i < 2 * n; ++i) EXPECT_EQ(sums[i], static_cast<float>(t * (t + 1) / 2 * (i + 1))) << i;
  });
}

TEST(TpCollectives, ScatterThenGatherIsTheIdentity) {
  for_each_tp([](ParallelContext& pc) {
    comm::Communicator& tp = pc.device_tp_group();
    const ExecContext& ctx = pc.exec();
    const int r = pc.tp_rank(), t = pc.tp_size();
    const int64_t rows = 5, cols = 12, cl = cols / t;  // 12: divisible by 1, 2, 4
    std::vector<float> x(rows * cols), y(rows * cl, -1.0f), back(rows * cols, -1.0f), scratch(rows * cols);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) x[i * cols + j] = full_value(i, j);

    EXPECT_EQ(scatter_to_tp_region_forward(ctx, tp, x.data(), y.data(), rows, cols, "test scatter"), 0.0);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cl; ++j) EXPECT_EQ(y[i * cl + j], full_value(i, r * cl + j)) << i << "," << j;

    EXPECT_GE(gather_from_tp_region_forward(ctx, tp, y.data(), back.data(), scratch.data(), rows, cols, "test gather"),
              0.0);
    EXPECT_EQ(back, x);
  });
}

TEST(TpCollectives, GatherForwardConcatenatesInRankOrder) {
  for_each_tp([](ParallelContext& pc) {
    comm::Communicator& tp = pc.device_tp_group();
    const ExecContext& ctx = pc.exec();
    const int r = pc.tp_rank(), t = pc.tp_size();
    const int64_t rows = 3, cl = 4, cols = cl * t;
    std::vector<float> x(rows * cl), y(rows * cols, -1.0f), scratch(rows * cols);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cl; ++j) x[i * cl + j] = full_value(i, r * cl + j);  // this rank's columns
    gather_from_tp_region_forward(ctx, tp, x.data(), y.data(), scratch.data(), rows, cols, "test gather");
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) EXPECT_EQ(y[i * cols + j], full_value(i, j)) << i << "," << j;
  });
}

// The duals: gather's backward is scatter's forward (keep this rank's columns of dY), scatter's backward is
// gather's forward (concatenate every rank's dY slice).
TEST(TpCollectives, BackwardSidesAreTheDualForwards) {
  for_each_tp([](ParallelContext& pc) {
    comm::Communicator& tp = pc.device_tp_group();
    const ExecContext& ctx = pc.exec();
    const int r = pc.tp_rank(), t = pc.tp_size();
    const int64_t rows = 4, cols = 8, cl = cols / t;
    std::vector<float> dy_full(rows * cols);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) dy_full[i * cols + j] = full_value(i, j) + 0.5f;

    std::vector<float> dx_gather(rows * cl, -1.0f), dx_scatter_fwd(rows * cl, -2.0f);
    EXPECT_EQ(gather_from_tp_region_backward(ctx, tp, dy_full.data(), dx_gather.data(), rows, cols, "test gather bwd"),
              0.0);
    scatter_to_tp_region_forward(ctx, tp, dy_full.data(), dx_scatter_fwd.data(), rows, cols, "test scatter");
    EXPECT_EQ(dx_gather, dx_scatter_fwd);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cl; ++j) EXPECT_EQ(dx_gather[i * cl + j], full_value(i, r * cl + j) + 0.5f);

    std::vector<float> dy_local(rows * cl), dx_scatter(rows * cols, -1.0f), dx_gather_fwd(rows * cols, -2.0f),
        scratch(rows * cols);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cl; ++j) dy_local[i * cl + j] = full_value(i, r * cl + j) - 0.25f;
    EXPECT_GE(scatter_to_tp_region_backward(ctx, tp, dy_local.data(), dx_scatter.data(), scratch.data(), rows, cols,
                                            "test scatter bwd"),
              0.0);
    gather_from_tp_region_forward(ctx, tp, dy_local.data(), dx_gather_fwd.data(), scratch.data(), rows, cols,
                                  "test gather");
    EXPECT_EQ(dx_scatter, dx_gather_fwd);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) EXPECT_EQ(dx_scatter[i * cols + j], full_value(i, j) - 0.25f);
  });
}

// A last dimension the group does not divide is refused on every rank before any communication (so no rank hangs).
// Sequence parallelism: the all-gather concatenates the row shards in rank order, the reduce-scatter sums every rank's
// partials of a rank's rows (in place too), each backward is the other's forward, and the LayerNorm gradients' sum is
// the same on every rank.
TEST(TpCollectives, SequenceParallelGatherAndReduceScatterAreDuals) {
  for_each_tp([](ParallelContext& pc) {
    comm::Communicator& tp = pc.device_tp_group();
    const int r = pc.tp_rank(), t = pc.tp_size();
    const int64_t rows = 6 * t, cols = 5, n = rows / t * cols;  // this rank's shard: rows / t rows
    std::vector<float> shard(n), full(n * t);
    for (int64_t i = 0; i < n; ++i) shard[i] = full_value(r * rows / t + i / cols, i % cols);
    EXPECT_GE(gather_from_sequence_parallel_region_forward(tp, shard.data(), full.data(), n, "test sp gather"), 0.0);
    for (int64_t i = 0; i < n * t; ++i) ASSERT_EQ(full[i], full_value(i / cols, i % cols)) << i;
    // reduce-scatter: rank q contributes (q + 1) x value to every row; rank r keeps its rows' sum
    std::vector<float> partial(n * t), mine(n);
    for (int64_t i = 0; i < n * t; ++i) partial[i] = static_cast<float>(r + 1) * full_value(i / cols, i % cols);
    const float sum = static_cast<float>(t * (t + 1) / 2);
    reduce_scatter_to_sequence_parallel_region_forward(tp, partial.data(), mine.data(), n, "test sp reduce-scatter");
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(mine[i], sum * full_value(r * rows / t + i / cols, i % cols)) << i;
    std::vector<float> in_place = partial;  // into this rank's block of the partials
    reduce_scatter_to_sequence_parallel_region_forward(tp, in_place.data(), in_place.data() + r * n, n,
                                                       "test in place");
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(in_place[r * n + i], mine[i]) << i;
    // the duals: gather's backward is the reduce-scatter, reduce-scatter's backward the gather
    std::vector<float> dx(n), dfull(n * t);
    gather_from_sequence_parallel_region_backward(tp, partial.data(), dx.data(), n, "test sp gather backward");
    EXPECT_EQ(dx, mine);
    reduce_scatter_to_sequence_parallel_region_backward(tp, shard.data(), dfull.data(), n, "test sp rs backward");
    EXPECT_EQ(dfull, full);
    std::vector<float> grads(7, static_cast<float>(r + 1));
    allreduce_sequence_parallel_grads(tp, grads.data(), 7, "test sp grads");
    for (float g : grads) EXPECT_EQ(g, sum);
  });
}

TEST(TpCollectives, IndivisibleLastDimensionIsAnError) {
  const int n = world_size();
  if (n == 1) GTEST_SKIP() << "every size divides over one rank";
  ParallelContext pc(n, 1, "tp-dp-pp", comm::CommOptions{30.0}, "test");
  comm::Communicator& tp = pc.device_tp_group();
  const int64_t rows = 2, cols = n + 1;
  std::vector<float> x(rows * cols), y(rows * cols), scratch(rows * cols * n);
  EXPECT_THROW(scatter_to_tp_region_forward(pc.exec(), tp, x.data(), y.data(), rows, cols, "test"), hpct::Error);
  EXPECT_THROW(gather_from_tp_region_forward(pc.exec(), tp, x.data(), y.data(), scratch.data(), rows, cols, "test"),
               hpct::Error);
}

// ---- bf16 activations (A = bf16): the same functions move and reduce 2-byte elements ---------------------------

namespace {
std::vector<bf16> to_bf16_vector(const std::vector<float>& v) {
  std::vector<bf16> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = to_bf16(v[i]);
  return b;
}
std::vector<float> to_float_vector(const std::vector<bf16>& b) {
  std::vector<float> v(b.size());
  for (size_t i = 0; i < b.size(); ++i) v[i] = to_f32(b[i]);
  return v;
}
bool same_bits(const std::vector<bf16>& a, const std::vector<bf16>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(bf16)) == 0;
}
}  // namespace

// Small integers: every partial sum (at most 10 * 25 = 250) is exact in bf16 (8 significant bits), so the sums are
// exact whatever order the allreduce combines them in; the identities leave the bits alone.
TEST(TpCollectivesBf16, ConjugatePairsSumExactlyAndIdentitiesKeepTheBits) {
  for_each_tp([](ParallelContext& pc) {
    comm::Communicator& tp = pc.device_tp_group();
    const int r = pc.tp_rank(), t = pc.tp_size();
    const int64_t n = 75;
    std::vector<float> ref(n);
    for (int64_t i = 0; i < n; ++i) ref[i] = static_cast<float>((r + 1) * (i % 25 + 1));
    std::vector<bf16> y = to_bf16_vector(ref), dx = to_bf16_vector(ref);
    EXPECT_GE(reduce_from_tp_region_forward(tp, y.data(), n, "test bf16 reduce_from forward"), 0.0);
    EXPECT_GE(copy_to_tp_region_backward(tp, dx.data(), n, "test bf16 copy_to backward"), 0.0);
    for (int64_t i = 0; i < n; ++i) {
      const float want = static_cast<float>(t * (t + 1) / 2 * (i % 25 + 1));
      EXPECT_EQ(to_f32(y[i]), want) << i;
      EXPECT_EQ(to_f32(dx[i]), want) << i;
    }
    // Identities: a pattern with NaNs and odd mantissas must come back bit for bit.
    std::vector<bf16> x(n);
    for (int64_t i = 0; i < n; ++i) x[i] = bf16{static_cast<uint16_t>(0x7f81 + 977 * i + r)};
    const std::vector<bf16> before = x;
    EXPECT_EQ(copy_to_tp_region_forward(tp, x.data(), n, "test bf16 copy_to forward"), 0.0);
    EXPECT_TRUE(same_bits(x, before));
    EXPECT_EQ(reduce_from_tp_region_backward(tp, x.data(), n, "test bf16 reduce_from backward"), 0.0);
    EXPECT_TRUE(same_bits(x, before));
  });
}

// Values whose bf16 sum rounds: the communicating sides are the plain bf16 allreduce bit for bit (the rounding happens
// in the communicator, nowhere else), and within t - 1 bf16 roundings of the fp32 sum of the same inputs.
TEST(TpCollectivesBf16, CommunicatingSidesAreThePlainBf16AllreduceAndNearTheFp32Sum) {
  for_each_tp([](ParallelContext& pc) {
    comm::Communicator& tp = pc.device_tp_group();
    const int r = pc.tp_rank(), t = pc.tp_size();
    const int64_t n = 301;
    std::vector<float> a(n);
    for (int64_t i = 0; i < n; ++i) a[i] = round_to<bf16>(1.0f / static_cast<float>(3 + i + 17 * r) + 0.01f * r);
    std::vector<bf16> raw = to_bf16_vector(a), via_reduce = raw, via_copy = raw;
    tp.allreduce(raw.data(), n, DType::BF16, comm::ReduceOp::Sum, "test bf16 raw");
    reduce_from_tp_region_forward(tp, via_reduce.data(), n, "test bf16 reduce_from");
    copy_to_tp_region_backward(tp, via_copy.data(), n, "test bf16 copy_to");
    EXPECT_TRUE(same_bits(raw, via_reduce));
    EXPECT_TRUE(same_bits(raw, via_copy));
    std::vector<float> fp32 = a;  // the same (bf16-representable) inputs summed in fp32
    tp.allreduce(fp32.data(), n, DType::F32, comm::ReduceOp::Sum, "test fp32 reference");
    for (int64_t i = 0; i < n; ++i) {
      // each of the t - 1 roundings moves a partial sum by at most half a bf16 ulp (2^-8 relative) of a value no
      // larger than the total of the (positive) inputs
      const float bound = static_cast<float>(t - 1) * std::ldexp(1.0f, -8) * fp32[i] * 1.0001f;
      EXPECT_LE(std::fabs(to_f32(raw[i]) - fp32[i]), bound) << i;
    }
  });
}

TEST(TpCollectivesBf16, ScatterGatherAndTheirDualsMoveBf16Columns) {
  for_each_tp([](ParallelContext& pc) {
    comm::Communicator& tp = pc.device_tp_group();
    const ExecContext& ctx = pc.exec();
    const int r = pc.tp_rank(), t = pc.tp_size();
    const int64_t rows = 5, cols = 12, cl = cols / t;
    // (16 i + j) / 64 <= 75 / 64: at most 7 significant bits, exact in bf16 and distinct for every (i, j)
    auto value = [](int64_t i, int64_t j) { return static_cast<float>(16 * i + j) / 64.0f; };
    std::vector<float> xf(rows * cols);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) xf[i * cols + j] = value(i, j);
    const std::vector<bf16> x = to_bf16_vector(xf);
    std::vector<bf16> y(rows * cl, bf16{0xffff}), back(rows * cols, bf16{0xffff}), scratch(rows * cols);
    EXPECT_EQ(scatter_to_tp_region_forward(ctx, tp, x.data(), y.data(), rows, cols, "test bf16 scatter"), 0.0);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cl; ++j) EXPECT_EQ(to_f32(y[i * cl + j]), value(i, r * cl + j));
    EXPECT_GE(gather_from_tp_region_forward(ctx, tp, y.data(), back.data(), scratch.data(), rows, cols,
                                            "test bf16 gather"),
              0.0);
    EXPECT_TRUE(same_bits(back, x)) << "scatter then gather is the identity";
    // the duals
    std::vector<bf16> dx_gather(rows * cl), dx_scatter(rows * cols);
    gather_from_tp_region_backward(ctx, tp, x.data(), dx_gather.data(), rows, cols, "test bf16 gather bwd");
    EXPECT_TRUE(same_bits(dx_gather, y));
    scatter_to_tp_region_backward(ctx, tp, y.data(), dx_scatter.data(), scratch.data(), rows, cols,
                                  "test bf16 scatter bwd");
    EXPECT_TRUE(same_bits(dx_scatter, x));
    EXPECT_EQ(to_float_vector(dx_scatter), xf);
  });
}
