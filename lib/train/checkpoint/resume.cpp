#include "train/checkpoint/resume.hpp"

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "ckpt/checkpoint.hpp"
#include "core/error.hpp"
#include "core/format.hpp"
#include "core/log.hpp"
#include "core/timer.hpp"
#include "train/checkpoint/protocol.hpp"
#include "train/loop/run_environment.hpp"

namespace fs = std::filesystem;

namespace hpct::train {

ResumePoint open_resume(parallel::ParallelContext& pc, const Config& deck, const ConfigSchema& schema,
                        const std::string& resume, const std::string& ckpt_root, int64_t steps) {
  ResumePoint r;
  r.dir = resolve_resume(resume, ckpt_root, deck.deck_path());
  if (!r.dir.empty()) {
    Timer t;
    r.checked_bytes = verify_collective(pc.world(), r.dir);
    r.reader = std::make_unique<ckpt::Reader>(r.dir);
    check_resume_compatible(deck, schema, *r.reader);
    r.step = r.reader->attrs().ints.at("step");
    HPCT_USAGE_CHECK(r.step <= steps || steps == 0,
                     "checkpoint {} is at step {}, past train.steps = {}; raise train.steps to continue", r.dir, r.step,
                     steps);
    r.seconds = t.seconds();
    log_info("resuming from {} (step {}, written with {}): {} verified", r.dir, r.step,
             r.reader->attrs().strings.count("layout") ? r.reader->attrs().strings.at("layout") : "?",
             human_bytes(static_cast<double>(r.checked_bytes)));
  } else if (resume == "latest") {
    log_info("checkpoint.resume = latest: no checkpoint under {}, starting fresh", ckpt_root);
  }
  if (r.dir.empty() && pc.rank() == 0 && fs::exists(fs::path(ckpt_root) / "latest")) {
    // A fresh run never mixes its checkpoints with an earlier run's, and never deletes them: move them aside.
    const std::time_t now = std::time(nullptr);
    char stamp[32];
    std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", std::gmtime(&now));
    const std::string aside = ckpt_root + ".prev-" + stamp;
    std::error_code ec;
    fs::rename(ckpt_root, aside, ec);
    HPCT_USAGE_CHECK(!ec, "cannot move the earlier run's checkpoints {} aside to {}: {}", ckpt_root, aside,
                     ec.message());
    log_warn("starting fresh (checkpoint.resume = {}): the earlier run's checkpoints in {} were moved to {} (resume "
             "them with --set checkpoint.resume=latest next time)",
             resume, ckpt_root, aside);
  }
  pc.world().barrier("resume decided");
  return r;
}

std::string resolve_resume(const std::string& resume, const std::string& root, const std::string& deck_path) {
  if (resume == "none" || resume.empty()) return "";
  if (resume == "latest") return ckpt::resolve_latest(root);
  fs::path p(resume);
  if (fs::is_directory(p) && !fs::exists(p / "index.h5") && fs::exists(p / "latest")) {
    const std::string r = ckpt::resolve_latest(p.string());  // a checkpoints/ directory
    HPCT_USAGE_CHECK(!r.empty(), "checkpoint.resume = {}: no checkpoint in that directory", resume);
    return r;
  }
  if (fs::is_directory(p) && !fs::exists(p / "index.h5") && fs::exists(p / "checkpoints" / "latest"))
    return ckpt::resolve_latest((p / "checkpoints").string());  // a run directory
  HPCT_USAGE_CHECK(fs::exists(p / "index.h5"),
                   "deck {}: checkpoint.resume = {}: not a checkpoint (no {}); give a step_XXXXXXXX directory, "
                   "\"latest\" or \"none\"",
                   deck_path, resume, (p / "index.h5").string());
  return p.string();
}

int64_t verify_collective(comm::Communicator& world, const std::string& dir) {
  std::string err;
  int64_t bytes = 0;
  try {
    bytes = ckpt::verify(dir, world.rank(), world.size());
  } catch (const Error& e) {
    err = e.cause();
  }
  const std::vector<std::string> errs = allgather_strings(world, err, "checkpoint verification");
  for (size_t r = 0; r < errs.size(); ++r)
    HPCT_USAGE_CHECK(errs[r].empty(),
                     "cannot resume: {} (found by rank {}; an earlier one: --set "
                     "checkpoint.resume=<dir>/checkpoints/step_XXXXXXXX)",
                     errs[r], r);
  world.allreduce(&bytes, 1, DType::I64, comm::ReduceOp::Sum, "checkpoint verification (bytes)");
  return bytes;
}

void check_resume_compatible(const Config& deck, const ConfigSchema& schema, const ckpt::Reader& reader) {
  const auto it = reader.attrs().strings.find("deck");
  HPCT_USAGE_CHECK(it != reader.attrs().strings.end(), "checkpoint {} has no deck attribute", reader.dir());
  const Config old = Config::parse(schema, it->second, reader.dir() + "/index.h5:deck");
  std::vector<std::string> keys;
  for (const auto& k : schema.keys())
    if ((k.name.rfind("model.", 0) == 0 || k.name.rfind("optim.", 0) == 0) && k.name != "model.init_from" &&
        k.name != "model.memory_format")
      keys.push_back(k.name);  // model.init_from: the weights a fresh start took; a resumed run takes its checkpoint's.
                               // model.memory_format: where activations live, which no checkpoint holds
  keys.push_back("train.seed");
  keys.push_back("train.global_batch");
  for (const auto& key : keys) {
    const KeySpec* spec = schema.find(key);
    std::string a, b;
    switch (spec->type) {
      case ValueType::Int: a = std::to_string(old.get_int(key)), b = std::to_string(deck.get_int(key)); break;
      case ValueType::Float:
        a = fmt::format("{}", old.get_float(key)), b = fmt::format("{}", deck.get_float(key));
        break;
      case ValueType::Bool: a = old.get_bool(key) ? "true" : "false", b = deck.get_bool(key) ? "true" : "false"; break;
      case ValueType::String: a = old.get_string(key), b = deck.get_string(key); break;
      case ValueType::StringList:
        a = fmt::format("{}", fmt::join(old.get_string_list(key), ",")),
        b = fmt::format("{}", fmt::join(deck.get_string_list(key), ","));
        break;
      case ValueType::FloatList:
        a = fmt::format("{}", fmt::join(old.get_float_list(key), ",")),
        b = fmt::format("{}", fmt::join(deck.get_float_list(key), ","));
        break;
    }
    HPCT_USAGE_CHECK(a == b,
                     "deck {}: {} = {} but checkpoint {} was written with {} = {}; model, optim, train.seed and "
                     "train.global_batch must match to resume (steps, log, checkpoint, parallel keys and "
                     "model.memory_format may change); "
                     "restore the value or start fresh with --set checkpoint.resume=none and another --out",
                     deck.deck_path(), key, b, reader.dir(), key, a);
  }
}

std::string shard_list_json(const std::vector<data::TokenShardInfo>& shards) {
  nlohmann::json j = nlohmann::json::array();
  for (const data::TokenShardInfo& s : shards) j.push_back({{"file", s.name}, {"path", s.path}, {"tokens", s.tokens}});
  return j.dump();
}

std::vector<data::TokenShardInfo> parse_shard_list_json(const std::string& json, const std::string& where) {
  std::vector<data::TokenShardInfo> out;
  try {
    for (const auto& e : nlohmann::json::parse(json))
      out.push_back({e.at("file").get<std::string>(), e.at("path").get<std::string>(), e.at("tokens").get<int64_t>()});
  } catch (const nlohmann::json::exception& e) {
    HPCT_USAGE_FAIL("{} is not a shard list ({}); the checkpoint is damaged: resume from another one", where, e.what());
  }
  return out;
}

namespace {

std::string shard_text(const std::vector<data::TokenShardInfo>& v, size_t k) {
  if (k >= v.size()) return fmt::format("none (the list ends after {} shards)", v.size());
  return fmt::format("{} ({} tokens)", v[k].name, v[k].tokens);
}

// The first shard at which the (file name, token count) lists differ; nullopt when they are equal.
std::optional<size_t> first_difference(const std::vector<data::TokenShardInfo>& a,
                                       const std::vector<data::TokenShardInfo>& b) {
  for (size_t k = 0; k < std::max(a.size(), b.size()); ++k)
    if (k >= a.size() || k >= b.size() || a[k].name != b[k].name || a[k].tokens != b[k].tokens) return k;
  return std::nullopt;
}

}  // namespace

void check_token_data_resume(const ckpt::Attrs& attrs, const std::string& ckpt_dir, const std::string& deck_path,
                             const std::string& order, const std::vector<data::TokenShardInfo>& train,
                             const std::vector<data::TokenShardInfo>& val, bool allow_changed) {
  const std::string accept =
      "restore the deck's data, or accept the change (the batch sequence then differs from the interrupted run's) "
      "with --set data.allow_changed=true";
  // checkpoints written before data.order existed sampled in random order, the only one there was
  const auto order_attr = attrs.strings.find("data.order");
  const std::string old_order = order_attr != attrs.strings.end() ? order_attr->second : "random";
  if (old_order != order) {
    HPCT_USAGE_CHECK(allow_changed, "deck {}: data.order = {} but checkpoint {} was written with data.order = {}; {}",
                     deck_path, order, ckpt_dir, old_order, accept);
    log_warn("data.allow_changed = true: data.order = {} but checkpoint {} was written with data.order = {}; the "
             "batch sequence changes from here",
             order, ckpt_dir, old_order);
  }
  const auto old_train = attrs.strings.find("data.train.shards");
  if (old_train == attrs.strings.end()) {
    log_info("checkpoint {} records no data shard list (written before multi-shard datasets): data.train is not "
             "checked against it",
             ckpt_dir);
    return;
  }
  const std::vector<data::TokenShardInfo> old = parse_shard_list_json(old_train->second,
                                                                      ckpt_dir + ":data.train.shards");
  if (const auto k = first_difference(old, train)) {
    const std::string what = fmt::format(
        "data.train differs from checkpoint {} at shard {}: {} here, {} in the checkpoint ({} shards "
        "here, {} there)",
        ckpt_dir, *k, shard_text(train, *k), shard_text(old, *k), train.size(), old.size());
    HPCT_USAGE_CHECK(allow_changed, "deck {}: {}; {}", deck_path, what, accept);
    log_warn("data.allow_changed = true: {}; the batch sequence changes from here", what);
  }
  const auto old_val = attrs.strings.find("data.val.shards");
  if (old_val != attrs.strings.end()) {
    const std::vector<data::TokenShardInfo> ov = parse_shard_list_json(old_val->second, ckpt_dir + ":data.val.shards");
    if (const auto k = first_difference(ov, val))
      log_info("data.val differs from checkpoint {} at shard {}: {} here, {} in the checkpoint; val_loss is measured "
               "on the new set from here",
               ckpt_dir, *k, shard_text(val, *k), shard_text(ov, *k));
  }
}

}  // namespace hpct::train
