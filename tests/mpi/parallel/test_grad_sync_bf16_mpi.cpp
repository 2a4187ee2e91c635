// Under mpirun at np 2 and 4: the gradient reduction type of GradSync (parallel.grad_dtype, grad_sync.hpp).
//  - bf16: every reduced gradient (allreduce, or this rank's ZeRO-1 share) is a bf16 value, the same bits on every
//    rank, within 2 DP - 1 bf16 roundings of the fp32 sum; at DP 2 it is exactly round(round(g0) + round(g1)), the
//    host computation with the same rounding; the ZeRO-1 shares tile every tensor and the fp32 parameter allgather is
//    unchanged; at DP 1 the gradients stay untouched.
//  - fp32 (the default): bit for bit the plain fp32 allreduce of the gradient slab, no bf16 buffer.
//  - parse_grad_dtype: the deck values and a UsageError naming them.
// The gradients are not small integers here (those would pass through bf16 unchanged): a hash gives every (rank,
// tensor, element) a value with a full fp32 mantissa and magnitudes over three decades.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.hpp"
#include "parallel/grad_sync.hpp"
#include "parallel/parallel_context.hpp"
#include "tensor/bf16.hpp"
#include "../mpi_test_util.hpp"
#include "zero2_backward.hpp"

using namespace hpct;
using namespace hpct::parallel;

namespace {

using test::world_size;

// Tensors of odd sizes (buckets and ZeRO shares cut them at odd places).
void plan(Slab& s) {
  s.add("wte", {13, 7});
  s.add("wpe", {5, 7});
  s.add("h.0.w", {3, 2, 5, 7});
  s.add("h.0.b", {11});
  s.add("h.1.w", {29, 3});
  s.add("lnf", {1});
  s.allocate();
}

float grad_value(int rank, int tensor, int64_t i) {
  uint64_t z = (static_cast<uint64_t>(rank) << 40) ^ (static_cast<uint64_t>(tensor) << 32) ^ static_cast<uint64_t>(i);
  z = (z ^ (z >> 31)) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 29)) * 0xBF58476D1CE4E5B9ull;
  z ^= z >> 32;
  const float u = static_cast<float>(z & 0xffffff) / static_cast<float>(1 << 24);  // [0, 1)
  return (2.0f * u - 1.0f) * std::pow(10.0f, static_cast<float>(tensor % 3) - 1.0f);
}

void fill_grads(Slab& grads, int rank) {
  auto& ts = grads.tensors();
  for (size_t t = 0; t < ts.size(); ++t)
    for (int64_t i = 0; i < ts[t].numel(); ++i) ts[t].f32()[i] = grad_value(rank, static_cast<int>(t), i);
}

// A backward in reverse layout order, with progress points, then finish().
void run_step(GradSync& gs, int n_tensors) {
  gs.arm();
  for (int t = n_tensors - 1; t >= 0; --t) {
    gs.on_ready(t, t + 1);
    gs.on_ready(0, 0);
  }
  gs.finish();
}

class GradSyncBf16Test : public ::testing::TestWithParam<std::tuple<int, bool, double>> {};

