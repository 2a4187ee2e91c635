// bench_token_loader: sampled tokens/s per rank of the GPT's token loader (data::TokenBatchSampler::fill, one thread:
// window lookup, vocabulary check, copy to int32) over a multi-GB set of generated llm.c shards, in random and epoch
// order, cold (the shards' pages dropped from the page cache first) and warm (the same windows again), against what
// the trainer consumes per rank (train_gpt's PERFORMANCE line on inputs/bench_gpt.toml, and the recorded H100 figure
// of GPT-2 124M).
//
//   bench_token_loader [--dir /tmp/hpct_bench_shards] [--shards 8] [--shard-tokens 268435456] [--keep]
//                      [--train-gpt build/apps/train_gpt --deck inputs/bench_gpt.toml]
//
// Writes --shards shards of --shard-tokens random tokens (GPT-2's vocabulary, 50257; the last shard a quarter of that,
// as FineWeb's last shard is short) into --dir (7 x 256M + 64M tokens = 3.6 GiB by default), removed at the end unless
// --keep. Cold: the shards' clean pages are dropped (posix_fadvise DONTNEED; they are fsynced when written) and mapped
// afresh before each measurement, so the windows fault in from the disk (the virtual disk's host may still cache). Results: validation/results/token_loader_cpu.md.
#include <fcntl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "data/token_dataset.hpp"
#include "data/token_sampler.hpp"
#include "data/token_shard.hpp"

namespace fs = std::filesystem;
using namespace hpct;

namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Drops a file's clean pages from the page cache (the shards are fsynced when written), so the next reads fault them
// in from the disk: "cold-ish" (the device's own cache and the hypervisor's may still hold them).
void drop_cache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

struct Rate {
  double tokens_per_s = 0, seconds = 0;
};

// fill() of micro-batches of B sequences for steps 1..steps (samples [0, B) of each step, as DP rank 0's first
// micro-batch), at least min_seconds.
Rate time_fill(const data::TokenBatchSampler& s, int B, int64_t steps) {
  const int T = s.seq_len();
  std::vector<int32_t> inp(static_cast<size_t>(B) * T), tgt(inp.size());
  const double t0 = now_s();
  for (int64_t step = 1; step <= steps; ++step) s.fill(step, 0, B, inp.data(), tgt.data());
  const double dt = now_s() - t0;
  return {static_cast<double>(steps) * B * T / dt, dt};
}

