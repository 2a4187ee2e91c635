#pragma once
// The DP x PP x TP process grid (docs/invariants.md, invariant 2), pure arithmetic (no MPI), unit-tested: the training
// layout's view of a device mesh (parallel/mesh.hpp) of three named axes, which does the arithmetic.
//
// The order string names the three axes from fastest to slowest varying, e.g. "tp-dp-pp" (the default):
//     rank = tp + TP * (dp + DP * pp)
// so a TP group is TP adjacent ranks (one node), a DP group strides by TP, a PP group by TP*DP.
// Any permutation of {tp, dp, pp} is accepted; TP fastest is the recommended one.
#include <array>
#include <string>
#include <vector>

#include "parallel/mesh.hpp"

namespace hpct::parallel {

enum class Axis { TP = 0, DP = 1, PP = 2 };
const char* axis_name(Axis a);

struct Coord {
  int tp = 0, dp = 0, pp = 0;
  int get(Axis a) const { return a == Axis::TP ? tp : a == Axis::DP ? dp : pp; }
  void set(Axis a, int v) { (a == Axis::TP ? tp : a == Axis::DP ? dp : pp) = v; }
  bool operator==(const Coord&) const = default;
};

// One rank's place in the model-parallel part of the grid: what a model needs to hold its shards (its TP shard of
// every tensor, its pipeline stage's layers). Data parallelism does not change the model's layout.
struct ModelParallel {
  int tp = 1, tp_rank = 0, pp = 1, pp_rank = 0;
  // sequence parallelism (parallel.sp, tp > 1): the activations outside the TP regions are sharded by token rows
  // over the TP group (parallel/tp_collectives.hpp); the parameters are laid out as without it
  bool sp = false;
  // model chunks per pipeline rank (parallel.virtual_stages, the interleaved schedule): chunk c of rank pp_rank is
  // virtual stage c * pp + pp_rank of the pp * virtual_stages the layers are cut into
  int virtual_stages = 1;
};

class Grid {
 public:
  // world = TP * DP * PP, DP derived. Throws UsageError naming `where` (the deck and keys) when the
  // sizes do not divide the world or the order string is not a permutation of tp, dp, pp.
  Grid(int world, int tp, int pp, const std::string& order = "tp-dp-pp", const std::string& where = "");

  int world() const { return world_; }
  int tp() const { return size_[0]; }
  int dp() const { return size_[1]; }
  int pp() const { return size_[2]; }
  int size(Axis a) const { return size_[static_cast<int>(a)]; }
  const std::string& order() const { return order_str_; }

  Coord coord_of(int rank) const;
  int rank_of(const Coord& c) const;
  // The ranks of `rank`'s group along axis a (the other two coordinates fixed), ordered by the
  // coordinate on a; `rank` sits at position coord_of(rank).get(a).
  std::vector<int> group(Axis a, int rank) const;
  // A number identifying the group along a that contains rank (equal for all of its members), in
  // [0, world / size(a)): the colour for MPI_Comm_split.
  int group_id(Axis a, int rank) const;
  std::string describe() const;  // "world 8 = tp 2 x dp 2 x pp 2 (order tp-dp-pp)"
  // The mesh of the three axes, in parallel.order (fastest first).
  const Mesh& mesh() const { return mesh_; }

 private:
  // The sizes (indexed by Axis) and the order (fastest first) that the public constructor validates and parses.
  struct Shape {
    std::array<int, 3> size;
    std::array<Axis, 3> order;
  };
  static Shape parse(int world, int tp, int pp, const std::string& order, const std::string& where);
  Grid(int world, const std::string& order, const Shape& shape);

  int world_;
  std::array<int, 3> size_;    // indexed by Axis
  std::array<Axis, 3> order_;  // fastest first
  std::string order_str_;
  Mesh mesh_;
};

}  // namespace hpct::parallel
