#pragma once
// Where a training run is: its command-line options, the data directory, the launch facts (how the job was started,
// what a checkpoint records of it), the output directory and the wall clock.
#include <string>

#include "ckpt/checkpoint.hpp"
#include "comm/communicator.hpp"
#include "parallel/launch_env.hpp"
#include "parallel/parallel_context.hpp"

namespace hpct::train {

struct RunOptions {
  std::string out_dir;    // receives train.log, metrics.jsonl and checkpoints/
  std::string dump_path;  // optional: write the app's reference dump (PyTorch cross-check) there
};

// The data directory: $HPCT_DATA_DIR, default <repository>/data.
std::string data_dir();
// Resolves a data.* path: absolute paths stay; relative ones resolve against data_dir().
std::string resolve_data_path(const std::string& path);

double unix_now();  // seconds since the epoch, wall clock

// How the job was started (parallel/launch_env.hpp), collective over MPI_COMM_WORLD: call it on every rank before the
// ParallelContext, so that srun tasks that did not wire up into one MPI job fail first (UsageError), not with a layout
// error about a world of 1. The trainers keep the result: its local_rank is what the CUDA backend will choose the GPU
// by (device = local_rank % device count); log it with parallel::log_launch_env after the run's first log line.
parallel::LaunchEnv read_launch(const comm::CommOptions& opts);
// The launch facts a checkpoint records in index.h5's attributes: restart_count (SLURM_RESTART_COUNT, 0 outside
// Slurm) and, under Slurm, slurm_job_id: which job (and which requeue of it) wrote the checkpoint.
void add_launch_attrs(ckpt::Attrs& a, const parallel::LaunchEnv& launch);

// Creates the output directory (rank 0), waits for it, and sends the log to <out_dir>/train.log.
// Returns the checkpoint root <out_dir>/checkpoints.
std::string prepare_output(parallel::ParallelContext& pc, const std::string& out_dir);

}  // namespace hpct::train
