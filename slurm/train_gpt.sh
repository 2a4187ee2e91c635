#!/usr/bin/env bash
# Slurm batch template for train_gpt.   sbatch slurm/train_gpt.sh [DECK] [--set section.key=value ...]
# This version of train_gpt runs on one rank (data/tensor/pipeline parallelism and preemption-safe
# requeue come in later releases): one task, all of a node's cores through OpenMP.
#SBATCH --job-name=hpct-gpt          # name shown by squeue
#SBATCH --nodes=1                    # one node
#SBATCH --ntasks=1                   # one MPI rank (serial training in this version)
#SBATCH --cpus-per-task=2            # OpenMP threads of the rank: set to the node's cores
#SBATCH --time=00:30:00              # wall-clock limit
#SBATCH --output=hpct-gpt-%j.out     # stdout and stderr of the job (%j = job id)

# ---- site-specific block: edit for your cluster ------------------------------------------------------
# #SBATCH --partition=compute       # partition / queue
# #SBATCH --account=myproject       # account to charge
# module load openmpi hdf5          # modules providing the runtime libraries, if not system packages
HPCT_ROOT="${HPCT_ROOT:-${SLURM_SUBMIT_DIR:-$(pwd)}}"   # the hpctrain checkout
HPCT_BUILD_DIR="${HPCT_BUILD_DIR:-$HPCT_ROOT/build}"   # where scripts/build.sh put the binaries
export HPCT_DATA_DIR="${HPCT_DATA_DIR:-$HPCT_ROOT/data}" # token shards (scripts/prepare_data.sh)
# ---- end of the site-specific block ------------------------------------------------------------------

set -euo pipefail
deck="${1:-$HPCT_ROOT/inputs/gpt_demo.toml}"
shift || true
export OMP_NUM_THREADS="${SLURM_CPUS_PER_TASK:-2}"
out="$HPCT_ROOT/runs/$(basename "$deck" .toml)"   # stable across jobs of the same deck
echo "job ${SLURM_JOB_ID:-none} on ${SLURM_JOB_NODELIST:-$(hostname)}: $deck -> $out"
# srun with PMIx, as Debian's Slurm and Open MPI provide; alternative: mpirun -np 1 --bind-to none ...
srun --mpi=pmix --kill-on-bad-exit=1 "$HPCT_BUILD_DIR/apps/train_gpt" "$deck" --out "$out" "$@"
