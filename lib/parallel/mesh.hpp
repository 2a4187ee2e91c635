#pragma once
// A device mesh: the world's ranks laid out on named axes (docs/parallelism.md), pure arithmetic (no MPI),
// unit-tested. The axes are listed fastest-varying first, so with sizes n0, n1, ...
//     rank = c0 + n0 * (c1 + n1 * (c2 + ...))
// The training grid (parallel/grid.hpp: tp, dp, pp in parallel.order) is one mesh; another parallel axis (context or
// expert parallelism, a split of dp into replicas and shards) is one more named axis here, and its groups come from
// group() / group_over() like the others'.
#include <string>
#include <vector>

namespace hpct::parallel {

class Mesh {
 public:
  struct Axis {
    std::string name;
    int size = 1;
  };
  // Names non-empty and distinct, sizes >= 1 (a wiring error otherwise: user input is validated by whoever reads it,
  // as Grid does for the deck's keys).
  explicit Mesh(std::vector<Axis> fastest_first);

  int world() const { return world_; }
  const std::vector<Axis>& axes() const { return axes_; }
  // The axis' position in axes(); an error naming the mesh's axes when it has none of that name.
  int index(const std::string& axis) const;
  int size(const std::string& axis) const { return axes_[static_cast<size_t>(index(axis))].size; }

  // A rank's coordinate on every axis, in axes() order, and back.
  std::vector<int> coord_of(int rank) const;
  int rank_of(const std::vector<int>& coord) const;
  int coord(int rank, const std::string& axis) const { return coord_of(rank)[static_cast<size_t>(index(axis))]; }

  // The ranks that differ from `rank` only along `axes` (its group over them), ordered with the first listed axis
  // fastest: along one axis, ordered by the coordinate on it, `rank` at position coord(rank, axis).
  std::vector<int> group_over(const std::vector<std::string>& axes, int rank) const;
  std::vector<int> group(const std::string& axis, int rank) const { return group_over({axis}, rank); }
  // A number identifying that group (equal for all of its members), in [0, world / (product of the axes' sizes)):
  // the colour for MPI_Comm_split.
  int group_id_over(const std::vector<std::string>& axes, int rank) const;
  int group_id(const std::string& axis, int rank) const { return group_id_over({axis}, rank); }

  std::string describe() const;  // "tp 2 x dp 2 x pp 2" (fastest first)

 private:
  std::vector<Axis> axes_;
  int world_ = 1;
};

}  // namespace hpct::parallel
