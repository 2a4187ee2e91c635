#!/usr/bin/env bash
# README command 1: install the dependencies, build, prepare the data and run the default training job
# (inputs/gpt_demo.toml: a 4-layer GPT on the King James Bible, a few minutes on 2 cores).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
bash scripts/setup.sh
bash scripts/build.sh --apps  # the apps and data tools only: no tests, CUDA only where a GPU is visible
bash scripts/prepare_data.sh
build="${HPCT_BUILD_DIR:-$here/build}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Data-parallel over 2 ranks, the node's cores shared among them through OpenMP (--bind-to none: Open MPI
# would otherwise pin each rank to one core). Outputs and checkpoints: runs/gpt_demo/.
cores=$(getconf _NPROCESSORS_ONLN)
ranks=2
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(( cores > ranks ? cores / ranks : 1 ))}
mpirun -np "$ranks" --oversubscribe --bind-to none "$build/apps/train_gpt" inputs/gpt_demo.toml "$@"
