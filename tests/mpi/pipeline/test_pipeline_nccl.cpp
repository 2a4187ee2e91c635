// The pipeline over NCCL (label cuda; skips without a usable GPU or with fewer GPUs on a node than ranks on it):
// ParallelContext on CUDA with pp = world builds one NcclCommunicator per link and direction, and the executor runs
// both schedules with device buffers through them, nothing blocking the host inside the step: a synthetic stage on
// the device (forward out = 2 in, backward din = 2 dout, with kernels on the compute stream) records every input and
// output gradient it is handed in a device buffer, read once after the step (one synchronize, through the context's
// sync guard). Values are small integers times powers of two: exact in fp32, distinct per micro-batch, so a transfer
// matched to the wrong micro-batch is counted wrong. Then the same with bf16 activations (ncclBfloat16 transfers of
// a pass-through stage, checked bit for bit), and the interleaved 1F1B (2 chunks per rank) through a context built for
// it, whose wrap link (last rank -> rank 0) is a pair of NCCL communicators of its own.
// At np 1 (pp = 1) there are no links: the test checks that the context says so and that the sync guard drains a
// compute stream that waits on a (1-rank) NCCL allreduce queued with a stream-ordered wait.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/cuda_check.hpp"
#include "core/error.hpp"
#include "kernels/kernels.hpp"
#include "../mpi_test_util.hpp"
#include "parallel/parallel_context.hpp"
#include "parallel/pipeline_schedule.hpp"
#include "tensor/bf16.hpp"
#include "../nccl_test_util.hpp"

using namespace hpct;
using namespace hpct::parallel;
namespace k = hpct::kernels;

namespace {

using test::select_gpu;

// Every rank decides alike (a rank that skipped alone would leave the others in a collective).
#define SKIP_WITHOUT_GPU()                                                    \
  do {                                                                        \
    const std::string why = select_gpu();                                     \
    int ok = why.empty() ? 1 : 0;                                             \
    MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);    \
    if (!ok) GTEST_SKIP() << (why.empty() ? "another rank has no GPU" : why); \
  } while (0)

float x0(int j, int64_t i) { return static_cast<float>(j * 64 + i % 61 + 1); }
float g0(int j, int64_t i) { return static_cast<float>(j * 32 + i % 29 + 1); }

// Virtual stage vs = chunk * stages + stage of stages * chunks (chunks = 1: the rank's stage).
class DeviceStage final : public PipelineStage {
 public:
  DeviceStage(const ExecContext& ctx, int stage, int stages, int m, int64_t numel, int chunks = 1)
      : ctx_(ctx), s_(stage), p_(stages), m_(m), v_(chunks), numel_(numel), dev_("test stage", Device::CUDA) {
    seen_in_ = &dev_.add("seen_in", {chunks * m, numel});  // (chunk, micro) -> its input
    seen_dout_ = &dev_.add("seen_dout", {chunks * m, numel});
    src_x_ = &dev_.add("src_x", {m, numel});
    src_g_ = &dev_.add("src_g", {m, numel});
    dev_.allocate();
    std::vector<float> hx(static_cast<size_t>(m * numel)), hg(hx.size());
    for (int j = 0; j < m; ++j)
      for (int64_t i = 0; i < numel; ++i) {
        hx[static_cast<size_t>(j * numel + i)] = x0(j, i);
        hg[static_cast<size_t>(j * numel + i)] = g0(j, i);
      }
    k::copy_from_host(ctx_, src_x_->data, hx.data(), static_cast<int64_t>(hx.size()) * 4);
    k::copy_from_host(ctx_, src_g_->data, hg.data(), static_cast<int64_t>(hg.size()) * 4);
    k::synchronize(ctx_);  // hx, hg are freed on return
  }
  int64_t activation_numel() const override { return numel_; }
  float* at(Tensor* t, int j) { return t->f32() + static_cast<int64_t>(j) * numel_; }

