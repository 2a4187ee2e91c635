// The CUDA backend's core group (lib/kernels/cuda/cuda_core.cu) against the CPU backend: every op through the
// kernels.hpp dispatch on Device::CUDA and on Device::CPU, same random inputs, compared with
// all_close(rtol, atol_rel) (atol = atol_rel * max|want|). Skips without a usable GPU (HPCT_REQUIRE_GPU).
//
// Tolerances, and why:
//   - exact (0, 0): ops that are one IEEE operation per element or plain float additions in the CPU's order
//     (scale, residual, ReLU, the embedding forward, dwte and dwpe: the CUDA kernels add each element's terms in
//     the CPU's position order), and the copies;
//   - rtol 1e-6: the double-accumulated reductions (sum, LayerNorm dweight/dbias): the order differs from the CPU's
//     but the error of a double sum is ~1e-16 relative, so the float results differ by at most one rounding;
//     sum_squares_accumulate compares the double itself: 1e-12;
//   - rtol 1e-5, atol_rel 1e-6: pointwise formulas of several operations (AdamW, SGD, GELU: expf vs the CPU's
//     exp_simd, both ~2 ulp; both compilers contract a*b+c into FMAs in their own patterns) and the LayerNorm rows
//     (float sums over C in a different order: warp lanes vs SIMD lanes, ~sqrt(C) ulp of the row's scale); the
//     absolute floor covers elements that cancel to ~0 (gelu'(x) ~ 0 near x = -0.75, (x - mean) ~ 0).
// Odd sizes throughout (not multiples of 32, 128, 256 or 1024); += outputs pre-filled with random values; null
// optional pointers; in-place calls where the interface allows them; and reruns that must reproduce bit for bit.
//
// bf16 storage (the Bf16* tests): the same ops with A = bf16 against the CPU backend's bf16 ops on the same bf16
// inputs.
// Exact where both sides compute the same float values and round them once to nearest even (the casts, residual, ReLU,
// the embedding and its float gradients); elsewhere the float tolerance plus one bf16 ulp (kBf16Ulp below: the two
// sides round float results that differ in their last bits, now and then on either side of a bf16 boundary). The
// tests/cuda_emu emulation runs the same kernels on the host with the same tolerances.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "core/cuda_check.hpp"
#include "cuda_test_util.hpp"
#include "kernel_test_util.hpp"
#include "kernels/kernels.hpp"
#include "kernels/kernels.hpp"

