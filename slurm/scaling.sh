#!/usr/bin/env bash
# hpctrain: strong- and weak-scaling sweep in one submission.   sbatch slurm/scaling.sh [scaling.py options]
# One allocation of the largest size; validation/scaling.py runs every point as a job step inside it
# (`srun --mpi=pmix -N <nodes> -n R -c <cpus-per-task>`), R = 1, 2, 4, ... up to the job's tasks (every node
# count from 1 to --nodes when --ntasks-per-node is the ranks per node), for train_gpt (inputs/bench_gpt.toml) and
# train_resnet (inputs/resnet20_fmnist.toml): strong scaling at the deck's global batch, weak scaling at a fixed
# batch per rank. Every point runs --repeat times (default 3; the median is kept). Results:
#   $HPCT_RESULTS_DIR/scaling_slurm_<job id>.{md,csv,png}  the report, one CSV row per run, the plot
#   $HPCT_RUNS_DIR/hpct-scaling-<job id>/<app>_<mode>_R<r>/ every run's log, metrics.jsonl and command
# Options are scaling.py's (e.g. --ranks 1 2 4 8 --steps 30 --apps gpt --gpt-deck inputs/gpt2_124m.toml);
# see `validation/scaling.py --help`. Not requeued (a sweep restarts from scratch).
#
#SBATCH --job-name=hpct-scaling      # shown by squeue; names the run directory
#SBATCH --nodes=1                    # the largest node count of the sweep
#SBATCH --ntasks-per-node=2          # ranks per node (= GPUs per node on GPU nodes)
#SBATCH --cpus-per-task=1            # CPU cores per rank = OpenMP threads, the same at every point
#SBATCH --time=01:00:00              # the whole sweep: points x repeats x (start-up + steps)
#SBATCH --output=%x-%j.out           # the sweep's table and verdict (%x job name, %j job id)

# ==== site block: edit for your cluster ==============================================================
# #SBATCH --partition=compute        # partition (queue)
# #SBATCH --account=myproject        # account to charge
# #SBATCH --gpus-per-node=4          # GPUs per node; set --ntasks-per-node to the same number
# #SBATCH --exclusive                # whole nodes: scaling numbers from shared nodes mean little
# module load openmpi hdf5 cuda      # modules with the runtime libraries, where they are not system packages
# export HPCT_ROOT=/path/to/hpctrain # the checkout (default: found from the submitted script's path)
# export HPCT_BUILD_DIR=$HPCT_ROOT/build        # the binaries (scripts/build.sh)
# export HPCT_DATA_DIR=$HPCT_ROOT/data          # data files (scripts/prepare_data.sh)
# export HPCT_RUNS_DIR=/scratch/$USER/hpct-runs # run directories (default <working dir>/runs)
# export HPCT_RESULTS_DIR=$HPCT_ROOT/validation/results  # where the report and CSV go (this is the default)
# export HPCT_PYTHON=/usr/bin/python3           # a Python >= 3.11 (tomllib) with matplotlib for the plot
# export HPCT_SRUN_MPI=pmix_v4       # srun's MPI plugin if your site's differs (`srun --mpi=list`)
# NCCL (GPU runs): NCCL_SOCKET_IFNAME, NCCL_IB_HCA, NCCL_DEBUG=WARN; see slurm/train_gpt.sh
# ==== end of the site block ==========================================================================

set -uo pipefail
if [ -z "${HPCT_ROOT:-}" ]; then  # sbatch runs a copy of this script: find the original from the job record
  script="$(scontrol show job "${SLURM_JOB_ID:-0}" 2>/dev/null | sed -n 's/^ *Command=\([^ ]*\).*/\1/p')"
  HPCT_ROOT="$(cd "$(dirname "${script:-${SLURM_SUBMIT_DIR:-.}/slurm/x}")/.." 2>/dev/null && pwd)"
fi
[ -f "$HPCT_ROOT/slurm/job_common.sh" ] || { echo "hpctrain checkout not found (HPCT_ROOT=$HPCT_ROOT): export HPCT_ROOT"; exit 2; }
source "$HPCT_ROOT/slurm/job_common.sh"

hpct_job_init "${SLURM_JOB_NAME:-hpct-scaling}" nodeadline
results="${HPCT_RESULTS_DIR:-$HPCT_ROOT/validation/results}"
mkdir -p "$results"
ranks=()  # 1, 2, 4, ... and the job's tasks, unless the options give --ranks
if ! printf '%s\n' "$@" | grep -qx -- --ranks; then
  r=1; while [ "$r" -lt "${SLURM_NTASKS:-1}" ]; do ranks+=("$r"); r=$((r * 2)); done
  ranks=(--ranks "${ranks[@]}" "${SLURM_NTASKS:-1}")
fi
cmd=("${HPCT_PYTHON:-/usr/bin/python3}" "$HPCT_ROOT/validation/scaling.py" --launcher srun --srun-mpi "$HPCT_SRUN_MPI"
     --train-gpt "$HPCT_BUILD_DIR/apps/train_gpt" --train-resnet "$HPCT_BUILD_DIR/apps/train_resnet"
     --out "$HPCT_RUN_DIR" --report "$results/scaling_slurm_$HPCT_JOB_ID.md" "${ranks[@]}" "$@")
hpct_log "sweep: ${cmd[*]}"
"${cmd[@]}"
rc=$?
hpct_log "scaling.py exited with code $rc; report $results/scaling_slurm_$HPCT_JOB_ID.md"
exit "$rc"
