#include "interop/torchvision_resnet.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <toml++/toml.h>

#include "ckpt/checkpoint.hpp"
#include "ckpt/safetensors.hpp"
#include "core/error.hpp"

namespace hpct::interop {

namespace fs = std::filesystem;

namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + ")";
}

// The deck recorded in the checkpoint (Config::effective_toml: every key of the schema) as a TOML table.
struct Deck {
  toml::table t;
  std::string name;
  const toml::node* at(const std::string& key) const { return t.at_path(key).node(); }
  int64_t get_int(const std::string& key) const {
    const toml::node* n = at(key);
    HPCT_USAGE_CHECK(n && n->is_integer(), "{}: the checkpoint's deck has no integer {}", name, key);
    return n->as_integer()->get();
  }
  std::string get_string(const std::string& key) const {
    const toml::node* n = at(key);
    HPCT_USAGE_CHECK(n && n->is_string(), "{}: the checkpoint's deck has no string {}", name, key);
    return n->as_string()->get();
  }
  // a list key: a TOML array, or one string of comma-separated items (docs/contracts.md); absent -> empty
  std::vector<double> get_floats(const std::string& key) const {
    std::vector<double> out;
    const toml::node* n = at(key);
    if (!n) return out;
    if (const toml::array* a = n->as_array()) {
      for (const toml::node& v : *a) out.push_back(v.value<double>().value_or(0.0));
    } else if (n->is_string()) {
      const std::string s = n->as_string()->get();
      for (size_t p = 0; p < s.size();) {
        size_t q = s.find(',', p);
        if (q == std::string::npos) q = s.size();
        const std::string item = s.substr(p, q - p);
        if (item.find_first_not_of(" \t") != std::string::npos) out.push_back(std::stod(item));
        p = q + 1;
      }
    } else if (auto v = n->value<double>()) {
      out.push_back(*v);
    }
    return out;
  }
};

// Writes text to path atomically (path.tmp, fsync, rename).
void write_text_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  HPCT_USAGE_CHECK(fd >= 0, "cannot create {}: {} (check that its directory is writable)", tmp, std::strerror(errno));
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t w = ::write(fd, text.data() + done, text.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const int err = errno;
      ::close(fd);
      HPCT_USAGE_FAIL("cannot write {}: {}", tmp, std::strerror(err));
    }
    done += static_cast<size_t>(w);
  }
  const bool ok = ::fsync(fd) == 0;
  ::close(fd);
  HPCT_USAGE_CHECK(ok, "cannot fsync {}: {}", tmp, std::strerror(errno));
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    HPCT_FAIL("cannot rename {} to {}: {}", tmp, path, std::strerror(errno));
}

}  // namespace

std::vector<StateDictEntry> torchvision_state_dict_layout(const resnet::ResNetConfig& cfg) {
  std::vector<StateDictEntry> out;
  for (const resnet::ParamSpec& p : resnet::parameter_layout(cfg)) {
    out.push_back({p.name, DType::F32, p.shape, "model/" + p.name});
    // torchvision's BatchNorm2d state: weight, bias, running_mean, running_var, num_batches_tracked
    if (p.shape.size() == 1 && p.name.size() > 5 && p.name.compare(p.name.size() - 5, 5, ".bias") == 0 &&
        p.name != "fc.bias") {
      const std::string bn = p.name.substr(0, p.name.size() - 5);
      out.push_back({bn + ".running_mean", DType::F32, p.shape, "model/" + bn + ".running_mean"});
      out.push_back({bn + ".running_var", DType::F32, p.shape, "model/" + bn + ".running_var"});
      out.push_back({bn + ".num_batches_tracked", DType::I64, {}, ""});
    }
  }
  return out;
}

std::string torchvision_architecture(const resnet::ResNetConfig& cfg) {
  return (cfg.style == "imagenet" ? "resnet" : "cifar_resnet") + std::to_string(cfg.depth);
}

std::string torchvision_unloadable_reason(const resnet::ResNetConfig& cfg) {
  if (cfg.style != "imagenet")
    return fmt::format(
        "a CIFAR-style ResNet-{} (3x3 stride-1 stem conv without max-pool, three stages of widths {}, {}, {}): "
        "torchvision has no such class; build a module with the same structure and names (see "
        "tests/reference/resnet_models.py, class Net) and load the state dict into it",
        cfg.depth, cfg.base_width, 2 * cfg.base_width, 4 * cfg.base_width);
  if (cfg.base_width != 64)
    return fmt::format(
        "base width {}: torchvision's resnet{} has stage widths 64, 128, 256, 512 (its width_per_group changes only a "
        "Bottleneck's inner width), so every tensor's shape differs; build the ResNet with inplanes and stage widths "
        "{}, {}, {}, {} (tests/reference/resnet_models.py, build_resnet)",
        cfg.base_width, cfg.depth, cfg.base_width, 2 * cfg.base_width, 4 * cfg.base_width, 8 * cfg.base_width);
  if (cfg.in_channels != 3)
    return fmt::format(
        "{} input channel{}: torchvision's conv1.weight is (64, 3, 7, 7), this one ({}, {}, 7, 7); replace "
        "m.conv1 = torch.nn.Conv2d({}, 64, 7, 2, 3, bias=False) before load_state_dict",
        cfg.in_channels, cfg.in_channels == 1 ? "" : "s", cfg.base_width, cfg.in_channels, cfg.in_channels);
  return "";
}