namespace hpct::kernels {
namespace {

using test::all_close;
using test::bitwise_equal;
using test::cpu_ctx;
using test::DeviceBuffer;
using test::gpu_ctx;
using test::random_ints;
using test::random_vector;

template <typename T>
using DBuf = DeviceBuffer<T>;
using test::random_bf16;
using test::to_bf16_vector;

// One bf16 ulp: at most 2^-7 of a value (8 significant bits).
constexpr double kBf16Ulp = 1.0 / 128.0;

// ---- memory helpers ---------------------------------------------------------------------------------------------
TEST(CudaCore, CopiesRoundTripAndFillZeroClearsExactlyItsRange) {
  HPCT_REQUIRE_GPU();
  const size_t n = 1237;
  const auto x = random_vector(n, 1);
  DBuf<float> d(x);
  EXPECT_TRUE(bitwise_equal("round trip", d.download(), x));
  // zero the elements [100, 700) through a byte range that starts inside the buffer
  fill_zero(gpu_ctx(), d.get() + 100, 600 * sizeof(float));
  fill_zero(gpu_ctx(), d.get(), 0);  // zero bytes: a no-op
  synchronize(gpu_ctx());
  auto want = x;
  for (size_t i = 100; i < 700; i++) want[i] = 0.0f;
  EXPECT_TRUE(bitwise_equal("fill_zero range", d.download(), want));
  // copy into a sub-range from the host and out of a sub-range to the host
  const auto y = random_vector(33, 2);
  copy_from_host(gpu_ctx(), d.get() + 1000, y.data(), 33 * sizeof(float));
  std::vector<float> back(33, -1.0f);
  copy_to_host(gpu_ctx(), back.data(), d.get() + 1000, 33 * sizeof(float));
  synchronize(gpu_ctx());  // copy_to_host's data is valid only after a synchronize
  EXPECT_TRUE(bitwise_equal("sub-range copies", back, y));
}

// copy_device is stream-ordered on ctx.stream; synchronize() goes through ctx.sync_guard when one is set (the bounded
// wait ParallelContext installs, exec_context.hpp), and through cudaStreamSynchronize otherwise; a copy to or from
// pageable host memory (where the runtime itself may block until the stream reaches it) drains the stream through the
// guard first, one to page-locked memory does not.
TEST(CudaCore, CopyDeviceAndSynchronizeThroughTheGuard) {
  HPCT_REQUIRE_GPU();
  struct CountingGuard final : StreamSyncGuard {
    std::vector<std::string> whats;
    void* last_stream = reinterpret_cast<void*>(1);
    void synchronize(void* stream, const char* what) override {
      whats.emplace_back(what);
      last_stream = stream;
      CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
    }
  } guard;
  cudaStream_t stream = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  ExecContext ctx{Device::CUDA, stream};
  ctx.sync_guard = &guard;
  const size_t n = 4099;
  const auto x = random_vector(n, 7);
  DBuf<float> a(x), b(n);
  synchronize(gpu_ctx());  // the buffers were filled on the default stream (no guard there)
  copy_device(ctx, b.get() + 1, a.get() + 1, static_cast<int64_t>((n - 2) * sizeof(float)));
  std::vector<float> got(n, -1.0f);  // pageable
  copy_to_host(ctx, got.data(), b.get(), static_cast<int64_t>(n * sizeof(float)));
  ASSERT_EQ(guard.whats.size(), 1u);  // drained before the pageable copy
  EXPECT_NE(guard.whats[0].find("pageable"), std::string::npos) << guard.whats[0];
  synchronize(ctx);
  ASSERT_EQ(guard.whats.size(), 2u);
  EXPECT_NE(guard.whats[1].find("synchronize"), std::string::npos) << guard.whats[1];
  EXPECT_EQ(guard.last_stream, static_cast<void*>(stream));
  float* pinned = nullptr;  // page-locked: no drain, the copy stays asynchronous
  CUDA_CHECK(cudaMallocHost(&pinned, sizeof(float)));
  copy_to_host(ctx, pinned, b.get() + 1, sizeof(float));
  EXPECT_EQ(guard.whats.size(), 2u);
  synchronize(ctx);
  EXPECT_EQ(guard.whats.size(), 3u);
  EXPECT_EQ(*pinned, x[1]);
  CUDA_CHECK(cudaFreeHost(pinned));
  CUDA_CHECK(cudaStreamDestroy(stream));
  auto want = x;
  want[0] = want[n - 1] = 0.0f;  // b was zeroed; the copy skipped the first and the last element
  EXPECT_TRUE(bitwise_equal("copy_device", got, want));
}

// The ops are stream-ordered on ctx.stream: a chain on a non-default stream, synchronized once at the end.
TEST(CudaCore, OpsRunInOrderOnANonDefaultStream) {
  HPCT_REQUIRE_GPU();
  cudaStream_t stream = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const ExecContext ctx{Device::CUDA, stream};
  const int64_t n = 100003;
  const auto x = random_vector(n, 3);
  DBuf<float> d(static_cast<size_t>(n)), s(1);
  // the buffers were zeroed on the default stream, with which a non-blocking stream does not synchronize
  synchronize(gpu_ctx());
  copy_from_host(ctx, d.get(), x.data(), n * static_cast<int64_t>(sizeof(float)));
  scale(ctx, d.get(), 0.5f, n);
  sum(ctx, s.get(), d.get(), n);
  std::vector<float> got(static_cast<size_t>(n));
  float got_sum = 0.0f;
  copy_to_host(ctx, got.data(), d.get(), n * static_cast<int64_t>(sizeof(float)));
  copy_to_host(ctx, &got_sum, s.get(), sizeof(float));
  synchronize(ctx);
  CUDA_CHECK(cudaStreamDestroy(stream));
  auto want = x;
  scale(cpu_ctx(), want.data(), 0.5f, n);
  float want_sum = 0.0f;
  sum(cpu_ctx(), &want_sum, want.data(), n);
  EXPECT_TRUE(bitwise_equal("scale on a stream", got, want));
  EXPECT_TRUE(all_close("sum on a stream", &got_sum, &want_sum, 1, 1e-6, 0.0));
}

// ---- reductions -------------------------------------------------------------------------------------------------
TEST(CudaCore, SumMatchesCpuAtOddSizesAndAlignments) {
  HPCT_REQUIRE_GPU();
  const auto x = random_vector(1000003 + 3, 4, -1.0, 2.0);  // positive mean: the sum is not ~0
  DBuf<float> d(x), out(1);
  // n = 0 writes 0; offsets 0..3 floats exercise the float4 path and the scalar one (unaligned pointers)
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{31}, int64_t{1025}, int64_t{4099}, int64_t{1000003}}) {
    for (int off = 0; off < 4; off++) {
      std::vector<float> preset{123.0f};
      out.upload(preset);  // must be overwritten (assigned)
      sum(gpu_ctx(), out.get(), d.get() + off, n);
      const float got = out.download()[0];
      float want = 0.0f;
      sum(cpu_ctx(), &want, x.data() + off, n);
      EXPECT_TRUE(all_close("sum n=" + std::to_string(n) + " off=" + std::to_string(off), &got, &want, 1, 1e-6, 0.0));
    }
  }
}

TEST(CudaCore, SumSquaresAccumulatesInDouble) {
  HPCT_REQUIRE_GPU();
  const auto x = random_vector(777777, 5, -3.0, 3.0);
  DBuf<float> d(x);
  for (int64_t n : {int64_t{0}, int64_t{3}, int64_t{4097}, int64_t{777777 - 1}}) {
    for (int off : {0, 1}) {
      const double preset = 3.25;  // += : the previous value is kept
      DBuf<double> out(std::vector<double>{preset});
      sum_squares_accumulate(gpu_ctx(), out.get(), d.get() + off, n);
      sum_squares_accumulate(gpu_ctx(), out.get(), d.get() + off, n);  // twice: accumulates again
      const double got = out.download()[0];
      double want = preset;
      sum_squares_accumulate(cpu_ctx(), &want, x.data() + off, n);
      sum_squares_accumulate(cpu_ctx(), &want, x.data() + off, n);
      EXPECT_TRUE(all_close("sum_squares n=" + std::to_string(n), &got, &want, 1, 1e-12, 0.0));
    }
  }
}

