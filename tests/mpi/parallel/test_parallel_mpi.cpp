// Under mpirun at np 1, 2, 4: ParallelContext builds the groups the grid formula says, and GradSync sums
// gradients exactly (bucketed, overlapped or not, ZeRO-1 shares that tile every tensor once, parameter
// allgather; ZeRO-2's per-micro-batch reduce-scatter through its ring of buckets). Values are small integers, so float sums are exact and checked with ==.
#include <gtest/gtest.h>
#include <mpi.h>

#include <numeric>

#include "core/error.hpp"
#include "parallel/grad_sync.hpp"
#include "parallel/parallel_context.hpp"
#include "../mpi_test_util.hpp"
#include "zero2_backward.hpp"

using namespace hpct;
using namespace hpct::parallel;

namespace {

using test::world_rank;
using test::world_size;

// tensors of odd sizes (so buckets and ZeRO shares cut tensors at odd places)
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
  return static_cast<float>((rank + 1) * 1000 + tensor * 37 + i % 101);
}

}  // namespace

TEST(ParallelContext, GroupsMatchTheGrid) {
  const int n = world_size();
  for (int tp = 1; tp <= n; ++tp)
    for (int pp = 1; pp <= n; ++pp) {
      if (n % (tp * pp)) continue;
      ParallelContext pc(tp, pp, "tp-dp-pp", comm::CommOptions{30.0}, "test");
      const Grid& g = pc.grid();
      const int me = world_rank();
      EXPECT_EQ(pc.coord(), g.coord_of(me));
      // each group allreduce-sums the world ranks of its members: compare with the grid's member list
      for (Axis a : {Axis::TP, Axis::DP, Axis::PP}) {
        comm::Communicator& c = a == Axis::TP ? pc.tp_group() : a == Axis::DP ? pc.dp_group() : pc.pp_group();
        int64_t v = me;
        c.allreduce(&v, 1, DType::I64, comm::ReduceOp::Sum, "group sum");
        const auto members = g.group(a, me);
        EXPECT_EQ(v, std::accumulate(members.begin(), members.end(), int64_t{0})) << "axis " << axis_name(a);
        EXPECT_EQ(c.size(), g.size(a));
      }
      // embedding group: first and last stage of the same (tp, dp)
      const bool holds = pc.pp_rank() == 0 || pc.pp_rank() == pp - 1;
      ASSERT_EQ(pc.has_embedding_group(), holds);
      if (holds) {
        Coord c0 = pc.coord(), c1 = pc.coord();
        c0.pp = 0;
        c1.pp = pp - 1;
        int64_t v = me;
        pc.embedding_group().allreduce(&v, 1, DType::I64, comm::ReduceOp::Sum, "embedding group sum");
        EXPECT_EQ(v, pp == 1 ? me : g.rank_of(c0) + g.rank_of(c1));
        EXPECT_EQ(pc.embedding_group().size(), pp == 1 ? 1 : 2);
      }
    }
}

class GradSyncTest : public ::testing::TestWithParam<std::tuple<int, bool, double>> {};