  void begin_step() {
    k::fill_zero(ctx_, seen_in_->data, static_cast<int64_t>(seen_in_->bytes()));
    k::fill_zero(ctx_, seen_dout_->data, static_cast<int64_t>(seen_dout_->bytes()));
  }
  void forward(int c, int j, const void* in_bytes, void* out_bytes) override {  // f32 activations (the default)
    const auto* in = static_cast<const float*>(in_bytes);
    auto* out = static_cast<float*>(out_bytes);
    const int vs = c * p_ + s_;
    if ((vs == 0) != (in == nullptr) || (vs == v_ * p_ - 1) != (out == nullptr)) ++wrong_;
    const float* x = in ? in : at(src_x_, j);
    if (in) k::copy_device(ctx_, at(seen_in_, c * m_ + j), in, numel_ * 4);
    if (out) {
      k::copy_device(ctx_, out, x, numel_ * 4);
      k::scale(ctx_, out, 2.0f, numel_);
    }
  }
  void backward(int c, int j, const void* dout_bytes, void* din_bytes) override {
    const auto* dout = static_cast<const float*>(dout_bytes);
    auto* din = static_cast<float*>(din_bytes);
    const int vs = c * p_ + s_;
    if ((vs == v_ * p_ - 1) != (dout == nullptr) || (vs == 0) != (din == nullptr)) ++wrong_;
    const float* g = dout ? dout : at(src_g_, j);
    if (dout) k::copy_device(ctx_, at(seen_dout_, c * m_ + j), dout, numel_ * 4);
    if (din) {
      k::copy_device(ctx_, din, g, numel_ * 4);
      k::scale(ctx_, din, 2.0f, numel_);
    }
  }
  // Reads what the step received (one copy, one synchronize) and counts the values that are not (chunk, micro-batch
  // j)'s: the input of virtual stage vs is x0 doubled vs times, its output gradient g0 doubled by every later one.
  int64_t check() {
    std::vector<float> in(static_cast<size_t>(v_ * m_ * numel_)), dout(in.size());
    k::copy_to_host(ctx_, in.data(), seen_in_->data, static_cast<int64_t>(in.size()) * 4);
    k::copy_to_host(ctx_, dout.data(), seen_dout_->data, static_cast<int64_t>(dout.size()) * 4);
    k::synchronize(ctx_);
    int64_t wrong = wrong_;
    for (int c = 0; c < v_; ++c)
      for (int j = 0; j < m_; ++j)
        for (int64_t i = 0; i < numel_; ++i) {
          const int vs = c * p_ + s_;
          const size_t e = static_cast<size_t>((c * m_ + j) * numel_ + i);
          if (vs > 0 && in[e] != x0(j, i) * std::ldexp(1.0f, vs)) ++wrong;
          if (vs < v_ * p_ - 1 && dout[e] != g0(j, i) * std::ldexp(1.0f, v_ * p_ - 1 - vs)) ++wrong;
        }
    return wrong;
  }

 private:
  const ExecContext& ctx_;
  int s_, p_, m_, v_;
  int64_t numel_;
  Slab dev_;
  Tensor *seen_in_, *seen_dout_, *src_x_, *src_g_;
  int64_t wrong_ = 0;
};

