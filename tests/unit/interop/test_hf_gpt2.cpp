// Hugging Face GPT-2 mapping (lib/interop/hf_gpt2.hpp) without Python: a GPT checkpoint written by lib/ckpt is
// exported, then read back through HfGpt2Source: every tensor equals the checkpoint's bit for bit, whole and as
// TP-like hyperslabs; HF's layouts are checked element by element (Conv1D transposes, the fused QKV's columns, wte cut
// to V rows); a bias-free model exports zero biases and imports back; config.json mismatches give their exact message.
// transformers' side of the same files: tests/interop/check_hf_gpt2.py.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include <nlohmann/json.hpp>

#include "ckpt/checkpoint.hpp"
#include "ckpt/safetensors.hpp"
#include "core/error.hpp"
#include "interop/hf_gpt2.hpp"
#include "models/gpt/gpt.hpp"

namespace hpct::interop {
namespace {

namespace fs = std::filesystem;

gpt::GptConfig tiny(bool bias) {
  gpt::GptConfig c;
  c.n_layer = 2, c.n_head = 2, c.n_embd = 8, c.seq_len = 4, c.vocab_size = 200, c.padded_vocab = 256;
  c.bias = bias;
  return c;
}

int64_t numel(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

// A one-rank checkpoint of cfg with random tensors (wte's padding rows zero) under dir; returns the tensors.
std::map<std::string, std::vector<float>> write_checkpoint(const fs::path& dir, const gpt::GptConfig& c) {
  std::mt19937 gen(11);
  std::normal_distribution<float> nd;
  std::map<std::string, std::vector<float>> t;
  std::vector<ckpt::Piece> pieces;
  const auto layout = gpt::parameter_layout(c);
  for (const gpt::ParamSpec& p : layout) {
    auto& v = t[p.name];
    v.resize(static_cast<size_t>(numel(p.shape)));
    for (float& x : v) x = nd(gen);
    if (p.name == "wte") std::fill(v.begin() + static_cast<int64_t>(c.vocab_size) * c.n_embd, v.end(), 0.0f);
  }
  for (const gpt::ParamSpec& p : layout) {
    ckpt::Piece pc;
    pc.dataset = "model/" + p.name;
    pc.global_shape = p.shape;
    pc.offset.assign(p.shape.size(), 0);
    pc.count = p.shape;
    pc.data = t[p.name].data();
    pieces.push_back(pc);
  }
  fs::remove_all(dir);
  const ckpt::ShardManifest m = ckpt::write_shard(dir.string(), 0, pieces);
  ckpt::Attrs a;
  a.ints["step"] = 3;
  a.ints["model.vocab_size"] = c.vocab_size;
  a.ints["model.padded_vocab"] = c.padded_vocab;
  a.strings["app"] = "train_gpt";
  ckpt::write_index(dir.string(), {m}, a);
  return t;
}

fs::path temp_dir(const std::string& what) {
  return fs::temp_directory_path() / ("hpct_interop_" + what + "_" + std::to_string(::getpid()));
}

TEST(HfGpt2, ExportThenImportIsBitwiseAndLayoutsAreGpt2s) {
  for (bool bias : {true, false}) {
    const gpt::GptConfig c = tiny(bias);
    const fs::path ck = temp_dir("ck"), out = temp_dir("hf");
    const auto t = write_checkpoint(ck, c);
    const ckpt::Reader reader(ck.string());
    const gpt::GptConfig derived = gpt_config_of_checkpoint(reader, "test");
    EXPECT_EQ(derived.n_layer, 2);
    EXPECT_EQ(derived.n_head, 2);
    EXPECT_EQ(derived.vocab_size, 200);
    EXPECT_EQ(derived.bias, bias);
    const HfExportResult r = export_hf_gpt2(reader, out.string(), DType::F32);
    EXPECT_EQ(r.tensors, 2 + 12 * 2 + 2);  // wte, wpe, 12 per block, ln_f: biases always (zero when bias-free)

    // HF's layouts, element by element
    const auto f = ckpt::SafetensorsFile::open((out / "model.safetensors").string());
    EXPECT_EQ(f.metadata().at("format"), "pt");
    const int64_t C = 8, V = 200;
    EXPECT_EQ(f.info("transformer.wte.weight").shape, (std::vector<int64_t>{V, C}));
    EXPECT_EQ(f.info("transformer.h.1.attn.c_attn.weight").shape, (std::vector<int64_t>{C, 3 * C}));
    EXPECT_EQ(f.info("transformer.h.1.mlp.c_proj.weight").shape, (std::vector<int64_t>{4 * C, C}));
    EXPECT_FALSE(f.has("lm_head.weight"));
    std::vector<float> qkv(static_cast<size_t>(3 * C * C));
    f.read_f32("transformer.h.1.attn.c_attn.weight", qkv.data());
    const auto& mine = t.at("h.1.attn.qkv.weight");  // (3, NH, HS, C) = (3C, C): row o = (s, h, d)
    for (int64_t i = 0; i < C; ++i)
      for (int64_t o = 0; o < 3 * C; ++o) ASSERT_EQ(qkv[i * 3 * C + o], mine[o * C + i]) << i << " " << o;
    std::vector<float> b(static_cast<size_t>(C));
    f.read_f32("transformer.h.0.ln_2.bias", b.data());
    for (int64_t i = 0; i < C; ++i) EXPECT_EQ(b[i], bias ? t.at("h.0.ln2.bias")[i] : 0.0f);
    const auto cfg = nlohmann::json::parse(std::ifstream(out / "config.json"));
    EXPECT_EQ(cfg["n_positions"], 4);
    EXPECT_EQ(cfg["vocab_size"], 200);
    EXPECT_EQ(cfg["activation_function"], "gelu_new");
    EXPECT_EQ(cfg["tie_word_embeddings"], true);

    // back through the import source: every tensor whole, and boxes as TP shards read them
    const HfGpt2Source src(out.string(), c);
    EXPECT_EQ(src.num_tensors(), static_cast<int64_t>(gpt::parameter_layout(c).size()));
    for (const gpt::ParamSpec& p : gpt::parameter_layout(c)) {
      ASSERT_TRUE(src.has(p.name)) << p.name;
      ASSERT_EQ(src.shape(p.name), p.shape);
      std::vector<float> whole(static_cast<size_t>(numel(p.shape)));
      src.read(p.name, std::vector<int64_t>(p.shape.size(), 0), p.shape, whole.data());
      EXPECT_EQ(whole, t.at(p.name)) << p.name;
    }
    // heads [1, 2) of the QKV weight: the hyperslab (3, 1, HS, C) at offset (0, 1, 0, 0)
    std::vector<float> box(static_cast<size_t>(3 * 4 * C));
    src.read("h.0.attn.qkv.weight", {0, 1, 0, 0}, {3, 1, 4, C}, box.data());
    const auto& q = t.at("h.0.attn.qkv.weight");
    for (int64_t s = 0; s < 3; ++s)
      for (int64_t d = 0; d < 4; ++d)
        for (int64_t i = 0; i < C; ++i) ASSERT_EQ(box[(s * 4 + d) * C + i], q[((s * 2 + 1) * 4 + d) * C + i]);
    fs::remove_all(ck);
    fs::remove_all(out);
  }
}

std::string usage_error(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const UsageError& e) {
    return e.cause();
  }
  return "(no UsageError)";
}

TEST(HfGpt2, ImportErrorsNameTheKeyBothValuesAndTheFix) {
  const gpt::GptConfig c = tiny(true);
  const fs::path ck = temp_dir("ck_err"), out = temp_dir("hf_err");
  write_checkpoint(ck, c);
  export_hf_gpt2(ckpt::Reader(ck.string()), out.string(), DType::F32);
  const std::string w = "model.init_from " + out.string() + ": ";
  gpt::GptConfig wide = c;
  wide.n_embd = 16;
  EXPECT_EQ(usage_error([&] { HfGpt2Source(out.string(), wide); }),
            w + "config.json has n_embd = 8 but the deck's model.n_embd = 16; set model.n_embd = 8");
  gpt::GptConfig longer = c;
  longer.seq_len = 8;
  EXPECT_EQ(usage_error([&] { HfGpt2Source(out.string(), longer); }),
            w + "config.json has n_positions = 4 but the deck's model.seq_len = 8 is longer (the model has no "
                "positions beyond 4); set model.seq_len <= 4");
  EXPECT_EQ(usage_error([&] { HfGpt2Source(out.string(), tiny(false)); })
                .rfind(w + "tensor transformer.h.0.ln_1.bias "
                           "is not zero",
                       0),
            0u);
  EXPECT_EQ(usage_error([&] { HfGpt2Source((out / "nope").string(), c); }),
            "model.init_from " + (out / "nope").string() +
                ": no such directory (a Hugging Face GPT-2 directory holds config.json and model.safetensors, as "
                "save_pretrained writes them)");
  fs::remove_all(ck);
  fs::remove_all(out);
}

}  // namespace
}  // namespace hpct::interop
