// The launch environment (parallel/launch_env.hpp) from injected variables: no scheduler, an srun step, mpirun inside
// a Slurm allocation, the batch script itself, malformed integers (UsageError naming the variable and value), the
// srun wire-up check (UsageError), and the log line. Pure: no MPI launch needed.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "core/error.hpp"
#include "parallel/launch_env.hpp"

using namespace hpct;
using namespace hpct::parallel;

namespace {

using Env = std::map<std::string, std::string>;

GetEnv from(const Env& env) {
  return [&env](const char* name) -> const char* {
    const auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
}

// The message of the UsageError that parse_launch_env throws ("" when it does not throw or throws something else).
std::string usage_error(const Env& env, int rank, int world) {
  try {
    parse_launch_env(from(env), rank, world);
  } catch (const UsageError& e) {
    return e.cause();
  } catch (...) {
    return "(not a UsageError)";
  }
  return "";
}

// An srun step of 4 tasks on 2 nodes, as Slurm 22.05 sets it (task 2: the first task of the second node).
Env srun_env() {
  return {{"SLURM_JOB_ID", "123"},       {"SLURM_JOB_NAME", "hpct-gpt"}, {"SLURM_JOB_NODELIST", "vm[01-02]"},
          {"SLURM_JOB_NUM_NODES", "2"},  {"SLURM_STEP_ID", "0"},         {"SLURM_RESTART_COUNT", "1"},
          {"SLURM_CPUS_PER_TASK", "4"},  {"SLURM_PROCID", "2"},          {"SLURM_LOCALID", "0"},
          {"SLURM_STEP_NUM_TASKS", "4"}, {"SLURM_NTASKS", "4"},          {"SLURM_NODEID", "1"}};
}

}  // namespace

TEST(LaunchEnv, NoScheduler) {
  const Env env;
  LaunchEnv e = parse_launch_env(from(env), 0, 1);
  EXPECT_EQ(e.scheduler, "none");
  EXPECT_EQ(e.launcher, "other");
  EXPECT_FALSE(e.job_id);
  EXPECT_EQ(e.restart_count, 0);
  EXPECT_FALSE(e.launcher_local_rank);
  EXPECT_TRUE(e.warnings.empty());
  e.host = "h1";
  EXPECT_EQ(describe(e), "launch: no scheduler, started directly, 1 node | rank 0 on h1, local rank 0 of 1");
}

TEST(LaunchEnv, MpirunWithoutScheduler) {
  const Env env{{"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}};
  LaunchEnv e = parse_launch_env(from(env), 1, 2);
  EXPECT_EQ(e.scheduler, "none");
  EXPECT_EQ(e.launcher, "mpirun");
  ASSERT_TRUE(e.launcher_local_rank);
  EXPECT_EQ(*e.launcher_local_rank, 1);
  EXPECT_EQ(e.launcher_local_rank_var, "OMPI_COMM_WORLD_LOCAL_RANK");
  e.host = "h1";
  e.local_rank = 1;
  e.local_size = 2;
  EXPECT_EQ(describe(e), "launch: no scheduler, mpirun, 1 node | rank 1 on h1, local rank 1 of 2");
}

TEST(LaunchEnv, SrunStep) {
  const Env env = srun_env();
  LaunchEnv e = parse_launch_env(from(env), 2, 4);
  EXPECT_EQ(e.scheduler, "slurm");
  EXPECT_EQ(e.launcher, "srun");
  EXPECT_EQ(e.job_id, 123);
  EXPECT_EQ(e.job_name, "hpct-gpt");
  EXPECT_EQ(e.node_list, "vm[01-02]");
  EXPECT_EQ(e.job_num_nodes, 2);
  EXPECT_EQ(e.step_id, 0);
  EXPECT_EQ(e.restart_count, 1);
  EXPECT_EQ(e.cpus_per_task, 4);
  EXPECT_EQ(e.slurm_procid, 2);
  EXPECT_EQ(e.slurm_tasks, 4);
  EXPECT_EQ(e.slurm_tasks_var, "SLURM_STEP_NUM_TASKS");
  EXPECT_EQ(e.launcher_local_rank, 0);
  EXPECT_EQ(e.launcher_local_rank_var, "SLURM_LOCALID");
  EXPECT_FALSE(e.array_job_id);
  EXPECT_TRUE(e.warnings.empty());
  // what read_launch_env adds from MPI on this rank
  e.host = "vm02";
  e.local_rank = 0;
  e.local_size = 2;
  e.nodes_mpi = 2;
  EXPECT_EQ(describe(e), "launch: slurm job 123 'hpct-gpt' (restart 1) step 0 via srun on vm[01-02] (2 nodes; MPI sees "
                         "2) | rank 2 on vm02, local rank 0 of 2, 4 CPUs per task");
}

TEST(LaunchEnv, ArrayJobFirstStart) {
  Env env = srun_env();
  env["SLURM_ARRAY_JOB_ID"] = "120";
  env["SLURM_ARRAY_TASK_ID"] = "3";
  env.erase("SLURM_RESTART_COUNT");  // Slurm sets it only after a requeue
  env.erase("SLURM_JOB_NAME");
  env.erase("SLURM_CPUS_PER_TASK");
  LaunchEnv e = parse_launch_env(from(env), 2, 4);
  EXPECT_EQ(e.array_job_id, 120);
  EXPECT_EQ(e.array_task_id, 3);
  EXPECT_EQ(e.restart_count, 0);
  e.host = "vm02";
  e.nodes_mpi = 2;
  EXPECT_EQ(describe(e), "launch: slurm job 123 (array 120_3) (restart 0) step 0 via srun on vm[01-02] (2 nodes; MPI "
                         "sees 2) | rank 2 on vm02, local rank 0 of 1");
}

TEST(LaunchEnv, MpirunInsideSlurm) {
  // the batch script's variables (SLURM_PROCID=0 on every rank mpirun starts) plus mpirun's own
  const Env env{{"SLURM_JOB_ID", "77"},        {"SLURM_JOB_NODELIST", "node[01-02]"},
                {"SLURM_JOB_NUM_NODES", "2"},  {"SLURM_NTASKS", "4"},
                {"SLURM_PROCID", "0"},         {"SLURM_LOCALID", "0"},
                {"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}};
  LaunchEnv e = parse_launch_env(from(env), 3, 4);  // no wire-up check, although SLURM_PROCID is not the rank
  EXPECT_EQ(e.scheduler, "slurm");
  EXPECT_EQ(e.launcher, "mpirun");
  EXPECT_EQ(e.job_id, 77);
  EXPECT_FALSE(e.step_id);
  EXPECT_EQ(e.launcher_local_rank, 1);  // Open MPI's, not the batch script's SLURM_LOCALID
  EXPECT_EQ(e.launcher_local_rank_var, "OMPI_COMM_WORLD_LOCAL_RANK");
  EXPECT_TRUE(e.warnings.empty());
  e.host = "node02";
  e.local_rank = 1;
  e.local_size = 2;
  e.nodes_mpi = 2;
  EXPECT_EQ(describe(e), "launch: slurm job 77 (restart 0) via mpirun on node[01-02] (2 nodes; MPI sees 2) | rank 3 on "
                         "node02, local rank 1 of 2");
}

TEST(LaunchEnv, BatchScriptDirectStartWarns) {
  // the train binary run directly in the batch script of a 2-task job: Slurm's SLURM_PROCID=0 but no step
  const Env env{{"SLURM_JOB_ID", "4"},  {"SLURM_NTASKS", "2"},        {"SLURM_PROCID", "0"},
                {"SLURM_LOCALID", "0"}, {"SLURM_JOB_NUM_NODES", "1"}, {"SLURM_JOB_NODELIST", "vm"}};
  const LaunchEnv e = parse_launch_env(from(env), 0, 1);
  EXPECT_EQ(e.launcher, "other");
  ASSERT_EQ(e.warnings.size(), 1u);
  EXPECT_NE(e.warnings[0].find("SLURM_NTASKS=2"), std::string::npos) << e.warnings[0];
  EXPECT_NE(e.warnings[0].find("MPI sees a world of 1"), std::string::npos) << e.warnings[0];
  EXPECT_NE(describe(e).find("(restart 0) started directly on vm (1 node; MPI sees 1)"), std::string::npos)
      << describe(e);
  // a one-task job started directly is fine
  Env one = env;
  one["SLURM_NTASKS"] = "1";
  EXPECT_TRUE(parse_launch_env(from(one), 0, 1).warnings.empty());
}

TEST(LaunchEnv, MalformedIntegersAreUsageErrors) {
  for (const char* bad : {"abc", "1x", "-1", "+1", " 2", "2 ", "0x10", "1.0", "99999999999999999999"}) {
    Env env = srun_env();
    env["SLURM_RESTART_COUNT"] = bad;
    const std::string msg = usage_error(env, 2, 4);
    EXPECT_NE(msg.find(std::string("SLURM_RESTART_COUNT='") + bad + "'"), std::string::npos)
        << "value '" << bad << "': " << msg;
    EXPECT_NE(msg.find("not a non-negative integer"), std::string::npos) << msg;
  }
  for (const char* var :
       {"SLURM_JOB_ID", "SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID", "SLURM_CPUS_PER_TASK"}) {
    Env env = srun_env();
    env[var] = "4o";
    EXPECT_NE(usage_error(env, 2, 4).find(std::string(var) + "='4o'"), std::string::npos) << var;
  }
  // an empty value counts as unset
  Env env = srun_env();
  env["SLURM_RESTART_COUNT"] = "";
  EXPECT_EQ(usage_error(env, 2, 4), "");
  EXPECT_EQ(parse_launch_env(from(env), 2, 4).restart_count, 0);
}

TEST(LaunchEnv, SrunTasksNotWiredUpIsUsageError) {
  // srun -n 2 without PMIx: each task is a singleton MPI job (world 1)
  const Env env{{"SLURM_PROCID", "0"}, {"SLURM_STEP_NUM_TASKS", "2"}};
  EXPECT_EQ(usage_error(env, 0, 1),
            "srun started 2 tasks (SLURM_STEP_NUM_TASKS=2) but MPI sees a world of 1 (rank 0): the tasks did not wire "
            "up into one MPI job; launch with srun --mpi=pmix (Debian's Slurm/Open MPI), or with mpirun inside the "
            "allocation");
  // the full srun env at the wrong world size, and the SLURM_NTASKS fallback when the step count is missing
  EXPECT_NE(
      usage_error(srun_env(), 0, 1).find("srun started 4 tasks (SLURM_STEP_NUM_TASKS=4) but MPI sees a world of 1"),
      std::string::npos);
  const Env old{{"SLURM_JOB_ID", "9"}, {"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "4"}};
  EXPECT_NE(usage_error(old, 1, 2).find("srun started 4 tasks (SLURM_NTASKS=4) but MPI sees a world of 2 (rank 1)"),
            std::string::npos);
  EXPECT_EQ(usage_error(old, 1, 4), "");
  // under mpirun the same Slurm variables are not srun's
  Env under_mpirun = srun_env();
  under_mpirun["OMPI_COMM_WORLD_SIZE"] = "1";
  EXPECT_EQ(usage_error(under_mpirun, 0, 1), "");
}