TEST(CudaCore, ReductionsReproduceBitForBit) {
  HPCT_REQUIRE_GPU();
  const auto x = random_vector(3000017, 6);
  DBuf<float> d(x), s(2);
  DBuf<double> q(2);
  for (int k = 0; k < 2; k++) {
    sum(gpu_ctx(), s.get() + k, d.get(), 3000017);
    sum_squares_accumulate(gpu_ctx(), q.get() + k, d.get(), 3000017);
  }
  const auto sv = s.download();
  const auto qv = q.download();
  EXPECT_EQ(std::memcmp(&sv[0], &sv[1], sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(&qv[0], &qv[1], sizeof(double)), 0);
}

// ---- pointwise ----------------------------------------------------------------------------------------------------
TEST(CudaCore, ScaleResidualAndReluAreExact) {
  HPCT_REQUIRE_GPU();
  const int64_t n = 50021;
  auto a = random_vector(n, 7), b = random_vector(n, 8);
  a[0] = 0.0f;
  a[1] = -0.0f;
  a[2] = std::numeric_limits<float>::infinity();
  a[3] = -std::numeric_limits<float>::infinity();
  DBuf<float> da(a), db(b), dout(static_cast<size_t>(n));
  // scale
  {
    DBuf<float> dx(b);
    scale(gpu_ctx(), dx.get(), -1.7f, n);
    auto want = b;
    scale(cpu_ctx(), want.data(), -1.7f, n);
    EXPECT_TRUE(bitwise_equal("scale", dx.download(), want));
  }
  // residual, out of place and in place (out == a)
  {
    residual_forward(gpu_ctx(), dout.get(), da.get(), db.get(), n);
    std::vector<float> want(static_cast<size_t>(n));
    residual_forward(cpu_ctx(), want.data(), a.data(), b.data(), n);
    EXPECT_TRUE(bitwise_equal("residual", dout.download(), want));
    DBuf<float> dinplace(a);
    residual_forward(gpu_ctx(), dinplace.get(), dinplace.get(), db.get(), n);
    EXPECT_TRUE(bitwise_equal("residual in place", dinplace.download(), want));
  }
  // residual then ReLU in one pass (a ResNet block's end), out of place and in place
  {
    residual_relu_forward(gpu_ctx(), dout.get(), da.get(), db.get(), n);
    std::vector<float> want(static_cast<size_t>(n));
    residual_relu_forward(cpu_ctx(), want.data(), a.data(), b.data(), n);
    EXPECT_TRUE(bitwise_equal("residual_relu", dout.download(), want));
    DBuf<float> dinplace(a);
    residual_relu_forward(gpu_ctx(), dinplace.get(), dinplace.get(), db.get(), n);
    EXPECT_TRUE(bitwise_equal("residual_relu in place", dinplace.download(), want));
  }
  // a block input's gradient through the previous block's ReLU in one pass (the ReLU output: a's values)
  {
    residual_relu_backward(gpu_ctx(), dout.get(), da.get(), db.get(), da.get(), n);
    std::vector<float> want(static_cast<size_t>(n));
    residual_relu_backward(cpu_ctx(), want.data(), a.data(), b.data(), a.data(), n);
    EXPECT_TRUE(bitwise_equal("residual_relu_backward", dout.download(), want));
  }
  // ReLU forward and backward, out of place and in place
  {
    relu_forward(gpu_ctx(), dout.get(), da.get(), n);
    std::vector<float> want(static_cast<size_t>(n));
    relu_forward(cpu_ctx(), want.data(), a.data(), n);
    EXPECT_TRUE(bitwise_equal("relu_forward", dout.download(), want));
    DBuf<float> dinplace(a);
    relu_forward(gpu_ctx(), dinplace.get(), dinplace.get(), n);
    EXPECT_TRUE(bitwise_equal("relu_forward in place", dinplace.download(), want));

    const auto g = random_vector(n, 9);
    DBuf<float> dg(g), ddinp(static_cast<size_t>(n));
    relu_backward(gpu_ctx(), ddinp.get(), dg.get(), dout.get(), n);
    std::vector<float> want_d(static_cast<size_t>(n));
    relu_backward(cpu_ctx(), want_d.data(), g.data(), want.data(), n);
    EXPECT_TRUE(bitwise_equal("relu_backward", ddinp.download(), want_d));
    relu_backward(gpu_ctx(), dg.get(), dg.get(), dout.get(), n);  // dinp == dout
    EXPECT_TRUE(bitwise_equal("relu_backward in place", dg.download(), want_d));
  }
}

TEST(CudaCore, GeluForwardBackwardMatchCpu) {
  HPCT_REQUIRE_GPU();
  const int64_t n = 40009;
  auto x = random_vector(n, 10, -6.0, 6.0);
  const float specials[] = {0.0f, -0.0f, 1e-20f, -1e-20f, 10.0f, -10.0f, 30.0f, -30.0f, 100.0f, -100.0f, -0.75f};
  for (size_t i = 0; i < std::size(specials); i++) x[i] = specials[i];
  const auto dout = random_vector(n, 11);
  DBuf<float> dx(x), ddout(dout), dout_buf(static_cast<size_t>(n)), ddinp(static_cast<size_t>(n));
  gelu_forward(gpu_ctx(), dout_buf.get(), dx.get(), n);
  gelu_backward(gpu_ctx(), ddinp.get(), dx.get(), ddout.get(), n);
  std::vector<float> want_out(static_cast<size_t>(n)), want_dinp(static_cast<size_t>(n));
  gelu_forward(cpu_ctx(), want_out.data(), x.data(), n);
  gelu_backward(cpu_ctx(), want_dinp.data(), x.data(), dout.data(), n);
  EXPECT_TRUE(all_close("gelu_forward", dout_buf.download(), want_out, 1e-5, 1e-6));
  EXPECT_TRUE(all_close("gelu_backward", ddinp.download(), want_dinp, 1e-5, 1e-6));
}

// ---- optimizers ---------------------------------------------------------------------------------------------------
TEST(CudaCore, AdamwMatchesCpuOverSeveralSteps) {
  HPCT_REQUIRE_GPU();
  const int64_t n = 30011;
  auto p = random_vector(n, 12), m = random_vector(n, 13, -0.1, 0.1), v = random_vector(n, 14, 0.0, 0.01);
  DBuf<float> dp(p), dm(m), dv(v);
  for (int t = 1; t <= 3; t++) {
    const auto g = random_vector(n, 20 + t);
    DBuf<float> dg(g);
    adamw_update(gpu_ctx(), dp.get(), dg.get(), dm.get(), dv.get(), n, 3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.7f, t);
    adamw_update(cpu_ctx(), p.data(), g.data(), m.data(), v.data(), n, 3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.7f, t);
    EXPECT_TRUE(all_close("adamw params t=" + std::to_string(t), dp.download(), p, 1e-5, 1e-6));
    EXPECT_TRUE(all_close("adamw m t=" + std::to_string(t), dm.download(), m, 1e-5, 1e-6));
    EXPECT_TRUE(all_close("adamw v t=" + std::to_string(t), dv.download(), v, 1e-5, 1e-6));
  }
}

TEST(CudaCore, SgdMatchesCpuInEveryMode) {
  HPCT_REQUIRE_GPU();
  const int64_t n = 20011;
  struct Mode {
    float momentum, dampening, weight_decay;
    bool nesterov;
  };
  const Mode modes[] = {
      {0.0f, 0.0f, 5e-4f, false}, {0.9f, 0.0f, 5e-4f, false}, {0.9f, 0.1f, 0.0f, false}, {0.9f, 0.0f, 1e-4f, true}};
  for (const Mode& md : modes) {
    const std::string tag = "sgd momentum=" + std::to_string(md.momentum) + " nesterov=" + std::to_string(md.nesterov);
    auto p = random_vector(n, 30);
    std::vector<float> buf(static_cast<size_t>(n), std::numeric_limits<float>::quiet_NaN());  // garbage before step 1
    DBuf<float> dp(p), dbuf(buf);
    float* dbuf_ptr = md.momentum == 0.0f ? nullptr : dbuf.get();  // no buffer without momentum
    float* buf_ptr = md.momentum == 0.0f ? nullptr : buf.data();
    for (int step = 0; step < 3; step++) {
      const auto g = random_vector(n, 40 + step);
      DBuf<float> dg(g);
      sgd_update(gpu_ctx(), dp.get(), dg.get(), dbuf_ptr, n, 0.05f, md.momentum, md.dampening, md.weight_decay,
                 md.nesterov, 0.8f, step == 0);
      sgd_update(cpu_ctx(), p.data(), g.data(), buf_ptr, n, 0.05f, md.momentum, md.dampening, md.weight_decay,
                 md.nesterov, 0.8f, step == 0);
      EXPECT_TRUE(all_close(tag + " params step " + std::to_string(step), dp.download(), p, 1e-5, 1e-6));
      if (buf_ptr) {
        EXPECT_TRUE(all_close(tag + " buf step " + std::to_string(step), dbuf.download(), buf, 1e-5, 1e-6));
      }
    }
  }
}

// ---- embedding ----------------------------------------------------------------------------------------------------
TEST(CudaCore, EncoderForwardBackwardEqualCpuBitForBit) {
  HPCT_REQUIRE_GPU();
  for (int C : {37, 768 + 5}) {
    const int B = 3, T = 29, Vp = 53;
    const size_t N = static_cast<size_t>(B) * T;
    // a small token range forces repeated tokens (several positions adding into one dwte row)
    const auto inp = random_ints(N, 50, 0, 9);
    const auto wte = random_vector(static_cast<size_t>(Vp) * C, 51),
               wpe = random_vector(static_cast<size_t>(T) * C, 52);
    const auto dout = random_vector(N * C, 53);
    auto dwte = random_vector(static_cast<size_t>(Vp) * C, 54), dwpe = random_vector(static_cast<size_t>(T) * C, 55);
    DBuf<int32_t> dinp(inp);
    DBuf<float> dwte_w(wte), dwpe_w(wpe), ddout(dout), ddwte(dwte), ddwpe(dwpe), dout_buf(N * C);
    encoder_forward(gpu_ctx(), dout_buf.get(), dinp.get(), dwte_w.get(), dwpe_w.get(), B, T, C);
    encoder_backward(gpu_ctx(), ddwte.get(), ddwpe.get(), ddout.get(), dinp.get(), B, T, C);
    std::vector<float> want_out(N * C);
    encoder_forward(cpu_ctx(), want_out.data(), inp.data(), wte.data(), wpe.data(), B, T, C);
    encoder_backward(cpu_ctx(), dwte.data(), dwpe.data(), dout.data(), inp.data(), B, T, C);
    const std::string tag = " C=" + std::to_string(C);
    EXPECT_TRUE(bitwise_equal("encoder_forward" + tag, dout_buf.download(), want_out));
    EXPECT_TRUE(bitwise_equal("encoder_backward dwte" + tag, ddwte.download(), dwte));  // pre-filled: +=
    EXPECT_TRUE(bitwise_equal("encoder_backward dwpe" + tag, ddwpe.download(), dwpe));
  }
}

TEST(CudaCore, EncoderVocabParallelEqualsCpuBitForBit) {
  HPCT_REQUIRE_GPU();
  const int B = 2, T = 41, C = 45, Vp = 64, Vl = 16;
  const size_t N = static_cast<size_t>(B) * T;
  const auto inp = random_ints(N, 60, 0, Vp);  // tokens on every rank, this one's among them
  const auto dout = random_vector(N * C, 61);
  const auto wpe = random_vector(static_cast<size_t>(T) * C, 62);
  DBuf<int32_t> dinp(inp);
  DBuf<float> ddout(dout), dwpe_w(wpe);
  for (int v0 : {0, 16, 48}) {
    const auto wte_local = random_vector(static_cast<size_t>(Vl) * C, 63 + v0);
    DBuf<float> dwte_w(wte_local);
    for (bool with_wpe : {true, false}) {
      const std::string tag = " v0=" + std::to_string(v0) + (with_wpe ? " wpe" : " no wpe");
      DBuf<float> dout_buf(N * C);
      encoder_forward_vocab_parallel(gpu_ctx(), dout_buf.get(), dinp.get(), dwte_w.get(),
                                     with_wpe ? dwpe_w.get() : nullptr, v0, Vl, B, T, C);
      std::vector<float> want(N * C);
      encoder_forward_vocab_parallel(cpu_ctx(), want.data(), inp.data(), wte_local.data(),
                                     with_wpe ? wpe.data() : nullptr, v0, Vl, B, T, C);
      EXPECT_TRUE(bitwise_equal("encoder_forward_vocab_parallel" + tag, dout_buf.download(), want));

      auto dwte = random_vector(static_cast<size_t>(Vl) * C, 70), dwpe = random_vector(static_cast<size_t>(T) * C, 71);
      DBuf<float> ddwte(dwte), ddwpe(dwpe);
      encoder_backward_vocab_parallel(gpu_ctx(), ddwte.get(), with_wpe ? ddwpe.get() : nullptr, ddout.get(), dinp.get(),
                                      v0, Vl, B, T, C);
      encoder_backward_vocab_parallel(cpu_ctx(), dwte.data(), with_wpe ? dwpe.data() : nullptr, dout.data(), inp.data(),
                                      v0, Vl, B, T, C);
      EXPECT_TRUE(bitwise_equal("encoder_backward_vocab_parallel dwte" + tag, ddwte.download(), dwte));
      // with dwpe null the device buffer must be untouched; dwpe (host) is then untouched too
      EXPECT_TRUE(bitwise_equal("encoder_backward_vocab_parallel dwpe" + tag, ddwpe.download(), dwpe));
    }
  }
}

// A negative token: the CPU backend throws; the device one cannot, so it writes NaN (kernels/cuda/cuda_core.cu).
TEST(CudaCore, EncoderForwardMarksANegativeTokenWithNaN) {
  HPCT_REQUIRE_GPU();
  const int B = 1, T = 3, C = 5, Vp = 4;
  const std::vector<int32_t> inp{1, -1, 2};
  DBuf<int32_t> dinp(inp);
  DBuf<float> dwte(random_vector(static_cast<size_t>(Vp) * C, 80)), dwpe(random_vector(static_cast<size_t>(T) * C, 81));
  DBuf<float> out(static_cast<size_t>(T) * C);
  encoder_forward(gpu_ctx(), out.get(), dinp.get(), dwte.get(), dwpe.get(), B, T, C);
  const auto got = out.download();
  for (int c = 0; c < C; c++) {
    EXPECT_TRUE(std::isfinite(got[c]));
    EXPECT_TRUE(std::isnan(got[C + c]));
    EXPECT_TRUE(std::isfinite(got[2 * C + c]));
  }
}

// ---- LayerNorm ----------------------------------------------------------------------------------------------------
TEST(CudaCore, LayernormForwardMatchesCpu) {
  HPCT_REQUIRE_GPU();
  struct Shape {
    int N, C;
  };
  for (const Shape s : {Shape{13, 77}, Shape{5, 768}, Shape{37, 3}, Shape{1, 1031}}) {
    for (bool with_bias : {true, false}) {
      const std::string tag = " N=" + std::to_string(s.N) + " C=" + std::to_string(s.C) + (with_bias ? "" : " no bias");
      const size_t NC = static_cast<size_t>(s.N) * s.C;
      const auto inp = random_vector(NC, 90, -2.0, 3.0);
      const auto w = random_vector(static_cast<size_t>(s.C), 91), b = random_vector(static_cast<size_t>(s.C), 92);
      DBuf<float> dinp(inp), dw(w), db(b), dout(NC), dmean(static_cast<size_t>(s.N)), drstd(static_cast<size_t>(s.N));
      layernorm_forward(gpu_ctx(), dout.get(), dmean.get(), drstd.get(), dinp.get(), dw.get(),
                        with_bias ? db.get() : nullptr, s.N, s.C);
      std::vector<float> out(NC), mean(static_cast<size_t>(s.N)), rstd(static_cast<size_t>(s.N));
      layernorm_forward(cpu_ctx(), out.data(), mean.data(), rstd.data(), inp.data(), w.data(),
                        with_bias ? b.data() : nullptr, s.N, s.C);
      EXPECT_TRUE(all_close("layernorm out" + tag, dout.download(), out, 1e-5, 1e-6));
      EXPECT_TRUE(all_close("layernorm mean" + tag, dmean.download(), mean, 1e-5, 1e-6));
      EXPECT_TRUE(all_close("layernorm rstd" + tag, drstd.download(), rstd, 1e-5, 1e-6));
    }
  }
}

TEST(CudaCore, LayernormBackwardAccumulatesLikeCpu) {
  HPCT_REQUIRE_GPU();
  struct Shape {
    int N, C;
  };
  // N = 1037 > the 16 row groups of the dweight kernel, C = 77 and 800 not multiples of its 32-column tile
  for (const Shape s : {Shape{13, 77}, Shape{1037, 77}, Shape{67, 800}, Shape{3, 5}}) {
    for (bool with_bias : {true, false}) {
      const std::string tag = " N=" + std::to_string(s.N) + " C=" + std::to_string(s.C) +
                              (with_bias ? "" : " no dbias");
      const size_t NC = static_cast<size_t>(s.N) * s.C, C = static_cast<size_t>(s.C);
      const auto inp = random_vector(NC, 100, -2.0, 3.0), dout = random_vector(NC, 101);
      const auto w = random_vector(C, 102), b = random_vector(C, 103);
      // mean and rstd from the CPU forward: both backends get the same saved statistics
      std::vector<float> fwd(NC), mean(static_cast<size_t>(s.N)), rstd(static_cast<size_t>(s.N));
      layernorm_forward(cpu_ctx(), fwd.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), s.N, s.C);
      // every gradient pre-filled: dinp, dweight, dbias all accumulate (+=)
      auto dinp = random_vector(NC, 104), dw = random_vector(C, 105), db = random_vector(C, 106);
      DBuf<float> d_inp(inp), d_dout(dout), d_w(w), d_mean(mean), d_rstd(rstd), d_dinp(dinp), d_dw(dw), d_db(db);
      layernorm_backward(gpu_ctx(), d_dinp.get(), d_dw.get(), with_bias ? d_db.get() : nullptr, d_dout.get(),
                         d_inp.get(), d_w.get(), d_mean.get(), d_rstd.get(), s.N, s.C);
      layernorm_backward(cpu_ctx(), dinp.data(), dw.data(), with_bias ? db.data() : nullptr, dout.data(), inp.data(),
                         w.data(), mean.data(), rstd.data(), s.N, s.C);
      EXPECT_TRUE(all_close("layernorm dinp" + tag, d_dinp.download(), dinp, 1e-5, 1e-6));
      EXPECT_TRUE(all_close("layernorm dweight" + tag, d_dw.download(), dw, 1e-6, 1e-7));
      // without dbias the device buffer stays as it was (and so does the host one)
      EXPECT_TRUE(all_close("layernorm dbias" + tag, d_db.download(), db, 1e-6, 1e-7));
    }
  }
}

