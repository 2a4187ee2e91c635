#include "parallel/grid.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <sstream>

#include "core/error.hpp"

namespace hpct::parallel {

const char* axis_name(Axis a) { return a == Axis::TP ? "tp" : a == Axis::DP ? "dp" : "pp"; }

Grid::Grid(int world, int tp, int pp, const std::string& order, const std::string& where) : world_(world) {
  const std::string at = where.empty() ? std::string() : where + ": ";
  HPCT_USAGE_CHECK(world >= 1, "{}world size {} must be >= 1", at, world);
  HPCT_USAGE_CHECK(tp >= 1 && pp >= 1, "{}parallel.tp = {} and parallel.pp = {} must be >= 1", at, tp, pp);
  HPCT_USAGE_CHECK(world % (tp * pp) == 0,
                   "{}the world size {} is not divisible by parallel.tp x parallel.pp = {} x {}; launch a multiple "
                   "of {} ranks or change parallel.tp / parallel.pp",
                   at, world, tp, pp, tp * pp);
  size_ = {tp, world / (tp * pp), pp};
  // parse "a-b-c"
  std::vector<std::string> parts;
  std::stringstream ss(order);
  for (std::string item; std::getline(ss, item, '-');) parts.push_back(item);
  bool ok = parts.size() == 3;
  std::array<bool, 3> seen{false, false, false};
  for (size_t i = 0; ok && i < 3; ++i) {
    Axis a;
    if (parts[i] == "tp") a = Axis::TP;
    else if (parts[i] == "dp")
      a = Axis::DP;
    else if (parts[i] == "pp")
      a = Axis::PP;
    else {
      ok = false;
      break;
    }
    if (seen[static_cast<int>(a)]) {
      ok = false;
      break;
    }
    seen[static_cast<int>(a)] = true;
    order_[i] = a;
  }
  HPCT_USAGE_CHECK(ok,
                   "{}parallel.order = \"{}\" is not a permutation of tp, dp, pp joined by '-' (fastest first), "
                   "e.g. \"tp-dp-pp\"",
                   at, order);
  order_str_ = order;
}

Coord Grid::coord_of(int rank) const {
  HPCT_CHECK(rank >= 0 && rank < world_, "rank {} outside the world of {}", rank, world_);
  Coord c;
  int r = rank;
  for (Axis a : order_) {
    c.set(a, r % size(a));
    r /= size(a);
  }
  return c;
}

int Grid::rank_of(const Coord& c) const {
  int rank = 0, stride = 1;
  for (Axis a : order_) {
    HPCT_CHECK(c.get(a) >= 0 && c.get(a) < size(a), "{} coordinate {} outside [0, {})", axis_name(a), c.get(a),
               size(a));
    rank += c.get(a) * stride;
    stride *= size(a);
  }
  return rank;
}

std::vector<int> Grid::group(Axis a, int rank) const {
  Coord c = coord_of(rank);
  std::vector<int> ranks;
  for (int i = 0; i < size(a); ++i) {
    c.set(a, i);
    ranks.push_back(rank_of(c));
  }
  return ranks;
}

int Grid::group_id(Axis a, int rank) const {
  Coord c = coord_of(rank);
  c.set(a, 0);
  // the rank of the group's first member, compressed to [0, world / size(a))
  int id = 0, stride = 1;
  for (Axis b : order_) {
    if (b == a) continue;
    id += c.get(b) * stride;
    stride *= size(b);
  }
  return id;
}

std::string Grid::describe() const {
  return fmt::format("world {} = tp {} x dp {} x pp {} (order {})", world_, tp(), dp(), pp(), order_str_);
}

}  // namespace hpct::parallel
