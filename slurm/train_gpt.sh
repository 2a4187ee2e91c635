#!/usr/bin/env bash
# Slurm batch template for train_gpt.   sbatch slurm/train_gpt.sh [DECK] [--set section.key=value ...]
# Data-parallel training over the job's tasks (one MPI rank per task, OpenMP threads inside), restartable:
# the run directory is stable per deck, every start resumes from its newest checkpoint
# (checkpoint.resume=latest; none yet: a fresh start), and before the time limit Slurm sends SIGUSR1, the
# ranks checkpoint at the same step and exit with code 3, and the job requeues itself.
#SBATCH --job-name=hpct-gpt          # name shown by squeue
#SBATCH --nodes=1                    # nodes; DP = nodes x ntasks-per-node (TP = PP = 1 in this version)
#SBATCH --ntasks-per-node=2          # MPI ranks per node
#SBATCH --cpus-per-task=1            # OpenMP threads per rank: the node's cores / ranks per node
#SBATCH --time=00:30:00              # wall-clock limit
#SBATCH --signal=B:USR1@90           # SIGUSR1 to this batch shell 90 s before the limit: checkpoint and stop
#SBATCH --requeue                    # allow `scontrol requeue` of this job after a stop with exit code 3
#SBATCH --open-mode=append           # a requeued job appends to the same output file
#SBATCH --output=hpct-gpt-%j.out     # stdout and stderr of the job (%j = job id)

# ---- site-specific block: edit for your cluster ------------------------------------------------------
# #SBATCH --partition=compute       # partition / queue
# #SBATCH --account=myproject       # account to charge
# module load openmpi hdf5          # modules providing the runtime libraries, if not system packages
HPCT_ROOT="${HPCT_ROOT:-${SLURM_SUBMIT_DIR:-$(pwd)}}"   # the hpctrain checkout
HPCT_BUILD_DIR="${HPCT_BUILD_DIR:-$HPCT_ROOT/build}"   # where scripts/build.sh put the binaries
export HPCT_DATA_DIR="${HPCT_DATA_DIR:-$HPCT_ROOT/data}" # token shards (scripts/prepare_data.sh)
# ---- end of the site-specific block ------------------------------------------------------------------

set -uo pipefail
deck="${1:-$HPCT_ROOT/inputs/gpt_demo.toml}"
shift || true
export OMP_NUM_THREADS="${SLURM_CPUS_PER_TASK:-1}"
out="$HPCT_ROOT/runs/$(basename "$deck" .toml)"   # stable across jobs and requeues of the same deck
echo "job ${SLURM_JOB_ID:-none} (restart ${SLURM_RESTART_COUNT:-0}) on ${SLURM_JOB_NODELIST:-$(hostname)}: $deck -> $out"

# The signal reaches this shell only; forward it to the ranks (they agree on it at the next step).
step_pid=""
trap 'echo "SIGUSR1: asking the ranks to checkpoint and stop"; [ -n "$step_pid" ] && kill -USR1 "$step_pid"' USR1
# srun with PMIx, as Debian's Slurm and Open MPI provide (srun forwards SIGUSR1 to every task).
srun --mpi=pmix --kill-on-bad-exit=1 "$HPCT_BUILD_DIR/apps/train_gpt" "$deck" --out "$out" \
     --set checkpoint.resume=latest "$@" &
step_pid=$!
wait "$step_pid"; rc=$?
while [ "$rc" -gt 128 ] && kill -0 "$step_pid" 2>/dev/null; do wait "$step_pid"; rc=$?; done  # wait again after a trap
echo "train_gpt exited with $rc"
if [ "$rc" -eq 3 ] && [ -n "${SLURM_JOB_ID:-}" ]; then
  echo "checkpoint written: requeueing job $SLURM_JOB_ID"
  scontrol requeue "$SLURM_JOB_ID"
fi
exit "$rc"
