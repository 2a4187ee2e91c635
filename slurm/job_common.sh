# shellcheck shell=bash
# What every hpctrain batch template shares (sourced by slurm/train_gpt.sh, train_resnet.sh, scaling.sh; not
# submitted itself). Functions:
#   hpct_job_init NAME [nodeadline]  the job's facts, threads, run directory, train.deadline; logs them
#   hpct_auto_layout APP DECK ARGS  with HPCT_LAYOUT=auto: the layout planner for the job's tasks (APP DECK --plan
#                          TASKS --auto --machine HPCT_MACHINE ARGS), its table logged, its best layout's --set
#                          arguments in HPCT_LAYOUT_ARGS; non-zero when it finds none
#   hpct_launch APP ARGS   runs build/apps/APP ARGS on every task (srun, or mpirun), forwarding signals; on exit
#                          code 3 after SIGUSR1 or train.deadline the job requeues itself; returns APP's exit code
# Inputs (environment; the templates set them in their site block, a user may export them before sbatch):
#   HPCT_ROOT            the hpctrain checkout (the templates find it)
#   HPCT_BUILD_DIR       binaries (default $HPCT_ROOT/build)
#   HPCT_LAUNCHER        srun (default) | mpirun
#   HPCT_SRUN_MPI        srun's --mpi plugin (default pmix: Debian's Slurm + Open MPI; site builds may want pmix_v4)
#   HPCT_RUNS_DIR        where per-job run directories go (default <the job's working directory>/runs: the submit
#                        directory, or sbatch --chdir)
#   HPCT_RUN_DIR         the run directory itself (default $HPCT_RUNS_DIR/<job name>-<job id>; stable across
#                        requeues of the job; set it to continue an earlier job's run in a new job)
#   HPCT_DEADLINE_MARGIN seconds before the job's end time by which the app must have checkpointed and exited
#                        (default 60: leaves time for srun to finish and for the requeue)
#   HPCT_MAX_RESTARTS    requeue at most this many times (default 50), against a job that cannot make progress
#   HPCT_LAYOUT          deck (default: the deck's parallel.* keys) | auto (the layout planner chooses at job start)
#   HPCT_MACHINE         with HPCT_LAYOUT=auto: the planner's machine (a preset of inputs/machines or a TOML file;
#                        default h100_dgx on GPU nodes, this_cpu otherwise)
#   HPCT_PLAN_TIMEOUT    with HPCT_LAYOUT=auto: seconds the planner may take before the job gives up (default 300; it
#                        answers in seconds: its memory checks stop after 30 s)

hpct_log() { echo "[hpct $(date -u +%H:%M:%S)] $*"; }