TEST_P(GradSyncBf16Test, ReducedGradientsAreBf16SumsWithinRoundingOfFp32) {
  const auto [zero, overlap, bucket_kib] = GetParam();
  ParallelContext pc(1, 1, "tp-dp-pp", comm::CommOptions{30.0}, "test");
  Slab params("params", Device::CPU), grads("grads", Device::CPU);
  plan(params);
  plan(grads);
  const int P = pc.dp_size(), me = pc.dp_rank();
  auto& ts = grads.tensors();
  fill_grads(grads, me);
  GradSyncOptions o;
  o.zero = zero;
  o.overlap = overlap;
  o.bucket_bytes = static_cast<size_t>(bucket_kib * 1024);
  o.reduce_dtype = DType::BF16;
  GradSync gs(pc.dp_group(), params, grads, o, pc.exec());
  EXPECT_EQ(gs.reduce_dtype(), DType::BF16);
  EXPECT_GE(gs.comm_bytes(), grads.bytes() / 2 - 64) << "one bf16 image of the gradient slab";
  EXPECT_LE(gs.comm_bytes(), grads.bytes() / 2 + 64);
  EXPECT_NE(gs.describe().find("reduced in bf16"), std::string::npos) << gs.describe();
  run_step(gs, static_cast<int>(ts.size()));

  const float u = std::ldexp(1.0f, -8);  // bf16's unit roundoff
  int64_t checked = 0, differ_from_fp32 = 0;
  std::vector<int64_t> cover(ts.size(), 0);
  for (const OwnedRange& r : gs.owned()) {
    for (int64_t i = r.begin; i < r.end; ++i) {
      const float got = r.grad[i - r.begin];
      float fp32 = 0.0f, magnitude = 0.0f, bf16_pair = 0.0f;
      for (int q = 0; q < P; ++q) {
        const float g = grad_value(q, r.tensor, i);
        fp32 += g;
        magnitude += std::fabs(g);
        bf16_pair += round_to<bf16>(g);  // exact in fp32 at P = 2 (two bf16 values)
      }
      ASSERT_EQ(got, round_to<bf16>(got)) << "tensor " << r.tensor << "[" << i << "] did not pass through bf16";
      ASSERT_LE(std::fabs(got - fp32), static_cast<float>(2 * P - 1) * u * magnitude * 1.001f)
          << "tensor " << r.tensor << "[" << i << "]: bf16 reduction " << got << ", fp32 " << fp32;
      if (P == 2) ASSERT_EQ(got, round_to<bf16>(bf16_pair)) << "tensor " << r.tensor << "[" << i << "]";
      differ_from_fp32 += got != fp32;
      ++checked;
    }
    cover[static_cast<size_t>(r.tensor)] += r.end - r.begin;
  }
  EXPECT_GT(differ_from_fp32, checked / 2) << "full-mantissa gradients must show the bf16 rounding";
  pc.dp_group().allreduce(cover.data(), static_cast<int64_t>(cover.size()), DType::I64, comm::ReduceOp::Sum, "cover");
  for (size_t t = 0; t < ts.size(); ++t) EXPECT_EQ(cover[t], ts[t].numel() * (zero ? 1 : P)) << ts[t].name;

  if (!zero) {  // replicas stay bitwise equal: every rank holds rank 0's bits
    std::vector<float> mine(static_cast<size_t>(grads.bytes() / 4));
    std::memcpy(mine.data(), grads.base(), grads.bytes());
    std::vector<float> root = mine;
    MPI_Bcast(root.data(), static_cast<int>(root.size()), MPI_FLOAT, 0, MPI_COMM_WORLD);
    for (const Tensor& t : ts)
      EXPECT_EQ(std::memcmp(t.data, reinterpret_cast<const char*>(root.data()) + grads.offset_of(t), t.bytes()), 0)
          << t.name << " differs from rank 0's";
  } else {  // the parameter allgather stays fp32 and exact
    for (auto& p : params.tensors()) std::fill(p.f32(), p.f32() + p.numel(), -1.0f);
    for (const OwnedRange& r : gs.owned())
      for (int64_t i = r.begin; i < r.end; ++i)
        params.tensors()[static_cast<size_t>(r.tensor)].f32()[i] = 1.0f / (3 + i);
    gs.gather_params();
    for (auto& p : params.tensors())
      for (int64_t i = 0; i < p.numel(); ++i) ASSERT_EQ(p.f32()[i], 1.0f / (3 + i)) << p.name << "[" << i << "]";
  }

  // A second step with the same inputs gives the same bits (no state carried between steps, reproducible).
  std::vector<float> first;
  for (const OwnedRange& r : gs.owned()) first.insert(first.end(), r.grad, r.grad + (r.end - r.begin));
  fill_grads(grads, me);
  run_step(gs, static_cast<int>(ts.size()));
  std::vector<float> second;
  for (const OwnedRange& r : gs.owned()) second.insert(second.end(), r.grad, r.grad + (r.end - r.begin));
  EXPECT_EQ(std::memcmp(first.data(), second.data(), first.size() * sizeof(float)), 0);
}