// bf16 activations (train.precision = bf16) over the NCCL links: a pass-through stage (out = in, din = dout, device
// copies of 2-byte elements) whose every receive is recorded; micro-batch j's values are bf16(x0(j, i)) and
// bf16(g0(j, i)), distinct per micro-batch, so a mismatched or misread transfer shows in the bits.
class Bf16DeviceStage final : public PipelineStage {
 public:
  Bf16DeviceStage(const ExecContext& ctx, int stage, int stages, int m, int64_t numel)
      : ctx_(ctx), s_(stage), p_(stages), m_(m), numel_(numel), dev_("test bf16 stage", Device::CUDA) {
    seen_in_ = &dev_.add("seen_in", {m, numel}, DType::BF16);
    seen_dout_ = &dev_.add("seen_dout", {m, numel}, DType::BF16);
    src_x_ = &dev_.add("src_x", {m, numel}, DType::BF16);
    src_g_ = &dev_.add("src_g", {m, numel}, DType::BF16);
    dev_.allocate();
    std::vector<bf16> hx(static_cast<size_t>(m * numel)), hg(hx.size());
    for (int j = 0; j < m; ++j)
      for (int64_t i = 0; i < numel; ++i) {
        hx[static_cast<size_t>(j * numel + i)] = to_bf16(x0(j, i));
        hg[static_cast<size_t>(j * numel + i)] = to_bf16(g0(j, i));
      }
    k::copy_from_host(ctx_, src_x_->data, hx.data(), static_cast<int64_t>(hx.size()) * 2);
    k::copy_from_host(ctx_, src_g_->data, hg.data(), static_cast<int64_t>(hg.size()) * 2);
    k::synchronize(ctx_);
  }
  int64_t activation_numel() const override { return numel_; }
  DType activation_dtype() const override { return DType::BF16; }
  bf16* at(Tensor* t, int j) { return t->b16() + static_cast<int64_t>(j) * numel_; }
  void forward(int, int j, const void* in, void* out) override {
    if ((s_ == 0) != (in == nullptr) || (s_ == p_ - 1) != (out == nullptr)) ++wrong_;
    if (in) k::copy_device(ctx_, at(seen_in_, j), in, numel_ * 2);
    if (out) k::copy_device(ctx_, out, in ? in : at(src_x_, j), numel_ * 2);
  }
  void backward(int, int j, const void* dout, void* din) override {
    if ((s_ == p_ - 1) != (dout == nullptr) || (s_ == 0) != (din == nullptr)) ++wrong_;
    if (dout) k::copy_device(ctx_, at(seen_dout_, j), dout, numel_ * 2);
    if (din) k::copy_device(ctx_, din, dout ? dout : at(src_g_, j), numel_ * 2);
  }
  int64_t check() {
    std::vector<bf16> in(static_cast<size_t>(m_ * numel_)), dout(in.size());
    k::copy_to_host(ctx_, in.data(), seen_in_->data, static_cast<int64_t>(in.size()) * 2);
    k::copy_to_host(ctx_, dout.data(), seen_dout_->data, static_cast<int64_t>(dout.size()) * 2);
    k::synchronize(ctx_);
    int64_t wrong = wrong_;
    for (int j = 0; j < m_; ++j)
      for (int64_t i = 0; i < numel_; ++i) {
        const size_t e = static_cast<size_t>(j * numel_ + i);
        if (s_ > 0 && in[e].bits != to_bf16(x0(j, i)).bits) ++wrong;
        if (s_ < p_ - 1 && dout[e].bits != to_bf16(g0(j, i)).bits) ++wrong;
      }
    return wrong;
  }

 private:
  const ExecContext& ctx_;
  int s_, p_, m_;
  int64_t numel_;
  Slab dev_;
  Tensor *seen_in_ = nullptr, *seen_dout_ = nullptr, *src_x_ = nullptr, *src_g_ = nullptr;
  int64_t wrong_ = 0;
};