# The job's facts, OpenMP threads, the run directory and train.deadline (HPCT_DEADLINE_ARGS).
hpct_job_init() {
  local name="$1"
  HPCT_BUILD_DIR="${HPCT_BUILD_DIR:-$HPCT_ROOT/build}"
  HPCT_LAUNCHER="${HPCT_LAUNCHER:-srun}"
  HPCT_SRUN_MPI="${HPCT_SRUN_MPI:-pmix}"
  HPCT_DEADLINE_MARGIN="${HPCT_DEADLINE_MARGIN:-60}"
  HPCT_MAX_RESTARTS="${HPCT_MAX_RESTARTS:-50}"
  HPCT_JOB_ID="${SLURM_ARRAY_JOB_ID:+${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}}"
  HPCT_JOB_ID="${HPCT_JOB_ID:-${SLURM_JOB_ID:-none}}"
  HPCT_RESTART="${SLURM_RESTART_COUNT:-0}"
  HPCT_RUNS_DIR="${HPCT_RUNS_DIR:-$PWD/runs}"
  HPCT_RUN_DIR="${HPCT_RUN_DIR:-$HPCT_RUNS_DIR/$name-$HPCT_JOB_ID}"
  # OpenMP threads per rank = the CPUs Slurm gave each task. Slurm >= 23.11 no longer passes --cpus-per-task
  # from the job to srun: SRUN_CPUS_PER_TASK does.
  export OMP_NUM_THREADS="${SLURM_CPUS_PER_TASK:-${OMP_NUM_THREADS:-1}}"
  export SRUN_CPUS_PER_TASK="${SLURM_CPUS_PER_TASK:-1}"
  export OMP_PROC_BIND="${OMP_PROC_BIND:-false}"
  hpct_log "job $HPCT_JOB_ID '${SLURM_JOB_NAME:-}' restart $HPCT_RESTART | nodes ${SLURM_JOB_NODELIST:-$(hostname)}" \
    "(${SLURM_JOB_NUM_NODES:-1}) | tasks ${SLURM_NTASKS:-1} x ${OMP_NUM_THREADS} threads | gpus/node" \
    "${SLURM_GPUS_ON_NODE:-0} | launcher $HPCT_LAUNCHER | root $HPCT_ROOT | run dir $HPCT_RUN_DIR"

  # train.deadline: Slurm 22.05 exports no end time; squeue knows it (EndTime, local time; "N/A" without a limit).
  HPCT_DEADLINE_ARGS=()
  [ "${2:-}" = nodeadline ] && return 0
  local end="" end_s now
  [ -n "${SLURM_JOB_ID:-}" ] && end="$(timeout 20 squeue -h -j "$SLURM_JOB_ID" -o %e 2>/dev/null | head -1)"
  if [ -n "$end" ] && end_s="$(date -d "$end" +%s 2>/dev/null)"; then
    now="$(date +%s)"
    if [ $((end_s - HPCT_DEADLINE_MARGIN)) -gt $((now + 5)) ]; then
      HPCT_DEADLINE_ARGS=(--set "train.deadline=$((end_s - HPCT_DEADLINE_MARGIN))")
      hpct_log "time limit at $end: train.deadline = end - ${HPCT_DEADLINE_MARGIN} s = $((end_s - HPCT_DEADLINE_MARGIN))"
    else
      hpct_log "time limit at $end leaves less than ${HPCT_DEADLINE_MARGIN} s: no train.deadline (signals still stop the run)"
    fi
  else
    hpct_log "no job end time known (${end:-no squeue}): no train.deadline"
  fi
}

# hpct_auto_layout APP DECK ARGS...: HPCT_LAYOUT_ARGS = the --set arguments of the planner's best layout for the
# job's task count (empty with HPCT_LAYOUT=deck). The planner runs once, in this batch shell (no MPI job): it reads
# the deck and the machine file, no data. Every start plans again; the result is the same for the same inputs, and a
# checkpoint restores onto any layout anyway.
hpct_auto_layout() {
  local app="$1" deck="$2"; shift 2
  HPCT_LAYOUT_ARGS=()
  case "${HPCT_LAYOUT:-deck}" in
  deck) return 0 ;;
  auto) ;;
  *) hpct_log "ERROR: HPCT_LAYOUT=$HPCT_LAYOUT: use deck or auto"; return 2 ;;
  esac
  local machine="${HPCT_MACHINE:-}"
  [ -z "$machine" ] && { [ "${SLURM_GPUS_ON_NODE:-0}" -gt 0 ] && machine=h100_dgx || machine=this_cpu; }
  local plan=("$HPCT_BUILD_DIR/apps/$app" "$deck" --plan "${SLURM_NTASKS:-1}" --auto --machine "$machine" --top 5 "$@")
  hpct_log "layout planner: ${plan[*]}"
  local out rc
  out="$(timeout "${HPCT_PLAN_TIMEOUT:-300}" "${plan[@]}" 2>&1)"; rc=$?
  echo "$out"
  if [ "$rc" -eq 124 ]; then
    hpct_log "ERROR: the layout planner did not answer within HPCT_PLAN_TIMEOUT=${HPCT_PLAN_TIMEOUT:-300} s; raise it, or set HPCT_LAYOUT=deck"
    return 2
  fi
  if [ "$rc" -ne 0 ]; then
    hpct_log "ERROR: the layout planner exited with code $rc (above); set HPCT_LAYOUT=deck to use the deck's layout"
    return 2
  fi
  # the best layout's line: "  select it with: --set k=v --set k=v ..."
  read -r -a HPCT_LAYOUT_ARGS <<<"$(echo "$out" | sed -n 's/^ *select it with://p' | head -1)"
  hpct_log "layout chosen by the planner (machine $machine): ${HPCT_LAYOUT_ARGS[*]}"
}

