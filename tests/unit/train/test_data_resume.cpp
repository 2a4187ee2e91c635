// The GPT's data on resume (train/checkpoint/resume.hpp, check_token_data_resume): the checkpoint's shard list and data.order
// against the deck's, the exact messages, data.allow_changed, and checkpoints written before shard lists existed.
// Also the deck's data keys: a single path (the decks written before lists) is a one-item list.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "core/error.hpp"
#include "train/tasks/gpt/gpt_deck.hpp"
#include "train/checkpoint/resume.hpp"

namespace hpct::train {
namespace {

using data::TokenShardInfo;

std::string usage_message(const std::function<void()>& f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.cause();
  }
  return "(no UsageError)";
}

const std::vector<TokenShardInfo> kTrain = {{"a_000000.bin", "/d/a_000000.bin", 1000},
                                            {"a_000001.bin", "/d/a_000001.bin", 1000},
                                            {"a_000002.bin", "/d/a_000002.bin", 333}};
const std::vector<TokenShardInfo> kVal = {{"a_val.bin", "/d/a_val.bin", 500}};

ckpt::Attrs attrs_of(const std::vector<TokenShardInfo>& train, const std::string& order) {
  ckpt::Attrs a;
  a.strings["data.train.shards"] = shard_list_json(train);
  a.strings["data.val.shards"] = shard_list_json(kVal);
  a.strings["data.order"] = order;
  return a;
}

void check(const ckpt::Attrs& a, const std::vector<TokenShardInfo>& train, const std::string& order, bool allow) {
  check_token_data_resume(a, "run/checkpoints/step_00000003", "deck.toml", order, train, kVal, allow);
}

TEST(DataResume, ShardListJsonRoundTrips) {
  EXPECT_EQ(parse_shard_list_json(shard_list_json(kTrain), "x"), kTrain);
  EXPECT_EQ(shard_list_json({{"a.bin", "/p/a.bin", 12}}), R"([{"file":"a.bin","path":"/p/a.bin","tokens":12}])");
  EXPECT_NE(usage_message([] { parse_shard_list_json("{nope", "ck:data.train.shards"); }).find("ck:data.train.shards"),
            std::string::npos);
}

TEST(DataResume, SameListAndOrderPassMovedPathsToo) {
  EXPECT_NO_THROW(check(attrs_of(kTrain, "epoch"), kTrain, "epoch", false));
  std::vector<TokenShardInfo> moved = kTrain;
  for (auto& s : moved) s.path = "/elsewhere/" + s.name;  // file names and counts decide, not the directory
  EXPECT_NO_THROW(check(attrs_of(kTrain, "epoch"), moved, "epoch", false));
  // an old checkpoint (no shard list, no order: random was the only order): accepted in random order, with a log line
  EXPECT_NO_THROW(check(ckpt::Attrs{}, kTrain, "random", false));
  EXPECT_EQ(usage_message([] { check(ckpt::Attrs{}, kTrain, "epoch", false); }),
            "deck deck.toml: data.order = epoch but checkpoint run/checkpoints/step_00000003 was written with "
            "data.order = random; restore the deck's data, or accept the change (the batch sequence then differs from "
            "the interrupted run's) with --set data.allow_changed=true");
}

TEST(DataResume, ChangedListIsAnErrorNamingTheFirstDifference) {
  const std::string accept =
      "restore the deck's data, or accept the change (the batch sequence then differs from the interrupted run's) "
      "with --set data.allow_changed=true";
  std::vector<TokenShardInfo> fewer(kTrain.begin(), kTrain.begin() + 2);
  EXPECT_EQ(usage_message([&] { check(attrs_of(kTrain, "random"), fewer, "random", false); }),
            "deck deck.toml: data.train differs from checkpoint run/checkpoints/step_00000003 at shard 2: none (the "
            "list ends after 2 shards) here, a_000002.bin (333 tokens) in the checkpoint (2 shards here, 3 there); " +
                accept);
  std::vector<TokenShardInfo> grown = kTrain;
  grown[2].tokens = 400;
  EXPECT_EQ(usage_message([&] { check(attrs_of(kTrain, "random"), grown, "random", false); }),
            "deck deck.toml: data.train differs from checkpoint run/checkpoints/step_00000003 at shard 2: a_000002.bin "
            "(400 tokens) here, a_000002.bin (333 tokens) in the checkpoint (3 shards here, 3 there); " +
                accept);
  EXPECT_EQ(usage_message([&] { check(attrs_of(kTrain, "random"), kTrain, "epoch", false); }),
            "deck deck.toml: data.order = epoch but checkpoint run/checkpoints/step_00000003 was written with "
            "data.order = random; " +
                accept);
  // data.allow_changed = true accepts both (with a warning)
  EXPECT_NO_THROW(check(attrs_of(kTrain, "random"), fewer, "epoch", true));
}

TEST(DataResume, DeckDataKeysTakeAPathAGlobOrAList) {
  const std::string deck = R"(
[model]
n_layer = 2
n_head = 2
n_embd = 16
seq_len = 8
[data]
train = "t.bin"
val = ["v1.bin", "v2.bin"]
)";
  const Config c = Config::parse(gpt_deck_schema(), deck, "t.toml");
  EXPECT_EQ(c.get_string_list("data.train"), std::vector<std::string>{"t.bin"});
  EXPECT_EQ(c.get_string_list("data.val"), (std::vector<std::string>{"v1.bin", "v2.bin"}));
  EXPECT_EQ(c.get_string("data.order"), "random");
  EXPECT_FALSE(c.get_bool("data.allow_changed"));
  const Config o = Config::parse(gpt_deck_schema(), deck, "t.toml", {"data.train=x_*.bin,y.bin", "data.order=epoch"});
  EXPECT_EQ(o.get_string_list("data.train"), (std::vector<std::string>{"x_*.bin", "y.bin"}));
  EXPECT_EQ(o.get_string("data.order"), "epoch");
  EXPECT_NE(usage_message([&] {
              Config::parse(gpt_deck_schema(), deck, "t.toml", {"data.order=shuffle"});
            }).find("data.order"),
            std::string::npos);
}

}  // namespace
}  // namespace hpct::train
