#include <gtest/gtest.h>

#include "core/config.hpp"
#include "core/error.hpp"

using hpct::Config;
using hpct::ConfigSchema;

namespace {

const ConfigSchema& schema() {
  static const ConfigSchema s = [] {
    ConfigSchema s;
    s.section("model", true, "the model");
    s.int_key("model.n_layer", std::nullopt, "layers", 1, 64);
    s.float_key("model.init_std", 0.02, "init std", 0.0, 1.0);
    s.section("train", false, "training");
    s.int_key("train.steps", 10, "steps", 0);
    s.bool_key("train.flag", false, "a flag");
    s.string_key("train.device", "cpu", "device", {"cpu", "cuda", "auto"});
    s.string_key("train.name", "x", "free text");
    return s;
  }();
  return s;
}

// Runs f, expects a UsageError whose message contains every needle.
template <typename F>
void expect_usage_error(F f, std::initializer_list<const char*> needles) {
  try {
    f();
    FAIL() << "no error thrown";
  } catch (const hpct::UsageError& e) {
    for (const char* n : needles)
      EXPECT_NE(e.cause().find(n), std::string::npos) << "'" << n << "' not in: " << e.cause();
  }
}

}  // namespace

TEST(Config, ParsesTypesAndDefaults) {
  const Config c = Config::parse(schema(), "[model]\nn_layer = 4\ninit_std = 1\n[train]\nflag = true\n", "d.toml");
  EXPECT_EQ(c.get_int("model.n_layer"), 4);
  EXPECT_DOUBLE_EQ(c.get_float("model.init_std"), 1.0);  // a TOML integer is a valid float
  EXPECT_EQ(c.get_int("train.steps"), 10);               // default
  EXPECT_TRUE(c.get_bool("train.flag"));
  EXPECT_EQ(c.get_string("train.device"), "cpu");
  EXPECT_TRUE(c.was_set("model.n_layer"));
  EXPECT_FALSE(c.was_set("train.steps"));
}

TEST(Config, OverridesConvertToDeclaredType) {
  const Config c = Config::parse(schema(), "[model]\nn_layer = 4\n", "d.toml",
                                 {"train.steps=25", "model.init_std=0.5", "train.flag=1", "train.device=auto",
                                  "train.name=\"quoted\"", "train.steps=30"});
  EXPECT_EQ(c.get_int("train.steps"), 30);  // later overrides win
  EXPECT_DOUBLE_EQ(c.get_float("model.init_std"), 0.5);
  EXPECT_TRUE(c.get_bool("train.flag"));
  EXPECT_EQ(c.get_string("train.device"), "auto");
  EXPECT_EQ(c.get_string("train.name"), "quoted");
}

TEST(Config, UnknownKeyNamesKeyAndDeck) {
  expect_usage_error([] { Config::parse(schema(), "[model]\nn_layer = 4\nn_layers = 5\n", "deck.toml"); },
                     {"deck.toml", "model.n_layers", "model.n_layer"});
  expect_usage_error([] { Config::parse(schema(), "[model]\nn_layer = 4\n", "deck.toml", {"train.stepz=3"}); },
                     {"train.stepz", "train.steps"});
  expect_usage_error([] { Config::parse(schema(), "[model]\nn_layer = 4\n[optim]\nlr = 1\n", "deck.toml"); },
                     {"[optim]", "deck.toml"});
}

TEST(Config, WrongTypeNamesKey) {
  expect_usage_error([] { Config::parse(schema(), "[model]\nn_layer = \"four\"\n", "deck.toml"); },
                     {"model.n_layer", "integer", "string", "deck.toml"});
  expect_usage_error([] { Config::parse(schema(), "[model]\nn_layer = 4.5\n", "deck.toml"); },
                     {"model.n_layer", "integer"});
  expect_usage_error([] { Config::parse(schema(), "[model]\nn_layer = 4\n", "deck.toml", {"train.steps=abc"}); },
                     {"train.steps", "abc", "integer"});
  expect_usage_error([] { Config::parse(schema(), "[model]\nn_layer = 4\n", "deck.toml", {"train.flag=yes"}); },
                     {"train.flag", "bool"});
}

TEST(Config, OutOfRangeAndChoices) {
  expect_usage_error([] { Config::parse(schema(), "[model]\nn_layer = 0\n", "deck.toml"); }, {"model.n_layer", ">= 1"});
  expect_usage_error([] { Config::parse(schema(), "[model]\nn_layer = 4\n", "d", {"model.n_layer=65"}); },
                     {"model.n_layer", "<= 64"});
  expect_usage_error([] { Config::parse(schema(), "[model]\nn_layer = 4\n", "d", {"train.device=tpu"}); },
                     {"train.device", "tpu", "cpu, cuda, auto"});
}

