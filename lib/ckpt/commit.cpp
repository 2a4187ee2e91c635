// The atomic commit of a checkpoint directory and the `latest` pointer (checkpoint.hpp, docs/contracts.md).
// Crash at any point:
//   before the rename        .tmp_step_N is incomplete or unreferenced; `latest` names the previous step
//                            (the next commit removes the stale .tmp_step_N)
//   after the rename         step_N is complete but `latest` still names the previous one (the next commit
//                            of step N replaces the orphan; older steps are pruned normally)
//   while replacing latest   `latest` is either the old or the new name (rename(2) is atomic)
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <utility>

#include "ckpt/checkpoint.hpp"
#include "ckpt/ckpt_internal.hpp"
#include "core/log.hpp"
#include "core/timer.hpp"

namespace hpct::ckpt {

using namespace detail;
namespace fs = std::filesystem;

namespace {

// "step_00000040" -> 40; -1 for other names.
int64_t parse_step_dir(const std::string& name, const char* prefix) {
  static const std::regex digits("[0-9]{8,}");
  const size_t n = std::strlen(prefix);
  if (name.compare(0, n, prefix) != 0) return -1;
  const std::string rest = name.substr(n);
  if (!std::regex_match(rest, digits)) return -1;
  return std::stoll(rest);
}

// Reads root/latest: the step directory name it holds (trimmed), or "" when the file does not exist.
std::string read_latest_name(const std::string& root) {
  const fs::path p = fs::path(root) / "latest";
  std::error_code ec;
  if (!fs::exists(p, ec)) return "";
  std::ifstream in(p);
  HPCT_USAGE_CHECK(in.good(), "cannot read {}: {}", p.string(), std::strerror(errno));
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  return s;
}

void write_file_durably(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  HPCT_CHECK(fd >= 0, "cannot create {}: {}", path, std::strerror(errno));
  const char* p = text.data();
  size_t left = text.size();
  while (left > 0) {
    const ssize_t w = ::write(fd, p, left);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      const int err = errno;
      ::close(fd);
      HPCT_FAIL("cannot write {}: {}", path, std::strerror(err));
    }
    p += w;
    left -= static_cast<size_t>(w);
  }
  const bool synced = ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  HPCT_CHECK(synced, "fsync of {} failed: {}", path, std::strerror(err));
}

void remove_tree(const fs::path& p) {
  std::error_code ec;
  fs::remove_all(p, ec);
  HPCT_CHECK(!ec, "cannot remove {}: {}", p.string(), ec.message());
}

}  // namespace

BackgroundRemover::~BackgroundRemover() { wait(); }

void BackgroundRemover::remove(std::vector<std::string> dirs) {
  wait();
  if (dirs.empty()) return;
  thread_ = std::thread([this, dirs = std::move(dirs)] {
    for (const std::string& d : dirs) {
      std::error_code ec;
      fs::remove_all(d, ec);
      if (ec && error_.empty()) error_ = fmt::format("cannot remove {}: {}", d, ec.message());
    }
  });
}

std::string BackgroundRemover::wait() {
  if (thread_.joinable()) thread_.join();
  return std::exchange(error_, std::string());
}

void BackgroundRemover::wait_and_warn() {
  if (const std::string failed = wait(); !failed.empty()) log_warn("checkpoint prune: {} (remove it by hand)", failed);
}

