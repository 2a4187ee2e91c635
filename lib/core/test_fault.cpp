#include "core/test_fault.hpp"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <string>

#include "core/error.hpp"

namespace hpct {
namespace {

struct Planted {
  bool set = false;
  FaultKind kind = FaultKind::DpBucketTwice;
  int rank = -1;  // -1: every rank
};

constexpr struct {
  const char* name;
  FaultKind kind;
} kFaults[] = {{"dp_bucket_twice", FaultKind::DpBucketTwice}, {"dp_bucket_dropped", FaultKind::DpBucketDropped},
               {"tp_grad_scale", FaultKind::TpGradScale},     {"syncbn_naive", FaultKind::SyncBnNaive},
               {"pp_loss_twice", FaultKind::PpLossTwice},     {"zero_shard_offset", FaultKind::ZeroShardOffset}};

// The option after a variable's colon, "key=<N>" with N a decimal integer in [0, max] (digits only); nullopt otherwise.
std::optional<uint64_t> option_value(const std::string& opt, const std::string& key, uint64_t max) {
  if (opt.rfind(key, 0) != 0) return std::nullopt;
  const std::string digits = opt.substr(key.size());
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  errno = 0;
  const unsigned long long v = std::strtoull(digits.c_str(), nullptr, 10);
  if (errno != 0 || v > max) return std::nullopt;
  return v;
}

Planted parse() {
  Planted p;
  const char* e = std::getenv("HPCT_TEST_FAULT");
  if (!e || !*e) return p;
  const std::string v = e;
  const size_t colon = v.find(':');
  const std::string name = v.substr(0, colon);
  std::string known;
  for (const auto& f : kFaults) {
    known += (known.empty() ? "" : ", ") + std::string(f.name);
    if (name == f.name) {
      p.set = true;
      p.kind = f.kind;
    }
  }
  HPCT_USAGE_CHECK(p.set,
                   "HPCT_TEST_FAULT=\"{}\": unknown fault \"{}\" (one of {}; a test hook: unset it for real runs)", v,
                   name, known);
  if (colon != std::string::npos) {
    const std::string opt = v.substr(colon + 1);
    const std::optional<uint64_t> r = option_value(opt, "rank=", std::numeric_limits<int>::max());
    HPCT_USAGE_CHECK(r.has_value(), "HPCT_TEST_FAULT=\"{}\": \"{}\" is not rank=<R> (R >= 0)", v, opt);
    p.rank = static_cast<int>(*r);
  }
  std::fprintf(
      stderr,
      "WARNING: HPCT_TEST_FAULT=%s plants a defect (a test hook for validation/equivalence.py --plant): this run's "
      "numbers are WRONG by design; unset HPCT_TEST_FAULT for real runs\n",
      e);
  std::fflush(stderr);
  return p;
}

const Planted& planted() {
  static const Planted p = parse();  // read once; thread-safe initialisation
  return p;
}

}  // namespace

bool fault_active(FaultKind kind, int group_rank) {
  const Planted& p = planted();
  return p.set && p.kind == kind && (p.rank < 0 || group_rank < 0 || p.rank == group_rank);
}

void announce_test_fault() {
  (void)planted();
  (void)resume_noise();
}

namespace {

// One relative size: [0, 1), finite.
bool parse_rel(const std::string& text, double& rel) {
  char* end = nullptr;
  errno = 0;
  rel = std::strtod(text.c_str(), &end);
  return !text.empty() && end && *end == '\0' && errno == 0 && std::isfinite(rel) && rel >= 0 && rel < 1;
}

ResumeNoise parse_resume_noise() {
  ResumeNoise n;
  const char* e = std::getenv("HPCT_TEST_RESUME_NOISE");
  if (!e || !*e) return n;
  const std::string v = e;
  const size_t colon = v.find(':');
  const std::string what = v.substr(0, colon);
  if (what.rfind('@', 0) == 0) {  // per tensor, from a file of "<name> <REL>" lines
    const std::string path = what.substr(1);
    std::ifstream f(path);
    HPCT_USAGE_CHECK(f.good(), "HPCT_TEST_RESUME_NOISE=\"{}\": cannot read {} (a test hook: unset it for real runs)", v,
                     path);
    std::string line;
    for (int no = 1; std::getline(f, line); ++no) {
      std::istringstream ls(line);
      std::string name, rel_text, more;
      if (!(ls >> name)) continue;  // a blank line
      double rel = 0;
      HPCT_USAGE_CHECK((ls >> rel_text) && !(ls >> more) && parse_rel(rel_text, rel),
                       "HPCT_TEST_RESUME_NOISE: {} line {}: \"{}\" is not \"<tensor name> <REL in [0, 1)>\"", path, no,
                       line);
      n.per_tensor[name] = rel;
    }
  } else {
    HPCT_USAGE_CHECK(parse_rel(what, n.rel),
                     "HPCT_TEST_RESUME_NOISE=\"{}\": \"{}\" is not a relative size in [0, 1) (REL[:seed=S] or "
                     "@FILE[:seed=S], a test hook: unset it for real runs)",
                     v, what);
  }
  if (colon != std::string::npos) {
    const std::string opt = v.substr(colon + 1);
    const std::optional<uint64_t> s = option_value(opt, "seed=", std::numeric_limits<uint64_t>::max());
    HPCT_USAGE_CHECK(s.has_value(), "HPCT_TEST_RESUME_NOISE=\"{}\": \"{}\" is not seed=<S> (S >= 0)", v, opt);
    n.seed = *s;
  }
  const std::string scope = n.per_tensor.empty()
                                ? fmt::format("every value by up to {:g} relative", n.rel)
                                : fmt::format("{} tensors, each by its own relative size", n.per_tensor.size());
  std::fprintf(stderr,
               "WARNING: HPCT_TEST_RESUME_NOISE=%s perturbs the resumed parameters (%s; a test hook for "
               "validation/gpu_layouts.py's restart control): this run does not continue its checkpoint exactly; "
               "unset HPCT_TEST_RESUME_NOISE for real runs\n",
               e, scope.c_str());
  std::fflush(stderr);
  return n;
}

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

double ResumeNoise::rel_of(const std::string& name) const {
  if (per_tensor.empty()) return rel;
  const auto it = per_tensor.find(name);
  return it == per_tensor.end() ? 0.0 : it->second;
}

const ResumeNoise& resume_noise() {
  static const ResumeNoise n = parse_resume_noise();  // read once; thread-safe initialisation
  return n;
}

void perturb_resumed_box(const ResumeNoise& noise, const std::string& name, const std::vector<int64_t>& shape,
                         const std::vector<int64_t>& offset, const std::vector<int64_t>& count, float* data) {
  const double rel = noise.rel_of(name);
  if (rel == 0) return;
  HPCT_CHECK(shape.size() == offset.size() && shape.size() == count.size(),
             "perturb_resumed_box {}: shape, offset and count of different ranks", name);
  uint64_t key = 0xCBF29CE484222325ull;  // FNV-1a of the name, then the seed mixed in
  for (const unsigned char c : name) key = (key ^ c) * 0x100000001B3ull;
  key = splitmix64(key ^ splitmix64(noise.seed));
  const size_t nd = shape.size();
  if (nd == 0) {  // a scalar: flat index 0
    const double u = static_cast<double>(splitmix64(key) >> 11) * 0x1.0p-52 - 1.0;
    data[0] = static_cast<float>(data[0] * (1.0 + rel * u));
    return;
  }
  for (size_t a = 0; a < nd; ++a)
    HPCT_CHECK(offset[a] >= 0 && count[a] >= 0 && offset[a] + count[a] <= shape[a],
               "perturb_resumed_box {}: the box leaves the tensor on axis {}", name, a);
  std::vector<int64_t> at(nd, 0);  // the box's index of the current row (the last axis runs inside)
  const int64_t row = count[nd - 1];
  int64_t rows = 1;
  for (size_t a = 0; a + 1 < nd; ++a) rows *= count[a];
  if (row == 0) return;
  for (int64_t r = 0; r < rows; ++r) {
    int64_t flat = 0;  // the row's first value's flat index in the whole tensor
    for (size_t a = 0; a < nd; ++a) flat = flat * shape[a] + offset[a] + (a + 1 < nd ? at[a] : 0);
    float* p = data + r * row;
    for (int64_t i = 0; i < row; ++i) {
      const uint64_t bits = splitmix64(key ^ static_cast<uint64_t>(flat + i));
      const double u = static_cast<double>(bits >> 11) * 0x1.0p-52 - 1.0;  // [-1, 1)
      p[i] = static_cast<float>(p[i] * (1.0 + rel * u));
    }
    for (size_t a = nd - 1; a-- > 0;) {  // next row: odometer over the axes before the last
      if (++at[a] < count[a]) break;
      at[a] = 0;
    }
  }
}

}  // namespace hpct