// train_gpt's "PERFORMANCE ranks ... | ms/step tokens/s tokens/s/rank MFU | ..." value line -> tokens/s/rank.
double trainer_tokens_per_rank(const std::string& exe, const std::string& deck) {
  const std::string out = (fs::temp_directory_path() / "hpct_bench_token_loader_run").string();
  const std::string cmd = fmt::format(
      "OMP_NUM_THREADS=${{OMP_NUM_THREADS:-2}} {} {} --out {} --set train.steps=8 --set sample.tokens=0 --set "
      "checkpoint.at_end=false 2>&1",
      exe, deck, out);
  fmt::print("trainer: {}\n", cmd);
  FILE* p = ::popen(cmd.c_str(), "r");
  HPCT_USAGE_CHECK(p != nullptr, "cannot run {}", exe);
  char line[4096];
  double rate = 0;
  while (std::fgets(line, sizeof line, p)) {
    const std::string l(line);
    const size_t at = l.find("PERFORMANCE ");
    if (at == std::string::npos || l.find("ms/step") != std::string::npos) continue;
    fmt::print("trainer: {}", l.substr(at));
    const size_t bar = l.find('|', at);
    double ms = 0, tok = 0, tok_rank = 0;
    if (bar != std::string::npos && std::sscanf(l.c_str() + bar + 1, "%lf %lf %lf", &ms, &tok, &tok_rank) == 3)
      rate = tok_rank;
  }
  ::pclose(p);
  fs::remove_all(out);
  return rate;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Token loader throughput (tokens/s per rank) vs the trainer's consumption", "bench_token_loader"};
  std::string dir = (fs::temp_directory_path() / "hpct_bench_shards").string(), train_gpt,
              deck = "inputs/bench_gpt.toml";
  int num_shards = 8;
  int64_t shard_tokens = int64_t{1} << 28;
  bool keep = false;
  app.add_option("--dir", dir, "directory for the generated shards")->capture_default_str();
  app.add_option("--shards", num_shards, "number of shards")->capture_default_str();
  app.add_option("--shard-tokens", shard_tokens, "tokens per shard (the last one gets 1/4 of it: a short tail)")
      ->capture_default_str();
  app.add_flag("--keep", keep, "keep the shards (default: removed at the end)");
  app.add_option("--train-gpt", train_gpt, "train_gpt to measure the trainer's consumption with (empty: skip)");
  app.add_option("--deck", deck, "the deck train_gpt runs for 8 steps")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  try {
    fs::create_directories(dir);
    std::vector<std::string> paths;
    {
      std::vector<uint16_t> buf(static_cast<size_t>(shard_tokens));
      uint64_t x = 0x9E3779B97F4A7C15ull;
      const double t0 = now_s();
      int64_t bytes = 0;
      for (int k = 0; k < num_shards; ++k) {
        const int64_t n = k + 1 < num_shards ? shard_tokens : shard_tokens / 4;  // a FineWeb-like short last shard
        for (int64_t i = 0; i < n; ++i) {  // xorshift64: cheap random token ids below GPT-2's vocabulary
          x ^= x << 13, x ^= x >> 7, x ^= x << 17;
          buf[i] = static_cast<uint16_t>((x >> 32) % 50257);
        }
        paths.push_back((fs::path(dir) / fmt::format("bench_train_{:06d}.bin", k)).string());
        data::write_token_shard(paths.back(), buf.data(), n);
        bytes += data::kTokenShardHeaderBytes + 2 * n;
      }
      const double dt = now_s() - t0;
      fmt::print("wrote {} shards, {:.2f} GiB, in {:.1f} s ({:.2f} GB/s incl. generation and fsync) to {}\n",
                 num_shards, bytes / 1073741824.0, dt, bytes / dt / 1e9, dir);
    }
    {
      const double t_open = now_s();
      const data::TokenDataset ds = data::TokenDataset::open(paths, "data.train");
      fmt::print("opened {} in {:.3f} ms (headers and sizes only)\n", ds.describe(), (now_s() - t_open) * 1e3);
    }

    const double trainer = train_gpt.empty() ? 0.0 : trainer_tokens_per_rank(train_gpt, deck);
    // (T, B, label, trainer tokens/s/rank, where that figure comes from)
    struct Shape {
      int T, B;
      const char* label;
      double trainer;
      std::string source;
    };
    const std::vector<Shape> shapes = {
        {256, 8, "bench_gpt (T 256, micro-batch 8)", trainer, trainer > 0 ? "train_gpt bench_gpt.toml, this CPU" : "-"},
        {1024, 16, "gpt2_124m (T 1024, micro-batch 16)", 313380.0,
         "GPT-2 124M bf16 on one H100 (results/gpu_nvidia_h100_80gb_hbm3_2026-11-26.md)"},
    };
    fmt::print("\n| shape | order | cold tokens/s | warm tokens/s | trainer tokens/s/rank | cold / trainer | warm / "
               "trainer | trainer figure |\n|---|---|---:|---:|---:|---:|---:|---|\n");
    for (const Shape& sh : shapes)
      for (data::TokenOrder order : {data::TokenOrder::Random, data::TokenOrder::Epoch}) {
        // pages still mapped cannot be dropped: every measurement maps the shards afresh after dropping them
        for (const auto& p : paths) drop_cache(p);
        const data::TokenDataset ds = data::TokenDataset::open(paths, "data.train");
        const data::TokenBatchSampler s(ds, sh.T, 1337, 50257, order, 512);
        // as many steps as ~64 MiB of windows: enough to average over disk latency, short on a cold disk
        const int64_t steps = std::max<int64_t>(64, (int64_t{32} << 20) / (int64_t{sh.B} * sh.T));
        const Rate cold = time_fill(s, sh.B, steps);
        const Rate warm = time_fill(s, sh.B, steps);
        auto ratio = [&](double r) { return sh.trainer > 0 ? fmt::format("{:.0f}x", r / sh.trainer) : "-"; };
        fmt::print("| {} | {} | {:.3g} | {:.3g} | {} | {} | {} | {} |\n", sh.label, data::token_order_name(order),
                   cold.tokens_per_s, warm.tokens_per_s, sh.trainer > 0 ? fmt::format("{:.0f}", sh.trainer) : "-",
                   ratio(cold.tokens_per_s), ratio(warm.tokens_per_s), sh.source);
        std::fflush(stdout);
      }
    if (!keep) {
      for (const auto& p : paths) fs::remove(p);
      std::error_code ec;
      fs::remove(dir, ec);  // only if empty
      fmt::print("\nremoved the shards (--keep keeps them)\n");
    }
  } catch (const Error& e) {
    fmt::print(stderr, "bench_token_loader: error: {}\n", e.cause());
    return 1;
  }
  return 0;
}
