#pragma once
// Resuming a run (docs/contracts.md, "Checkpoints"): checkpoint.resume resolved, the checkpoint verified over the
// ranks, its deck checked against this run's on the keys that must not change, and opened; or a fresh start that
// moves an earlier run's checkpoints aside.
#include <cstdint>
#include <memory>
#include <string>

#include <vector>

#include "ckpt/checkpoint.hpp"
#include "comm/communicator.hpp"
#include "data/token_dataset.hpp"
#include "core/config.hpp"
#include "parallel/parallel_context.hpp"

namespace hpct::train {

// Resolves checkpoint.resume: "none" -> "", "latest" -> the newest complete checkpoint under root or ""
// (no checkpoint yet), anything else -> that path (an error if it is not a checkpoint directory).
std::string resolve_resume(const std::string& resume, const std::string& root, const std::string& deck_path);

// Verifies every shard of dir (split over the ranks of comm) and turns any problem into a UsageError
// raised on every rank with the failing rank's message (so rank 0 prints it). Returns bytes checked.
int64_t verify_collective(comm::Communicator& world, const std::string& dir);

// Checks that the checkpoint's deck agrees with this run on the keys that must not change across a
// restart (model.*, optim.*, train.seed, train.global_batch); UsageError naming the first difference.
void check_resume_compatible(const Config& deck, const ConfigSchema& schema, const ckpt::Reader& reader);

// A token dataset's shard list as the checkpoint attribute data.train.shards / data.val.shards records it: a JSON
// array of {"file": name, "path": resolved path, "tokens": count}, in the dataset's order.
std::string shard_list_json(const std::vector<data::TokenShardInfo>& shards);
std::vector<data::TokenShardInfo> parse_shard_list_json(const std::string& json, const std::string& where);

// A token dataset on resume (the GPT's; docs/contracts.md "Checkpoints"): data.train's shard list (file name and token count of each
// shard, in order; the paths may differ, so a dataset can move) and data.order must match the checkpoint's, else a
// UsageError naming the first differing shard (or the count) that says --set data.allow_changed=true accepts it;
// with allow_changed a mismatch is a warning (the batch sequence changes). A changed data.val only logs a line (it
// changes the reported val_loss, not the training). A checkpoint without the shard lists (written before multi-shard
// datasets) is accepted with a log line; without data.order, its order was random (the only one then).
void check_token_data_resume(const ckpt::Attrs& attrs, const std::string& ckpt_dir, const std::string& deck_path,
                             const std::string& order, const std::vector<data::TokenShardInfo>& train,
                             const std::vector<data::TokenShardInfo>& val, bool allow_changed);

// checkpoint.resume, collective over pc.world(): "latest" / a path -> the checkpoint is verified (every shard, split
// over the ranks), its deck checked against this one on the keys that must not change, and opened; "none" or no
// checkpoint yet -> a fresh start, and an earlier run's checkpoints under ckpt_root are moved aside to
// <ckpt_root>.prev-<UTC time> (never mixed, never deleted). `reader` is null for a fresh start.
struct ResumePoint {
  std::unique_ptr<ckpt::Reader> reader;
  std::string dir;
  int64_t step = 0;  // optimizer steps the checkpoint completed
  int64_t checked_bytes = 0;
  double seconds = 0.0;
};
ResumePoint open_resume(parallel::ParallelContext& pc, const Config& deck, const ConfigSchema& schema,
                        const std::string& resume, const std::string& ckpt_root, int64_t steps);

}  // namespace hpct::train
