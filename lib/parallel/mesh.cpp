#include "parallel/mesh.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.hpp"

namespace hpct::parallel {

Mesh::Mesh(std::vector<Axis> fastest_first) : axes_(std::move(fastest_first)) {
  HPCT_CHECK(!axes_.empty(), "a mesh needs at least one axis");
  for (size_t i = 0; i < axes_.size(); ++i) {
    HPCT_CHECK(!axes_[i].name.empty() && axes_[i].size >= 1,
               "mesh axis {} (\"{}\") of size {}: names must be "
               "non-empty and sizes >= 1",
               i, axes_[i].name, axes_[i].size);
    for (size_t j = 0; j < i; ++j)
      HPCT_CHECK(axes_[j].name != axes_[i].name, "mesh axis \"{}\" named twice", axes_[i].name);
    world_ *= axes_[i].size;
  }
}

int Mesh::index(const std::string& axis) const {
  for (size_t i = 0; i < axes_.size(); ++i)
    if (axes_[i].name == axis) return static_cast<int>(i);
  HPCT_FAIL("the mesh {} has no axis \"{}\"", describe(), axis);
}

std::vector<int> Mesh::coord_of(int rank) const {
  HPCT_CHECK(rank >= 0 && rank < world_, "rank {} outside the world of {}", rank, world_);
  std::vector<int> c(axes_.size());
  for (size_t i = 0; i < axes_.size(); ++i) {
    c[i] = rank % axes_[i].size;
    rank /= axes_[i].size;
  }
  return c;
}

int Mesh::rank_of(const std::vector<int>& coord) const {
  HPCT_CHECK(coord.size() == axes_.size(), "a coordinate of {} values on a mesh of {} axes", coord.size(),
             axes_.size());
  int rank = 0, stride = 1;
  for (size_t i = 0; i < axes_.size(); ++i) {
    HPCT_CHECK(coord[i] >= 0 && coord[i] < axes_[i].size, "{} coordinate {} outside [0, {})", axes_[i].name, coord[i],
               axes_[i].size);
    rank += coord[i] * stride;
    stride *= axes_[i].size;
  }
  return rank;
}

std::vector<int> Mesh::group_over(const std::vector<std::string>& axes, int rank) const {
  std::vector<int> along;
  for (const std::string& a : axes) along.push_back(index(a));
  std::vector<int> c = coord_of(rank);
  int members = 1;
  for (int i : along) members *= axes_[static_cast<size_t>(i)].size;
  std::vector<int> ranks;
  for (int m = 0; m < members; ++m) {  // m's digits over `along`, the first axis fastest
    int rest = m;
    for (int i : along) {
      c[static_cast<size_t>(i)] = rest % axes_[static_cast<size_t>(i)].size;
      rest /= axes_[static_cast<size_t>(i)].size;
    }
    ranks.push_back(rank_of(c));
  }
  return ranks;
}

int Mesh::group_id_over(const std::vector<std::string>& axes, int rank) const {
  std::vector<bool> along(axes_.size(), false);
  for (const std::string& a : axes) along[static_cast<size_t>(index(a))] = true;
  const std::vector<int> c = coord_of(rank);
  // the coordinates on the other axes, as one number (axes() order, fastest first)
  int id = 0, stride = 1;
  for (size_t i = 0; i < axes_.size(); ++i) {
    if (along[i]) continue;
    id += c[i] * stride;
    stride *= axes_[i].size;
  }
  return id;
}

std::string Mesh::describe() const {
  std::string s;
  for (const Axis& a : axes_) s += fmt::format("{}{} {}", s.empty() ? "" : " x ", a.name, a.size);
  return s;
}

}  // namespace hpct::parallel
