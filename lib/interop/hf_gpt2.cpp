#include "interop/hf_gpt2.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "tensor/bf16.hpp"

namespace hpct::interop {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr const char* kPrefix = "transformer.";
constexpr double kLayerNormEps = 1e-5;  // lib/kernels: every LayerNorm

int64_t numel(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + (s.size() == 1 ? ",)" : ")");
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_bias(const std::string& hpct_name) { return ends_with(hpct_name, ".bias"); }

// The matrix view of a transposed parameter: rows = all axes but the last, cols = the last ((3, NH, HS, C) -> (3C, C)).
std::pair<int64_t, int64_t> matrix_view(const std::vector<int64_t>& shape) {
  const int64_t cols = shape.back();
  return {numel(shape) / cols, cols};
}

// HF's shape of an hpctrain parameter of the model cfg (n_positions rows of wpe).
std::vector<int64_t> hf_shape(const std::string& name, const std::vector<int64_t>& shape, const gpt::GptConfig& cfg,
                              int n_positions) {
  if (name == "wte") return {cfg.vocab_size, cfg.n_embd};
  if (name == "wpe") return {n_positions, cfg.n_embd};
  if (hf_gpt2_name(name).transposed) {
    const auto [rows, cols] = matrix_view(shape);
    return {cols, rows};
  }
  return {numel(shape)};  // LayerNorms and biases: 1-D (the QKV bias (3, NH, HS) is HF's (3C))
}

// out (cols, rows) = transpose of in (rows, cols)
void transpose(const float* in, int64_t rows, int64_t cols, float* out) {
  constexpr int64_t kTile = 32;
  for (int64_t i0 = 0; i0 < rows; i0 += kTile)
    for (int64_t j0 = 0; j0 < cols; j0 += kTile)
      for (int64_t i = i0; i < std::min(rows, i0 + kTile); ++i)
        for (int64_t j = j0; j < std::min(cols, j0 + kTile); ++j) out[j * rows + i] = in[i * cols + j];
}

// Writes text to path atomically (path.tmp, fsync, rename); UsageError naming the file.
void write_text_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  HPCT_USAGE_CHECK(fd >= 0, "cannot create {}: {}; check that the directory is writable", tmp, std::strerror(errno));
  const ssize_t w = ::write(fd, text.data(), text.size());
  const bool ok = w == static_cast<ssize_t>(text.size()) && ::fsync(fd) == 0;
  const std::string why = std::strerror(errno);
  ::close(fd);
  if (!ok) ::unlink(tmp.c_str());
  HPCT_USAGE_CHECK(ok, "cannot write {}: {}; check free space and permissions", tmp, why);
  HPCT_USAGE_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "cannot rename {} to {}: {}", tmp, path,
                   std::strerror(errno));
}