// The parameter-gradient reductions (and the whole backward) reproduce themselves bit for bit.
TEST(CudaCore, BackwardsReproduceBitForBit) {
  HPCT_REQUIRE_GPU();
  const int N = 517, C = 129, B = 11, T = 47, Vp = 31;
  const size_t NC = static_cast<size_t>(N) * C;
  const auto inp = random_vector(NC, 110), dout = random_vector(NC, 111), w = random_vector(C, 112);
  std::vector<float> fwd(NC), mean(N), rstd(N);
  layernorm_forward(cpu_ctx(), fwd.data(), mean.data(), rstd.data(), inp.data(), w.data(),
                    static_cast<const float*>(nullptr), N, C);
  const auto tokens = random_ints(static_cast<size_t>(B) * T, 113, 0, Vp);
  const auto edout = random_vector(static_cast<size_t>(B) * T * C, 114);
  DBuf<float> d_inp(inp), d_dout(dout), d_w(w), d_mean(mean), d_rstd(rstd), d_edout(edout);
  DBuf<int32_t> d_tok(tokens);
  std::vector<float> runs[2][5];
  for (auto& run : runs) {
    DBuf<float> dinp(NC), dw(C), db(C), dwte(static_cast<size_t>(Vp) * C), dwpe(static_cast<size_t>(T) * C);
    layernorm_backward(gpu_ctx(), dinp.get(), dw.get(), db.get(), d_dout.get(), d_inp.get(), d_w.get(), d_mean.get(),
                       d_rstd.get(), N, C);
    encoder_backward(gpu_ctx(), dwte.get(), dwpe.get(), d_edout.get(), d_tok.get(), B, T, C);
    run[0] = dinp.download();
    run[1] = dw.download();
    run[2] = db.download();
    run[3] = dwte.download();
    run[4] = dwpe.download();
  }
  const char* names[5] = {"dinp", "dweight", "dbias", "dwte", "dwpe"};
  for (int k = 0; k < 5; k++) EXPECT_TRUE(bitwise_equal(std::string("rerun ") + names[k], runs[0][k], runs[1][k]));
}

