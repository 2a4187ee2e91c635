"""What validation/calibrate_machine.py and validation/planner_check.py share: the environment of their MPI jobs,
the layout planner's JSON Lines (`train_gpt DECK --plan WORLD --auto --machine M --json`), starting several jobs at
once with a time limit, and a run's steady-state step time from its metrics.jsonl. Standard library only (the
--verify mode of planner_check.py, a ctest, needs no numpy)."""
import json
import os
import shlex
import signal
import statistics
import subprocess
import threading
import time

from campaign import REPO
from mpi_jobs import session_pids

# Every rank runs one OpenMP thread: the machine file describes ranks of one core's worth (devices_per_node ranks
# share the node's cores, shared_slowdown says at what cost), and a planner candidate is run the same way.
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1",
           HPCT_DATA_DIR=os.environ.get("HPCT_DATA_DIR", os.path.join(REPO, "data")))
DATA_FILES = ("kjv_train.bin", "kjv_val.bin")  # what the GPT decks used here read (scripts/prepare_data.sh)
WARMUP_STEPS = 5  # steps left out of the timing: first-touch allocations, caches, the ranks' start skew


def mpirun(ranks):
    """The launcher prefix: ranks may exceed the cores (oversubscribed), as the machine file's devices_per_node
    allows. Several ranks are bound round-robin to the cores (rank r to core r mod cores): left to the scheduler,
    which ranks pair on a core changes from run to run, and a pipeline whose stages land on one core runs up to 40%
    slower (gpt_tiny at 8 ranks, DP 4 x PP 2: 13.6 to 19.4 ms/step unbound, 13.7 to 14.1 bound). A one-rank job stays
    unbound: independent copies of it (the sharing measurement) are spread by the scheduler, not stacked on core 0."""
    bind = ["--bind-to", "core:overload-allowed", "--map-by", "core"] if ranks > 1 else ["--bind-to", "none"]
    return ["mpirun", "-np", str(ranks), "--oversubscribe"] + bind


def set_args(sets):
    """["--set", s] for each of sets."""
    out = []
    for s in sets:
        out += ["--set", s]
    return out


def show(cmd):
    """A command as it can be pasted into a shell from the repository root (repository paths relative)."""
    return shlex.join(rel(c) if os.path.isabs(c) else c for c in cmd)


def rel(path):
    """path relative to the repository when inside it, else absolute."""
    p = os.path.abspath(path)
    return os.path.relpath(p, REPO) if p.startswith(REPO + "/") else p


def preflight(train_gpt, need_data=True):
    """What stops every run before it starts: no train_gpt, a train_gpt without the planner's --auto, no data.
    Returns the problem, or None."""
    if not os.access(train_gpt, os.X_OK):
        return f"{train_gpt} is not an executable (build the apps, or pass --build)"
    r = subprocess.run([train_gpt, "--help"], capture_output=True, text=True, env=ENV)
    if "--auto" not in r.stdout:
        return f"{train_gpt} --help has no --auto: this build has no layout planner"
    missing = [f for f in DATA_FILES if not os.path.exists(os.path.join(ENV["HPCT_DATA_DIR"], f))]
    if need_data and missing:
        return f"{', '.join(missing)} missing in {ENV['HPCT_DATA_DIR']} (scripts/prepare_data.sh)"
    return None


def plan_objects(cmd, timeout=300):
    """Runs the planner (`... --plan W --auto --machine M --json ...`) and returns (objects, problem): its JSON Lines
    objects in printed order (the table before them is skipped), or ([], what went wrong)."""
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=ENV)
    except (OSError, subprocess.TimeoutExpired) as e:
        return [], f"{show(cmd)}: {e}"
    objs = []
    for line in r.stdout.splitlines():
        if line.startswith("{"):
            try:
                o = json.loads(line)
            except ValueError:
                continue
            if isinstance(o, dict) and "layout" in o:
                objs.append(o)
    if r.returncode != 0 or not objs:
        tail = (r.stdout[-1500:] + r.stderr[-1500:]).strip()
        return [], f"{show(cmd)} exited {r.returncode} with {len(objs)} candidate object(s):\n{tail}"
    return objs, None


def deck_object(objs):
    """The object of the deck's own layout ("deck": true), or None."""
    return next((o for o in objs if o.get("deck") is True), None)


def run_together(jobs, timeout):
    """Starts every (command, out_dir) of jobs at once, each in a session of its own with its stdout and stderr in
    out_dir/stdout.txt, and waits for all; after `timeout` seconds the unfinished ones are killed, ranks included
    (mpi_jobs.session_pids). Returns (exit code, seconds) per job, 124 for a killed one."""
    procs = []
    t0 = time.time()
    for cmd, out in jobs:
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "stdout.txt"), "w") as f:
            procs.append(subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=ENV, start_new_session=True))
    killed = set()

    def kill_all():
        for p in procs:
            if p.poll() is None:
                killed.add(p.pid)
                for pid in sorted(session_pids(p.pid), key=lambda x: x == p.pid):  # the ranks first, mpirun last
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
    timer = threading.Timer(timeout, kill_all)
    timer.start()
    results = []
    for p in procs:
        rc = p.wait()
        results.append((124 if p.pid in killed else rc, time.time() - t0))
    timer.cancel()
    return results


def step_ms(out_dir, steps):
    """(median ms of the steps after WARMUP_STEPS, problem) from out_dir/metrics.jsonl (docs/contracts.md, one record
    per optimizer step with its wall time "ms"); problem is None when every step 1..steps is there."""
    try:
        with open(os.path.join(out_dir, "metrics.jsonl")) as f:
            recs = [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError) as e:
        return None, f"metrics.jsonl: {e}"
    if [r.get("step") for r in recs] != list(range(1, steps + 1)):
        return None, f"metrics.jsonl holds {len(recs)} step records, not steps 1..{steps}"
    timed = [float(r["ms"]) for r in recs if r["step"] > WARMUP_STEPS and r.get("ms") is not None]
    if not timed:
        return None, f"no step time after step {WARMUP_STEPS}"
    return statistics.median(timed), None


def failure_tail(out_dir, rc):
    """One line for the failure message: the app's last "error:" line (mpirun's own complaints follow it), else the
    job's last line."""
    try:
        with open(os.path.join(out_dir, "stdout.txt"), errors="replace") as f:
            lines = [line.strip() for line in f if line.strip()]
    except OSError:
        lines = []
    errors = [line for line in lines if ": error:" in line]
    last = (errors or lines or [""])[-1]
    return f"exit {rc}" + (f": {last[:200]}" if last else "")