std::string commit(const std::string& root, int64_t step, int keep, SavePhases* phases, BackgroundRemover* remover) {
  Timer timer;
  // the previous prune is finished before this one lists the directories (it may still hold a .trash_* listed below)
  if (remover != nullptr) remover->wait_and_warn();
  const fs::path tmp = fs::path(root) / tmp_step_dir_name(step);
  const fs::path final_dir = fs::path(root) / step_dir_name(step);
  HPCT_CHECK(fs::is_directory(tmp),
             "cannot commit checkpoint step {}: {} does not exist (write_shard and "
             "write_index write into it first)",
             step, tmp.string());
  HPCT_CHECK(fs::exists(tmp / "index.h5"),
             "cannot commit checkpoint step {}: {} has no index.h5 (write_index "
             "has not run)",
             step, tmp.string());

  const std::string latest_before = read_latest_name(root);
  if (fs::exists(final_dir) && latest_before == step_dir_name(step)) {
    // Already committed and current (same step, same content): keep it, so `latest` never dangles.
    remove_tree(tmp);
  } else {
    if (fs::exists(final_dir)) remove_tree(final_dir);  // orphan of an interrupted commit or an abandoned timeline
    std::error_code ec;
    fs::rename(tmp, final_dir, ec);
    HPCT_CHECK(!ec, "cannot rename {} to {}: {}", tmp.string(), final_dir.string(), ec.message());
    fsync_dir(root);
    pause_if_requested("renamed");

    const std::string latest = (fs::path(root) / "latest").string();
    const std::string latest_tmp = latest + ".tmp";
    write_file_durably(latest_tmp, step_dir_name(step) + "\n");
    if (std::rename(latest_tmp.c_str(), latest.c_str()) != 0)
      HPCT_FAIL("cannot rename {} to {}: {}", latest_tmp, latest, std::strerror(errno));
    fsync_dir(root);
  }

  const double committed_s = timer.seconds();

  // Prune: keep the `keep` highest-numbered step_* (always the one just committed); drop stale .tmp_step_* and the
  // .trash_step_* of an interrupted background removal.
  std::vector<std::pair<int64_t, fs::path>> steps;
  std::vector<std::string> trash;
  for (const auto& entry : fs::directory_iterator(root)) {
    if (!entry.is_directory()) continue;
    const std::string name = entry.path().filename().string();
    if (parse_step_dir(name, ".tmp_step_") >= 0) {
      remove_tree(entry.path());
      continue;
    }
    if (parse_step_dir(name, ".trash_step_") >= 0) {
      trash.push_back(entry.path().string());
      continue;
    }
    const int64_t s = parse_step_dir(name, "step_");
    if (s >= 0 && s != step) steps.emplace_back(s, entry.path());
  }
  if (keep > 0) {
    std::sort(steps.begin(), steps.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    // The committed step takes one of the `keep` places.
    for (size_t i = static_cast<size_t>(keep - 1); i < steps.size(); ++i) {
      fs::path victim = steps[i].second;
      if (remover != nullptr) {  // out of the checkpoint namespace now, removed on the remover's thread
        const fs::path to = fs::path(root) / (".trash_" + victim.filename().string());
        std::error_code ec;
        fs::rename(victim, to, ec);
        HPCT_CHECK(!ec, "cannot rename {} to {} (to remove it): {}", victim.string(), to.string(), ec.message());
        victim = to;
      }
      trash.push_back(victim.string());
    }
  }
  if (remover != nullptr) {
    remover->remove(std::move(trash));
  } else {
    for (const std::string& t : trash) remove_tree(t);
  }
  if (phases != nullptr) {
    phases->commit_s += committed_s;
    phases->prune_s += timer.seconds() - committed_s;
  }
  return final_dir.string();
}

std::string resolve_latest(const std::string& root) {
  const std::string name = read_latest_name(root);
  if (name.empty()) {
    std::error_code ec;
    HPCT_USAGE_CHECK(!fs::exists(fs::path(root) / "latest", ec),
                     "{}/latest is empty; it should name a step_* "
                     "directory (delete it to start fresh)",
                     root);
    return "";
  }
  HPCT_USAGE_CHECK(parse_step_dir(name, "step_") >= 0, "{}/latest holds '{}', not a step_%08d directory name", root,
                   name);
  const fs::path dir = fs::path(root) / name;
  HPCT_USAGE_CHECK(fs::is_directory(dir),
                   "{}/latest names {}, which does not exist: the checkpoint directory was "
                   "removed or moved; point checkpoint.resume at an existing step_* directory",
                   root, dir.string());
  return dir.string();
}

std::string find_step_dir(const std::string& path) {
  const fs::path p(path);
  HPCT_USAGE_CHECK(fs::exists(p), "checkpoint path {} does not exist", path);
  if (fs::exists(p / "index.h5")) return path;
  for (const fs::path& root : {p, p / "checkpoints"}) {
    if (fs::exists(root / "latest")) return resolve_latest(root.string());
  }
  HPCT_USAGE_FAIL("{} is not a checkpoint: it has no index.h5 (a step_* directory), no latest file (a checkpoints "
                  "directory) and no checkpoints/latest (a run directory)",
                  path);
}

}  // namespace hpct::ckpt
