#!/usr/bin/env bash
# README command 1: install the dependencies, build, prepare the data and run the default training job
# (inputs/gpt_demo.toml: a 4-layer GPT on the King James Bible, a few minutes on 2 cores).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
bash scripts/setup.sh
bash scripts/build.sh
bash scripts/prepare_data.sh
build="${HPCT_BUILD_DIR:-$here/build}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# One rank until data parallelism lands; --bind-to none lets the rank use every core through OpenMP.
mpirun -np 1 --bind-to none "$build/apps/train_gpt" inputs/gpt_demo.toml "$@"
