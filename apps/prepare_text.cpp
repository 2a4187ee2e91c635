// prepare_text: plain text -> byte-level token shards in the llm.c / nanoGPT format (docs/contracts.md).
//
//   prepare_text INPUT.txt --out-dir DIR --name NAME [--val-fraction 0.1] [--shard-tokens N]
//
// writes DIR/NAME_train.bin (the first 1 - f of the bytes) and DIR/NAME_val.bin (the last f), vocabulary
// 256 (token = byte value). --shard-tokens N splits the training part into shards of N tokens (the last one
// shorter) named as llm.c names its shards, DIR/NAME_train_000000.bin, DIR/NAME_train_000001.bin, ...
// (a deck reads them with a glob: data.train = "NAME_train_*.bin"). scripts/prepare_data.sh calls it for the decks' data; use it directly for
// your own corpus. Errors: one line on stderr, exit code 1.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>

#include "core/error.hpp"
#include "data/text_prepare.hpp"

int main(int argc, char** argv) {
  CLI::App app{"Turn a plain text file into byte-level token shards (vocab 256): DIR/NAME_train.bin and "
               "DIR/NAME_val.bin, validation = the last val-fraction of the text.",
               "prepare_text"};
  std::string input, out_dir, name;
  double val_fraction = 0.1;
  int64_t shard_tokens = 0;
  app.add_option("input", input, "Plain text file to tokenize")->required();
  app.add_option("--out-dir", out_dir, "Directory for the shards (created if missing)")->required();
  app.add_option("--name", name, "Dataset name: writes NAME_train.bin and NAME_val.bin")->required();
  app.add_option("--val-fraction", val_fraction, "Fraction of the text, taken from its end, used for validation")
      ->capture_default_str();
  app.add_option("--shard-tokens", shard_tokens,
                 "Split the training part into shards of this many tokens, NAME_train_000000.bin, ... (0: one file)")
      ->capture_default_str();

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    fmt::print(stderr, "prepare_text: error: {} (see prepare_text --help)\n", e.what());
    return 1;
  }

  try {
    const auto out = hpct::data::prepare_text_shards(input, out_dir, name, val_fraction, shard_tokens);
    const std::string train = out.train_paths.size() == 1
                                  ? out.train_path
                                  : fmt::format("{} shards {} .. {}", out.train_paths.size(), out.train_paths.front(),
                                                out.train_paths.back());
    fmt::print("prepare_text: {} -> {} ({} tokens), {} ({} tokens); vocab 256 (bytes), validation = last {}\n", input,
               train, out.train_tokens, out.val_path, out.val_tokens, val_fraction);
  } catch (const hpct::UsageError& e) {
    fmt::print(stderr, "prepare_text: error: {}\n", e.cause());
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "prepare_text: error: {}\n", e.what());
    return 1;
  }
  return 0;
}