// ---- bf16 storage ------------------------------------------------------------------------------------------------
// cast both ways, at an aligned start (16-byte packs) and one element off (element by element), with ties, the
// infinities, signed zeros, a subnormal and a value that overflows to infinity; NaN stays NaN (its payload is the
// hardware's canonical one on the GPU, the CPU keeps the sign and payload).
TEST(CudaCore, Bf16CastBothWaysEqualCpuBitForBit) {
  HPCT_REQUIRE_GPU();
  const int64_t n = 4099;
  auto src = random_vector(static_cast<size_t>(n) + 1, 700, -3.0, 3.0);
  const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, 1.0f + 0x1p-8f, 1.0f + 0x3p-8f, 0x1p-130f, 3.4e38f};
  for (size_t i = 0; i < std::size(specials); i++) src[i + 1] = specials[i];
  for (int off : {0, 1}) {
    SCOPED_TRACE("off " + std::to_string(off));
    DBuf<float> d_src(src), d_back(src.size());
    DBuf<bf16> d_low(src.size());
    cast(gpu_ctx(), d_low.get() + off, d_src.get() + off, n);
    cast(gpu_ctx(), d_back.get() + off, d_low.get() + off, n);
    std::vector<bf16> want_low(src.size(), bf16{0});
    std::vector<float> want_back(src.size(), 0.0f);
    cast(cpu_ctx(), want_low.data() + off, src.data() + off, n);
    cast(cpu_ctx(), want_back.data() + off, want_low.data() + off, n);
    EXPECT_TRUE(bitwise_equal("cast float -> bf16", d_low.download(), want_low));
    EXPECT_TRUE(bitwise_equal("cast bf16 -> float", d_back.download(), want_back));
  }
  DBuf<float> d_nan(std::vector<float>{std::numeric_limits<float>::quiet_NaN()});
  DBuf<bf16> d_nan_low(1);
  cast(gpu_ctx(), d_nan_low.get(), d_nan.get(), 1);
  EXPECT_TRUE(std::isnan(to_f32(d_nan_low.download()[0])));
}