struct Stream {
  Stream() { CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
  ~Stream() { cudaStreamDestroy(s); }
  cudaStream_t s = nullptr;
};

TEST(PipelineNccl, DeviceBuffersOverNcclLinksPassExactValues) {
  SKIP_WITHOUT_GPU();
  Stream stream;
  ExecContext exec{Device::CUDA, stream.s};
  ParallelContext pc(1, test::world_size(), "tp-dp-pp", comm::CommOptions{60.0}, "test_pipeline_nccl", exec);
  const ExecContext& ctx = pc.exec();
  ASSERT_NE(ctx.sync_guard, nullptr) << "ParallelContext on CUDA installs its sync guard";
  EXPECT_EQ(ctx.stream, exec.stream);
  const int s = pc.pp_rank(), p = pc.pp_size();
  PipelineTransport& transport = pc.pipeline_transport();
  if (p == 1) {
    // no links at pp = 1: the transport is the (unused) MPI one; the guard still bounds the stream's waits
    EXPECT_EQ(transport.device(), Device::CPU);
    EXPECT_NE(pc.describe_device_groups().find("pp = 1: no links"), std::string::npos) << pc.describe_device_groups();
    Slab buf("buf", Device::CUDA);
    Tensor& t = buf.add("x", {1 << 20});
    buf.allocate();
    std::vector<float> h(static_cast<size_t>(t.numel()), 3.0f), back(h.size(), 0.0f);
    k::copy_from_host(ctx, t.data, h.data(), t.numel() * 4);
    pc.device_dp_group().allreduce(t.data, t.numel(), DType::F32, comm::ReduceOp::Sum, "1-rank allreduce");
    k::copy_to_host(ctx, back.data(), t.data, t.numel() * 4);
    k::synchronize(ctx);
    EXPECT_EQ(back, h);
    return;
  }
  EXPECT_EQ(transport.device(), Device::CUDA);
  EXPECT_NE(pc.describe_device_groups().find("pp link"), std::string::npos) << pc.describe_device_groups();
  for (ScheduleKind kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB})
    for (int m : {1, 3, 8})
      for (int64_t numel : {int64_t{5}, int64_t{1} << 20}) {
        SCOPED_TRACE(fmt::format("{} m {} numel {}", schedule_kind_name(kind), m, numel));
        const auto schedule = make_schedule(kind, p, s, m);
        DeviceStage stage(ctx, s, p, m, numel);
        PipelineBuffers buffers(schedule, numel, Device::CUDA);
        for (int step = 0; step < 3; ++step) {
          stage.begin_step();
          run_schedule(schedule, stage, transport, buffers,
                       {.barrier = step != 1, .before_last_backward = {}, .before_backward = {}});
          EXPECT_EQ(stage.check(), 0) << "step " << step;
        }
      }
  for (ScheduleKind kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB}) {  // bf16 activations (ncclBfloat16)
    SCOPED_TRACE(fmt::format("bf16 {}", schedule_kind_name(kind)));
    const int m = 3;
    const int64_t numel = int64_t{1} << 19;
    const auto schedule = make_schedule(kind, p, s, m);
    Bf16DeviceStage stage(ctx, s, p, m, numel);
    PipelineBuffers buffers(schedule, numel, Device::CUDA, DType::BF16);
    run_schedule(schedule, stage, transport, buffers);
    EXPECT_EQ(stage.check(), 0);
  }
}

// The interleaved 1F1B over NCCL: a context built for 2 chunks per rank has the wrap link (its own pair of NCCL
// communicators, also at p = 2), and every chunk receives exactly its virtual stage's values, in device buffers.
TEST(PipelineNccl, InterleavedOverNcclLinksWithTheWrapPassesExactValues) {
  SKIP_WITHOUT_GPU();
  if (test::world_size() < 2) GTEST_SKIP() << "interleaving needs pp >= 2";
  Stream stream;
  ExecContext exec{Device::CUDA, stream.s};
  ParallelContext pc(1, test::world_size(), "tp-dp-pp", comm::CommOptions{60.0}, "test_pipeline_nccl", exec, 0, 2);
  const ExecContext& ctx = pc.exec();
  const int s = pc.pp_rank(), p = pc.pp_size();
  PipelineTransport& transport = pc.pipeline_transport();
  EXPECT_EQ(transport.device(), Device::CUDA);
  EXPECT_EQ(transport.virtual_stages(), 2);
  if (s == 0 || s == p - 1) {
    EXPECT_NE(transport.describe().find(fmt::format("pp link {}-0 (wrap)", p - 1)), std::string::npos)
        << transport.describe();
  }
  for (int m : {p, 2 * p})
    for (int64_t numel : {int64_t{5}, int64_t{1} << 20}) {
      SCOPED_TRACE(fmt::format("v 2 m {} numel {}", m, numel));
      const auto schedule = make_schedule(ScheduleKind::OneFOneB, p, s, m, 2);
      DeviceStage stage(ctx, s, p, m, numel, 2);
      PipelineBuffers buffers(schedule, numel, Device::CUDA);
      for (int step = 0; step < 2; ++step) {
        stage.begin_step();
        run_schedule(schedule, stage, transport, buffers);
        EXPECT_EQ(stage.check(), 0) << "step " << step;
      }
    }
}

}  // namespace
