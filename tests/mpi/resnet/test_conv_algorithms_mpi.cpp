// train.conv_algorithms under mpirun (train/tasks/resnet/conv_algorithm_choice.hpp): the table's file round trip and its errors,
// and the collective decision: only rank 0 times, every rank gets the same table, the run directory's table is reused
// when it fits this GPU, cuDNN and model and timed again otherwise, an explicit table is used and copied, a missing one
// is a UsageError on every rank, and "heuristic" times nothing. The timing itself is a stand-in here (no GPU): the CUDA
// side is test_cuda_resnet's ConvAlgorithmTableRunsEachTimedCandidate.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "comm/comm.hpp"
#include "core/error.hpp"
#include "train/tasks/resnet/conv_algorithm_choice.hpp"

namespace hpct::train {
namespace {

namespace fs = std::filesystem;
namespace k = hpct::kernels;

comm::CommOptions test_options() {
  comm::CommOptions o;
  o.timeout_s = 60;  // a hang fails the test instead of the ctest timeout
  return o;
}

k::ConvAlgoKey key(int N, int C, int OC, int K, int stride, bool nhwc) {
  ExecContext ctx{Device::CUDA, nullptr, Precision::BF16};
  ctx.channels_last = nhwc;
  return k::conv_algo_key(ctx, N, C, 14, 14, OC, K, K, stride, K / 2, DType::BF16);
}

// A stand-in for ResNet::time_conv_algorithms: one timing per key, the second forward candidate faster.
std::vector<k::ConvTiming> fake_timings(const std::vector<k::ConvAlgoKey>& keys) {
  std::vector<k::ConvTiming> out;
  for (const k::ConvAlgoKey& key : keys) {
    k::ConvTiming t;
    t.key = key;
    t.phases[0] = {{1, 0, 1.0}, {7, 4096, 0.25}};
    t.phases[1] = {{1, 0, 2.0}, {0, 0, -1.0}};
    t.phases[2] = {{0, 0, 3.0}, {3, 1 << 20, 2.9}};
    out.push_back(t);
  }
  return out;
}

// A directory every rank sees: rank 0's name, broadcast.
std::string shared_dir(comm::Communicator& world, const std::string& name) {
  std::string dir;
  if (world.rank() == 0) {
    dir = (fs::temp_directory_path() / fmt::format("hpct_conv_algos_{}_{}", name, ::getpid())).string();
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  dir = comm::broadcast_string(world, dir, 0, "test directory");
  world.barrier("test directory made");
  return dir;
}

class ConvAlgorithmChoice : public ::testing::Test {
 protected:
  void SetUp() override { world_ = comm::make_world_communicator(test_options()); }
  std::unique_ptr<comm::MpiCommunicator> world_;
  const std::vector<k::ConvAlgoKey> keys_{key(8, 16, 16, 3, 1, true), key(8, 16, 32, 1, 2, true),
                                          key(8, 16, 32, 3, 2, true)};

  // decide_conv_algorithms with the stand-in timing; `timed` counts this rank's timings
  k::ConvAlgorithms decide(const std::string& setting, const std::string& dir, int* timed,
                           const std::string& device = "NVIDIA H200", int cudnn = 91400,
                           std::vector<k::ConvAlgoKey> keys = {}) {
    if (keys.empty()) keys = keys_;
    ConvAlgorithmRequest r{setting, dir, device, cudnn, keys};
    return decide_conv_algorithms(*world_, r, [&] {
      ++*timed;
      return fake_timings(keys);
    });
  }
  // every rank holds the same table (its file text compared with rank 0's)
  void expect_same_on_every_rank(const k::ConvAlgorithms& t) {
    const std::string mine = conv_algorithms_json(t);
    const std::string root = comm::broadcast_string(*world_, mine, 0, "rank 0's table");
    EXPECT_EQ(mine, root) << "rank " << world_->rank() << " holds another table than rank 0";
  }
};

TEST_F(ConvAlgorithmChoice, TheFileRoundTrips) {
  k::ConvAlgorithms t("NVIDIA H100 80GB HBM3", 91300);
  for (const k::ConvTiming& timing : fake_timings(keys_)) t.add(timing);
  const std::string text = conv_algorithms_json(t);
  const k::ConvAlgorithms back = parse_conv_algorithms(text, "round trip");
  EXPECT_EQ(back.device(), "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(back.cudnn_version(), 91300);
  ASSERT_EQ(back.size(), keys_.size());
  for (const k::ConvAlgoKey& key : keys_) {
    EXPECT_EQ(back.find(key, k::ConvPhase::Forward), 7) << key.describe();
    EXPECT_EQ(back.find(key, k::ConvPhase::BackwardData), 1);
    EXPECT_EQ(back.find(key, k::ConvPhase::BackwardFilter), 0) << "2.9 ms is within 5% of 3.0 ms";
    const auto& times = back.entries().at(key).timing.phases[0];
    ASSERT_EQ(times.size(), 2u);
    EXPECT_EQ(times[1].algo, 7);
    EXPECT_EQ(times[1].bytes, 4096u);
    EXPECT_DOUBLE_EQ(times[1].ms, 0.25);
  }
  EXPECT_EQ(conv_algorithms_json(back), text);
  EXPECT_EQ(back.summary(), t.summary());
}

TEST_F(ConvAlgorithmChoice, ABadFileNamesItselfAndWhatIsWrong) {
  k::ConvAlgorithms t("gpu", 1);
  for (const k::ConvTiming& timing : fake_timings(keys_)) t.add(timing);
  const std::string good = conv_algorithms_json(t);
  const auto expect_error = [](const std::string& text, const std::string& part) {
    try {
      parse_conv_algorithms(text, "tables/x.json");
      ADD_FAILURE() << "no error for: " << text.substr(0, 80);
    } catch (const UsageError& e) {
      const std::string what = e.cause();
      EXPECT_NE(what.find("tables/x.json"), std::string::npos) << what;
      EXPECT_NE(what.find(part), std::string::npos) << "want '" << part << "' in: " << what;
    }
  };
  const auto replaced = [&](const std::string& from, const std::string& to) {
    std::string s = good;
    const size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return s.replace(at, from.size(), to);
  };
  expect_error("{ not json", "JSON");
  expect_error("{\"format\": \"something else\"}", "format");
  expect_error(replaced("\"version\": 1", "\"version\": 2"), "version 2");
  expect_error(replaced("\"N\": 8", "\"M\": 8"), "has no \"N\"");
  expect_error(replaced("\"N\": 8", "\"N\": \"eight\""), "wrong type");
  expect_error(replaced("\"layout\": \"nhwc\"", "\"layout\": \"chwn\""), "layout \"chwn\"");
  expect_error(replaced("\"storage\": \"bf16\"", "\"storage\": \"i32\""), "storage \"i32\"");
  expect_error(replaced("\"forward\": 7", "\"fwd\": 7"), "has no \"forward\"");
}

TEST_F(ConvAlgorithmChoice, TimedOnRankZeroOnceThenReusedFromTheRunDirectory) {
  const std::string dir = shared_dir(*world_, "timed");
  int timed = 0;
  const k::ConvAlgorithms first = decide(kConvAlgorithmsTimed, dir, &timed);
  EXPECT_EQ(timed, world_->rank() == 0 ? 1 : 0) << "only rank 0 times";
  EXPECT_EQ(first.size(), keys_.size());
  EXPECT_EQ(first.find(keys_[0], k::ConvPhase::Forward), 7);
  expect_same_on_every_rank(first);
  EXPECT_TRUE(fs::exists(fs::path(dir) / kConvAlgorithmsFile));

  // a rerun (or a resume) into the same directory: the same table, nothing timed
  timed = 0;
  const k::ConvAlgorithms again = decide(kConvAlgorithmsTimed, dir, &timed);
  EXPECT_EQ(timed, 0);
  EXPECT_EQ(conv_algorithms_json(again), conv_algorithms_json(first));

  // another GPU model, another cuDNN, a convolution the table lacks: timed again and rewritten
  for (int variant = 0; variant < 3; variant++) {
    SCOPED_TRACE(variant);
    timed = 0;
    std::vector<k::ConvAlgoKey> keys = keys_;
    if (variant == 2) keys.push_back(key(8, 32, 64, 3, 2, true));
    const k::ConvAlgorithms t = decide(kConvAlgorithmsTimed, dir, &timed, variant == 0 ? "NVIDIA A100" : "NVIDIA H200",
                                       variant == 1 ? 91500 : 91400, keys);
    EXPECT_EQ(timed, world_->rank() == 0 ? 1 : 0);
    EXPECT_EQ(t.size(), keys.size());
    expect_same_on_every_rank(t);
  }

  // an unreadable table in the run directory is timed over, not an error
  if (world_->rank() == 0) std::ofstream(fs::path(dir) / kConvAlgorithmsFile) << "{ truncated";
  world_->barrier("table truncated");
  timed = 0;
  EXPECT_EQ(decide(kConvAlgorithmsTimed, dir, &timed).size(), keys_.size());
  EXPECT_EQ(timed, world_->rank() == 0 ? 1 : 0);
  world_->barrier("done");
  if (world_->rank() == 0) fs::remove_all(dir);
}

TEST_F(ConvAlgorithmChoice, AnExplicitTableIsUsedAsItIsAndCopied) {
  const std::string src = shared_dir(*world_, "src"), dst = shared_dir(*world_, "dst");
  int timed = 0;
  const k::ConvAlgorithms made = decide(kConvAlgorithmsTimed, src, &timed);
  const std::string path = (fs::path(src) / kConvAlgorithmsFile).string();
  // another GPU model: used where it applies (a warning), never timed
  timed = 0;
  const k::ConvAlgorithms used = decide(path, dst, &timed, "NVIDIA A100");
  EXPECT_EQ(timed, 0);
  EXPECT_EQ(conv_algorithms_json(used), conv_algorithms_json(made));
  expect_same_on_every_rank(used);
  EXPECT_TRUE(fs::exists(fs::path(dst) / kConvAlgorithmsFile)) << "the run directory keeps the table it ran with";
  world_->barrier("done");
  if (world_->rank() == 0) {
    fs::remove_all(src);
    fs::remove_all(dst);
  }
}

TEST_F(ConvAlgorithmChoice, AMissingExplicitTableIsAUsageErrorOnEveryRank) {
  const std::string dir = shared_dir(*world_, "missing");
  int timed = 0;
  try {
    decide(dir + "/no_such_table.json", dir, &timed);
    ADD_FAILURE() << "no error on rank " << world_->rank();
  } catch (const UsageError& e) {
    const std::string what = e.cause();
    EXPECT_NE(what.find("train.conv_algorithms"), std::string::npos) << what;
    EXPECT_NE(what.find("no_such_table.json"), std::string::npos) << what;
    EXPECT_NE(what.find("\"heuristic\""), std::string::npos) << "the message names the alternatives: " << what;
  }
  EXPECT_EQ(timed, 0);
  world_->barrier("done");
  if (world_->rank() == 0) fs::remove_all(dir);
}

TEST_F(ConvAlgorithmChoice, HeuristicTimesNothingAndWritesNothing) {
  const std::string dir = shared_dir(*world_, "heuristic");
  int timed = 0;
  EXPECT_TRUE(decide(kConvAlgorithmsHeuristic, dir, &timed).empty());
  EXPECT_EQ(timed, 0);
  EXPECT_FALSE(fs::exists(fs::path(dir) / kConvAlgorithmsFile));
  world_->barrier("done");
  if (world_->rank() == 0) fs::remove_all(dir);
}

}  // namespace
}  // namespace hpct::train