TEST(Config, MissingSectionAndKey) {
  expect_usage_error([] { Config::parse(schema(), "[train]\nsteps = 3\n", "deck.toml"); }, {"[model]", "deck.toml"});
  expect_usage_error([] { Config::parse(schema(), "[model]\ninit_std = 0.1\n", "deck.toml"); },
                     {"model.n_layer", "missing"});
}

TEST(Config, SyntaxErrorAndMissingFile) {
  expect_usage_error([] { Config::parse(schema(), "[model\nn_layer = 4\n", "deck.toml"); }, {"deck.toml", "line 1"});
  expect_usage_error([] { Config::load(schema(), "/nonexistent/deck.toml"); }, {"/nonexistent/deck.toml", "not found"});
}

TEST(Config, EffectiveTomlRoundTrips) {
  const Config a = Config::parse(schema(), "[model]\nn_layer = 7\n", "d", {"model.init_std=0.125"});
  const Config b = Config::parse(schema(), a.effective_toml(), "effective");
  EXPECT_EQ(b.get_int("model.n_layer"), 7);
  EXPECT_DOUBLE_EQ(b.get_float("model.init_std"), 0.125);
  EXPECT_EQ(b.get_string("train.device"), "cpu");
}

TEST(Config, HelpListsEveryKey) {
  const std::string h = schema().help_text();
  for (const auto& k : schema().keys()) EXPECT_NE(h.find(k.name), std::string::npos) << k.name;
  EXPECT_NE(h.find("(required)"), std::string::npos);
}

namespace {

const ConfigSchema& list_schema() {
  static const ConfigSchema s = [] {
    ConfigSchema s;
    s.section("data", false, "data");
    s.string_list_key("data.train", std::vector<std::string>{"a.bin"}, "shards");
    s.float_list_key("data.mean", std::vector<double>{0.5}, "means", 0.0, 1.0);
    return s;
  }();
  return s;
}

}  // namespace

// Lists: a TOML array, one compact comma-separated string (also the --set form), or one scalar; every item validated;
// the effective deck writes arrays that read back as the same values.
TEST(Config, ListKeysFromArraysStringsAndSet) {
  using V = std::vector<std::string>;
  using D = std::vector<double>;
  const Config def = Config::parse(list_schema(), "", "d");
  EXPECT_EQ(def.get_string_list("data.train"), V{"a.bin"});
  const Config arr = Config::parse(list_schema(), "[data]\ntrain = [\"x.bin\", \"y.bin\"]\nmean = [0.25, 1]\n", "d");
  EXPECT_EQ(arr.get_string_list("data.train"), (V{"x.bin", "y.bin"}));
  EXPECT_EQ(arr.get_float_list("data.mean"), (D{0.25, 1.0}));
  const Config compact = Config::parse(list_schema(),
                                       "[data]\ntrain = \"p.bin, q.bin\"\nmean = \"0.485,0.456,0.406\"\n", "d");
  EXPECT_EQ(compact.get_string_list("data.train"), (V{"p.bin", "q.bin"}));
  EXPECT_EQ(compact.get_float_list("data.mean"), (D{0.485, 0.456, 0.406}));
  EXPECT_EQ(Config::parse(list_schema(), "[data]\nmean = 0.75\n", "d").get_float_list("data.mean"), D{0.75});
  const Config set = Config::parse(list_schema(), "", "d",
                                   {"data.train=shard_*.bin,extra.bin", "data.mean=[0.1, 0.2]"});
  EXPECT_EQ(set.get_string_list("data.train"), (V{"shard_*.bin", "extra.bin"}));
  EXPECT_EQ(set.get_float_list("data.mean"), (D{0.1, 0.2}));
  EXPECT_TRUE(Config::parse(list_schema(), "", "d", {"data.train="}).get_string_list("data.train").empty());
  const Config back = Config::parse(list_schema(), set.effective_toml(), "effective");
  EXPECT_EQ(back.get_string_list("data.train"), set.get_string_list("data.train"));
  EXPECT_EQ(back.get_float_list("data.mean"), set.get_float_list("data.mean"));
  expect_usage_error([] { Config::parse(list_schema(), "", "d", {"data.mean=0.1,x"}); },
                     {"data.mean = \"0.1,x\"", "\"x\" is not a number"});
  expect_usage_error([] { Config::parse(list_schema(), "", "d", {"data.mean=0.1,2"}); },
                     {"data.mean = 2.0 is out of range"});
  expect_usage_error([] { Config::parse(list_schema(), "[data]\ntrain = [1, 2]\n", "d"); },
                     {"data.train must be of type list of strings, got a TOML array"});
  EXPECT_NE(list_schema().help_text().find("list of floats"), std::string::npos);
}