TEST(CudaCore, Bf16PointwiseMatchCpu) {
  HPCT_REQUIRE_GPU();
  const int64_t n = 100003;
  const auto a = random_bf16(static_cast<size_t>(n), 710, -6.0, 6.0), b = random_bf16(static_cast<size_t>(n), 711);
  const auto g = random_bf16(static_cast<size_t>(n), 712);
  DBuf<bf16> da(a), db(b), dg(g), res(static_cast<size_t>(n)), relu(static_cast<size_t>(n)),
      drelu(static_cast<size_t>(n)), gelu(static_cast<size_t>(n)), dgelu(static_cast<size_t>(n));
  residual_forward(gpu_ctx(), res.get(), da.get(), db.get(), n);
  relu_forward(gpu_ctx(), relu.get(), da.get(), n);
  relu_backward(gpu_ctx(), drelu.get(), dg.get(), relu.get(), n);
  gelu_forward(gpu_ctx(), gelu.get(), da.get(), n);
  gelu_backward(gpu_ctx(), dgelu.get(), da.get(), dg.get(), n);
  std::vector<bf16> w_res(a.size()), w_relu(a.size()), w_drelu(a.size()), w_gelu(a.size()), w_dgelu(a.size());
  residual_forward(cpu_ctx(), w_res.data(), a.data(), b.data(), n);
  relu_forward(cpu_ctx(), w_relu.data(), a.data(), n);
  relu_backward(cpu_ctx(), w_drelu.data(), g.data(), w_relu.data(), n);
  gelu_forward(cpu_ctx(), w_gelu.data(), a.data(), n);
  gelu_backward(cpu_ctx(), w_dgelu.data(), a.data(), g.data(), n);
  EXPECT_TRUE(bitwise_equal("residual", res.download(), w_res));
  EXPECT_TRUE(bitwise_equal("relu_forward", relu.download(), w_relu));
  EXPECT_TRUE(bitwise_equal("relu_backward", drelu.download(), w_drelu));
  EXPECT_TRUE(all_close("gelu_forward", gelu.download(), w_gelu, 1e-5 + kBf16Ulp, 1e-6));
  EXPECT_TRUE(all_close("gelu_backward", dgelu.download(), w_dgelu, 1e-5 + kBf16Ulp, 1e-6));
  // in place, one element off 16-byte alignment (element by element)
  DBuf<bf16> dinplace(a);
  residual_forward(gpu_ctx(), dinplace.get() + 1, dinplace.get() + 1, db.get() + 1, n - 1);
  std::vector<bf16> w_inplace = a;
  residual_forward(cpu_ctx(), w_inplace.data() + 1, w_inplace.data() + 1, b.data() + 1, n - 1);
  EXPECT_TRUE(bitwise_equal("residual in place, unaligned", dinplace.download(), w_inplace));
}