TEST_P(GradSyncTest, SumsExactlyAndZeroSharesTile) {
  const auto [zero, overlap, bucket_kib] = GetParam();
  ParallelContext pc(1, 1, "tp-dp-pp", comm::CommOptions{30.0}, "test");
  Slab params("params", Device::CPU), grads("grads", Device::CPU);
  plan(params);
  plan(grads);
  const int P = pc.dp_size(), me = pc.dp_rank();
  auto& ts = grads.tensors();
  for (size_t t = 0; t < ts.size(); ++t)
    for (int64_t i = 0; i < ts[t].numel(); ++i) ts[t].f32()[i] = grad_value(me, static_cast<int>(t), i);
  GradSyncOptions o;
  o.zero = zero;
  o.overlap = overlap;
  o.bucket_bytes = static_cast<size_t>(bucket_kib * 1024);
  GradSync gs(pc.dp_group(), params, grads, o);
  ASSERT_GE(gs.buckets().size(), 1u);

  // a backward in reverse layout order, with progress points
  gs.arm();
  for (int t = static_cast<int>(ts.size()) - 1; t >= 0; --t) {
    gs.on_ready(t, t + 1);
    gs.on_ready(0, 0);
  }
  gs.finish();

  auto expected = [&](int t, int64_t i) {
    float s = 0;
    for (int r = 0; r < P; ++r) s += grad_value(r, t, i);
    return s;
  };
  // every owned range holds the exact sum; the owned ranges of all ranks tile every tensor once
  std::vector<int64_t> cover;
  cover.assign(ts.size(), 0);
  for (const OwnedRange& o2 : gs.owned()) {
    for (int64_t i = o2.begin; i < o2.end; ++i) ASSERT_EQ(o2.grad[i - o2.begin], expected(o2.tensor, i));
    cover[static_cast<size_t>(o2.tensor)] += o2.end - o2.begin;
  }
  pc.dp_group().allreduce(cover.data(), static_cast<int64_t>(cover.size()), DType::I64, comm::ReduceOp::Sum, "cover");
  for (size_t t = 0; t < ts.size(); ++t) EXPECT_EQ(cover[t], ts[t].numel() * (zero ? 1 : P)) << ts[t].name;

  if (zero) {
    // each rank writes (rank+1)*value into its share of the parameters; the allgather assembles them
    for (auto& p : params.tensors()) std::fill(p.f32(), p.f32() + p.numel(), -1.0f);
    for (const OwnedRange& o2 : gs.owned())
      for (int64_t i = o2.begin; i < o2.end; ++i) params.tensors()[static_cast<size_t>(o2.tensor)].f32()[i] = 1.0f + i;
    gs.gather_params();
    for (auto& p : params.tensors())
      for (int64_t i = 0; i < p.numel(); ++i) ASSERT_EQ(p.f32()[i], 1.0f + i) << p.name << "[" << i << "]";
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, GradSyncTest,
                         ::testing::Values(std::make_tuple(0, true, 0.25), std::make_tuple(0, false, 0.25),
                                           std::make_tuple(0, true, 1024.0), std::make_tuple(1, true, 0.25),
                                           std::make_tuple(1, false, 0.1), std::make_tuple(1, true, 1024.0)));

// ZeRO-2: the gradients live in the gradient sync's buckets (a ring reused within a micro-batch, wte kept whole); every
// micro-batch's buckets are reduce-scattered as the backward completes them and summed into the shard. A backward
// that writes one tensor per group in reverse, and wte first too (as the GPT's head does), over three micro-batches:
// every owned range holds the exact sum over ranks and micro-batches, the shares tile every tensor once, and the ring
// is smaller than the gradients.
TEST(GradSyncZero2, SumsEveryMicroBatchThroughARing) {
  ParallelContext pc(1, 1, "tp-dp-pp", comm::CommOptions{30.0}, "test");
  const int P = pc.dp_size(), me = pc.dp_rank(), micro_batches = 3;
  Slab params("params", Device::CPU), grads("grads", Device::CPU);
  plan(params);
  // the same tensors as plan(), planned only: ZeRO-2 binds them to its buckets
  for (const Tensor& t : params.tensors()) grads.add(t.name, t.shape);
  if (P == 1) grads.allocate();  // one rank: nothing to shard, the model keeps its own gradients (the trainers' rule)
  const int n = static_cast<int>(grads.tensors().size());
  GradWriteOrder order;
  for (int t = n - 1; t >= 2; --t) order.groups.emplace_back(t, t + 1);
  order.groups.emplace_back(0, 2);  // wte and wpe, the embedding's backward
  order.pinned.assign(static_cast<size_t>(n), false);
  order.pinned[0] = true;
  GradSyncOptions o;
  o.zero = 2;
  o.bucket_bytes = 100;  // a few tensors per bucket at most
  GradSync gs(pc.dp_group(), params, grads, o, ExecContext{}, &order);
  ASSERT_EQ(gs.per_micro_batch(), P > 1);
  if (P == 1) return;
  ASSERT_TRUE(grads.bound());
  test::run_zero2_step(gs, grads, order, me, micro_batches);
  auto expected = [&](int t, int64_t i) {
    float s = 0;
    for (int r = 0; r < P; ++r)
      for (int mb = 0; mb < micro_batches; ++mb) s += test::zero2_grad_value(r, t, i, mb) * (t == 0 ? 2.0f : 1.0f);
    return s;
  };
  std::vector<int64_t> cover(static_cast<size_t>(n), 0);
  for (const OwnedRange& r : gs.owned()) {
    for (int64_t i = r.begin; i < r.end; ++i) ASSERT_EQ(r.grad[i - r.begin], expected(r.tensor, i)) << r.tensor;
    cover[static_cast<size_t>(r.tensor)] += r.end - r.begin;
  }
  pc.dp_group().allreduce(cover.data(), n, DType::I64, comm::ReduceOp::Sum, "cover");
  for (int t = 0; t < n; ++t) EXPECT_EQ(cover[static_cast<size_t>(t)], grads.tensors()[static_cast<size_t>(t)].numel());
  const BucketPlan bp = plan_buckets(grads, o, P, me, &order);
  EXPECT_TRUE(bp.ring);
  EXPECT_LT(bp.ring_numel + bp.pinned_numel, static_cast<int64_t>(grads.bytes() / sizeof(float)));
}
