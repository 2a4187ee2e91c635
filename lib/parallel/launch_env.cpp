#include "parallel/launch_env.hpp"

#include <mpi.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <cstring>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/mpi_check.hpp"

namespace hpct::parallel {

namespace {

// The value of a variable; nullptr when unset or empty.
const char* lookup(const GetEnv& getenv, const char* name) {
  const char* v = getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

std::string env_string(const GetEnv& getenv, const char* name) {
  const char* v = lookup(getenv, name);
  return v ? std::string(v) : std::string();
}

// Strictly a non-negative decimal integer (no sign, no spaces, no suffix), or unset.
std::optional<int64_t> env_int(const GetEnv& getenv, const char* name) {
  const char* v = lookup(getenv, name);
  if (v == nullptr) return std::nullopt;
  const char* end = v + std::strlen(v);
  const bool digits = std::all_of(v, end, [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; });
  int64_t x = 0;
  const auto [ptr, ec] = std::from_chars(v, end, x);
  HPCT_USAGE_CHECK(digits && ec == std::errc() && ptr == end,
                   "environment variable {}='{}' is not a non-negative integer; Slurm or the MPI launcher sets it: "
                   "unset it, or fix the job script that overrides it",
                   name, v);
  return x;
}

std::string nodes_str(int64_t n) { return fmt::format("{} node{}", n, n == 1 ? "" : "s"); }

}  // namespace

LaunchEnv parse_launch_env(const GetEnv& getenv, int world_rank, int world_size) {
  LaunchEnv e;
  e.world_rank = world_rank;
  e.world_size = world_size;

  e.job_id = env_int(getenv, "SLURM_JOB_ID");
  e.scheduler = e.job_id ? "slurm" : "none";
  e.job_name = env_string(getenv, "SLURM_JOB_NAME");
  e.array_job_id = env_int(getenv, "SLURM_ARRAY_JOB_ID");
  e.array_task_id = env_int(getenv, "SLURM_ARRAY_TASK_ID");
  e.node_list = env_string(getenv, "SLURM_JOB_NODELIST");
  e.job_num_nodes = env_int(getenv, "SLURM_JOB_NUM_NODES");
  e.step_id = env_int(getenv, "SLURM_STEP_ID");
  e.restart_count = env_int(getenv, "SLURM_RESTART_COUNT").value_or(0);
  e.cpus_per_task = env_int(getenv, "SLURM_CPUS_PER_TASK");
  e.slurm_procid = env_int(getenv, "SLURM_PROCID");
  const std::optional<int64_t> step_tasks = env_int(getenv, "SLURM_STEP_NUM_TASKS");
  const std::optional<int64_t> ntasks = env_int(getenv, "SLURM_NTASKS");
  e.slurm_tasks = step_tasks ? step_tasks : ntasks;
  e.slurm_tasks_var = step_tasks ? "SLURM_STEP_NUM_TASKS" : ntasks ? "SLURM_NTASKS" : "";

  // The launcher. The batch script of a Slurm job has SLURM_PROCID=0 and SLURM_NTASKS too, but no SLURM_STEP_*:
  // only a step that srun started counts as srun.
  const bool ompi = lookup(getenv, "OMPI_COMM_WORLD_SIZE") != nullptr;
  const bool srun_step = e.slurm_procid && (step_tasks || e.step_id);
  e.launcher = ompi ? "mpirun" : srun_step ? "srun" : "other";
  if (e.launcher == "srun") {
    e.launcher_local_rank = env_int(getenv, "SLURM_LOCALID");
    e.launcher_local_rank_var = "SLURM_LOCALID";
  } else if (e.launcher == "mpirun") {
    e.launcher_local_rank = env_int(getenv, "OMPI_COMM_WORLD_LOCAL_RANK");
    e.launcher_local_rank_var = "OMPI_COMM_WORLD_LOCAL_RANK";
  }
  if (!e.launcher_local_rank) e.launcher_local_rank_var.clear();

  // srun without a PMI that Open MPI understands starts every task as a singleton MPI job: each would train alone
  // and write the same files. Fail on every task, before any collective.
  if (e.launcher == "srun" && e.slurm_tasks) {
    HPCT_USAGE_CHECK(*e.slurm_tasks == world_size,
                     "srun started {} tasks ({}={}) but MPI sees a world of {} (rank {}): the tasks did not wire up "
                     "into one MPI job; launch with srun --mpi=pmix (Debian's Slurm/Open MPI), or with mpirun inside "
                     "the allocation",
                     *e.slurm_tasks, e.slurm_tasks_var, *e.slurm_tasks, world_size, world_rank);
  }
  if (e.launcher == "other" && e.scheduler == "slurm" && e.slurm_tasks && *e.slurm_tasks > world_size)
    e.warnings.push_back(fmt::format(
        "started without srun or mpirun inside Slurm job {} of {} tasks ({}={}): MPI sees a world of {}; start the "
        "ranks with srun --mpi=pmix, or mpirun, to use the allocation",
        *e.job_id, *e.slurm_tasks, e.slurm_tasks_var, *e.slurm_tasks, world_size));
  return e;
}

LaunchEnv read_launch_env(comm::MpiCommunicator& world, const GetEnv& getenv) {
  const GetEnv env = getenv ? getenv : GetEnv([](const char* name) { return std::getenv(name); });
  LaunchEnv e = parse_launch_env(env, world.rank(), world.size());
  e.host = process_identity().host;

  // The ranks sharing this node, ordered by world rank.
  MPI_Comm node = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split_type(world.mpi_comm(), MPI_COMM_TYPE_SHARED, world.rank(), MPI_INFO_NULL, &node));
  MPI_CHECK(MPI_Comm_rank(node, &e.local_rank));
  MPI_CHECK(MPI_Comm_size(node, &e.local_size));
  MPI_CHECK(MPI_Comm_free(&node));

