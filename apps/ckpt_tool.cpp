// ckpt_tool: look into, check and export hpctrain checkpoints (docs/invariants.md, invariant 4,
// lib/ckpt/checkpoint.hpp).
//
//   ckpt_tool inspect PATH                    step, attributes, layout (shard files), table of tensors
//   ckpt_tool verify PATH                     every shard file present, every piece's CRC32C: VALID or FAILED
//   ckpt_tool export PATH OUT.h5 [--optimizer] one plain HDF5 file of whole tensors (model only by default)
//   ckpt_tool diff PATH_A PATH_B [--optimizer] [--json]
//                                             how far two checkpoints of one model lie apart, tensor by tensor
//                                             (relative L2 ||a - b|| / ||b||, largest |a - b|, values that differ)
//   ckpt_tool export --format torchvision PATH OUTDIR   a ResNet as torchvision's state dict: OUTDIR/model.safetensors
//                                             + config.json (lib/interop/torchvision_resnet.hpp)
//   ckpt_tool export --format hf PATH OUTDIR [--dtype bf16]
//                                             a GPT as Hugging Face GPT-2: OUTDIR/config.json + model.safetensors
//                                             (lib/interop/hf_gpt2.hpp), for GPT2LMHeadModel.from_pretrained(OUTDIR)
//
// PATH is a step directory (step_00000040/), a checkpoints directory holding `latest`, or a run directory
// (runs/gpt2, whose checkpoints/latest is followed). Under mpirun, verify splits the shard files over the
// ranks; inspect, export and diff run on rank 0. Errors: one line, non-zero exit (verify: FAILED line, exit 1).
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <set>

#include "app_main.hpp"
#include "ckpt/checkpoint.hpp"
#include "core/format.hpp"
#include "interop/hf_gpt2.hpp"
#include "interop/torchvision_resnet.hpp"

