#include "train/tasks/resnet/conv_algorithm_choice.hpp"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/timer.hpp"

namespace hpct::train {

namespace fs = std::filesystem;
namespace k = hpct::kernels;
using nlohmann::json;

namespace {

constexpr const char* kFormat = "hpctrain convolution algorithms";
constexpr int kVersion = 1;

DType storage_of_name(const std::string& s, const std::string& where) {
  for (DType t : {DType::F32, DType::BF16, DType::F16})
    if (s == dtype_name(t)) return t;
  HPCT_USAGE_FAIL("{}: storage \"{}\" is not f32, bf16 or f16", where, s);
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  HPCT_USAGE_CHECK(in.good(), "cannot read the convolution algorithm table {} (no permission?)", path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// write-temporary + rename: a reader never sees half a table
void write_text(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    out.close();
    HPCT_CHECK(out.good(), "cannot write the convolution algorithm table {} (disk full, or no permission?)", tmp);
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  HPCT_CHECK(!ec, "cannot rename {} to {}: {}", tmp, path, ec.message());
}

// cudnnGetVersion()'s number as a version: 91400 -> "9.14.0"
std::string cudnn_text(int v) { return fmt::format("{}.{}.{}", v / 10000, v / 100 % 100, v % 100); }

// What is wrong with using `table` for this run, "" when nothing: another GPU model or cuDNN, convolutions it lacks.
std::string mismatch(const k::ConvAlgorithms& table, const ConvAlgorithmRequest& r) {
  if (table.device() != r.device)
    return fmt::format("it was timed on {}, this run computes on {}", table.device(), r.device);
  if (table.cudnn_version() != r.cudnn_version)
    return fmt::format("it was timed with cuDNN {}, this run loaded cuDNN {}", cudnn_text(table.cudnn_version()),
                       cudnn_text(r.cudnn_version));
  int missing = 0;
  std::string first;
  for (const k::ConvAlgoKey& key : r.keys)
    if (!table.contains(key) && missing++ == 0) first = key.describe();
  if (missing > 0)
    return fmt::format("it lacks {} of the model's {} convolutions (the first: {})", missing, r.keys.size(), first);
  return "";
}

// Rank 0's part: the table's text, or throws.
std::string decide_on_rank0(const ConvAlgorithmRequest& r,
                            const std::function<std::vector<k::ConvTiming>()>& time_them) {
  const std::string own = (fs::path(r.out_dir) / kConvAlgorithmsFile).string();
  if (r.setting != kConvAlgorithmsTimed) {  // a path
    HPCT_USAGE_CHECK(fs::is_regular_file(r.setting),
                     "train.conv_algorithms = {}: no such file; give the conv_algorithms.json of an earlier run, or "
                     "\"timed\" (time the candidates now) or \"heuristic\" (cuDNN's order)",
                     r.setting);
    const std::string text = read_text(r.setting);
    const k::ConvAlgorithms table = parse_conv_algorithms(text, r.setting);
    const std::string why = mismatch(table, r);
    if (!why.empty())
      log_warn("convolution algorithms: {} is used where its choices are candidates here, but {}; the rest runs "
               "cuDNN's heuristic order",
               r.setting, why);
    std::error_code ec;  // own does not exist yet: not the same file
    const bool copy = !fs::equivalent(r.setting, own, ec);
    if (copy) write_text(own, text);
    log_info("convolution algorithms: from {} ({} convolutions, timed on {} with cuDNN {}){}", r.setting, table.size(),
             table.device(), cudnn_text(table.cudnn_version()), copy ? fmt::format(", copied to {}", own) : "");
    return text;
  }
  if (fs::exists(own)) {
    std::string why;
    try {
      const std::string text = read_text(own);
      why = mismatch(parse_conv_algorithms(text, own), r);
      if (why.empty()) {
        log_info("convolution algorithms: the table of this run directory, {} (a rerun with it computes with the "
                 "same algorithms)",
                 own);
        return text;
      }
    } catch (const UsageError& e) {
      why = e.cause();
    }
    log_info("convolution algorithms: {} is not used ({}): timing again", own, why);
  }
  Timer t;
  k::ConvAlgorithms table(r.device, r.cudnn_version);
  for (const k::ConvTiming& timing : time_them()) table.add(timing);
  const std::string text = conv_algorithms_json(table);
  write_text(own, text);
  log_info("convolution algorithms: timed {} convolutions in {:.1f} s, median of {} runs each: {}; written to {} (pass "
           "it as train.conv_algorithms to rerun with the same algorithms)",
           table.size(), t.seconds(), kConvAlgorithmRepeats, table.summary(), own);
  return text;
}

}  // namespace

std::string conv_algorithms_json(const k::ConvAlgorithms& table) {
  json convs = json::array();
  for (const auto& [key, e] : table.entries()) {
    json c = {{"N", key.N},
              {"C", key.C},
              {"H", key.H},
              {"W", key.W},
              {"OC", key.OC},
              {"KH", key.KH},
              {"KW", key.KW},
              {"stride", key.stride},
              {"pad", key.pad},
              {"storage", dtype_name(key.storage)},
              {"precision", precision_name(key.precision)},
              {"layout", key.channels_last ? "nhwc" : "nchw"}};
    json times = json::object();
    for (int p = 0; p < k::kConvPhases; p++) {
      const char* name = k::conv_phase_name(static_cast<k::ConvPhase>(p));
      c[name] = e.choice[static_cast<size_t>(p)];
      json list = json::array();
      for (const k::AlgoTime& a : e.timing.phases[static_cast<size_t>(p)])
        list.push_back({{"algo", a.algo}, {"workspace_bytes", a.bytes}, {"ms", a.ms}});
      times[name] = std::move(list);
    }
    c["times"] = std::move(times);
    convs.push_back(std::move(c));
  }
  const json j = {{"format", kFormat},
                  {"version", kVersion},
                  {"device", table.device()},
                  {"cudnn", table.cudnn_version()},
                  {"margin", k::kConvAlgoMargin},
                  {"convolutions", std::move(convs)}};
  return j.dump(1) + "\n";
}

k::ConvAlgorithms parse_conv_algorithms(const std::string& text, const std::string& source) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    HPCT_USAGE_FAIL("{}: not a convolution algorithm table (JSON: {}); give a conv_algorithms.json an hpctrain run "
                    "wrote",
                    source, e.what());
  }
  // every field read through here: a missing or mistyped one names itself
  const auto field = [&](const json& obj, const char* name, const std::string& where) -> const json& {
    HPCT_USAGE_CHECK(obj.is_object() && obj.contains(name), "{}: {} has no \"{}\"", source, where, name);
    return obj.at(name);
  };
  try {
    HPCT_USAGE_CHECK(j.is_object() && j.value("format", "") == kFormat,
                     "{}: not a convolution algorithm table (its \"format\" is not \"{}\")", source, kFormat);
    const int version = field(j, "version", "the table").get<int>();
    HPCT_USAGE_CHECK(version == kVersion, "{}: table version {}, this hpctrain reads version {}", source, version,
                     kVersion);
    k::ConvAlgorithms table(field(j, "device", "the table").get<std::string>(),
                            field(j, "cudnn", "the table").get<int>());
    const json& convs = field(j, "convolutions", "the table");
    HPCT_USAGE_CHECK(convs.is_array(), "{}: \"convolutions\" is not an array", source);
    for (size_t i = 0; i < convs.size(); i++) {
      const json& c = convs[i];
      const std::string where = fmt::format("convolution {}", i);
      k::ConvAlgoKey key;
      key.N = field(c, "N", where).get<int>();
      key.C = field(c, "C", where).get<int>();
      key.H = field(c, "H", where).get<int>();
      key.W = field(c, "W", where).get<int>();
      key.OC = field(c, "OC", where).get<int>();
      key.KH = field(c, "KH", where).get<int>();
      key.KW = field(c, "KW", where).get<int>();
      key.stride = field(c, "stride", where).get<int>();
      key.pad = field(c, "pad", where).get<int>();
      key.storage = storage_of_name(field(c, "storage", where).get<std::string>(), source + ": " + where);
      key.precision = parse_precision(field(c, "precision", where).get<std::string>());
      const std::string layout = field(c, "layout", where).get<std::string>();
      HPCT_USAGE_CHECK(layout == "nchw" || layout == "nhwc", "{}: {} has layout \"{}\" (nchw or nhwc)", source, where,
                       layout);
      key.channels_last = layout == "nhwc";
      k::ConvAlgorithms::Choice choice{};
      k::ConvTiming timing;
      timing.key = key;
      for (int p = 0; p < k::kConvPhases; p++) {
        const char* name = k::conv_phase_name(static_cast<k::ConvPhase>(p));
        choice[static_cast<size_t>(p)] = field(c, name, where).get<int>();
        if (c.contains("times") && c["times"].contains(name))
          for (const json& a : c["times"][name])
            timing.phases[static_cast<size_t>(p)].push_back(
                {a.at("algo").get<int>(), a.at("workspace_bytes").get<size_t>(), a.at("ms").get<double>()});
      }
      table.set(key, choice, &timing);
    }
    return table;
  } catch (const json::exception& e) {
    HPCT_USAGE_FAIL("{}: a field of the convolution algorithm table has the wrong type ({})", source, e.what());
  }
}

k::ConvAlgorithms decide_conv_algorithms(comm::Communicator& world, const ConvAlgorithmRequest& request,
                                         const std::function<std::vector<k::ConvTiming>()>& time_them) {
  if (request.setting == kConvAlgorithmsHeuristic) {
    if (world.rank() == 0)
      log_info("convolution algorithms: cuDNN's heuristic order (train.conv_algorithms = heuristic: the first "
               "deterministic candidate whose workspace fits)");
    return {};
  }
  // rank 0's outcome: "ok\n" + the table, or "error\n" + the UsageError's message for every rank
  std::string outcome;
  if (world.rank() == 0) {
    try {
      outcome = "ok\n" + decide_on_rank0(request, time_them);
    } catch (const UsageError& e) {
      outcome = "error\n" + e.cause();
    }
  }
  outcome = comm::broadcast_string(world, outcome, 0, "the convolution algorithm table");
  const size_t nl = outcome.find('\n');
  const std::string status = outcome.substr(0, nl), body = nl == std::string::npos ? "" : outcome.substr(nl + 1);
  if (status != "ok") HPCT_USAGE_FAIL("{}", body);
  return parse_conv_algorithms(body, request.setting == kConvAlgorithmsTimed
                                         ? (fs::path(request.out_dir) / kConvAlgorithmsFile).string()
                                         : request.setting);
}

}  // namespace hpct::train
