// The convolution algorithm table's host side (kernels/conv_algorithms.hpp): the choice from timed candidates, the
// table's keys and lookups, and the CPU backend's refusal to time (it has nothing to choose). The CUDA side, timing and
// running the choices, is test_cuda_resnet's ConvAlgorithmTableRunsEachTimedCandidate (label cuda).
#include <gtest/gtest.h>

#include <vector>

#include "core/error.hpp"
#include "kernels/conv_algorithms.hpp"
#include "kernels/kernels.hpp"

namespace hpct::kernels {
namespace {

// candidates in cuDNN's heuristic order: {algo, workspace bytes, ms (negative: not timed)}
using List = std::vector<AlgoTime>;

TEST(ConvAlgorithms, ChoiceKeepsTheHeuristicsFirstWithinTheMargin) {
  // the heuristic's first timed candidate is 1.00 ms; another at 0.97 ms is within 5%: the first stays
  EXPECT_EQ(choose_algorithm(List{{6, 0, 1.00}, {1, 0, 0.97}, {0, 0, 2.0}}, 0.05), 6);
  // 0.90 ms is more than 5% faster: it is chosen
  EXPECT_EQ(choose_algorithm(List{{6, 0, 1.00}, {1, 0, 0.97}, {0, 0, 0.90}}, 0.05), 0);
  // margin 0: the fastest, the earlier one on a tie
  EXPECT_EQ(choose_algorithm(List{{6, 0, 1.00}, {1, 0, 0.97}, {0, 0, 0.97}}, 0.0), 1);
}

TEST(ConvAlgorithms, UntimedCandidatesAreNeverChosen) {
  // the heuristic's first did not fit (ms < 0): the first timed one is the reference
  EXPECT_EQ(choose_algorithm(List{{6, 1 << 30, -1.0}, {1, 0, 1.0}, {0, 0, 0.99}}, 0.05), 1);
  EXPECT_EQ(choose_algorithm(List{{6, 1 << 30, -1.0}, {1, 0, 1.0}, {0, 0, 0.5}}, 0.05), 0);
  EXPECT_EQ(choose_algorithm(List{{6, 0, -1.0}, {1, 0, -1.0}}, 0.05), -1);
  EXPECT_EQ(choose_algorithm(List{}, 0.05), -1);
  EXPECT_THROW(choose_algorithm(List{{6, 0, 1.0}}, 1.0), Error);
}

ConvTiming timing(const ConvAlgoKey& key, List fwd, List bwd_data, List bwd_filter) {
  ConvTiming t;
  t.key = key;
  t.phases = {std::move(fwd), std::move(bwd_data), std::move(bwd_filter)};
  return t;
}

TEST(ConvAlgorithms, TableChoosesAndFindsPerShapeAndPhase) {
  ExecContext cuda{Device::CUDA, nullptr, Precision::BF16};
  cuda.channels_last = true;
  const ConvAlgoKey a = conv_algo_key(cuda, 8, 64, 56, 56, 64, 3, 3, 1, 1, DType::BF16);
  const ConvAlgoKey b = conv_algo_key(cuda, 8, 64, 56, 56, 256, 1, 1, 1, 0, DType::BF16);
  ConvAlgorithms table("NVIDIA H200", 91400);
  table.add(timing(a, {{1, 0, 1.0}, {0, 0, 0.5}}, {{1, 0, 2.0}}, {{0, 0, -1.0}, {1, 0, 3.0}}));
  EXPECT_EQ(table.size(), 1u);
  EXPECT_EQ(table.find(a, ConvPhase::Forward), 0);
  EXPECT_EQ(table.find(a, ConvPhase::BackwardData), 1);
  EXPECT_EQ(table.find(a, ConvPhase::BackwardFilter), 1);
  EXPECT_EQ(table.find(b, ConvPhase::Forward), -1) << "a shape the table lacks has no choice";
  EXPECT_TRUE(table.contains(a));
  EXPECT_FALSE(table.contains(b));
  const std::string summary = table.summary();
  EXPECT_NE(summary.find("forward 0.500 ms against 1.000 ms for cuDNN's first choices (1 of 1 replaced)"),
            std::string::npos)
      << summary;
  EXPECT_NE(summary.find("backward_data 2.000 ms against 2.000 ms for cuDNN's first choices (0 of 1 replaced)"),
            std::string::npos)
      << summary;
  // the same key again replaces the entry
  table.set(a, {5, -1, -1});
  EXPECT_EQ(table.size(), 1u);
  EXPECT_EQ(table.find(a, ConvPhase::Forward), 5);
  EXPECT_EQ(table.find(a, ConvPhase::BackwardData), -1);
}

TEST(ConvAlgorithms, KeysSeparateWhatChangesTheAlgorithms) {
  ExecContext fp32{Device::CUDA, nullptr, Precision::FP32}, tf32{Device::CUDA, nullptr, Precision::TF32};
  const ConvAlgoKey f = conv_algo_key(fp32, 8, 16, 32, 32, 16, 3, 3, 1, 1, DType::F32);
  const ConvAlgoKey t = conv_algo_key(tf32, 8, 16, 32, 32, 16, 3, 3, 1, 1, DType::F32);
  EXPECT_FALSE(f == t) << "fp32 and tf32 math choose among different candidates";
  // 16-bit storage runs one math whatever train.precision says: one key
  const ConvAlgoKey b1 = conv_algo_key(fp32, 8, 16, 32, 32, 16, 3, 3, 1, 1, DType::BF16);
  const ConvAlgoKey b2 = conv_algo_key(tf32, 8, 16, 32, 32, 16, 3, 3, 1, 1, DType::BF16);
  EXPECT_TRUE(b1 == b2);
  EXPECT_EQ(b1.precision, Precision::BF16);
  EXPECT_EQ(conv_algo_key(fp32, 8, 16, 32, 32, 16, 3, 3, 1, 1, DType::F16).precision, Precision::FP16);
  ExecContext nhwc = fp32;
  nhwc.channels_last = true;
  EXPECT_FALSE(conv_algo_key(nhwc, 8, 16, 32, 32, 16, 3, 3, 1, 1, DType::F32) == f) << "the layout is in the key";
  EXPECT_FALSE(conv_algo_key(fp32, 4, 16, 32, 32, 16, 3, 3, 1, 1, DType::F32) == f) << "the micro-batch is in the key";
  EXPECT_EQ(f.describe(), "N=8 C=16 H=32 W=32 OC=16 3x3 stride 1 pad 1, f32 storage, fp32 math, NCHW");
  EXPECT_THROW(conv_algo_key(fp32, 8, 16, 32, 32, 16, 3, 3, 1, 1, DType::I32), Error);
}

TEST(ConvAlgorithms, TheCpuHasNothingToTime) {
  std::vector<float> x(2 * 3 * 5 * 5), w(4 * 3 * 3 * 3), y(2 * 4 * 5 * 5), dx(x.size()), dw(w.size()), ws(1);
  const ExecContext cpu{};
  try {
    conv2d_time_algorithms(cpu, x.data(), w.data(), y.data(), dx.data(), dw.data(), ws.data(), 1, 2, 3, 5, 5, 4, 3, 3,
                           1, 1, 1);
    FAIL() << "the CPU backend timed convolution algorithms";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nothing to time"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hpct::kernels
