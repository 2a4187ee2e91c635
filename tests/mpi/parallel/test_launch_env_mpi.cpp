// Under mpirun at np 1, 2, 4 on one machine: read_launch_env's node-local rank and size (MPI_COMM_TYPE_SHARED),
// nodes_mpi, Open MPI's local rank, the mismatch warnings counted over the world (exact counts), and the srun
// wire-up error raised on every rank before any collective (so the test ends instead of hanging).
#include <gtest/gtest.h>
#include <mpi.h>

#include <map>
#include <string>

#include "comm/comm.hpp"
#include "core/error.hpp"
#include "parallel/launch_env.hpp"
#include "../mpi_test_util.hpp"

using namespace hpct;
using namespace hpct::parallel;

namespace {

using test::world_rank;
using test::world_size;

using Env = std::map<std::string, std::string>;
GetEnv from(const Env& env) {
  return [&env](const char* name) -> const char* {
    const auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
}

comm::CommOptions opts() {
  comm::CommOptions o;
  o.timeout_s = 60.0;
  return o;
}

}  // namespace

TEST(LaunchEnvMpi, OneMachineUnderMpirun) {
  auto world = comm::make_world_communicator(opts());
  const LaunchEnv e = read_launch_env(*world);  // the real environment: mpirun here
  const int rank = world_rank(), n = world_size();
  EXPECT_EQ(e.world_rank, rank);
  EXPECT_EQ(e.world_size, n);
  EXPECT_EQ(e.local_rank, rank);  // one machine: the node is the world, ordered by world rank
  EXPECT_EQ(e.local_size, n);
  EXPECT_EQ(e.nodes_mpi, 1);
  EXPECT_EQ(e.launcher, "mpirun");
  ASSERT_TRUE(e.launcher_local_rank);
  EXPECT_EQ(*e.launcher_local_rank, rank);  // OMPI_COMM_WORLD_LOCAL_RANK
  EXPECT_TRUE(e.warnings.empty()) << (e.warnings.empty() ? "" : e.warnings[0]);
  EXPECT_FALSE(e.host.empty());
  EXPECT_NE(describe(e).find("mpirun"), std::string::npos) << describe(e);
  EXPECT_NE(describe(e).find(" | rank " + std::to_string(rank) + " on " + e.host + ", local rank " +
                             std::to_string(rank) + " of " + std::to_string(n)),
            std::string::npos)
      << describe(e);
}

TEST(LaunchEnvMpi, MismatchWarningsAreCountedOverTheWorld) {
  // an srun step whose task ids and local ids are shifted by one against MPI's: every rank differs when n > 1
  const int rank = world_rank(), n = world_size();
  const Env env{{"SLURM_JOB_ID", "5"},
                {"SLURM_STEP_ID", "0"},
                {"SLURM_STEP_NUM_TASKS", std::to_string(n)},
                {"SLURM_PROCID", std::to_string((rank + 1) % n)},
                {"SLURM_LOCALID", std::to_string((rank + 1) % n)}};
  auto world = comm::make_world_communicator(opts());
  const LaunchEnv e = read_launch_env(*world, from(env));
  EXPECT_EQ(e.launcher, "srun");
  EXPECT_EQ(e.nodes_mpi, 1);
  if (n == 1) {
    EXPECT_TRUE(e.warnings.empty());
    return;
  }
  ASSERT_EQ(e.warnings.size(), 2u);
  const std::string all = " on " + std::to_string(n) + " of " + std::to_string(n) + " ranks";
  EXPECT_NE(e.warnings[0].find("SLURM_PROCID differs from the MPI rank" + all), std::string::npos) << e.warnings[0];
  EXPECT_NE(e.warnings[1].find("SLURM_LOCALID) differs from MPI's node-local rank" + all), std::string::npos)
      << e.warnings[1];

  // only rank 0 shifted: one of n
  Env one = env;
  one["SLURM_PROCID"] = std::to_string(rank == 0 ? n - 1 : rank);
  one["SLURM_LOCALID"] = std::to_string(rank);
  const LaunchEnv e1 = read_launch_env(*world, from(one));
  ASSERT_EQ(e1.warnings.size(), 1u);
  EXPECT_NE(e1.warnings[0].find("on 1 of " + std::to_string(n) + " ranks"), std::string::npos) << e1.warnings[0];
}

TEST(LaunchEnvMpi, UnwiredSrunFailsOnEveryRankBeforeAnyCollective) {
  const int n = world_size();
  const Env env{{"SLURM_PROCID", "0"}, {"SLURM_STEP_NUM_TASKS", std::to_string(n + 1)}};
  auto world = comm::make_world_communicator(opts());
  try {
    read_launch_env(*world, from(env));
    ADD_FAILURE() << "no UsageError";
  } catch (const UsageError& e) {
    EXPECT_NE(e.cause().find("srun started " + std::to_string(n + 1) + " tasks"), std::string::npos) << e.cause();
  }
  world->barrier("after the expected error");  // every rank got here: none waits in a collective of read_launch_env
}