// config.json against the deck (UsageErrors naming the key, both values and the fix); returns n_positions.
int check_config(const json& cfg, const gpt::GptConfig& deck, const std::string& w) {
  if (cfg.contains("model_type"))
    HPCT_USAGE_CHECK(cfg["model_type"] == "gpt2",
                     "{}: config.json has model_type = {} but model.init_from imports GPT-2 (model_type \"gpt2\")", w,
                     cfg["model_type"].dump());
  auto int_of = [&](const char* key) {
    HPCT_USAGE_CHECK(cfg.contains(key) && cfg[key].is_number_integer(), "{}: config.json has no integer {}", w, key);
    return cfg[key].get<int64_t>();
  };
  const std::pair<const char*, int> must_equal[] = {
      {"n_layer", deck.n_layer}, {"n_head", deck.n_head}, {"n_embd", deck.n_embd}, {"vocab_size", deck.vocab_size}};
  for (const auto& [key, mine] : must_equal) {
    const int64_t theirs = int_of(key);
    HPCT_USAGE_CHECK(theirs == mine, "{}: config.json has {} = {} but the deck's model.{} = {}; set model.{} = {}", w,
                     key, theirs, key, mine, key, theirs);
  }
  const int n_positions = static_cast<int>(int_of("n_positions"));
  HPCT_USAGE_CHECK(n_positions >= deck.seq_len,
                   "{}: config.json has n_positions = {} but the deck's model.seq_len = {} is longer (the model has "
                   "no positions beyond {}); set model.seq_len <= {}",
                   w, n_positions, deck.seq_len, n_positions, n_positions);
  const std::string act = cfg.value("activation_function", std::string("gelu_new"));
  HPCT_USAGE_CHECK(act == "gelu_new" || act == "gelu_pytorch_tanh" || act == "gelu_fast",
                   "{}: config.json has activation_function = \"{}\" but hpctrain's GPT computes the GELU's tanh "
                   "approximation (gelu_new, gelu_pytorch_tanh); this model cannot be imported exactly",
                   w, act);
  const double eps = cfg.value("layer_norm_epsilon", kLayerNormEps);
  HPCT_USAGE_CHECK(std::abs(eps - kLayerNormEps) <= 1e-12,
                   "{}: config.json has layer_norm_epsilon = {} but hpctrain's LayerNorm uses 1e-05; this model "
                   "cannot be imported exactly",
                   w, eps);
  if (cfg.contains("n_inner") && !cfg["n_inner"].is_null())
    HPCT_USAGE_CHECK(cfg["n_inner"] == 4 * deck.n_embd,
                     "{}: config.json has n_inner = {} but hpctrain's MLP width is 4 x n_embd = {}", w,
                     cfg["n_inner"].dump(), 4 * deck.n_embd);
  HPCT_USAGE_CHECK(cfg.value("scale_attn_weights", true) && !cfg.value("scale_attn_by_inverse_layer_idx", false) &&
                       !cfg.value("add_cross_attention", false),
                   "{}: config.json asks for scale_attn_weights = false, scale_attn_by_inverse_layer_idx = true or "
                   "add_cross_attention = true, which hpctrain's GPT does not compute",
                   w);
  return n_positions;
}

}  // namespace

HfName hf_gpt2_name(const std::string& n) {
  if (n == "wte") return {"wte.weight", false};
  if (n == "wpe") return {"wpe.weight", false};
  if (n == "lnf.weight") return {"ln_f.weight", false};
  if (n == "lnf.bias") return {"ln_f.bias", false};
  HPCT_CHECK(n.rfind("h.", 0) == 0, "{} is not a GPT parameter name", n);
  const size_t dot = n.find('.', 2);
  const std::string block = n.substr(0, dot + 1), rest = n.substr(dot + 1);
  static const std::map<std::string, HfName> kBlock = {
      {"ln1.weight", {"ln_1.weight", false}},
      {"ln1.bias", {"ln_1.bias", false}},
      {"attn.qkv.weight", {"attn.c_attn.weight", true}},
      {"attn.qkv.bias", {"attn.c_attn.bias", false}},
      {"attn.proj.weight", {"attn.c_proj.weight", true}},
      {"attn.proj.bias", {"attn.c_proj.bias", false}},
      {"ln2.weight", {"ln_2.weight", false}},
      {"ln2.bias", {"ln_2.bias", false}},
      {"mlp.fc.weight", {"mlp.c_fc.weight", true}},
      {"mlp.fc.bias", {"mlp.c_fc.bias", false}},
      {"mlp.proj.weight", {"mlp.c_proj.weight", true}},
      {"mlp.proj.bias", {"mlp.c_proj.bias", false}},
  };
  const auto it = kBlock.find(rest);
  HPCT_CHECK(it != kBlock.end(), "{} is not a GPT parameter name", n);
  return {block + it->second.name, it->second.transposed};
}

// ---- export ----------------------------------------------------------------------------------------------------