TorchvisionExport export_torchvision_resnet(const std::string& step_dir, const std::string& out_dir) {
  ckpt::Reader reader(step_dir);
  const ckpt::Attrs& a = reader.attrs();
  const std::string app = a.strings.count("app") ? a.strings.at("app") : "";
  HPCT_USAGE_CHECK(app != "train_gpt",
                   "ckpt_tool export --format torchvision: {} is a GPT checkpoint (app train_gpt); torchvision holds "
                   "the ResNet; use --format hf (Hugging Face transformers' GPT-2) or --format hdf5",
                   step_dir);
  HPCT_USAGE_CHECK((app.empty() || app == "train_resnet") && reader.has("model/conv1.weight") &&
                       reader.has("model/fc.weight"),
                   "ckpt_tool export --format torchvision: {} is not a ResNet checkpoint (app \"{}\", no "
                   "model/conv1.weight and model/fc.weight); --format torchvision exports train_resnet's checkpoints",
                   step_dir, app);
  HPCT_USAGE_CHECK(a.strings.count("deck"), "{}: the checkpoint records no deck (attribute `deck`)", step_dir);
  Deck deck;
  deck.name = step_dir + "/index.h5 (deck)";
  try {
    deck.t = toml::parse(a.strings.at("deck"), deck.name);
  } catch (const toml::parse_error& e) {
    HPCT_USAGE_FAIL("{}: the checkpoint's deck is not TOML: {}", deck.name, e.description());
  }

  // The architecture: the deck's [model], the input channels and classes from the tensors (the data decided them).
  resnet::ResNetConfig cfg;
  cfg.style = deck.get_string("model.style");
  cfg.depth = static_cast<int>(deck.get_int("model.depth"));
  cfg.base_width = static_cast<int>(deck.get_int("model.base_width"));
  if (cfg.base_width == 0) cfg.base_width = cfg.style == "imagenet" ? 64 : 16;
  const std::vector<int64_t> conv1 = reader.shape("model/conv1.weight"), fc = reader.shape("model/fc.weight");
  HPCT_USAGE_CHECK(conv1.size() == 4 && fc.size() == 2, "{}: conv1.weight {} and fc.weight {} are not a ResNet's",
                   step_dir, shape_str(conv1), shape_str(fc));
  cfg.in_channels = static_cast<int>(conv1[1]);
  cfg.num_classes = static_cast<int>(fc[0]);
  cfg.height = cfg.width = 224;  // the parameters' shapes do not depend on the image size
  cfg.validate(deck.name);
  if (a.ints.count("model.num_classes"))
    HPCT_USAGE_CHECK(a.ints.at("model.num_classes") == cfg.num_classes,
                     "{}: attribute model.num_classes = {} but fc.weight is {}", step_dir,
                     a.ints.at("model.num_classes"), shape_str(fc));

  // num_batches_tracked: training-mode BN forwards of one rank = steps x micro-batches per rank (header).
  const int64_t step = a.ints.count("step") ? a.ints.at("step") : 0;
  const int64_t dp = a.ints.count("layout.dp") ? a.ints.at("layout.dp") : 1;
  const int64_t gb = deck.get_int("train.global_batch"), mb = deck.get_int("train.micro_batch");
  const int64_t micro_per_step = std::max<int64_t>(1, gb / std::max<int64_t>(1, dp * mb));
  const int64_t tracked = step * micro_per_step;

  // Every tensor the architecture names must be in the checkpoint with its shape, and every model tensor of the
  // checkpoint must have its place (else the mapping is stale).
  const std::vector<StateDictEntry> layout = torchvision_state_dict_layout(cfg);
  const std::string arch = torchvision_architecture(cfg);
  std::set<std::string> mapped;
  for (const StateDictEntry& e : layout) {
    if (e.source.empty()) continue;
    HPCT_USAGE_CHECK(reader.has(e.source), "{}: a {}-style ResNet-{} needs {}, which the checkpoint lacks", step_dir,
                     cfg.style, cfg.depth, e.source);
    HPCT_USAGE_CHECK(reader.shape(e.source) == e.shape && reader.dtype(e.source) == DType::F32,
                     "{}: {} is {} {}, {} expects f32 {}", step_dir, e.source, dtype_name(reader.dtype(e.source)),
                     shape_str(reader.shape(e.source)), arch, shape_str(e.shape));
    mapped.insert(e.source);
  }
  for (const std::string& d : reader.datasets())
    HPCT_USAGE_CHECK(d.rfind("model/", 0) != 0 || mapped.count(d),
                     "{}: tensor {} has no place in {}'s state dict (the torchvision mapping does not know it)",
                     step_dir, d, arch);

  std::error_code ec;
  fs::create_directories(out_dir, ec);
  HPCT_USAGE_CHECK(!ec && fs::is_directory(out_dir), "cannot create the output directory {}: {}", out_dir,
                   ec.message());
  TorchvisionExport r;
  r.architecture = arch;
  r.safetensors_path = (fs::path(out_dir) / "model.safetensors").string();
  r.config_path = (fs::path(out_dir) / "config.json").string();
  r.num_batches_tracked = tracked;
  const std::string reason = torchvision_unloadable_reason(cfg);
  r.loadable = reason.empty();

  std::vector<ckpt::SafetensorsEntry> entries;
  for (const StateDictEntry& e : layout) {
    ckpt::SafetensorsEntry s{e.name, e.dtype, e.shape, {}};
    if (e.source.empty()) s.fill = [tracked](void* dst) { std::memcpy(dst, &tracked, sizeof(tracked)); };
    else
      s.fill = [&reader, src = e.source](void* dst) { reader.read_all(src, DType::F32, dst); };
    int64_t n = 1;
    for (int64_t d : e.shape) n *= d;
    r.bytes += n * static_cast<int64_t>(dtype_size(e.dtype));
    entries.push_back(std::move(s));
  }
  r.tensors = static_cast<int64_t>(entries.size());
  ckpt::write_safetensors(r.safetensors_path, entries,
                          {{"format", "pt"},
                           {"producer", "hpctrain ckpt_tool export --format torchvision"},
                           {"architecture", arch},
                           {"step", std::to_string(step)}});

  // config.json: what the tensors are, the inputs they expect, how to load them.
  nlohmann::ordered_json j;
  j["format"] = "torchvision";
  j["architecture"] = arch;
  j["style"] = cfg.style;
  j["depth"] = cfg.depth;
  j["block"] = cfg.bottleneck() ? "Bottleneck" : "BasicBlock";
  j["num_classes"] = cfg.num_classes;
  j["in_channels"] = cfg.in_channels;
  j["base_width"] = cfg.base_width;
  j["torchvision_loadable"] = r.loadable;
  if (r.loadable)
    j["load"] = fmt::format(
        "import safetensors.torch, torchvision; m = torchvision.models.{}(num_classes={}); "
        "m.load_state_dict(safetensors.torch.load_file(\"model.safetensors\"), strict=True); m.eval()",
        arch, cfg.num_classes);
  else
    j["not_loadable_reason"] = "not loadable into torchvision's stock classes: " + reason;
  const std::vector<double> mean = deck.get_floats("data.mean"), sd = deck.get_floats("data.std");
  nlohmann::ordered_json in;
  in["layout"] = "NCHW float32";
  in["normalization"] = "x[c] = (pixel / 255 - mean[c]) / std[c] (one value: every channel)";
  in["mean"] = mean;
  in["std"] = sd;
  j["input"] = in;
  const auto shortest = [](float x) { return std::stod(fmt::format("{}", x)); };  // 1e-05, not 9.99999974e-06
  j["batchnorm"] = {
      {"eps", shortest(cfg.bn_eps)}, {"momentum", shortest(cfg.bn_momentum)}, {"running_var", "unbiased"}};
  j["num_batches_tracked"] = tracked;
  j["num_batches_tracked_note"] = fmt::format(
      "hpctrain keeps no such counter: optimizer steps ({}) x micro-batches per rank ({} = global_batch {} / (DP {} x "
      "micro_batch {})), the training-mode BatchNorm forwards one rank made (exact unless a resume changed that "
      "split); "
      "used by torch only with momentum=None, never in eval mode",
      step, micro_per_step, gb, dp, mb);
  j["dtype"] = "float32";
  j["source"] = {
      {"checkpoint", fs::absolute(step_dir).lexically_normal().string()}, {"step", step}, {"app", "train_resnet"}};
  write_text_atomic(r.config_path, j.dump(2) + "\n");
  return r;
}

}  // namespace hpct::interop