  // {ranks with local rank 0 (= nodes), SLURM_PROCID != MPI rank, launcher local rank != MPI local rank}
  const bool procid_differs = e.launcher == "srun" && e.slurm_procid && *e.slurm_procid != e.world_rank;
  const bool local_differs = e.launcher_local_rank && *e.launcher_local_rank != e.local_rank;
  int32_t counts[3] = {e.local_rank == 0 ? 1 : 0, procid_differs ? 1 : 0, local_differs ? 1 : 0};
  world.allreduce(counts, 3, DType::I32, comm::ReduceOp::Sum, "launch environment (nodes, rank mismatches)");
  e.nodes_mpi = counts[0];
  if (counts[1] > 0)
    e.warnings.push_back(fmt::format(
        "SLURM_PROCID differs from the MPI rank on {} of {} ranks{}: Slurm's task ids (srun --label, accounting) do "
        "not name hpctrain's ranks",
        counts[1], e.world_size,
        procid_differs ? fmt::format(" (rank {}: SLURM_PROCID={})", e.world_rank, *e.slurm_procid) : ""));
  if (counts[2] > 0)
    e.warnings.push_back(fmt::format(
        "the launcher's local rank ({}) differs from MPI's node-local rank on {} of {} ranks{}: hpctrain uses MPI's "
        "(MPI_COMM_TYPE_SHARED, ordered by world rank), e.g. to choose the GPU",
        e.launcher_local_rank_var.empty() ? "SLURM_LOCALID / OMPI_COMM_WORLD_LOCAL_RANK" : e.launcher_local_rank_var,
        counts[2], e.world_size,
        local_differs ? fmt::format(" (rank {}: {}={}, MPI local rank {})", e.world_rank, e.launcher_local_rank_var,
                                    *e.launcher_local_rank, e.local_rank)
                      : ""));
  return e;
}

std::string describe(const LaunchEnv& e) {
  const std::string how = e.launcher == "mpirun" ? "mpirun"
                          : e.launcher == "srun" ? "srun"
                          : e.world_size == 1    ? "started directly"
                                                 : "another launcher";
  std::string s = "launch: ";
  if (e.scheduler == "slurm") {
    s += fmt::format("slurm job {}", e.job_id.value_or(0));
    if (e.array_job_id || e.array_task_id)
      s += fmt::format(" (array {}_{})", e.array_job_id ? std::to_string(*e.array_job_id) : "?",
                       e.array_task_id ? std::to_string(*e.array_task_id) : "?");
    if (!e.job_name.empty()) s += fmt::format(" '{}'", e.job_name);
    s += fmt::format(" (restart {})", e.restart_count);
    if (e.step_id) s += fmt::format(" step {}", *e.step_id);
    s += e.launcher == "other" ? " " + how : " via " + how;
    if (!e.node_list.empty()) s += " on " + e.node_list;
    s += e.job_num_nodes ? fmt::format(" ({}; MPI sees {})", nodes_str(*e.job_num_nodes), e.nodes_mpi)
                         : fmt::format(" (MPI sees {})", nodes_str(e.nodes_mpi));
  } else {
    s += fmt::format("no scheduler, {}, {}", how, nodes_str(e.nodes_mpi));
  }
  s += fmt::format(" | rank {} on {}, local rank {} of {}", e.world_rank, e.host, e.local_rank, e.local_size);
  if (e.cpus_per_task) s += fmt::format(", {} CPU{} per task", *e.cpus_per_task, *e.cpus_per_task == 1 ? "" : "s");
  return s;
}

void log_launch_env(const LaunchEnv& e) {
  log_info("{}", describe(e));
  for (const std::string& w : e.warnings) log_warn("{}", w);
}

}  // namespace hpct::parallel