# hpct_launch APP ARGS...: one rank per task. Signals reach this batch shell only (--signal=B:...); they are
# forwarded to the launcher, which forwards them to every rank; the ranks agree on the stop at the next step.
hpct_launch() {
  local app="$1"; shift
  local exe="$HPCT_BUILD_DIR/apps/$app"
  if [ ! -x "$exe" ]; then
    hpct_log "ERROR: $exe is not an executable: build hpctrain first (bash scripts/build.sh), or set HPCT_BUILD_DIR"
    return 2
  fi
  local cmd
  case "$HPCT_LAUNCHER" in
  srun)
    # --kill-on-bad-exit: one failing rank ends the step instead of leaving the others waiting in a collective
    cmd=(srun "--mpi=$HPCT_SRUN_MPI" --kill-on-bad-exit=1 "$exe" "$@") ;;
  mpirun)
    # Open MPI reads the allocation from Slurm; it forwards SIGUSR1/SIGTERM to the ranks
    cmd=(mpirun -np "${SLURM_NTASKS:-1}" --bind-to none -x OMP_NUM_THREADS -x OMP_PROC_BIND "$exe" "$@") ;;
  *)
    hpct_log "ERROR: HPCT_LAUNCHER=$HPCT_LAUNCHER: use srun or mpirun"
    return 2 ;;
  esac
  hpct_log "launch: ${cmd[*]}"
  HPCT_SIGNAL=""
  local pid
  # shellcheck disable=SC2064
  trap 'HPCT_SIGNAL=USR1; hpct_log "SIGUSR1: asking the ranks to checkpoint and stop"; kill -USR1 "$pid" 2>/dev/null' USR1
  trap 'HPCT_SIGNAL=TERM; hpct_log "SIGTERM: asking the ranks to checkpoint and stop (no requeue)"; kill -TERM "$pid" 2>/dev/null' TERM
  "${cmd[@]}" &
  pid=$!
  [ -n "$HPCT_SIGNAL" ] && kill "-$HPCT_SIGNAL" "$pid" 2>/dev/null  # a signal that came before $pid was known
  local rc=0
  wait "$pid"; rc=$?
  # bash runs a trap between commands: `wait` returns >128 when one ran; wait again until the launcher exits
  while kill -0 "$pid" 2>/dev/null; do wait "$pid"; rc=$?; done
  trap - USR1 TERM
  hpct_log "$app exited with code $rc"
  if [ "$rc" -eq 3 ]; then
    if [ -z "${SLURM_JOB_ID:-}" ]; then
      hpct_log "stopped after a checkpoint (not under Slurm: resubmit to resume)"
    elif [ "$HPCT_SIGNAL" = TERM ]; then
      hpct_log "stopped after a checkpoint on SIGTERM (scancel, preemption or time limit): not requeued; resubmit" \
        "with HPCT_RUN_DIR=$HPCT_RUN_DIR to continue"
    elif [ "$HPCT_RESTART" -ge "$HPCT_MAX_RESTARTS" ]; then
      hpct_log "stopped after a checkpoint, but the job was already requeued $HPCT_RESTART times" \
        "(HPCT_MAX_RESTARTS=$HPCT_MAX_RESTARTS): not requeued"
    else
      # logged before the requeue: Slurm may end this batch shell as soon as it requeues the job, and a line after
      # scontrol would then be lost
      hpct_log "checkpoint written: requeueing job $SLURM_JOB_ID (restart $((HPCT_RESTART + 1))); it resumes from" \
        "$HPCT_RUN_DIR/checkpoints/latest"
      if ! timeout 60 scontrol requeue "$SLURM_JOB_ID"; then
        hpct_log "ERROR: scontrol requeue $SLURM_JOB_ID failed (was the job submitted with --requeue?); resubmit" \
          "with HPCT_RUN_DIR=$HPCT_RUN_DIR to continue"
      fi
    fi
  fi
  return "$rc"
}
