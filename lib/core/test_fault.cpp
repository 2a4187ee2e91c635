#include "core/test_fault.hpp"

#include <cstdio>
#include <cstdlib>
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
    char* end = nullptr;
    const long r = opt.rfind("rank=", 0) == 0 ? std::strtol(opt.c_str() + 5, &end, 10) : -1;
    HPCT_USAGE_CHECK(end && *end == '\0' && end != opt.c_str() + 5 && r >= 0,
                     "HPCT_TEST_FAULT=\"{}\": \"{}\" is not rank=<R> (R >= 0)", v, opt);
    p.rank = static_cast<int>(r);
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

void announce_test_fault() { (void)planted(); }

}  // namespace hpct