namespace {

namespace ck = hpct::ckpt;
namespace fs = std::filesystem;

// Long or multi-line strings (the deck text) shown as their first line, cut, and their size.
std::string shorten(const std::string& s) {
  const size_t nl = s.find('\n');
  std::string first = s.substr(0, std::min<size_t>(nl, 60));
  if (first.size() == s.size()) return fmt::format("\"{}\"", s);
  return fmt::format("\"{}...\" ({} bytes{})", first, s.size(), nl != std::string::npos ? ", multi-line" : "");
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + ")";
}

int inspect(const std::string& path) {
  const std::string dir = ck::find_step_dir(path);
  ck::Reader reader(dir);
  const auto& a = reader.attrs();
  fmt::print("checkpoint   {}\n", dir);
  fmt::print("step         {}\n",
             a.ints.count("step") ? std::to_string(a.ints.at("step")) : std::string("(no step attribute)"));
  fmt::print("format       {}\n", reader.format_version());
  fmt::print("attributes\n");
  std::map<std::string, std::string> all;
  for (const auto& [k, v] : a.ints) all[k] = std::to_string(v);
  for (const auto& [k, v] : a.floats) all[k] = fmt::format("{:.9g}", v);
  for (const auto& [k, v] : a.strings) all[k] = shorten(v);
  for (const auto& [k, v] : all) fmt::print("  {:<22} {}\n", k, v);

  // Layout: one shard file per writing rank.
  int64_t total_bytes = 0;
  std::map<std::string, int> pieces_per_tensor, replicas_per_tensor;
  std::map<std::string, std::set<int>> split_axes;
  for (const auto& m : reader.shards()) {
    for (const auto& p : m.pieces) {
      if (p.replica == 0) ++pieces_per_tensor[p.dataset];
      else
        ++replicas_per_tensor[p.dataset];
      split_axes[p.dataset].insert(p.split_axis);
    }
  }
  fmt::print("layout       {} shard files (one per writing rank)\n", reader.shards().size());
  for (const auto& m : reader.shards()) {
    std::error_code ec;
    const auto size = fs::file_size(fs::path(dir) / m.file, ec);
    total_bytes += ec ? 0 : static_cast<int64_t>(size);
    fmt::print("  {:<18} rank {:<5} {:>5} pieces  {}\n", m.file, m.rank, m.pieces.size(),
               ec ? std::string("MISSING") : hpct::human_bytes(static_cast<double>(size)));
  }
  fmt::print("  total {}\n", hpct::human_bytes(static_cast<double>(total_bytes)));

  const auto names = reader.datasets();
  fmt::print("tensors      {}\n", names.size());
  fmt::print("  {:<48} {:<5} {:<22} {:>6} {:>8}  {}\n", "name", "dtype", "shape", "pieces", "replicas", "split");
  for (const auto& n : names) {
    std::string split;
    for (int s : split_axes[n])
      split += (split.empty() ? "" : ",") + (s < 0 ? std::string("flat/none") : "axis " + std::to_string(s));
    fmt::print("  {:<48} {:<5} {:<22} {:>6} {:>8}  {}\n", n, hpct::dtype_name(reader.dtype(n)),
               shape_str(reader.shape(n)), pieces_per_tensor[n], replicas_per_tensor[n], split);
  }
  return 0;
}

int verify(const std::string& path, int rank, int world) {
  const auto t0 = std::chrono::steady_clock::now();
  std::string dir;
  int64_t bytes = 0;
  int failed = 0;
  try {
    dir = ck::find_step_dir(path);
    bytes = ck::verify(dir, rank, world);
  } catch (const hpct::Error& e) {
    failed = 1;
    fmt::print("FAILED: {}\n", e.cause());
    std::fflush(stdout);
  }
  int64_t total = 0;
  int any_failed = 0;
  MPI_Allreduce(&bytes, &total, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (any_failed) return 1;
  if (rank == 0)
    fmt::print("VALID: {} ({} checked in {:.3f} s, {:.1f} MiB/s, {} rank{})\n", dir,
               hpct::human_bytes(static_cast<double>(total)), s,
               static_cast<double>(total) / (1 << 20) / std::max(s, 1e-9), world, world > 1 ? "s" : "");
  return 0;
}

int diff(const std::string& path_a, const std::string& path_b, bool optimizer, bool json) {
  const ck::CheckpointDifference d = ck::diff_checkpoints(ck::find_step_dir(path_a), ck::find_step_dir(path_b),
                                                          optimizer);
  std::vector<std::string> groups = {"model/"};
  if (optimizer) groups.push_back("optim/");
  if (json) {  // one line, for scripts (validation/gpu_layouts.py)
    nlohmann::json j = {{"a", d.dir_a}, {"b", d.dir_b}, {"step_a", d.step_a}, {"step_b", d.step_b}};
    for (const std::string& g : groups) {
      const ck::GroupDifference s = d.group(g);
      j[g.substr(0, g.size() - 1)] = {{"relative_l2", s.relative},
                                      {"values", s.values},
                                      {"unequal", s.unequal},
                                      {"worst_tensor", s.worst ? s.worst->name : ""},
                                      {"worst_relative_l2", s.worst ? s.worst->relative() : 0.0}};
    }
    nlohmann::json ts = nlohmann::json::array();
    for (const auto& t : d.tensors)
      ts.push_back({{"name", t.name},
                    {"values", t.values},
                    {"relative_l2", t.relative()},
                    {"max_abs", t.max_abs},
                    {"unequal", t.unequal}});
    j["tensors"] = ts;
    fmt::print("{}\n", nlohmann::json{{"diff", j}}.dump());
    return 0;
  }
  fmt::print("a  {} (step {})\nb  {} (step {})\n", d.dir_a, d.step_a, d.dir_b, d.step_b);
  fmt::print("  {:<48} {:>10} {:>12} {:>12} {:>10}\n", "tensor", "values", "|a-b|/|b|", "max |a-b|", "differ");
  for (const auto& t : d.tensors)
    fmt::print("  {:<48} {:>10} {:>12.3e} {:>12.3e} {:>10}\n", t.name, t.values, t.relative(), t.max_abs, t.unequal);
  for (const std::string& g : groups) {
    const ck::GroupDifference s = d.group(g);
    fmt::print("{}: relative L2 difference {:.3e} over {} values, {} of them differ{}\n", g.substr(0, g.size() - 1),
               s.relative, s.values, s.unequal,
               s.worst ? fmt::format("; worst tensor {} ({:.3e})", s.worst->name, s.worst->relative()) : std::string());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return hpct::run_mpi_app(argc, argv, "ckpt_tool", [](int argc, char** argv) {
    CLI::App app{"hpctrain ckpt_tool: inspect, verify and export sharded HDF5 checkpoints. PATH is a step_* "
                 "directory, a checkpoints directory with `latest`, or a run directory."};
    app.require_subcommand(1);
    std::string path, path_b, out, format = "hdf5", dtype = "f32";
    bool optimizer = false, json = false;
    auto* c_inspect = app.add_subcommand("inspect", "print step, attributes, shard files and the tensor table");
    c_inspect->add_option("path", path, "checkpoint step directory, checkpoints directory or run directory")
        ->required();
    auto* c_verify = app.add_subcommand("verify", "check every shard file and every piece's CRC32C (VALID or FAILED)");
    c_verify->add_option("path", path, "checkpoint step directory, checkpoints directory or run directory")->required();
    auto* c_export = app.add_subcommand(
        "export", "write one plain HDF5 file with every tensor whole, or another framework's format (--format)");
    c_export->add_option("path", path, "checkpoint step directory, checkpoints directory or run directory")->required();
    c_export->add_option("out", out, "output: HDF5 file (hdf5, written atomically) or directory (hf, torchvision)")
        ->required();
    c_export
        ->add_option("--format", format,
                     "hdf5 (default): every tensor whole | hf: a GPT for Hugging Face transformers "
                     "| torchvision: a ResNet as torchvision's state dict (safetensors)")
        ->check(CLI::IsMember({"hdf5", "hf", "torchvision"}));
    c_export->add_flag("--optimizer", optimizer, "also export the optimizer state (/optim/...)");
    c_export->add_option("--dtype", dtype, "--format hf: the tensors' type, f32 or bf16")
        ->check(CLI::IsMember({"f32", "bf16"}))
        ->capture_default_str();
    auto* c_diff = app.add_subcommand(
        "diff", "how far two checkpoints of one model lie apart, tensor by tensor: ||a - b|| / ||b||, the largest "
                "|a - b|, how many values differ (any layouts; compared in double)");
    c_diff->add_option("a", path, "the first checkpoint (step directory, checkpoints directory or run directory)")
        ->required();
    c_diff->add_option("b", path_b, "the second, the reference of the relative difference")->required();
    c_diff->add_flag("--optimizer", optimizer, "also compare the optimizer state (/optim/...)");
    c_diff->add_flag("--json", json, "one JSON line {\"diff\": {...}} instead of the table");
    try {
      app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
      return hpct::process_identity().rank == 0 ? app.exit(e) : 0;  // the help of the subcommand asked for
    } catch (const CLI::ParseError& e) {
      HPCT_USAGE_FAIL("{} (see ckpt_tool --help)", e.what());
    }
    const int rank = hpct::process_identity().rank, world = hpct::process_identity().world;
    if (*c_verify) return verify(path, rank, world);
    if (rank != 0) return 0;
    if (*c_inspect) return inspect(path);
    if (*c_diff) return diff(path, path_b, optimizer, json);
    const std::string dir = ck::find_step_dir(path);
    const auto t0 = std::chrono::steady_clock::now();
    if (format == "hf") {
      HPCT_USAGE_CHECK(!optimizer, "ckpt_tool export --format hf exports the model only: drop --optimizer");
      const ck::Reader reader(dir);
      const auto r = hpct::interop::export_hf_gpt2(reader, out, dtype == "bf16" ? hpct::DType::BF16 : hpct::DType::F32);
      fmt::print("ckpt_tool: exported {} -> {} (Hugging Face GPT-2: config.json + model.safetensors, {} tensors, {} "
                 "parameters, {} {}, {:.2f} s)\n",
                 dir, out, r.tensors, r.parameters, dtype, hpct::human_bytes(static_cast<double>(r.bytes)),
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      return 0;
    }
    HPCT_USAGE_CHECK(!optimizer || format == "hdf5", "ckpt_tool export: --optimizer applies to --format hdf5 only");
    HPCT_USAGE_CHECK(dtype == "f32", "ckpt_tool export: --dtype applies to --format hf (the {} export keeps f32)",
                     format);
    if (format == "torchvision") {
      const auto r = hpct::interop::export_torchvision_resnet(dir, out);
      fmt::print("ckpt_tool: exported {} -> {} ({}, {} tensors, {}; {}, {:.2f} s)\n", dir, r.safetensors_path,
                 r.architecture, r.tensors, hpct::human_bytes(static_cast<double>(r.bytes)),
                 r.loadable ? "loads into torchvision.models." + r.architecture
                            : "not loadable into torchvision's stock classes: see " + r.config_path,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      return 0;
    }
    ck::export_consolidated(dir, out, optimizer);
    std::error_code ec;
    fmt::print("ckpt_tool: exported {} -> {} ({}{}, {:.2f} s)\n", dir, out,
               hpct::human_bytes(static_cast<double>(fs::file_size(out, ec))),
               optimizer ? ", with optimizer state" : ", model only",
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    return 0;
  });
}
