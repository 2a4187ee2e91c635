// SyncBN end to end at model level, under mpirun at np 1, 2, 4: a ResNet whose BatchNorms are synchronised over
// the world (the DP group) and whose ranks each hold a contiguous slice of a batch computes the same loss and,
// after summing the parameter gradients over ranks, the same gradients and running statistics as one model that
// sees the whole batch with per-rank BatchNorm. This is what makes data parallelism with SyncBN reproduce the
// serial run (docs/parallelism.md). The serial side uses the fused training kernels, the SyncBN side the split
// ones (local stats -> allgather -> Chan merge -> apply; local sums -> allreduce -> apply), so the comparison is
// to float rounding: 1e-4 relative on gradients, 1e-5 on the loss.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <vector>

#include "comm/mpi_communicator.hpp"
#include "core/rng.hpp"
#include "models/resnet/resnet.hpp"

using namespace hpct;
using namespace hpct::resnet;

TEST(SyncBn, SlicedBatchEqualsWholeBatch) {
  comm::MpiCommunicator world(MPI_COMM_WORLD, "dp", comm::CommOptions{60.0});
  const int R = world.size(), r = world.rank();
  ResNetConfig c;
  c.depth = 8;
  c.height = c.width = 8;
  c.num_classes = 5;
  c.base_width = 4;
  const int B = 8, b = B / R, D = c.in_channels * c.height * c.width;
  ASSERT_EQ(B % R, 0);
  std::vector<float> img(static_cast<size_t>(B * D));
  std::vector<int32_t> lab(B);
  for (int i = 0; i < B * D; ++i) img[i] = static_cast<float>(rng::normal(1, 1, i));
  for (int i = 0; i < B; ++i) lab[i] = static_cast<int32_t>(rng::uniform_int(1, 2, i, c.num_classes));
  const ExecContext ctx;

  ResNet whole(c, B, Device::CPU);  // reference: the whole batch, per-rank BatchNorm
  whole.init_parameters(ctx, 9);
  whole.zero_grad(ctx);
  whole.forward(ctx, img.data(), B, true);
  const float* lw = whole.loss_and_backward(ctx, lab.data(), 1.0f / B, B);
  double loss_whole = 0;
  for (int i = 0; i < B; ++i) loss_whole += lw[i];

  ResNet part(c, b, Device::CPU, &world);  // this rank's slice, SyncBN over the world
  part.init_parameters(ctx, 9);
  part.zero_grad(ctx);
  part.forward(ctx, img.data() + static_cast<int64_t>(r) * b * D, b, true);
  const float* lp = part.loss_and_backward(ctx, lab.data() + r * b, 1.0f / B, b);
  double loss_part = 0;
  for (int i = 0; i < b; ++i) loss_part += lp[i];
  world.allreduce(&loss_part, 1, DType::F64, comm::ReduceOp::Sum, "loss");
  EXPECT_NEAR(loss_part, loss_whole, 1e-5 * std::fabs(loss_whole));

  for (size_t i = 0; i < part.grads().tensors().size(); ++i) {
    Tensor& g = part.grads().tensors()[i];
    world.allreduce(g.data, g.numel(), DType::F32, comm::ReduceOp::Sum, "gradients");
    const Tensor& ref = whole.grads().tensors()[i];
    double num = 0, den = 0;
    for (int64_t j = 0; j < g.numel(); ++j) {
      num += std::pow(static_cast<double>(g.f32()[j]) - ref.f32()[j], 2);
      den += std::pow(static_cast<double>(ref.f32()[j]), 2);
    }
    EXPECT_LE(std::sqrt(num), 1e-4 * std::sqrt(den) + 1e-7)
        << g.name << " (relative L2 " << std::sqrt(num / den) << ")";
  }
  // running statistics: the merged batch statistics, identical on every rank
  for (size_t i = 0; i < part.buffers().tensors().size(); ++i) {
    const Tensor& t = part.buffers().tensors()[i];
    const Tensor& ref = whole.buffers().tensors()[i];
    for (int64_t j = 0; j < t.numel(); ++j)
      EXPECT_NEAR(t.f32()[j], ref.f32()[j], 1e-5f * std::max(1.0f, std::fabs(ref.f32()[j])))
          << t.name << "[" << j << "]";
  }
}
