// Under mpirun at np 2 and 4: ZeRO-3's parameter gathers (parallel/param_gather.hpp).
//  - plan_gather: the ring buckets alternate between two slots (consecutive layers never share one), each slot as
//    large as its largest bucket; pinned buckets have places of their own.
//  - a model's reads (a forward from the last bucket down, a backward up, the first layer's prefetching the next): every
//    tensor the kernels read holds exactly the whole parameter (fp32) or its bf16 rounding, with and without prefetch;
//    the tensors bound to the slots hold no memory of their own.
//  - what moves: the forward gathers every bucket once (the pinned one at its first read), the backward all but the
//    two the forward left in the slots, and a second step after refresh() the same again (nothing carries over).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "parallel/grad_sync.hpp"
#include "parallel/param_gather.hpp"
#include "parallel/parallel_context.hpp"
#include "tensor/bf16.hpp"
#include "../mpi_test_util.hpp"

using namespace hpct;
using namespace hpct::parallel;

namespace {

// Tensors of odd sizes; tensor 0 plays the tied embedding (pinned), the others one layer each.
const std::vector<std::vector<int64_t>> kShapes = {{13, 7}, {5, 7}, {3, 2, 5, 7}, {11}, {29, 3}, {17}};

float param_value(int tensor, int64_t i) { return 0.001f * static_cast<float>(tensor * 1000 + i) + 1.0f / 3.0f; }

struct Model {
  Slab grads{"grads", Device::CPU}, params{"params", Device::CPU}, read{"read", Device::CPU};
  GradWriteOrder order;
  explicit Model(DType act) {
    for (size_t t = 0; t < kShapes.size(); ++t) {
      const std::string name = "t" + std::to_string(t);
      grads.add(name, kShapes[t]);
      params.add(name, kShapes[t]);
      read.add(name, kShapes[t], act);
    }
    const int n = static_cast<int>(kShapes.size());
    for (int t = n - 1; t >= 1; --t) order.groups.emplace_back(t, t + 1);  // backward: the last layer first
    order.groups.emplace_back(0, 1);
    order.pinned.assign(static_cast<size_t>(n), false);
    order.pinned[0] = true;
  }
};

void expect_values(Slab& read, int t, DType act) {
  const Tensor& x = read.tensors()[static_cast<size_t>(t)];
  for (int64_t i = 0; i < x.numel(); ++i) {
    const float want = param_value(t, i);
    const float got = act == DType::F32 ? x.f32()[i] : to_f32(x.b16()[i]);
    ASSERT_EQ(got, act == DType::F32 ? want : round_to<bf16>(want)) << x.name << "[" << i << "]";
  }
}

// One micro-batch as the models run it: the forward reads the pinned tensor 0 (prefetching tensor 1), then tensors 1 up
// to n - 1, each prefetching the next; the backward reads n - 1 down to 1, each prefetching the one before.
void forward_backward(ParamGather& g, Slab& read, DType act) {
  const int n = static_cast<int>(kShapes.size());
  g.reading(0, 1, 1, 2);
  expect_values(read, 0, act);
  for (int t = 1; t < n; ++t) {
    g.reading(t, t + 1, t + 1 < n ? t + 1 : 0, t + 1 < n ? t + 2 : 0);
    expect_values(read, t, act);
  }
  for (int t = n - 1; t >= 1; --t) {
    g.reading(t, t + 1, t > 1 ? t - 1 : 0, t > 1 ? t : 0);
    expect_values(read, t, act);
  }
}

class ParamGatherTest : public ::testing::TestWithParam<std::tuple<DType, bool>> {};

TEST_P(ParamGatherTest, ReadsSeeTheWholeParametersAndGatherWhatTheSlotsLack) {
  const auto [act, prefetch] = GetParam();
  ParallelContext pc(1, 1, "tp-dp-pp", comm::CommOptions{30.0}, "test");
  if (pc.dp_size() == 1) GTEST_SKIP() << "ZeRO-3 shards over 2 or more ranks";
  Model m(act);
  GradSyncOptions o;
  o.zero = 3;
  GradSync gs(pc.dp_group(), m.params, m.grads, o, pc.exec(), &m.order);
  const BucketPlan& bp = gs.plan();
  ASSERT_EQ(bp.buckets.size(), kShapes.size()) << "ZeRO-3: one bucket per layer";

  const GatherPlan gp = plan_gather(bp);
  ASSERT_EQ(gp.ring.size(), kShapes.size() - 1);
  for (size_t k = 0; k < gp.ring.size(); ++k) {
    const auto b = static_cast<size_t>(gp.ring[k]);
    EXPECT_EQ(gp.slot[b], static_cast<int>(k % 2)) << "ring bucket " << k;
    EXPECT_LE(bp.buckets[b].elem_end - bp.buckets[b].elem_begin, gp.slot_numel[gp.slot[b]]);
  }
  EXPECT_EQ(gp.ring_numel, gp.slot_numel[0] + gp.slot_numel[1]);
  EXPECT_GT(gp.pinned_numel, 0);

  ParamGather g(pc.dp_group(), bp, m.read, pc.exec(), prefetch);
  EXPECT_TRUE(m.read.bound());
  EXPECT_EQ(g.shard_bytes(), gp.shard_bytes(act));
  EXPECT_EQ(g.gather_bytes(), gp.gather_bytes(act));
  std::vector<float> host;
  for (size_t t = 0; t < kShapes.size(); ++t) {
    host.resize(static_cast<size_t>(m.params.tensors()[t].numel()));
    for (size_t i = 0; i < host.size(); ++i) host[i] = param_value(static_cast<int>(t), static_cast<int64_t>(i));
    g.store_whole(static_cast<int>(t), host.data());
  }
  g.refresh();

  // bytes of the gathers: every bucket's element range, of the storage type
  auto bytes_of = [&](size_t b) {
    return static_cast<double>(bp.buckets[b].elem_end - bp.buckets[b].elem_begin) *
           static_cast<double>(dtype_size(act));
  };
  double all = 0.0;
  for (size_t b = 0; b < bp.buckets.size(); ++b) all += bytes_of(b);
  // the forward gathers everything (bucket 0, the pinned one, at its first read); it ends on ring buckets u_1 and u_0
  // (the last layers), which the slots still hold when the backward starts: the backward gathers the rest of the ring
  const auto pinned = static_cast<size_t>(bp.bucket_of_tensor[0]);
  ASSERT_TRUE(bp.bucket_pinned[pinned]);
  const double backward = all - bytes_of(pinned) - bytes_of(static_cast<size_t>(gp.ring[0])) -
                          bytes_of(static_cast<size_t>(gp.ring[1]));
  for (int step = 0; step < 2; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    pc.dp_group().reset_volume();
    forward_backward(g, m.read, act);
    EXPECT_DOUBLE_EQ(pc.dp_group().volume().allgather, all + backward);
    g.refresh();  // stale: the next step gathers the same again
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, ParamGatherTest,
                         ::testing::Values(std::make_tuple(DType::F32, true), std::make_tuple(DType::F32, false),
                                           std::make_tuple(DType::BF16, true)));

// The model's tensors must be planned only: gathering into memory the model allocated is an error naming the slab.
TEST(ParamGather, RefusesAnAllocatedSlab) {
  ParallelContext pc(1, 1, "tp-dp-pp", comm::CommOptions{30.0}, "test");
  if (pc.dp_size() == 1) GTEST_SKIP() << "ZeRO-3 shards over 2 or more ranks";
  Model m(DType::F32);
  GradSyncOptions o;
  o.zero = 3;
  GradSync gs(pc.dp_group(), m.params, m.grads, o, pc.exec(), &m.order);
  m.read.allocate();
  try {
    ParamGather g(pc.dp_group(), gs.plan(), m.read, pc.exec(), true);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("read"), std::string::npos) << e.what();
  }
}

}  // namespace