INSTANTIATE_TEST_SUITE_P(Modes, GradSyncBf16Test,
                         ::testing::Values(std::make_tuple(0, true, 0.25), std::make_tuple(0, false, 1024.0),
                                           std::make_tuple(1, true, 0.25), std::make_tuple(1, false, 0.1),
                                           std::make_tuple(1, true, 1024.0)));

// ZeRO-2 with bf16 reduction: every micro-batch's ring buckets are rounded to bf16, reduce-scattered in bf16 and their
// shares summed in fp32 into the shard; the pinned wte accumulates in fp32 over the micro-batches and is reduced once.
// Values from 100 to ~330 (integers, exact in fp32, not all exact in bf16's 8 bits): at DP 2 every share is exactly the
// host's round(round(g0) + round(g1)) per micro-batch, summed in fp32 (wte: of the step's sums); at DP 4 within
// 2 DP - 1 roundings per reduction. The bf16 image is a copy of the ring and the pinned buffer (kind `comm`).
TEST(GradSyncBf16, Zero2ReducesEveryMicroBatchInBf16) {
  ParallelContext pc(1, 1, "tp-dp-pp", comm::CommOptions{30.0}, "test");
  const int P = pc.dp_size(), me = pc.dp_rank(), micro_batches = 3;
  if (P == 1) GTEST_SKIP() << "ZeRO-2 shards over 2 or more ranks";
  Slab params("params", Device::CPU), grads("grads", Device::CPU);
  plan(params);
  for (const Tensor& t : params.tensors()) grads.add(t.name, t.shape);  // planned only: ZeRO-2 binds them
  const int n = static_cast<int>(grads.tensors().size());
  GradWriteOrder order;
  for (int t = n - 1; t >= 2; --t) order.groups.emplace_back(t, t + 1);
  order.groups.emplace_back(0, 2);
  order.pinned.assign(static_cast<size_t>(n), false);
  order.pinned[0] = true;
  GradSyncOptions o;
  o.zero = 2;
  o.bucket_bytes = 100;
  o.reduce_dtype = DType::BF16;
  GradSync gs(pc.dp_group(), params, grads, o, pc.exec(), &order);
  const BucketPlan bp = plan_buckets(grads, o, P, me, &order);
  EXPECT_EQ(gs.comm_bytes(), bp.comm_bytes());
  EXPECT_EQ(bp.image_numel(), bp.ring_numel + bp.pinned_numel);
  const auto value = test::zero2_grad_value;
  test::run_zero2_step(gs, grads, order, me, micro_batches);
  const float u = std::ldexp(1.0f, -8);
  int64_t rounded = 0;
  for (const OwnedRange& r : gs.owned()) {
    for (int64_t i = r.begin; i < r.end; ++i) {
      const float got = r.grad[i - r.begin];
      float exact = 0.0f, pair = 0.0f, magnitude = 0.0f;
      if (r.tensor == 0) {  // pinned: the step's fp32 sums, reduced once
        float g[2] = {0.0f, 0.0f};
        for (int q = 0; q < P; ++q) {
          float gq = 0.0f;
          for (int mb = 0; mb < micro_batches; ++mb) gq += 2.0f * value(q, 0, i, mb);
          exact += gq;
          magnitude += gq;
          if (q < 2) g[q] = gq;
        }
        pair = round_to<bf16>(round_to<bf16>(g[0]) + round_to<bf16>(g[1]));
        ASSERT_LE(std::fabs(got - exact), static_cast<float>(2 * P - 1) * u * magnitude * 1.001f) << "wte[" << i << "]";
      } else {  // every micro-batch reduced in bf16, the shares summed in fp32
        for (int mb = 0; mb < micro_batches; ++mb) {
          float m_exact = 0.0f;
          for (int q = 0; q < P; ++q) m_exact += value(q, r.tensor, i, mb);
          exact += m_exact;
          magnitude += m_exact;
          pair += round_to<bf16>(round_to<bf16>(value(0, r.tensor, i, mb)) + round_to<bf16>(value(1, r.tensor, i, mb)));
        }
        ASSERT_LE(std::fabs(got - exact), static_cast<float>(2 * P - 1) * u * magnitude * 1.001f)
            << "tensor " << r.tensor << "[" << i << "]";
      }
      if (P == 2) ASSERT_EQ(got, pair) << "tensor " << r.tensor << "[" << i << "]";
      rounded += got != exact;
    }
  }
  pc.dp_group().allreduce(&rounded, 1, DType::I64, comm::ReduceOp::Sum, "rounded");
  EXPECT_GT(rounded, 0) << "some gradients must show the bf16 rounding";
}

