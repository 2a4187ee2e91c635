#include "train/resume.hpp"

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <fmt/ranges.h>

#include "ckpt/checkpoint.hpp"
#include "core/error.hpp"
#include "core/format.hpp"
#include "core/log.hpp"
#include "core/timer.hpp"
#include "train/checkpointing.hpp"
#include "train/run_support.hpp"

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
                     "cannot resume: {} (found by rank {}); resume from an earlier checkpoint with "
                     "--set checkpoint.resume=<dir>/checkpoints/step_XXXXXXXX",
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
    if ((k.name.rfind("model.", 0) == 0 || k.name.rfind("optim.", 0) == 0) && k.name != "model.init_from")
      keys.push_back(k.name);  // model.init_from: the weights a fresh start took; a resumed run takes its checkpoint's
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
                     "train.global_batch must match to resume (steps, log, checkpoint and parallel keys may change); "
                     "restore the value or start fresh with --set checkpoint.resume=none and another --out",
                     deck.deck_path(), key, b, reader.dir(), key, a);
  }
}

}  // namespace hpct::train
