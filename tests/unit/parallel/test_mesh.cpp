// The device mesh of named axes (parallel/mesh.hpp): the formula rank = c0 + n0 * (c1 + n1 * ...) on a four-axis mesh
// (a fourth axis beside tp, dp, pp), groups along one and several axes partitioning the world with distinct colours,
// and the errors of a malformed mesh. The three-axis Grid on top of it is test_grid.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "parallel/mesh.hpp"

using namespace hpct::parallel;

namespace {
// tp 2 (fastest), cp 3 (a context-parallel axis), dp 2, pp 2
Mesh four_axes() { return Mesh({{"tp", 2}, {"cp", 3}, {"dp", 2}, {"pp", 2}}); }
}  // namespace

TEST(Mesh, FormulaOnFourAxes) {
  const Mesh m = four_axes();
  EXPECT_EQ(m.world(), 24);
  EXPECT_EQ(m.describe(), "tp 2 x cp 3 x dp 2 x pp 2");
  EXPECT_EQ(m.size("cp"), 3);
  for (int pp = 0; pp < 2; ++pp)
    for (int dp = 0; dp < 2; ++dp)
      for (int cp = 0; cp < 3; ++cp)
        for (int tp = 0; tp < 2; ++tp) {
          const int rank = tp + 2 * (cp + 3 * (dp + 2 * pp));
          EXPECT_EQ(m.coord_of(rank), (std::vector<int>{tp, cp, dp, pp})) << "rank " << rank;
          EXPECT_EQ(m.rank_of({tp, cp, dp, pp}), rank);
          EXPECT_EQ(m.coord(rank, "dp"), dp);
        }
  EXPECT_EQ(m.group("tp", 7), (std::vector<int>{6, 7}));
  EXPECT_EQ(m.group("cp", 7), (std::vector<int>{7, 9, 11}));  // tp 1, dp 1: cp strides by tp
  EXPECT_EQ(m.group("pp", 7), (std::vector<int>{7, 19}));
  // several axes: the first listed fastest
  EXPECT_EQ(m.group_over({"tp", "cp"}, 7), (std::vector<int>{6, 7, 8, 9, 10, 11}));
  EXPECT_EQ(m.group_over({"cp", "tp"}, 7), (std::vector<int>{6, 8, 10, 7, 9, 11}));
}

TEST(Mesh, GroupsPartitionTheWorldWithDistinctColours) {
  const Mesh m = four_axes();
  const std::vector<std::vector<std::string>> choices = {
      {"tp"}, {"cp"}, {"dp"}, {"pp"}, {"tp", "cp"}, {"dp", "pp"}, {"cp", "dp", "pp"}};
  for (const auto& axes : choices) {
    int members = 1;
    for (const auto& a : axes) members *= m.size(a);
    std::set<int> seen, colours;
    for (int r = 0; r < m.world(); ++r) {
      const std::vector<int> g = m.group_over(axes, r);
      ASSERT_EQ(static_cast<int>(g.size()), members);
      const int id = m.group_id_over(axes, r);
      EXPECT_GE(id, 0);
      EXPECT_LT(id, m.world() / members);
      for (int q : g) {
        EXPECT_EQ(m.group_id_over(axes, q), id) << "a group's members share its colour";
        EXPECT_EQ(m.group_over(axes, q), g) << "every member sees the same group";
      }
      if (g.front() == r) {  // count each group once, at its first member
        for (int q : g) EXPECT_TRUE(seen.insert(q).second) << "rank " << q << " in two groups";
        EXPECT_TRUE(colours.insert(id).second) << "two groups share colour " << id;
      }
    }
    EXPECT_EQ(static_cast<int>(seen.size()), m.world()) << "the groups cover the world";
  }
}

TEST(Mesh, MalformedMeshesAndUnknownAxesAreErrors) {
  EXPECT_THROW(Mesh({}), hpct::Error);
  EXPECT_THROW(Mesh({{"tp", 0}}), hpct::Error);
  EXPECT_THROW(Mesh({{"tp", 2}, {"tp", 2}}), hpct::Error);
  EXPECT_THROW(Mesh({{"", 2}}), hpct::Error);
  const Mesh m = four_axes();
  try {
    m.size("ep");
    FAIL() << "an unknown axis";
  } catch (const hpct::Error& e) {
    EXPECT_NE(std::string(e.what()).find("tp 2 x cp 3 x dp 2 x pp 2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(m.coord_of(24), hpct::Error);
  EXPECT_THROW(m.rank_of({0, 3, 0, 0}), hpct::Error);
}