gpt::GptConfig gpt_config_of_checkpoint(const ckpt::Reader& r, const std::string& what) {
  const auto& a = r.attrs();
  const std::string app = a.strings.count("app") ? a.strings.at("app") : std::string("an unknown app");
  HPCT_USAGE_CHECK(r.has("model/wte") && r.has("model/wpe") && r.has("model/h.0.attn.qkv.weight"),
                   "{}: checkpoint {} is not a GPT checkpoint (written by {}; it has no model/wte, model/wpe and "
                   "model/h.0.attn.qkv.weight): the Hugging Face format holds train_gpt's GPT-2; export a ResNet "
                   "with --format torchvision",
                   what, r.dir(), app);
  const auto wte = r.shape("model/wte"), wpe = r.shape("model/wpe"), qkv = r.shape("model/h.0.attn.qkv.weight");
  HPCT_USAGE_CHECK(wte.size() == 2 && wpe.size() == 2 && qkv.size() == 4 && qkv[0] == 3 && qkv[3] == wte[1] &&
                       wpe[1] == wte[1] && qkv[1] * qkv[2] == wte[1],
                   "{}: checkpoint {}: wte {}, wpe {} and h.0.attn.qkv.weight {} are not the shapes of a GPT", what,
                   r.dir(), shape_str(wte), shape_str(wpe), shape_str(qkv));
  gpt::GptConfig c;
  c.padded_vocab = static_cast<int>(wte[0]);
  c.n_embd = static_cast<int>(wte[1]);
  c.seq_len = static_cast<int>(wpe[0]);
  c.n_head = static_cast<int>(qkv[1]);
  while (r.has("model/h." + std::to_string(c.n_layer) + ".attn.qkv.weight")) ++c.n_layer;
  c.vocab_size = a.ints.count("model.vocab_size") ? static_cast<int>(a.ints.at("model.vocab_size")) : c.padded_vocab;
  c.bias = r.has("model/h.0.attn.qkv.bias");
  for (const gpt::ParamSpec& p : gpt::parameter_layout(c)) {  // every tensor of that model, with its shape
    const std::string ds = "model/" + p.name;
    HPCT_USAGE_CHECK(r.has(ds), "{}: checkpoint {} has no tensor {} (a GPT with L = {}, bias = {} has it)", what,
                     r.dir(), ds, c.n_layer, c.bias);
    HPCT_USAGE_CHECK(r.shape(ds) == p.shape, "{}: checkpoint {}: tensor {} has shape {}, the GPT's is {}", what,
                     r.dir(), ds, shape_str(r.shape(ds)), shape_str(p.shape));
  }
  return c;
}

HfExportResult export_hf_gpt2(const ckpt::Reader& r, const std::string& outdir, DType dtype) {
  HPCT_CHECK(dtype == DType::F32 || dtype == DType::BF16, "export_hf_gpt2: dtype {} (F32 or BF16)", dtype_name(dtype));
  const std::string what = "ckpt_tool export --format hf";
  const gpt::GptConfig c = gpt_config_of_checkpoint(r, what);
  std::error_code ec;
  fs::create_directories(outdir, ec);
  HPCT_USAGE_CHECK(!ec && fs::is_directory(outdir), "{}: cannot create the output directory {}: {}", what, outdir,
                   ec ? ec.message() : std::string("a file of that name exists"));

  // The tensors of the biased model: a bias-free one exports zero biases (GPT-2 has no bias-free variant).
  gpt::GptConfig biased = c;
  biased.bias = true;
  HfExportResult res;
  std::vector<ckpt::SafetensorsEntry> entries;
  for (const gpt::ParamSpec& p : gpt::parameter_layout(biased)) {
    const HfName hn = hf_gpt2_name(p.name);
    ckpt::SafetensorsEntry e;
    e.name = kPrefix + hn.name;
    e.dtype = dtype;
    e.shape = hf_shape(p.name, p.shape, c, c.seq_len);
    const std::vector<int64_t> logical = p.shape;
    const bool present = c.bias || !is_bias(p.name);
    e.fill = [&r, name = p.name, logical, hf = e.shape, hn, present, dtype](void* dst) {
      const int64_t n = numel(hf);
      std::vector<float> out(static_cast<size_t>(n), 0.0f);
      if (present) {
        std::vector<float> whole(static_cast<size_t>(numel(logical)));
        r.read_all("model/" + name, DType::F32, whole.data());
        if (hn.transposed) {
          const auto [rows, cols] = matrix_view(logical);
          transpose(whole.data(), rows, cols, out.data());
        } else {
          std::copy(whole.begin(), whole.begin() + n, out.begin());  // wte: its first V rows
        }
      }
      if (dtype == DType::F32) {
        std::memcpy(dst, out.data(), static_cast<size_t>(n) * sizeof(float));
      } else {
        bf16* d = static_cast<bf16*>(dst);
        for (int64_t i = 0; i < n; ++i) d[i] = to_bf16(out[static_cast<size_t>(i)]);
      }
    };
    res.parameters += numel(e.shape);
    res.bytes += numel(e.shape) * static_cast<int64_t>(dtype_size(dtype));
    ++res.tensors;
    entries.push_back(std::move(e));
  }

  json cfg = json::object();
  cfg["architectures"] = {"GPT2LMHeadModel"};
  cfg["model_type"] = "gpt2";
  cfg["vocab_size"] = c.vocab_size;
  cfg["n_positions"] = c.seq_len;
  cfg["n_ctx"] = c.seq_len;
  cfg["n_embd"] = c.n_embd;
  cfg["n_layer"] = c.n_layer;
  cfg["n_head"] = c.n_head;
  cfg["n_inner"] = nullptr;  // 4 n_embd
  cfg["activation_function"] = "gelu_new";
  cfg["layer_norm_epsilon"] = kLayerNormEps;
  cfg["resid_pdrop"] = 0.0;
  cfg["embd_pdrop"] = 0.0;
  cfg["attn_pdrop"] = 0.0;
  cfg["scale_attn_weights"] = true;
  cfg["scale_attn_by_inverse_layer_idx"] = false;
  cfg["reorder_and_upcast_attn"] = false;
  cfg["tie_word_embeddings"] = true;
  cfg["use_cache"] = true;
  // GPT-2's <|endoftext|> with its own vocabulary; none for another one (hpctrain's demo vocabulary is bytes)
  cfg["bos_token_id"] = c.vocab_size == 50257 ? json(50256) : json(nullptr);
  cfg["eos_token_id"] = c.vocab_size == 50257 ? json(50256) : json(nullptr);
  cfg["torch_dtype"] = dtype == DType::F32 ? "float32" : "bfloat16";
  cfg["hpctrain"] = {{"checkpoint", fs::absolute(r.dir()).string()},
                     {"step", r.attrs().ints.count("step") ? r.attrs().ints.at("step") : -1},
                     {"padded_vocab", c.padded_vocab},
                     {"bias", c.bias}};

  const std::string st = (fs::path(outdir) / "model.safetensors").string();
  ckpt::write_safetensors(st, entries, {{"format", "pt"}});  // transformers requires the "format" metadata
  write_text_atomic((fs::path(outdir) / "config.json").string(), cfg.dump(2) + "\n");
  return res;
}