// The default stays fp32: the gradient slab reduced in place, bit for bit the plain fp32 allreduce of each bucket,
// with no bf16 buffer.
TEST(GradSyncFp32, DefaultIsThePlainFp32AllreduceBitForBit) {
  ParallelContext pc(1, 1, "tp-dp-pp", comm::CommOptions{30.0}, "test");
  Slab params("params", Device::CPU), grads("grads", Device::CPU), ref("ref", Device::CPU);
  plan(params);
  plan(grads);
  plan(ref);
  fill_grads(grads, pc.dp_rank());
  fill_grads(ref, pc.dp_rank());
  GradSyncOptions o;
  o.bucket_bytes = 256;
  EXPECT_EQ(o.reduce_dtype, DType::F32);
  GradSync gs(pc.dp_group(), params, grads, o);
  EXPECT_EQ(gs.comm_bytes(), 0u);
  run_step(gs, static_cast<int>(grads.tensors().size()));
  for (const Bucket& b : gs.buckets())
    pc.dp_group().allreduce(static_cast<float*>(ref.base()) + b.elem_begin, b.elem_end - b.elem_begin, DType::F32,
                            comm::ReduceOp::Sum, "reference bucket");
  for (size_t t = 0; t < grads.tensors().size(); ++t)
    EXPECT_EQ(std::memcmp(grads.tensors()[t].data, ref.tensors()[t].data, grads.tensors()[t].bytes()), 0)
        << grads.tensors()[t].name;
}

// DP 1 (the whole world is one TP group): nothing is reduced, the gradients stay fp32 and untouched, no buffer.
TEST(GradSyncBf16, OneDataParallelRankLeavesTheGradientsAlone) {
  ParallelContext pc(world_size(), 1, "tp-dp-pp", comm::CommOptions{30.0}, "test");
  ASSERT_EQ(pc.dp_size(), 1);
  Slab params("params", Device::CPU), grads("grads", Device::CPU);
  plan(params);
  plan(grads);
  fill_grads(grads, 0);
  GradSyncOptions o;
  o.reduce_dtype = DType::BF16;
  GradSync gs(pc.dp_group(), params, grads, o, pc.exec());
  EXPECT_EQ(gs.comm_bytes(), 0u);
  run_step(gs, static_cast<int>(grads.tensors().size()));
  auto& ts = grads.tensors();
  for (size_t t = 0; t < ts.size(); ++t)
    for (int64_t i = 0; i < ts[t].numel(); ++i) ASSERT_EQ(ts[t].f32()[i], grad_value(0, static_cast<int>(t), i));
}

TEST(GradSyncBf16, ParseGradDtypeNamesTheAcceptedValues) {
  EXPECT_EQ(parse_grad_dtype("fp32"), DType::F32);
  EXPECT_EQ(parse_grad_dtype("bf16"), DType::BF16);
  EXPECT_STREQ(grad_dtype_name(DType::F32), "fp32");
  EXPECT_STREQ(grad_dtype_name(DType::BF16), "bf16");
  try {
    parse_grad_dtype("fp16");
    ADD_FAILURE() << "fp16 is not a gradient reduction type";
  } catch (const UsageError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("parallel.grad_dtype"), std::string::npos) << m;
    EXPECT_NE(m.find("\"fp32\""), std::string::npos) << m;
    EXPECT_NE(m.find("\"bf16\""), std::string::npos) << m;
  }
  ParallelContext pc(1, 1, "tp-dp-pp", comm::CommOptions{30.0}, "test");
  Slab params("params", Device::CPU), grads("grads", Device::CPU);
  plan(params);
  plan(grads);
  GradSyncOptions o;
  o.reduce_dtype = DType::F64;
  EXPECT_THROW(GradSync(pc.dp_group(), params, grads, o, pc.exec()), Error);
}

}  // namespace
