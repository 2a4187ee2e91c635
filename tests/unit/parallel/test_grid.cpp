// The DP x PP x TP grid: the documented formula rank = tp + TP*(dp + DP*pp) for order tp-dp-pp, the
// groups of every axis for every world size up to 24, other orders, and layout errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "core/error.hpp"
#include "parallel/grid.hpp"

using namespace hpct::parallel;

TEST(Grid, DefaultOrderFormula) {
  const Grid g(16, 2, 2);  // tp 2, dp 4, pp 2
  EXPECT_EQ(g.tp(), 2);
  EXPECT_EQ(g.dp(), 4);
  EXPECT_EQ(g.pp(), 2);
  for (int pp = 0; pp < 2; ++pp)
    for (int dp = 0; dp < 4; ++dp)
      for (int tp = 0; tp < 2; ++tp) {
        const int rank = tp + 2 * (dp + 4 * pp);
        const Coord c = g.coord_of(rank);
        EXPECT_EQ(c, (Coord{tp, dp, pp})) << "rank " << rank;
        EXPECT_EQ(g.rank_of(c), rank);
      }
  // a TP group is adjacent ranks, DP strides by TP, PP by TP*DP
  EXPECT_EQ(g.group(Axis::TP, 5), (std::vector<int>{4, 5}));
  EXPECT_EQ(g.group(Axis::DP, 5), (std::vector<int>{1, 3, 5, 7}));
  EXPECT_EQ(g.group(Axis::PP, 5), (std::vector<int>{5, 13}));
}

TEST(Grid, GroupsPartitionTheWorldForEverySplit) {
  for (int world = 1; world <= 24; ++world)
    for (int tp = 1; tp <= world; ++tp)
      for (int pp = 1; pp <= world; ++pp) {
        if (world % (tp * pp)) continue;
        for (const char* order : {"tp-dp-pp", "pp-dp-tp", "dp-tp-pp"}) {
          const Grid g(world, tp, pp, order);
          for (Axis a : {Axis::TP, Axis::DP, Axis::PP}) {
            std::set<int> seen_ids;
            std::vector<int> covered(static_cast<size_t>(world), 0);
            for (int r = 0; r < world; ++r) {
              const auto grp = g.group(a, r);
              ASSERT_EQ(static_cast<int>(grp.size()), g.size(a));
              // r sits at its coordinate; every member shares the group id and the other coordinates
              EXPECT_EQ(grp[static_cast<size_t>(g.coord_of(r).get(a))], r);
              for (int m : grp) EXPECT_EQ(g.group_id(a, m), g.group_id(a, r));
              const int id = g.group_id(a, r);
              EXPECT_GE(id, 0);
              EXPECT_LT(id, world / g.size(a));
              if (g.coord_of(r).get(a) == 0) {
                EXPECT_TRUE(seen_ids.insert(id).second) << "two groups share id " << id;
                for (int m : grp) ++covered[static_cast<size_t>(m)];
              }
            }
            for (int c : covered) EXPECT_EQ(c, 1) << "world " << world << " axis " << axis_name(a);
          }
        }
      }
}

TEST(Grid, OtherOrderPutsThatAxisFastest) {
  const Grid g(8, 2, 2, "pp-dp-tp");  // pp fastest: rank = pp + PP*(dp + DP*tp)
  EXPECT_EQ(g.coord_of(1), (Coord{0, 0, 1}));
  EXPECT_EQ(g.coord_of(2), (Coord{0, 1, 0}));
  EXPECT_EQ(g.coord_of(4), (Coord{1, 0, 0}));
}

TEST(Grid, ImpossibleLayoutsAreUsageErrors) {
  EXPECT_THROW(Grid(6, 4, 1), hpct::UsageError);
  EXPECT_THROW(Grid(8, 2, 3), hpct::UsageError);
  EXPECT_THROW(Grid(4, 1, 1, "tp-dp"), hpct::UsageError);
  EXPECT_THROW(Grid(4, 1, 1, "tp-tp-pp"), hpct::UsageError);
  try {
    Grid(6, 4, 1, "tp-dp-pp", "deck x.toml");
    FAIL();
  } catch (const hpct::UsageError& e) {
    EXPECT_NE(e.cause().find("not divisible by parallel.tp x parallel.pp = 4 x 1"), std::string::npos) << e.cause();
    EXPECT_NE(e.cause().find("deck x.toml"), std::string::npos);
  }
}