// ---- import ----------------------------------------------------------------------------------------------------

HfGpt2Source::~HfGpt2Source() = default;

HfGpt2Source::HfGpt2Source(const std::string& dir, const gpt::GptConfig& deck) : dir_(dir), cfg_(deck) {
  const std::string w = "model.init_from " + dir;
  HPCT_USAGE_CHECK(fs::is_directory(dir),
                   "{}: no such directory (a Hugging Face GPT-2 directory holds config.json and model.safetensors, "
                   "as save_pretrained writes them)",
                   w);
  const fs::path cfg_path = fs::path(dir) / "config.json";
  HPCT_USAGE_CHECK(fs::is_regular_file(cfg_path),
                   "{}: no config.json (a Hugging Face GPT-2 directory holds config.json and model.safetensors)", w);

  // ---- config.json against the deck
  json cfg;
  {
    std::ifstream in(cfg_path);
    std::stringstream ss;
    ss << in.rdbuf();
    try {
      cfg = json::parse(ss.str());
    } catch (const json::exception& e) {
      HPCT_USAGE_FAIL("{}: config.json is not JSON: {}", w, e.what());
    }
  }
  HPCT_USAGE_CHECK(cfg.is_object(), "{}: config.json is not a JSON object", w);
  try {
    n_positions_ = check_config(cfg, deck, w);
  } catch (const json::exception& e) {  // a value of another JSON type than GPT-2's config has
    HPCT_USAGE_FAIL("{}: config.json: {}", w, e.what());
  }
  // ---- the tensor files: model.safetensors, or the shards of model.safetensors.index.json
  const fs::path single = fs::path(dir) / "model.safetensors", index = fs::path(dir) / "model.safetensors.index.json";
  std::vector<std::string> names;
  if (fs::is_regular_file(single)) {
    names.push_back("model.safetensors");
  } else if (fs::is_regular_file(index)) {
    std::ifstream in(index);
    std::stringstream ss;
    ss << in.rdbuf();
    json idx;
    try {
      idx = json::parse(ss.str());
    } catch (const json::exception& e) {
      HPCT_USAGE_FAIL("{}: model.safetensors.index.json is not JSON: {}", w, e.what());
    }
    HPCT_USAGE_CHECK(idx.contains("weight_map") && idx["weight_map"].is_object(),
                     "{}: model.safetensors.index.json has no weight_map", w);
    std::set<std::string> uniq;
    for (const auto& [k, v] : idx["weight_map"].items()) {
      HPCT_USAGE_CHECK(v.is_string(), "{}: model.safetensors.index.json maps {} to {}, not a file name", w, k,
                       v.dump());
      uniq.insert(v.get<std::string>());
    }
    names.assign(uniq.begin(), uniq.end());
  } else {
    HPCT_USAGE_FAIL("{}: no model.safetensors (nor model.safetensors.index.json); write the model with "
                    "save_pretrained(DIR) (safetensors is its default format)",
                    w);
  }
  for (const std::string& n : names) {
    files_.push_back(
        std::make_unique<ckpt::SafetensorsFile>(ckpt::SafetensorsFile::open((fs::path(dir) / n).string())));
    file_names_.push_back(n);
    for (const std::string& stored : files_.back()->names()) {
      std::string key = stored.rfind(kPrefix, 0) == 0 ? stored.substr(std::strlen(kPrefix)) : stored;
      if (ends_with(key, ".attn.bias") || ends_with(key, ".attn.masked_bias")) continue;  // buffers: causal masks
      HPCT_USAGE_CHECK(!tensors_.count(key), "{}: tensor {} appears twice ({} and {})", w, key, tensors_[key].name,
                       stored);
      tensors_[key] = {files_.back().get(), stored};
    }
  }

  // ---- every tensor of the deck's model: presence and shape; biases of a bias-free deck zero; the tied head
  gpt::GptConfig biased = deck;
  biased.bias = true;
  std::set<std::string> known = {"lm_head.weight"};
  for (const gpt::ParamSpec& p : gpt::parameter_layout(biased)) {
    const std::string hn = hf_gpt2_name(p.name).name;
    known.insert(hn);
    const std::vector<int64_t> want = hf_shape(p.name, p.shape, deck, n_positions_);
    const Located& loc = hf(hn);
    const std::vector<int64_t>& got = loc.file->info(loc.name).shape;
    HPCT_USAGE_CHECK(got == want, "{}: tensor {} has shape {} but the deck's model needs {} (hpctrain's {} {}{})", w,
                     loc.name, shape_str(got), shape_str(want), p.name, shape_str(p.shape),
                     hf_gpt2_name(p.name).transposed ? ", transposed" : "");
    if (deck.bias || !is_bias(p.name)) {
      shapes_[p.name] = p.shape;
    } else {
      const std::vector<float> b = hf_f32(hn);
      float m = 0.0f;
      for (float x : b) m = std::max(m, std::abs(x));
      HPCT_USAGE_CHECK(m == 0.0f,
                       "{}: tensor {} is not zero (max |x| = {:.6g}) but the deck's model.bias = false (a model "
                       "without biases imports only zero biases); set model.bias = true",
                       w, loc.name, m);
    }
  }
  for (const auto& [key, loc] : tensors_)
    HPCT_USAGE_CHECK(known.count(key),
                     "{}: tensor {} of {} is not a parameter of GPT-2 with n_layer = {} (GPT2LMHeadModel's "
                     "parameters: wte, wpe, h.<l>.*, ln_f, lm_head)",
                     w, loc.name, loc.file->path(), deck.n_layer);
  const bool tied = cfg.value("tie_word_embeddings", true);
  if (tensors_.count("lm_head.weight")) {
    const std::vector<float> head = hf_f32("lm_head.weight"), wte = hf_f32("wte.weight");
    HPCT_USAGE_CHECK(head.size() == wte.size(), "{}: lm_head.weight has {} elements, wte.weight {}", w, head.size(),
                     wte.size());
    float m = 0.0f;
    for (size_t i = 0; i < head.size(); ++i) m = std::max(m, std::abs(head[i] - wte[i]));
    HPCT_USAGE_CHECK(m == 0.0f,
                     "{}: lm_head.weight differs from wte.weight (max |difference| {:.6g}): hpctrain ties the output "
                     "head to the token embedding, and this model's head is untied",
                     w, m);
  } else {
    HPCT_USAGE_CHECK(tied,
                     "{}: config.json has tie_word_embeddings = false and no lm_head.weight: hpctrain ties the output "
                     "head to the token embedding",
                     w);
  }
}