TEST(CudaCore, Bf16EncoderEqualsCpuBitForBit) {
  HPCT_REQUIRE_GPU();
  const int B = 3, T = 67, C = 129, Vp = 101;
  const size_t N = static_cast<size_t>(B) * T;
  const auto inp = random_ints(N, 720, 0, Vp);
  const auto wte = random_bf16(static_cast<size_t>(Vp) * C, 721), wpe = random_bf16(static_cast<size_t>(T) * C, 722);
  const auto dout = random_bf16(N * C, 723);
  const auto dwte0 = random_vector(static_cast<size_t>(Vp) * C, 724),
             dwpe0 = random_vector(static_cast<size_t>(T) * C, 725);
  DBuf<int32_t> d_inp(inp);
  DBuf<bf16> d_wte(wte), d_wpe(wpe), d_dout(dout), d_out(N * C);
  DBuf<float> d_dwte(dwte0), d_dwpe(dwpe0);
  encoder_forward(gpu_ctx(), d_out.get(), d_inp.get(), d_wte.get(), d_wpe.get(), B, T, C);
  encoder_backward(gpu_ctx(), d_dwte.get(), d_dwpe.get(), d_dout.get(), d_inp.get(), B, T, C);
  std::vector<bf16> out(N * C);
  auto dwte = dwte0, dwpe = dwpe0;
  encoder_forward(cpu_ctx(), out.data(), inp.data(), wte.data(), wpe.data(), B, T, C);
  encoder_backward(cpu_ctx(), dwte.data(), dwpe.data(), dout.data(), inp.data(), B, T, C);
  EXPECT_TRUE(bitwise_equal("encoder_forward", d_out.download(), out));
  EXPECT_TRUE(bitwise_equal("encoder_backward dwte", d_dwte.download(), dwte));
  EXPECT_TRUE(bitwise_equal("encoder_backward dwpe", d_dwpe.download(), dwpe));
}

