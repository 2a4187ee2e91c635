#include "train/loop/run_environment.hpp"

#include <chrono>
#include <cstdlib>
#include <filesystem>

#include "comm/comm.hpp"
#include "core/error.hpp"
#include "core/log.hpp"

#ifndef HPCT_SOURCE_DIR
#define HPCT_SOURCE_DIR "."
#endif

namespace hpct::train {

namespace fs = std::filesystem;

std::string data_dir() {
  const char* env = std::getenv("HPCT_DATA_DIR");
  return env && *env ? std::string(env) : (fs::path(HPCT_SOURCE_DIR) / "data").string();
}

std::string resolve_data_path(const std::string& path) {
  if (fs::path(path).is_absolute()) return path;
  return (fs::path(data_dir()) / path).string();
}

double unix_now() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

parallel::LaunchEnv read_launch(const comm::CommOptions& opts) {
  // a world communicator of its own (a duplicate of MPI_COMM_WORLD, freed on return): the ParallelContext, which
  // checks the layout against the world size, comes after the wire-up check
  return parallel::read_launch_env(*comm::make_world_communicator(opts));
}

void add_launch_attrs(ckpt::Attrs& a, const parallel::LaunchEnv& launch) {
  a.ints["restart_count"] = launch.restart_count;
  if (launch.job_id) a.ints["slurm_job_id"] = *launch.job_id;
}

std::string prepare_output(parallel::ParallelContext& pc, const std::string& out_dir) {
  if (pc.rank() == 0) {
    std::error_code ec;
    fs::create_directories(out_dir, ec);
    HPCT_USAGE_CHECK(!ec, "cannot create the output directory {}: {}", out_dir, ec.message());
  }
  pc.world().barrier("output directory created");
  set_log_file((fs::path(out_dir) / "train.log").string());
  return (fs::path(out_dir) / "checkpoints").string();
}

}  // namespace hpct::train