std::string HfGpt2Source::describe() const { return "Hugging Face GPT-2 " + dir_; }

bool HfGpt2Source::has(const std::string& name) const { return shapes_.count(name) != 0; }

std::vector<int64_t> HfGpt2Source::shape(const std::string& name) const {
  const auto it = shapes_.find(name);
  HPCT_USAGE_CHECK(it != shapes_.end(), "model.init_from {}: the model has no tensor {}", dir_, name);
  return it->second;
}

int64_t HfGpt2Source::num_parameters() const {
  int64_t n = 0;
  for (const auto& [name, s] : shapes_) n += numel(s);
  return n - static_cast<int64_t>(cfg_.padded_vocab - cfg_.vocab_size) * cfg_.n_embd;
}

const HfGpt2Source::Located& HfGpt2Source::hf(const std::string& hf_name) const {
  const auto it = tensors_.find(hf_name);
  HPCT_USAGE_CHECK(it != tensors_.end(), "model.init_from {}: {} has no tensor {} (nor {}{})", dir_,
                   file_names_.size() == 1 ? file_names_[0] : std::string("model.safetensors.index.json"), hf_name,
                   kPrefix, hf_name);
  return it->second;
}

std::vector<float> HfGpt2Source::hf_f32(const std::string& hf_name) const {
  const Located& loc = hf(hf_name);
  std::vector<float> out(static_cast<size_t>(loc.file->info(loc.name).numel));
  loc.file->read_f32(loc.name, out.data());
  return out;
}