// C = 768 reads 16-byte packs of bf16 per lane, C = 77 element by element.
// residual_layernorm_forward equals residual_forward then layernorm_forward on the GPU bit for bit, fused (aligned
// rows of 768) and through the fallback (a and b one element off the 16-byte packs), in place (residual == a) too.
template <typename A>
void check_residual_layernorm_equals_the_two_ops() {
  const int N = 37, C = 768;
  const size_t NC = static_cast<size_t>(N) * C;
  const auto a = test::to_storage_vector<A>(random_vector(NC + 1, 760, -2.0, 3.0));
  const auto b = test::to_storage_vector<A>(random_vector(NC + 1, 761));
  const auto w = test::to_storage_vector<A>(random_vector(static_cast<size_t>(C), 762));
  const auto bias = test::to_storage_vector<A>(random_vector(static_cast<size_t>(C), 763));
  for (const int off : {0, 1}) {
    for (const bool in_place : {false, true}) {
      SCOPED_TRACE("offset " + std::to_string(off) + (in_place ? " in place" : ""));
      DBuf<A> d_a(a), d_b(b), d_w(w), d_bias(bias), d_res(NC), d_out(NC), r_a(a), r_res(NC), r_out(NC);
      DBuf<float> d_mean(static_cast<size_t>(N)), d_rstd(static_cast<size_t>(N)), r_mean(static_cast<size_t>(N)),
          r_rstd(static_cast<size_t>(N));
      A* res = in_place ? d_a.get() + off : d_res.get();
      A* want_res = in_place ? r_a.get() + off : r_res.get();
      residual_layernorm_forward(gpu_ctx(), res, d_out.get(), d_mean.get(), d_rstd.get(), d_a.get() + off,
                                 d_b.get() + off, d_w.get(), d_bias.get(), N, C);
      residual_forward(gpu_ctx(), want_res, r_a.get() + off, d_b.get() + off, static_cast<int64_t>(NC));
      layernorm_forward(gpu_ctx(), r_out.get(), r_mean.get(), r_rstd.get(), want_res, d_w.get(), d_bias.get(), N, C);
      EXPECT_TRUE(bitwise_equal("residual", in_place ? d_a.download() : d_res.download(),
                                in_place ? r_a.download() : r_res.download()));
      EXPECT_TRUE(bitwise_equal("out", d_out.download(), r_out.download()));
      EXPECT_TRUE(bitwise_equal("mean", d_mean.download(), r_mean.download()));
      EXPECT_TRUE(bitwise_equal("rstd", d_rstd.download(), r_rstd.download()));
    }
  }
}
TEST(CudaCore, ResidualLayernormEqualsTheTwoOps) {
  HPCT_REQUIRE_GPU();
  check_residual_layernorm_equals_the_two_ops<float>();
  check_residual_layernorm_equals_the_two_ops<bf16>();
}

TEST(CudaCore, Bf16LayernormMatchesCpu) {
  HPCT_REQUIRE_GPU();
  for (const int C : {768, 77}) {
    SCOPED_TRACE("C " + std::to_string(C));
    const int N = 131;
    const size_t NC = static_cast<size_t>(N) * C;
    const auto inp = random_bf16(NC, 730, -2.0, 3.0), dout = random_bf16(NC, 731);
    const auto w = random_bf16(static_cast<size_t>(C), 732), b = random_bf16(static_cast<size_t>(C), 733);
    const auto dinp0 = random_bf16(NC, 734);
    const auto dw0 = random_vector(static_cast<size_t>(C), 735), db0 = random_vector(static_cast<size_t>(C), 736);
    DBuf<bf16> d_inp(inp), d_dout(dout), d_w(w), d_b(b), d_out(NC), d_dinp(dinp0);
    DBuf<float> d_mean(static_cast<size_t>(N)), d_rstd(static_cast<size_t>(N)), d_dw(dw0), d_db(db0);
    layernorm_forward(gpu_ctx(), d_out.get(), d_mean.get(), d_rstd.get(), d_inp.get(), d_w.get(), d_b.get(), N, C);
    layernorm_backward(gpu_ctx(), d_dinp.get(), d_dw.get(), d_db.get(), d_dout.get(), d_inp.get(), d_w.get(),
                       d_mean.get(), d_rstd.get(), N, C);
    std::vector<bf16> out(NC), dinp = dinp0;
    std::vector<float> mean(static_cast<size_t>(N)), rstd(static_cast<size_t>(N));
    auto dw = dw0, db = db0;
    layernorm_forward(cpu_ctx(), out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
    layernorm_backward(cpu_ctx(), dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), mean.data(),
                       rstd.data(), N, C);
    EXPECT_TRUE(all_close("mean", d_mean.download(), mean, 1e-5, 1e-6));
    EXPECT_TRUE(all_close("rstd", d_rstd.download(), rstd, 1e-5, 1e-6));
    EXPECT_TRUE(all_close("out", d_out.download(), out, 1e-5 + kBf16Ulp, 1e-6));
    EXPECT_TRUE(all_close("dinp (+=)", d_dinp.download(), dinp, 1e-5 + kBf16Ulp, 1e-6));
    EXPECT_TRUE(all_close("dweight (+=)", d_dw.download(), dw, 1e-6, 1e-7));
    EXPECT_TRUE(all_close("dbias (+=)", d_db.download(), db, 1e-6, 1e-7));
  }
}

}  // namespace
}  // namespace hpct::kernels
