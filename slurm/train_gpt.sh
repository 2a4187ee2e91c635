#!/usr/bin/env bash
# hpctrain: train the GPT under Slurm.   sbatch slurm/train_gpt.sh [DECK] [--set section.key=value ...]
# One MPI rank per task (one per GPU on GPU nodes), OpenMP threads = --cpus-per-task. Layout from the deck:
# DP = tasks / (parallel.tp x parallel.pp). Restartable: the run directory runs/<job name>-<job id> is stable
# across requeues, every start resumes from its newest checkpoint (checkpoint.resume=latest), and
#  - SIGUSR1 (--signal below, 90 s before the time limit; or `scancel --batch --signal=USR1 JOBID` by hand)
#    makes every rank write a checkpoint at the same step and exit with code 3; the job then requeues itself;
#  - train.deadline (the job's end time minus HPCT_DEADLINE_MARGIN, read from squeue) does the same when no
#    signal comes;
#  - SIGTERM (scancel, a preemption, the time limit) checkpoints and stops without requeueing.
# A job that finished (exit 0) or failed (any other code) does not requeue. Submit from the hpctrain checkout
# (or export HPCT_ROOT); deck paths are relative to the job's working directory
# (the submit directory, or sbatch --chdir).
#
#SBATCH --job-name=hpct-gpt          # shown by squeue; names the run directory runs/hpct-gpt-<job id>
#SBATCH --nodes=1                    # nodes
#SBATCH --ntasks-per-node=2          # MPI ranks per node: = GPUs per node on GPU nodes
#SBATCH --cpus-per-task=1            # CPU cores per rank = OpenMP threads (CPU runs: cores per node / ranks)
#SBATCH --time=00:30:00              # wall-clock limit of one start (a requeued start gets it again)
#SBATCH --signal=B:USR1@90           # SIGUSR1 to the batch shell 90 s before the limit: checkpoint, requeue
#SBATCH --requeue                    # allow `scontrol requeue` of this job (after exit code 3)
#SBATCH --open-mode=append           # a requeued start appends to the same output file
#SBATCH --output=%x-%j.out           # stdout + stderr of every start (%x job name, %j job id)

# ==== site block: edit for your cluster ==============================================================
# #SBATCH --partition=gpu            # partition (queue)
# #SBATCH --account=myproject        # account to charge
# #SBATCH --gpus-per-node=4          # GPUs per node; set --ntasks-per-node to the same number
# #SBATCH --exclusive                # whole nodes (recommended for multi-node runs)
# module load openmpi hdf5 cuda      # modules with the runtime libraries, where they are not system packages
# export HPCT_ROOT=/path/to/hpctrain # the checkout (default: found from the submitted script's path)
# export HPCT_BUILD_DIR=$HPCT_ROOT/build        # the binaries (scripts/build.sh)
# export HPCT_DATA_DIR=$HPCT_ROOT/data          # data files (scripts/prepare_data.sh); relative data.* paths
# export HPCT_RUNS_DIR=/scratch/$USER/hpct-runs # run directories (default <working dir>/runs)
# export HPCT_LAUNCHER=mpirun        # launch with mpirun inside the allocation instead of srun --mpi=pmix
# export HPCT_LAYOUT=auto            # the layout planner chooses DP/TP/PP, ZeRO, recompute, micro-batch at job start
# export HPCT_MACHINE=h100_dgx       # its machine: a preset of inputs/machines or a TOML file (docs/parallelism.md)
# export HPCT_SRUN_MPI=pmix_v4       # srun's MPI plugin if your site's differs (`srun --mpi=list`)
# NCCL (GPU runs; the defaults are right on most clusters):
# export NCCL_SOCKET_IFNAME=ib0      # interface for NCCL's bootstrap / socket transport (not lo, not docker0)
# export NCCL_IB_HCA=mlx5_0,mlx5_1   # InfiniBand adapters to use (default: all)
# export NCCL_DEBUG=WARN             # INFO prints the rings/trees and transports chosen (first thing to check)
# export NCCL_NET_GDR_LEVEL=PHB      # GPUDirect RDMA distance; leave unset unless your site says otherwise
# export NCCL_CROSS_NIC=0            # keep rings on one rail on multi-rail fabrics
# ==== end of the site block ==========================================================================

set -uo pipefail
if [ -z "${HPCT_ROOT:-}" ]; then  # sbatch runs a copy of this script: find the original from the job record
  script="$(scontrol show job "${SLURM_JOB_ID:-0}" 2>/dev/null | sed -n 's/^ *Command=\([^ ]*\).*/\1/p')"
  HPCT_ROOT="$(cd "$(dirname "${script:-${SLURM_SUBMIT_DIR:-.}/slurm/x}")/.." 2>/dev/null && pwd)"
fi
[ -f "$HPCT_ROOT/slurm/job_common.sh" ] || { echo "hpctrain checkout not found (HPCT_ROOT=$HPCT_ROOT): export HPCT_ROOT"; exit 2; }
source "$HPCT_ROOT/slurm/job_common.sh"

deck="${1:-$HPCT_ROOT/inputs/gpt_demo.toml}"
shift $(($# > 0 ? 1 : 0))
hpct_job_init "${SLURM_JOB_NAME:-hpct-gpt}"
hpct_auto_layout train_gpt "$deck" "$@" || exit 2
hpct_launch train_gpt "$deck" --out "$HPCT_RUN_DIR" --set checkpoint.resume=latest "${HPCT_DEADLINE_ARGS[@]}" \
  "${HPCT_LAYOUT_ARGS[@]}" "$@"
exit $?
