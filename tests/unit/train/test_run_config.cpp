// The shared deck sections as the training loop takes them (train/loop/run_config.hpp) and the loop's MFU formula
// (train/loop/training_loop.hpp): derived defaults that never fail by themselves, the schedule kind of one stage, and MFU
// per rank (the job's FLOP/s divided by the world size, against one device's peak).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>

#include "core/error.hpp"
#include "train/tasks/gpt/gpt_deck.hpp"
#include "train/tasks/resnet/resnet_deck.hpp"
#include "train/loop/run_config.hpp"
#include "train/loop/training_loop.hpp"

namespace hpct::train {
namespace {

const std::string kGptDeck = R"(
[model]
n_layer = 2
n_head = 2
n_embd = 16
seq_len = 8
[data]
train = "t.bin"
val = "v.bin"
[train]
steps = 10
[optim]
warmup_steps = 4
)";

Config gpt_deck(const std::vector<std::string>& sets) {
  return Config::parse(gpt_deck_schema(), kGptDeck, "t.toml", sets);
}

std::string usage_message(const std::function<void()>& f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.cause();
  }
  return "";
}

TEST(RunConfig, DecayStepsDefaultFollowsTheRunAndTheWarmUp) {
  // the default: train.steps when the warm-up fits in the run
  EXPECT_EQ(read_cosine_schedule(gpt_deck({}), 10).decay_steps, 10);
  // a run shorter than the warm-up (train.steps=1 on a deck with a warm-up) derives the end of the warm-up, no error
  const Config one = gpt_deck({"train.steps=1"});
  const optim::LrSchedule s = read_cosine_schedule(one, read_run_config(one).train.steps);
  EXPECT_EQ(s.decay_steps, 4);
  EXPECT_DOUBLE_EQ(s.at(1), 6e-4 / 4);  // still warming up: the same lr as in the longer run's first step
  // a decay_steps the user wrote before the warm-up's end is an error naming both keys and the fix
  const std::string msg = usage_message([] { read_cosine_schedule(gpt_deck({"optim.decay_steps=2"}), 10); });
  EXPECT_NE(msg.find("optim.decay_steps = 2 is before the end of optim.warmup_steps = 4"), std::string::npos) << msg;
  EXPECT_NE(msg.find("set optim.decay_steps >= 4"), std::string::npos) << msg;
}

TEST(RunConfig, TypedSectionsAndTheScheduleOfOneStage) {
  const RunConfig c = read_run_config(gpt_deck(
      {"parallel.zero=1", "parallel.bucket_mb=2", "log.every=5", "parallel.schedule=gpipe", "checkpoint.keep=7"}));
  EXPECT_EQ(c.train.steps, 10);
  EXPECT_EQ(c.parallel.sync.zero, 1);
  EXPECT_EQ(c.parallel.sync.bucket_bytes, 2u << 20);
  EXPECT_EQ(c.log.every, 5);
  EXPECT_EQ(c.checkpoint.keep, 7);
  EXPECT_EQ(c.parallel.schedule, parallel::ScheduleKind::None);  // pp = 1: no pipeline, whatever the deck asks
  EXPECT_EQ(read_run_config(gpt_deck({"parallel.pp=2", "parallel.schedule=gpipe"})).parallel.schedule,
            parallel::ScheduleKind::GPipe);
  const std::string msg = usage_message([] { read_run_config(gpt_deck({"train.deadline=1000"})); });
  EXPECT_NE(msg.find("train.deadline = 1000 is in the past"), std::string::npos) << msg;
}

TEST(Mfu, IsPerRankAgainstOneDevicesPeak) {
  // 4e12 FLOPs per step in 1 s on 2 ranks against a 1 TFLOP/s device: each rank does 2e12 FLOP/s, MFU 2 (200%)
  EXPECT_DOUBLE_EQ(*model_flops_utilization(4e12, 1000.0, 2, 1.0), 2.0);
  // the same job on twice the ranks at the same step time uses each device half as well
  const double one = *model_flops_utilization(3e12, 250.0, 1, 100.0);
  const double two = *model_flops_utilization(3e12, 250.0, 2, 100.0);
  EXPECT_DOUBLE_EQ(two, one / 2);
  EXPECT_FALSE(model_flops_utilization(3e12, 250.0, 2, 0.0).has_value());  // peak unknown: mfu = null
}

// The peak MFU is measured against: the deck's value when set, else the device table's at the run's precision on CUDA.
TEST(Mfu, PeakPerPrecisionFromTheDeviceTableUnlessTheDeckSetsOne) {
  const std::string h100 = "NVIDIA H100 80GB HBM3";
  EXPECT_DOUBLE_EQ(resolve_mfu_peak(0.0, Device::CUDA, h100, Precision::BF16).tflops, 989.5);
  EXPECT_DOUBLE_EQ(resolve_mfu_peak(0.0, Device::CUDA, h100, Precision::TF32).tflops, 494.5);
  EXPECT_DOUBLE_EQ(resolve_mfu_peak(0.0, Device::CUDA, h100, Precision::FP16).tflops, 989.5);
  EXPECT_DOUBLE_EQ(resolve_mfu_peak(0.0, Device::CUDA, h100, Precision::FP32).tflops, 67.0);
  EXPECT_DOUBLE_EQ(resolve_mfu_peak(0.0, Device::CUDA, "NVIDIA H100 NVL", Precision::BF16).tflops, 835.5);
  EXPECT_NE(resolve_mfu_peak(0.0, Device::CUDA, h100, Precision::BF16).source.find("bf16"), std::string::npos);
  // log.peak_tflops wins, on any device
  const MfuPeak deck = resolve_mfu_peak(123.0, Device::CUDA, h100, Precision::BF16);
  EXPECT_DOUBLE_EQ(deck.tflops, 123.0);
  EXPECT_EQ(deck.source, "log.peak_tflops");
  EXPECT_DOUBLE_EQ(resolve_mfu_peak(2.5, Device::CPU, "", Precision::FP32).tflops, 2.5);
  // unknown: the CPU, or a GPU the table lacks; the source says how to set it
  const MfuPeak cpu = resolve_mfu_peak(0.0, Device::CPU, "", Precision::FP32);
  EXPECT_EQ(cpu.tflops, 0.0);
  EXPECT_NE(cpu.source.find("log.peak_tflops"), std::string::npos);
  const MfuPeak other = resolve_mfu_peak(0.0, Device::CUDA, "Some Future GPU", Precision::BF16);
  EXPECT_EQ(other.tflops, 0.0);
  EXPECT_NE(other.source.find("Some Future GPU"), std::string::npos);
}

}  // namespace
}  // namespace hpct::train
