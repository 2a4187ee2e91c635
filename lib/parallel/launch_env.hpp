#pragma once
// LaunchEnv: how this job was started (scheduler, launcher, Slurm's job facts) and where this rank sits on its node,
// read once at start by the training apps, logged by rank 0 (one `launch: ...` line, describe()) and checked.
//
// World rank and size always come from MPI; the environment only describes the launch. Variables read:
//   scheduler  "slurm" when SLURM_JOB_ID is set, else "none"
//   launcher   "mpirun" when OMPI_COMM_WORLD_SIZE is set (Open MPI's mpirun, also inside a Slurm allocation);
//              "srun" when SLURM_PROCID is set in a job step (SLURM_STEP_ID or SLURM_STEP_NUM_TASKS set) and
//              OMPI_COMM_WORLD_SIZE is not; else "other" (started directly, e.g. a singleton, or in the batch script
//              itself: Slurm sets SLURM_PROCID=0 there too, but no SLURM_STEP_*)
//   Slurm      SLURM_JOB_ID, SLURM_JOB_NAME, SLURM_ARRAY_JOB_ID, SLURM_ARRAY_TASK_ID, SLURM_JOB_NODELIST,
//              SLURM_JOB_NUM_NODES, SLURM_STEP_ID, SLURM_RESTART_COUNT (0 when unset), SLURM_CPUS_PER_TASK,
//              SLURM_PROCID, SLURM_STEP_NUM_TASKS (else SLURM_NTASKS), SLURM_LOCALID
//   Open MPI   OMPI_COMM_WORLD_SIZE (presence only), OMPI_COMM_WORLD_LOCAL_RANK
// Integer variables are parsed strictly (decimal digits only; an empty value counts as unset): anything else is a
// UsageError naming the variable and its value.
//
// Checks (parse_launch_env):
//  - under srun, SLURM_STEP_NUM_TASKS (else SLURM_NTASKS) must equal MPI's world size. Tasks that come up as
//    singleton MPI jobs (srun without a PMI the MPI library can use) would each train alone and write the same files:
//    a UsageError (exit 2) on every task, before any collective, naming the fix (srun --mpi=pmix). (Debian's Open MPI
//    4.1 itself aborts in MPI_Init under srun --mpi=none or --mpi=pmi2; this catches the launches that do start.)
//  - under srun, SLURM_PROCID != the MPI rank, and the launcher's local rank (SLURM_LOCALID under srun,
//    OMPI_COMM_WORLD_LOCAL_RANK under mpirun) != MPI's shared-memory local rank: warnings only (read_launch_env
//    counts them over the world; rank 0 logs them, log_launch_env).
//  - in a batch script of several tasks, a direct start (launcher "other", one rank) is a warning only.
//
// local_rank: this rank's index among the ranks sharing its node (MPI_Comm_split_type MPI_COMM_TYPE_SHARED, ordered
// by world rank), whatever the launcher. The CUDA backend chooses its GPU from it:
// device = local_rank % device count. The trainers keep the LaunchEnv that read_launch_env returns for that.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "comm/mpi_communicator.hpp"

namespace hpct::parallel {

struct LaunchEnv {
  // ---- from MPI (always) ----
  int world_rank = 0, world_size = 1;
  int local_rank = 0, local_size = 1;  // MPI_COMM_TYPE_SHARED: the ranks on this node
  int nodes_mpi = 1;                   // shared-memory domains: ranks with local_rank 0, summed over the world
  std::string host;                    // this rank's hostname

  // ---- from the environment ----
  std::string scheduler = "none";                      // "slurm" | "none"
  std::string launcher = "other";                      // "mpirun" | "srun" | "other"
  std::optional<int64_t> job_id;                       // SLURM_JOB_ID
  std::string job_name;                                // SLURM_JOB_NAME ("" when unset)
  std::optional<int64_t> array_job_id, array_task_id;  // SLURM_ARRAY_JOB_ID, SLURM_ARRAY_TASK_ID
  std::string node_list;                               // SLURM_JOB_NODELIST, e.g. "vm[01-02]"
  std::optional<int64_t> job_num_nodes;                // SLURM_JOB_NUM_NODES
  std::optional<int64_t> step_id;                      // SLURM_STEP_ID
  int64_t restart_count = 0;                           // SLURM_RESTART_COUNT (requeues of this job), 0 when unset
  std::optional<int64_t> cpus_per_task;                // SLURM_CPUS_PER_TASK
  std::optional<int64_t> slurm_procid;                 // SLURM_PROCID
  std::optional<int64_t> slurm_tasks;                  // SLURM_STEP_NUM_TASKS, else SLURM_NTASKS
  std::string slurm_tasks_var;                         // which of the two gave slurm_tasks
  std::optional<int64_t> launcher_local_rank;          // SLURM_LOCALID (srun) / OMPI_COMM_WORLD_LOCAL_RANK (mpirun)
  std::string launcher_local_rank_var;                 // which variable gave it

  // ---- consistency warnings: counts over the world, details of this rank (rank 0 logs its own, log_launch_env) ----
  std::vector<std::string> warnings;
};

// getenv-like lookup: the value of a variable, or nullptr when unset. Injectable for tests.
using GetEnv = std::function<const char*(const char*)>;

// Pure: the environment's facts for the process MPI calls rank world_rank of world_size, the srun wire-up check
// (UsageError) and this rank's own SLURM_PROCID warning (not added here: read_launch_env counts it over the world).
// local_rank, local_size, nodes_mpi and host keep their defaults (read_launch_env fills them). A batch-script start
// of a multi-task job (launcher "other" with SLURM_NTASKS > world size) adds its warning here.
LaunchEnv parse_launch_env(const GetEnv& getenv, int world_rank, int world_size);

// Collective over world (call it on every rank, before any other collective of the run, so that a broken srun
// wire-up fails first): parse_launch_env with world's rank and size, then the node-local rank and size
// (MPI_Comm_split_type on world), nodes_mpi and the mismatch counts (one allreduce, bounded by comm.timeout_s),
// and the hostname.
LaunchEnv read_launch_env(comm::MpiCommunicator& world, const GetEnv& getenv = {});

// One line for the log, e.g.
//   launch: slurm job 123 'hpct-gpt' (restart 1) step 0 via srun on vm[01-02] (2 nodes; MPI sees 2) | rank 0 on
//   vm01, local rank 0 of 2[, 4 CPUs per task]
//   launch: no scheduler, mpirun, 1 node | rank 0 on vm01, local rank 0 of 2
std::string describe(const LaunchEnv& e);

// log_info(describe(e)) and log_warn of every warning (both rank 0 only).
void log_launch_env(const LaunchEnv& e);

}  // namespace hpct::parallel
