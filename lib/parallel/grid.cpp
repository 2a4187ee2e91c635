#include "parallel/grid.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <sstream>

#include "core/error.hpp"

namespace hpct::parallel {

const char* axis_name(Axis a) { return a == Axis::TP ? "tp" : a == Axis::DP ? "dp" : "pp"; }

namespace {
// The three axes in `order` (fastest first) with their sizes (indexed by Axis), as a mesh.
Mesh grid_mesh(const std::array<Axis, 3>& order, const std::array<int, 3>& size) {
  std::vector<Mesh::Axis> axes;
  for (Axis a : order) axes.push_back({axis_name(a), size[static_cast<size_t>(a)]});
  return Mesh(std::move(axes));
}
}  // namespace

Grid::Grid(int world, int tp, int pp, const std::string& order, const std::string& where)
    : Grid(world, order, parse(world, tp, pp, order, where)) {}

Grid::Grid(int world, const std::string& order, const Shape& shape)
    : world_(world), size_(shape.size), order_(shape.order), order_str_(order), mesh_(grid_mesh(order_, size_)) {}

Grid::Shape Grid::parse(int world, int tp, int pp, const std::string& order, const std::string& where) {
  const std::string at = where.empty() ? std::string() : where + ": ";
  HPCT_USAGE_CHECK(world >= 1, "{}world size {} must be >= 1", at, world);
  HPCT_USAGE_CHECK(tp >= 1 && pp >= 1, "{}parallel.tp = {} and parallel.pp = {} must be >= 1", at, tp, pp);
  HPCT_USAGE_CHECK(world % (tp * pp) == 0,
                   "{}the world size {} is not divisible by parallel.tp x parallel.pp = {} x {}; launch a multiple "
                   "of {} ranks or change parallel.tp / parallel.pp",
                   at, world, tp, pp, tp * pp);
  Shape shape{{tp, world / (tp * pp), pp}, {}};
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
    shape.order[i] = a;
  }
  HPCT_USAGE_CHECK(ok,
                   "{}parallel.order = \"{}\" is not a permutation of tp, dp, pp joined by '-' (fastest first), "
                   "e.g. \"tp-dp-pp\"",
                   at, order);
  return shape;
}

Coord Grid::coord_of(int rank) const {
  const std::vector<int> m = mesh_.coord_of(rank);
  Coord c;
  for (size_t i = 0; i < order_.size(); ++i) c.set(order_[i], m[i]);
  return c;
}

int Grid::rank_of(const Coord& c) const {
  std::vector<int> m;
  for (Axis a : order_) m.push_back(c.get(a));
  return mesh_.rank_of(m);
}

std::vector<int> Grid::group(Axis a, int rank) const { return mesh_.group(axis_name(a), rank); }

int Grid::group_id(Axis a, int rank) const { return mesh_.group_id(axis_name(a), rank); }

std::string Grid::describe() const {
  return fmt::format("world {} = tp {} x dp {} x pp {} (order {})", world_, tp(), dp(), pp(), order_str_);
}

}  // namespace hpct::parallel
