#include "models/recompute.hpp"

#include "core/error.hpp"

namespace hpct::models {

Recompute parse_recompute(const std::string& s, const std::string& where) {
  if (s == "none") return Recompute::None;
  if (s == "selective") return Recompute::Selective;
  if (s == "full") return Recompute::Full;
  HPCT_USAGE_FAIL("{}: train.recompute = \"{}\" is not a recompute mode; use none, selective or full", where, s);
}

const char* recompute_name(Recompute r) {
  switch (r) {
    case Recompute::None: return "none";
    case Recompute::Selective: return "selective";
    case Recompute::Full: return "full";
  }
  return "?";
}

}  // namespace hpct::models