void HfGpt2Source::build(const std::string& name) const {
  if (cache_name_ == name) return;
  const std::vector<int64_t> s = shape(name);
  const HfName hn = hf_gpt2_name(name);
  const std::vector<float> src = hf_f32(hn.name);
  cache_.assign(static_cast<size_t>(numel(s)), 0.0f);  // wte's padding rows [V, Vp) stay zero
  if (hn.transposed) {
    const auto [rows, cols] = matrix_view(s);  // hpctrain (rows, cols) = transpose of HF's (cols, rows)
    transpose(src.data(), cols, rows, cache_.data());
  } else {
    // wte: V of Vp rows; wpe: the first T of n_positions rows; the others whole
    std::copy(src.begin(), src.begin() + std::min(src.size(), cache_.size()), cache_.begin());
  }
  cache_name_ = name;
}

void HfGpt2Source::read(const std::string& name, const std::vector<int64_t>& offset, const std::vector<int64_t>& count,
                        float* out) const {
  build(name);
  const std::vector<int64_t> s = shape(name);
  const int nd = static_cast<int>(s.size());
  HPCT_CHECK(offset.size() == s.size() && count.size() == s.size(), "{}: box of rank {} for a tensor of rank {}", name,
             offset.size(), nd);
  for (int d = 0; d < nd; ++d)
    HPCT_CHECK(offset[d] >= 0 && count[d] >= 0 && offset[d] + count[d] <= s[d], "{}: box outside the tensor on axis {}",
               name, d);
  if (numel(count) == 0) return;
  std::vector<int64_t> stride(nd, 1);
  for (int d = nd - 2; d >= 0; --d) stride[d] = stride[d + 1] * s[d + 1];
  const int64_t run = count[nd - 1], rows = numel(count) / run;
  std::vector<int64_t> idx(nd, 0);  // odometer over the box's outer axes
  for (int64_t r = 0; r < rows; ++r) {
    int64_t g = 0;
    for (int d = 0; d < nd; ++d) g += (offset[d] + idx[d]) * stride[d];
    std::copy(cache_.begin() + g, cache_.begin() + g + run, out + r * run);
    for (int d = nd - 2; d >= 0; --d) {
      if (++idx[d] < count[d]) break;
      idx[d] = 0;
    }
  }
}

}  // namespace hpct::interop
