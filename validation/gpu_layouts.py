#!/usr/bin/env python3
"""The GPU layout matrix: several MPI ranks on one GPU, every case of validation/gpu_layout_cases.json run with each
communication backend and judged against the CPU serial run of the same deck and precision (docs/cuda.md, "The layout
matrix on one GPU"). Through the apps' contracts only (command line, --set, metrics.jsonl, checkpoints, exit codes).

  backends  mpi: `comm.backend = "mpi"` with `train.device = "cuda"` (the device communicator groups staged through
            host memory and MPI); nccl: `comm.backend = "nccl"` with NCCL_MULTI_RANK_GPU_ENABLE=1 (NCCL >= 2.30 runs
            several ranks of one communicator on one GPU). An app whose --help lacks comm.backend runs nccl without
            the key (what it always did) and mpi not at all (UNSUPPORTED)
  reference for each (app, precision) of the selected cases, once: the deck serially on the CPU (train.device=cpu, one
            rank, OMP_NUM_THREADS=1) and its rounding controls, the same at 2, 3 and 4 threads and, for train_resnet,
            with the CPU's other convolution (HPCT_CONV=im2col: the same sums in another order, as cuDNN's are;
            tests/integration/check_cuda_run.py). Kept under WORK/reference/ and reused while the command and the
            executable are unchanged
  judging   validation/layout_rules.py's Reference.verdict, the campaign's rule: every step's loss and gradient norm
            within max(1e-5, 10 x the controls' rounding envelope) over the initial window (steps 1..2) and over the
            whole curve, the final test loss likewise. bf16 (train.precision or parallel.grad_dtype): the losses within
            max(0.5%, 10 x the envelope), gradient norms reported, not judged (docs/precision.md; check_precision.py)
  kinds     layout: the case's run (STEPS steps) against the reference. restart: STEPS/2 steps on one side, the
            checkpoint resumed to STEPS in the same run directory on the other (GPU -> CPU, GPU -> other GPU layout,
            CPU -> GPU: the case's resume_on / checkpoint_from), the whole curve against the reference. memory: the
            run against the reference, and its first memory record against `--plan WORLD --json` with the same
            settings, every kind within 5% (docs/contracts.md). signal: SIGUSR1 to rank 1 once step 3 is logged:
            exit code 3, `latest` at the step it stopped after, the resume bitwise equal to an uninterrupted run of
            the same length on the same device and backend (NCCL_ALGO=Ring NCCL_PROTO=Simple pinned for nccl).
            background_ckpt: the run (background saves, checkpoint.async) against the reference, its log showing
            background saves, every checkpoint verified by ckpt_tool, the step-4 checkpoint resumed bitwise equal to
            the run's own steps 5.. (NCCL pinned likewise)
  verdicts  VALID, FAILED (a deviation past the rule, a wrong exit code, missing steps, a crash), UNSUPPORTED (the run
            timed out, or failed with an NCCL or sync-guard error, or the build cannot select the backend: recorded
            with its last error lines, never dropped, not a failure of the exit code but listed)
  --dry-run every selected case on the CPU instead (train.device=cpu with HPCT_STAGE_DEVICE_GROUPS=1: the apps route
            their device communicator groups through the host-staging layer), backend mpi only: the runner, the decks
            and the judging, anywhere (ctest validation_gpu_layouts_dry); every case must be VALID there
  --check-cases  every case of the file well-formed, and each of its runs' layouts accepted by `APP DECK --plan WORLD`
            (no MPI, no data for the GPT); runs nothing else
  --plant FAULT[:rank=R] / --plant-set KEY=VALUE  a planted defect (HPCT_TEST_FAULT, lib/core/test_fault.hpp; or an
            extra --set) in every run under test, never in the references: the verdicts must turn FAILED (the
            self-check of the judging; records go to WORK/planted.jsonl unless --record is given)

Writes JSON Lines (one object per case and backend, appended; --fresh starts the file anew) with the keys device,
device_slug, commit, nccl_version, backend, app, world, layout, precision, verdict, worst_loss_dev, worst_gnorm_dev,
message, log (the case's log, relative to the repository where it lies inside it), and a markdown report next to it
(PATH.md: cases x backends, from every record of the file, the latest per case and backend). Default record
validation/results/gpu/<device_slug>_<date>_layouts.jsonl, logs in validation/results/gpu/<device_slug>_<date>_layouts/,
run directories in runs/gpu_layouts/ (dry run: all under runs/gpu_layouts_dry/). Wall times are printed for progress
only: several ranks share one GPU, so no time here is a speed.

usage: gpu_layouts.py [--cases FILE] [--backend mpi|nccl|both] [--only ID[,ID..]] [--world N] [--out DIR]
                      [--work DIR] [--record PATH.jsonl] [--fresh] [--dry-run] [--check-cases] [--timeout S]
                      [--budget S] [--build DIR] [--mpirun 'mpirun --oversubscribe --bind-to none']
                      [--plant FAULT | --plant-set K=V] [--jobs N] [--report-only]
--only takes ids or shell patterns (gpt_dp2_*), comma-separated or repeated. --budget S: no case starts after S seconds
and a case it cuts is not recorded (both listed); SIGTERM or SIGINT (a `timeout` around the runner) kills the running
job's ranks, which run in a session of their own, writes the report and exits 128 + the signal. Exit status: 0 when no
case run FAILED (UNSUPPORTED listed), 1 when one did (dry run: when one is not VALID or the run was cut), 2 on a usage
error or no GPU.
Python 3.8+, standard library only (it runs from validation/gpu_bundle.sh's environment too)."""
import argparse
import datetime
import fnmatch
import hashlib
import json
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from layout_rules import (ANCHOR_STEPS, CONTROL_THREADS, ENVELOPE_FACTOR, RTOL, Envelope, Reference,  # noqa: E402
                          deviation, fmt, read_run)
from layout_rules import judge as rule_judge, rel as rel_dev  # noqa: E402
from mpi_jobs import session_pids  # noqa: E402

APPS = ("train_gpt", "train_resnet")
KINDS = ("layout", "restart", "memory", "signal", "background_ckpt")
BACKENDS = ("mpi", "nccl")
PRECISIONS = ("fp32", "bf16")
DEVICES = ("gpu", "cpu")
BF16_RTOL = 5e-3  # docs/precision.md: bf16 layouts within 0.5% of the bf16 serial run
MEMORY_KINDS = ("params", "grads", "optimizer", "comm", "activations", "workspace", "ckpt_staging", "peak")
PLAN_TOLERANCE = 0.05  # docs/contracts.md: the memory record within 5% of the plan per kind (exact today)
RECORD_KEYS = ("device", "device_slug", "commit", "nccl_version", "backend", "app", "world", "layout", "precision",
               "verdict", "worst_loss_dev", "worst_gnorm_dev", "message", "log")
FAULT_NAMES = ("dp_bucket_twice", "dp_bucket_dropped", "tp_grad_scale", "syncbn_naive", "pp_loss_twice",
               "zero_shard_offset")
RUNNER_KEYS = ("train.device", "train.precision", "train.steps", "optim.decay_steps", "comm.backend",
               "comm.timeout_s", "checkpoint.resume")  # set by the runner, never by a case
SIGNAL_AFTER = 3  # SIGUSR1 once this step is logged
SIGNAL_MORE = 5  # the resumed and the uninterrupted run go this many steps past the one the signal stopped
SIGNAL_STEPS = 100000  # the signalled run's train.steps and every signal run's optim.decay_steps: never reached
ASYNC_RESUME_FROM = 4  # background_ckpt: the checkpoint resumed
STEP_LINE = re.compile(r"^step\s+(\d+)/")
# error lines that make a failed run UNSUPPORTED rather than FAILED: NCCL's own errors and warnings, the sync guard,
# the bounded waits (comm.timeout_s), the device refusals about ranks per GPU, and a build without comm.backend
UNSUPPORTED_RE = re.compile(r"nccl|sync guard|timed out after|comm\.timeout_s|comm\.backend|ranks? per gpu|"
                            r"visible cuda device", re.I)
ERROR_LINE_RE = re.compile(r"error|abort|fail|fault|timed out|NCCL WARN|terminate|signal \d+|what\(\)", re.I)
# mpirun's own banner around a rank's MPI_Abort or death: never the cause
LAUNCHER_NOISE_RE = re.compile(r"^(-+|MPI_ABORT was invoked|with errorcode|NOTE: invoking MPI_ABORT|You may or may not "
                               r"see output|Primary job|mpirun (noticed|has exited|detected)|Per user-direction|"
                               r"a non-zero exit code|\d+ more process|Set MCA parameter|process(es)? returned)")

ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--cases", default=os.path.join(HERE, "gpu_layout_cases.json"), help="the case list (JSON)")
ap.add_argument("--backend", choices=["mpi", "nccl", "both"], default="both",
                help="comm.backend to run each case with (default both; a case's own backends list limits it)")
ap.add_argument("--only", action="append", default=[], metavar="IDS",
                help="case ids or shell patterns, comma-separated (repeatable)")
ap.add_argument("--world", type=int, action="append", default=[], metavar="N",
                help="only the cases whose GPU run has N ranks (repeatable)")
ap.add_argument("--out", help="logs: one per case and backend, and the references' (default: next to the record)")
ap.add_argument("--work", help="run directories (default runs/gpu_layouts, dry run runs/gpu_layouts_dry)")
ap.add_argument("--record", help="the JSON Lines record (default validation/results/gpu/<device_slug>_<date>_layouts"
                                 ".jsonl; the markdown report goes next to it)")
ap.add_argument("--fresh", action="store_true", help="start the record anew instead of appending to it")
ap.add_argument("--dry-run", action="store_true",
                help="run every selected case on the CPU (train.device=cpu, HPCT_STAGE_DEVICE_GROUPS=1), backend mpi")
ap.add_argument("--check-cases", action="store_true",
                help="check the case file (every case well-formed, every run's layout accepted by --plan) and stop")
ap.add_argument("--timeout", type=float, default=120, help="seconds per run (default 120): past it, UNSUPPORTED")
ap.add_argument("--budget", type=float,
                help="seconds for the whole invocation: no case starts after it, a case it cuts is not recorded "
                     "(both listed as not run); for a command under a time limit")
ap.add_argument("--build", default=os.path.join(REPO, "build"), help="build directory holding apps/ (default build)")
ap.add_argument("--mpirun", default="mpirun --oversubscribe --bind-to none",
                help="launcher prefix for runs of more than one rank; -np W is appended (world 1: a singleton)")
ap.add_argument("--report-only", action="store_true",
                help="write the markdown report of --record (e.g. after moving the record and its logs into the "
                     "repository, the records' log paths made to point there) and stop; runs nothing")
ap.add_argument("--plant", metavar="FAULT[:rank=R]", help="plant HPCT_TEST_FAULT in every run under test")
ap.add_argument("--plant-set", metavar="KEY=VALUE", help="plant an extra --set in every run under test")
ap.add_argument("--plant-resume-noise", type=float, metavar="REL",
                help="plant a checkpoint that comes back wrong: every restart case's resumed run perturbed by "
                     "HPCT_TEST_RESUME_NOISE=REL (select restart cases with --only)")
ap.add_argument("--restart-control", choices=["auto", "always"], default="auto",
                help="the restart cases' window and restart controls: auto (default) runs each only where its check "
                     "would otherwise fail; always runs both for every restart case (their figures in the notes)")
ap.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) // 4),
                help="reference runs at once (default cores / 4)")
args = ap.parse_args()
DRY = args.dry_run
if args.plant and args.plant.split(":")[0] not in FAULT_NAMES:
    ap.error(f"--plant {args.plant}: unknown fault (one of {', '.join(FAULT_NAMES)}, optionally with :rank=R)")
if args.plant_set and "=" not in args.plant_set:
    ap.error(f"--plant-set {args.plant_set}: should be KEY=VALUE")
if args.plant_resume_noise is not None and not 0 < args.plant_resume_noise < 1:
    ap.error(f"--plant-resume-noise {args.plant_resume_noise:g}: a relative size in (0, 1)")
PLANTED = args.plant or args.plant_set or (args.plant_resume_noise and f"resume noise {args.plant_resume_noise:g}")
MPIRUN = shlex.split(args.mpirun)
ENV = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1", PYTHONUNBUFFERED="1")
for k in ("HPCT_TEST_FAULT", "HPCT_STAGE_DEVICE_GROUPS", "NCCL_ALGO", "NCCL_PROTO", "HPCT_CONV"):
    ENV.pop(k, None)  # only what a run asks for


def die(msg, code=2):
    print(f"gpu_layouts: error: {msg}", flush=True)
    sys.exit(code)


# ---------------------------------------------------------------------------------------------------- the case file
def load_cases(path):
    """(the file's top level, its cases, a list of problems): every case checked against the schema above."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        die(f"{path}: {e}")
    bad = []
    for key in ("decks", "quiet", "reference", "cases", "steps"):
        if key not in doc:
            bad.append(f"{path}: no top-level '{key}'")
    if bad:
        return doc, [], bad
    steps = doc["steps"]
    if not isinstance(steps, int) or steps < 6:
        bad.append(f"steps {steps!r}: an integer >= 6 (the restart's checkpoint needs a window on each side)")
    for app in APPS:
        for key in ("decks", "quiet", "reference"):
            if app not in doc[key]:
                bad.append(f"'{key}' lacks {app}")
        if app in doc["decks"] and not os.path.isfile(os.path.join(REPO, doc["decks"][app])):
            bad.append(f"deck {doc['decks'][app]} of {app} is missing")
    seen = set()

    def check_layout(where, layout):
        if not isinstance(layout, list) or not all(isinstance(s, str) for s in layout):
            bad.append(f"{where}: layout should be a list of 'section.key=value' strings, is {layout!r}")
            return
        for s in layout:
            k, eq, _ = s.partition("=")
            if not eq or not re.fullmatch(r"[a-z_]+\.[a-z_0-9]+", k):
                bad.append(f"{where}: '{s}' is not section.key=value")
            elif k in RUNNER_KEYS:
                bad.append(f"{where}: '{s}': {k} is set by the runner (precision: the case's field)")

    def micro_batch(layout):
        v = [s.split("=", 1)[1] for s in (layout if isinstance(layout, list) else [])
             if s.startswith("train.micro_batch=")]
        return int(v[-1]) if v and v[-1].isdigit() else None
    # SyncBN normalises over the DP group's micro-batch: a ResNet run agrees with the reference at a constant
    # DP x micro_batch (docs/apps.md "train_resnet"), so every ResNet run states its micro-batch
    ref_gmb = micro_batch(doc["reference"].get("train_resnet", []))

    for i, c in enumerate(doc["cases"]):
        cid = c.get("id") if isinstance(c, dict) else None
        where = f"case {cid or '#' + str(i)}"
        if not isinstance(c, dict):
            bad.append(f"{where}: not an object")
            continue
        if not isinstance(cid, str) or not re.fullmatch(r"[a-z0-9_]+", cid):
            bad.append(f"{where}: id should be [a-z0-9_]+")
        elif cid in seen:
            bad.append(f"{where}: id repeated")
        seen.add(cid)
        for key in ("app", "world", "layout", "precision", "backends", "kind"):
            if key not in c:
                bad.append(f"{where}: no '{key}'")
        if c.get("app") not in APPS:
            bad.append(f"{where}: app {c.get('app')!r} (one of {', '.join(APPS)})")
        if not isinstance(c.get("world"), int) or isinstance(c.get("world"), bool) or c.get("world", 0) < 1:
            bad.append(f"{where}: world {c.get('world')!r}, an integer >= 1")
        check_layout(where, c.get("layout"))
        if c.get("precision") not in PRECISIONS:
            bad.append(f"{where}: precision {c.get('precision')!r} (one of {', '.join(PRECISIONS)})")
        b = c.get("backends")
        if not isinstance(b, list) or not b or len(set(b)) != len(b) or any(x not in BACKENDS for x in b):
            bad.append(f"{where}: backends {b!r}: a non-empty list of distinct {', '.join(BACKENDS)}")
        kind = c.get("kind")
        if kind not in KINDS:
            bad.append(f"{where}: kind {kind!r} (one of {', '.join(KINDS)})")
        other = [k for k in ("resume_on", "checkpoint_from") if k in c]
        if kind == "restart":
            cs = c.get("checkpoint_step")
            if not isinstance(cs, int) or not 2 <= cs <= steps - 2:
                bad.append(f"{where}: checkpoint_step {cs!r}, an integer in 2..{steps - 2}")
            if len(other) != 1:
                bad.append(f"{where}: a restart has exactly one of resume_on, checkpoint_from")
            else:
                seg = c[other[0]]
                if not isinstance(seg, dict) or set(seg) != {"world", "layout", "device"}:
                    bad.append(f"{where}: {other[0]} should be {{world, layout, device}}")
                else:
                    if not isinstance(seg["world"], int) or seg["world"] < 1:
                        bad.append(f"{where}: {other[0]}.world {seg['world']!r}")
                    if seg["device"] not in DEVICES:
                        bad.append(f"{where}: {other[0]}.device {seg['device']!r} (one of {', '.join(DEVICES)})")
                    check_layout(f"{where} {other[0]}", seg["layout"])
        elif other or "checkpoint_step" in c:
            bad.append(f"{where}: {', '.join(other + ['checkpoint_step'] * ('checkpoint_step' in c))} only for "
                       "restarts")
        if kind in ("signal", "background_ckpt") and c.get("world", 0) < 2:
            bad.append(f"{where}: a {kind} case runs at world >= 2")
        if kind == "background_ckpt":
            lay = c.get("layout") or []
            if "checkpoint.async=true" not in lay or not any(s.startswith("checkpoint.every=") for s in lay):
                bad.append(f"{where}: a background_ckpt case sets checkpoint.async=true and checkpoint.every")
            elif f"checkpoint.every={ASYNC_RESUME_FROM // 2}" not in lay and \
                    f"checkpoint.every={ASYNC_RESUME_FROM}" not in lay:
                bad.append(f"{where}: checkpoint.every must write step {ASYNC_RESUME_FROM} (the one resumed)")
            if "checkpoint.keep=0" not in lay:
                bad.append(f"{where}: checkpoint.keep=0 (every checkpoint is verified, step {ASYNC_RESUME_FROM} "
                           "resumed)")
        if c.get("app") == "train_resnet" and ref_gmb and isinstance(c.get("world"), int):
            runs = [(c["world"], c.get("layout"))] + [(c[k].get("world"), c[k].get("layout")) for k in other
                                                      if isinstance(c[k], dict)]
            for w, lay in runs:
                mb = micro_batch(lay)
                if not isinstance(w, int) or mb is None or w * mb != ref_gmb:
                    need = ref_gmb // w if isinstance(w, int) and w > 0 else "?"
                    bad.append(f"{where}: a train_resnet run at world {w} needs train.micro_batch={need} (SyncBN's "
                               f"global micro-batch DP x micro_batch = the reference's {ref_gmb})")
        unknown = set(c) - {"id", "app", "world", "layout", "precision", "backends", "kind", "note", "checkpoint_step",
                            "resume_on", "checkpoint_from"}
        if unknown:
            bad.append(f"{where}: unknown field(s) {sorted(unknown)}")
    return doc, doc["cases"], bad


DOC, CASES, problems = load_cases(args.cases)
if problems:
    for p in problems:
        print("  case file:", p)
    print(f"FAILED: {args.cases}: {len(problems)} problem(s) in the case list")
    sys.exit(1)
STEPS = DOC["steps"]
EXE = {app: os.path.join(args.build, "apps", app) for app in APPS}
CKPT_TOOL = os.path.join(args.build, "apps", "ckpt_tool")
for app, exe in EXE.items():
    if not os.access(exe, os.X_OK):
        die(f"{exe} is not an executable (build the apps, or pass --build DIR)")


def deck(app):
    return os.path.join(REPO, DOC["decks"][app])


def knows_key(app, key, cache={}):
    """Whether APP --help lists the deck key (comm.backend: the build can select the backend)."""
    if (app, key) not in cache:
        try:
            p = subprocess.run([EXE[app], "--help"], capture_output=True, text=True, errors="replace", timeout=60,
                               env=ENV)
            cache[(app, key)] = re.search(r"^\s*" + re.escape(key) + r"\s", p.stdout, re.M) is not None
        except (OSError, subprocess.TimeoutExpired):
            cache[(app, key)] = False
    return cache[(app, key)]


def segments(case):
    """The runs of a case in order: (role, world, layout, device); role 'case' is the run under test."""
    own = ("case", case["world"], case["layout"], "gpu")
    if case["kind"] != "restart":
        return [own]
    if "resume_on" in case:
        r = case["resume_on"]
        return [own, ("resume", r["world"], r["layout"], r["device"])]
    f = case["checkpoint_from"]
    return [("checkpoint", f["world"], f["layout"], f["device"]), own]


def bf16_rule(case):
    """The bf16 bound applies where the case computes or reduces in bf16 (docs/precision.md)."""
    return case["precision"] == "bf16" or any("parallel.grad_dtype=bf16" in seg[2] for seg in segments(case))


def device_sets(app, device, backend):
    """The device keys of a run: the GPU's (the CPU's in a dry run) with the backend, and every wait bounded at half
    --timeout, so that a stalled collective ends with the app's own message naming it before the runner kills the
    job."""
    sets = [f"comm.timeout_s={max(10.0, args.timeout / 2):g}"]
    if device == "cpu":
        return sets + ["train.device=cpu"]
    sets.append("train.device=cpu" if DRY else "train.device=cuda")
    if knows_key(app, "comm.backend"):
        sets.append(f"comm.backend={backend}")
    return sets


def run_sets(case, world_layout, device, backend, extra=()):
    """The --set arguments of one run of a case (quiet, precision, device, steps, the layout, the kind's extras)."""
    app = case["app"]
    sets = list(DOC["quiet"][app]) + [f"train.precision={case['precision']}"] + device_sets(app, device, backend)
    sets += [f"train.steps={STEPS}", f"optim.decay_steps={STEPS}"] + list(world_layout) + list(extra)
    if PLANTED and args.plant_set and device == "gpu":
        sets.append(args.plant_set)
    return sets


def run_env(device, backend, bitwise=False):
    env = dict(ENV)
    if device == "gpu":
        if DRY:
            env["HPCT_STAGE_DEVICE_GROUPS"] = "1"
        elif backend == "nccl":
            env["NCCL_MULTI_RANK_GPU_ENABLE"] = "1"
            if bitwise:  # one algorithm and protocol: NCCL's run-to-run order then depends on nothing else
                env.update(NCCL_ALGO="Ring", NCCL_PROTO="Simple")
        if args.plant:
            env["HPCT_TEST_FAULT"] = args.plant
    return env


def env_diff(env):
    return " ".join(f"{k}={env[k]}" for k in sorted(env) if os.environ.get(k) != env[k] and k not in (
        "OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "PYTHONUNBUFFERED"))


# ---------------------------------------------------------------------------------------------------- check-cases
def plan_cmd(app, world, sets, json_=False):
    return [EXE[app], deck(app), "--plan", str(world)] + (["--json"] if json_ else []) + \
        [a for s in sets for a in ("--set", s)]


def check_cases():
    """Every run of every case through --plan at its world (the GPU's plan: train.device=cuda), in parallel."""
    todo = []
    for c in CASES:
        for role, world, layout, device in segments(c):
            sets = [f"train.precision={c['precision']}", f"train.device={'cuda' if device == 'gpu' else 'cpu'}",
                    f"train.steps={STEPS}", f"optim.decay_steps={STEPS}"] + list(DOC["quiet"][c["app"]]) + layout
            todo.append((c["id"], role, c["app"], world, sets))

    def one(t):
        cid, role, app, world, sets = t
        try:
            p = subprocess.run(plan_cmd(app, world, sets), capture_output=True, text=True, errors="replace",
                               timeout=120, env=ENV)
            return t, p.returncode, (p.stdout + p.stderr).strip().splitlines()[-1:] or [""]
        except (OSError, subprocess.TimeoutExpired) as e:
            return t, -1, [str(e)]
    bad = []
    with ThreadPoolExecutor(8) as pool:  # each --plan waits mostly on its start-up, not on a core
        for (cid, role, app, world, sets), rc, last in pool.map(one, todo):
            if rc != 0:
                bad.append(f"{cid} ({role} run, world {world}): {app} --plan {world} exit {rc}: {last[0][:300]}")
    for b in bad:
        print("  --plan refused:", b)
    n_runs = len(todo)
    if bad:
        print(f"FAILED: --check-cases: {len(bad)} of {n_runs} runs' layouts refused by --plan")
        return False
    kinds = {k: sum(c["kind"] == k for c in CASES) for k in KINDS}
    print(f"VALID: --check-cases: {len(CASES)} cases well-formed ({', '.join(f'{n} {k}' for k, n in kinds.items())}); "
          f"all {n_runs} runs' layouts accepted by --plan at their world")
    return True


if args.check_cases:
    sys.exit(0 if check_cases() else 1)

pats = [p for o in args.only for p in o.split(",") if p]
selected = [c for c in CASES if (not pats or any(fnmatch.fnmatchcase(c["id"], p) for p in pats))
            and (not args.world or c["world"] in args.world)]
unmatched = [p for p in pats if not any(fnmatch.fnmatchcase(c["id"], p) for c in CASES)]
if unmatched:
    die(f"--only {', '.join(unmatched)}: no such case in {args.cases}")
want = ["mpi"] if DRY else (list(BACKENDS) if args.backend == "both" else [args.backend])
if DRY and args.backend == "nccl":
    die("--dry-run runs on the CPU, whose device groups go through the host-staged (mpi) path: no nccl there")
todo = [(c, b) for c in selected for b in want if b in c["backends"]]
if not todo:
    die("no case selected (--only, --world, --backend)")


# ---------------------------------------------------------------------------------------------------- the machine
def gpu_name():
    try:
        p = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                           text=True, errors="replace", timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"nvidia-smi cannot run ({e})"
    names = [l.strip() for l in p.stdout.splitlines() if l.strip()]
    if p.returncode != 0 or not names:
        return None, f"nvidia-smi lists no GPU (exit {p.returncode}: {(p.stdout + p.stderr).strip()[:200]})"
    return names[0], None


def slugify(name):
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            return next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "unknown CPU")
    except OSError:
        return "unknown CPU"


def commit():
    try:
        rev = subprocess.run(["git", "-C", REPO, "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True,
                             timeout=30)
        if rev.returncode != 0:
            raise OSError(rev.stderr)
        dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=30).stdout.strip()
        return rev.stdout.strip() + ("+dirty" if dirty else "")
    except (OSError, subprocess.TimeoutExpired):
        return os.environ.get("HPCT_COMMIT", "unknown")


if DRY:
    DEVICE, SLUG = f"CPU dry run ({cpu_model()})", "cpu_dry_run"
elif args.report_only:
    if not args.record:
        die("--report-only needs --record PATH.jsonl: the record to write the report of")
    DEVICE = SLUG = None  # the report takes the device from the record
else:
    DEVICE, why = gpu_name()
    if DEVICE is None:
        die(f"no GPU: {why}; run where nvidia-smi lists one, or --dry-run to run the cases on the CPU")
    SLUG = slugify(DEVICE)
COMMIT = commit()
DAY = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
if DRY:
    base = os.path.join(REPO, "runs", "gpu_layouts_dry")
    RECORD = os.path.abspath(args.record or os.path.join(base, f"{SLUG}_{DAY}_layouts.jsonl"))
    WORK = os.path.abspath(args.work or base)
else:
    RECORD = os.path.abspath(args.record or os.path.join(HERE, "results", "gpu", f"{SLUG}_{DAY}_layouts.jsonl"))
    WORK = os.path.abspath(args.work or os.path.join(REPO, "runs", "gpu_layouts"))
if PLANTED and not args.record:
    RECORD = os.path.join(WORK, "planted.jsonl")
OUT = os.path.abspath(args.out or os.path.splitext(RECORD)[0])
REPORT = os.path.splitext(RECORD)[0] + ".md"
for d in (OUT, WORK, os.path.dirname(RECORD)):
    os.makedirs(d, exist_ok=True)
if args.fresh and os.path.exists(RECORD) and not args.report_only:
    os.remove(RECORD)


def rel(path):
    p = os.path.abspath(path)
    return os.path.relpath(p, REPO) if p.startswith(REPO + os.sep) else p


# ---------------------------------------------------------------------------------------------------- running
def rank_pid(sid, rank):
    """The pid of MPI rank `rank` in session sid (from its environment), or None."""
    for pid in session_pids(sid):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if f"OMPI_COMM_WORLD_RANK={rank}".encode() in env or f"PMIX_RANK={rank}".encode() in env:
            return pid
    return None


class Result:
    def __init__(self, rc, text, seconds, timed_out):
        self.rc, self.text, self.seconds, self.timed_out = rc, text, seconds, timed_out


class Stop(Exception):
    """The invocation ends before a case's end: --budget spent, or SIGTERM / SIGINT (the running jobs killed)."""


T0 = time.time()
DEADLINE = T0 + args.budget if args.budget else None
RUNNING = set()  # the sessions (launcher pids) of the jobs running now
RUNNING_LOCK = threading.RLock()  # re-entrant: the signal handler may interrupt the main thread holding it
STOPPING = []  # set once a signal came: no job starts after it


def kill_session(sid):
    for pid in sorted(session_pids(sid), key=lambda x: x == sid):  # the ranks first, the launcher last
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def on_signal(signum, _frame):
    """A terminating signal (a time limit's `timeout`, Ctrl-C): the jobs run in sessions of their own, which the
    signal does not reach, so they are killed here before the runner stops."""
    STOPPING.append(signum)
    with RUNNING_LOCK:
        for sid in list(RUNNING):
            kill_session(sid)
    raise Stop(f"signal {signum}")


signal.signal(signal.SIGTERM, on_signal)
signal.signal(signal.SIGINT, on_signal)


def run(app, world, out, sets, env, log, on_line=None):
    """Runs one app job to its end (or the timeout: the whole session killed); its output goes to the log. Raises
    Stop where --budget ends first."""
    cmd = ([] if world == 1 else MPIRUN + ["-np", str(world)]) + [EXE[app], deck(app), "--out", out]
    for s in sets:
        cmd += ["--set", s]
    log.write(f"\n$ {env_diff(env)} {shlex.join(cmd)}\n")
    log.flush()
    limit = args.timeout
    if STOPPING:
        raise Stop(f"signal {STOPPING[0]}")
    if DEADLINE is not None:
        if DEADLINE - time.time() <= 0:
            raise Stop("--budget spent")
        limit = min(limit, DEADLINE - time.time())
    t0 = time.time()
    try:
        with RUNNING_LOCK:
            p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                                 env=env, start_new_session=True)
            RUNNING.add(p.pid)
    except OSError as e:
        log.write(f"# cannot start: {e}\n")
        return Result(127, str(e), 0.0, False)
    lines = []

    def reader():
        for line in p.stdout:
            lines.append(line)
            if on_line:
                on_line(line, p.pid)
    t = threading.Thread(target=reader, daemon=True)
    t.start()
    timed_out = False
    try:
        p.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        timed_out = True
        kill_session(p.pid)
        p.wait()
    finally:
        with RUNNING_LOCK:
            RUNNING.discard(p.pid)
    t.join(timeout=10)
    if timed_out and limit < args.timeout:
        log.write("".join(lines) + f"\n# killed after {time.time() - t0:.1f} s: --budget spent\n")
        raise Stop("--budget spent")
    dt = time.time() - t0
    text = "".join(lines)
    log.write(text)
    log.write(f"# exit {p.returncode}{' (killed: past --timeout %g s)' % args.timeout if timed_out else ''} "
              f"after {dt:.1f} s\n")
    log.flush()
    return Result(p.returncode, text, dt, timed_out)


def error_lines(text):
    """The output's error lines without the launcher's banner, the app's own (`APP: error: ...`) last, as the cause."""
    lines = [l.strip() for l in text.splitlines() if l.strip() and not l.startswith("runtime libraries:")
             and not LAUNCHER_NOISE_RE.match(l.strip())]
    errs = [l for l in lines if ERROR_LINE_RE.search(l)]
    own = [l for l in errs if re.match(r"^train_(gpt|resnet): error", l)]
    return [l for l in errs if l not in own] + own


def runtime_line(line):
    """The `runtime libraries: ...` part of an app's log line, or None. The apps print it alone, or after the
    communication backend's description on the same line (comm.backend = mpi: `... | runtime libraries: ...`)."""
    at = line.find("runtime libraries:")
    return line[at:].strip() if at >= 0 else None


def runtime_libraries(recs):
    """The distinct `runtime libraries:` lines (NCCL, cuDNN, cuBLAS, CUDA runtime and MPI, each with its path) in the
    records' logs, in first-seen order."""
    seen = []
    for r in recs:
        try:
            with open(os.path.join(REPO, r.get("log", "")), errors="replace") as f:
                for line in f:
                    line = runtime_line(line)
                    if line and line not in seen:
                        seen.append(line)
        except OSError:
            continue
    return seen


def nccl_version(text):
    for l in text.splitlines():
        l = runtime_line(l)
        if l:
            m = re.search(r"\bnccl (\d+(?:\.\d+)+)", l)
            if m:
                return m.group(1)
    return None


def failed_run(what, r, backend):
    """(verdict, message) of a run that did not end as it should: UNSUPPORTED for a timeout, an NCCL or guard error or
    a build without comm.backend; FAILED otherwise. The message carries the last error lines."""
    errs = error_lines(r.text)
    tail = errs[-3:] or [l.strip() for l in r.text.splitlines() if l.strip() and
                         not LAUNCHER_NOISE_RE.match(l.strip())][-3:]
    msg = f"{what}: " + ("timed out after %g s" % args.timeout if r.timed_out else f"exit {r.rc}") + \
        (": " + " | ".join(tail) if tail else "")
    ver = nccl_version(r.text)
    if backend == "nccl" and ver and tuple(int(x) for x in ver.split(".")[:2]) < (2, 30):
        msg += f" (NCCL {ver} loaded; several ranks on one GPU need NCCL >= 2.30)"
    unsupported = r.timed_out or any(UNSUPPORTED_RE.search(l) for l in errs)
    return ("UNSUPPORTED" if unsupported else "FAILED"), msg[:1200]


# ---------------------------------------------------------------------------------------------------- references
REF_LOG = open(os.path.join(OUT, "reference.log"), "a")
REF_LOCK = threading.Lock()


def exe_stamp(app):
    st = os.stat(EXE[app])
    return f"{st.st_size}:{int(st.st_mtime)}"


def reference_dir(app, precision, name=""):
    """Where the CPU reference runs of (app, precision) are kept (WORK/reference/<app>_<precision>/<name>)."""
    return os.path.join(WORK, "reference", f"{app}_{precision}", name)


def cpu_checkpoint_dir(case):
    """The CPU serial run's own checkpoint at the case's checkpoint step (state_difference makes it)."""
    k = case["checkpoint_step"]
    return os.path.join(reference_dir(case["app"], case["precision"], f"ckpt{k}"), "checkpoints", f"step_{k:08d}")


def reference_run(app, precision, name, threads, conv=None, steps=STEPS, first=1, extra=(), noise=None, out=None,
                  log=None):
    """One CPU serial run of the reference's deck: the reference itself and its rounding controls (threads, conv),
    its step-K checkpoint (steps=K, extra=["checkpoint.at_end=true"]), and runs resumed from a checkpoint (extra
    checkpoint.resume=..., first=K+1; noise: HPCT_TEST_RESUME_NOISE). Kept under WORK/reference/ and reused while
    its stamp (command, environment, executable) is unchanged; with out given (a run from a case's own checkpoint)
    run there every time, its output into log. Returns (Run, None) or (None, why)."""
    cache = out is None
    out = out or reference_dir(app, precision, name)
    sets = list(DOC["quiet"][app]) + ["train.device=cpu", f"train.precision={precision}", f"train.steps={steps}",
                                      f"optim.decay_steps={STEPS}", "checkpoint.at_end=false"] + DOC["reference"][app]
    sets += list(extra)
    env = dict(ENV, OMP_NUM_THREADS=str(threads))
    if conv:
        env["HPCT_CONV"] = conv
    if noise:
        env["HPCT_TEST_RESUME_NOISE"] = noise
    stamp = json.dumps(dict(sets=sets, threads=threads, conv=conv, noise=noise, exe=exe_stamp(app), deck=deck(app)))
    stamp_file = out + ".stamp"
    got = read_run(out)
    try:
        with open(stamp_file) as f:
            if cache and f.read() == stamp and sorted(got) == list(range(first, steps + 1)):
                return got, None
    except OSError:
        pass
    shutil.rmtree(out, ignore_errors=True)
    buf = _Buf()
    r = run(app, 1, out, sets, env, buf)
    with REF_LOCK:
        (log or REF_LOG).write(buf.getvalue())
        (log or REF_LOG).flush()
    got = read_run(out)
    if r.rc != 0 or sorted(got) != list(range(first, steps + 1)):
        return None, failed_run(f"the CPU serial run {app} {precision} {name}", r, "mpi")[1]
    if cache:
        with open(stamp_file, "w") as f:
            f.write(stamp)
    return got, None


class _Buf:
    def __init__(self):
        self.parts = []

    def write(self, s):
        self.parts.append(s)

    def flush(self):
        pass

    def getvalue(self):
        return "".join(self.parts)


REFERENCES = {}  # (app, precision) -> (runs {name: Run}, error or None)


def build_references(pairs):
    jobs = []
    for app, prec in pairs:
        jobs.append((app, prec, "serial", 1, None))
        jobs += [(app, prec, f"omp{t}", t, None) for t in CONTROL_THREADS]
        if app == "train_resnet":
            jobs.append((app, prec, "im2col", 1, "im2col"))
    t0 = time.time()
    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        results = list(pool.map(lambda j: (j, reference_run(*j)), jobs))
    for app, prec in pairs:
        runs, err = {}, None
        for (a, p, name, _, _), (got, e) in results:
            if (a, p) == (app, prec):
                runs[name] = got
                err = err or e
        REFERENCES[(app, prec)] = (runs, err)
    print(f"  CPU references: {len(pairs)} (app, precision), {len(jobs)} runs (reused where unchanged) in "
          f"{time.time() - t0:.0f} s; log {rel(REF_LOG.name)}", flush=True)


def reference_for(case):
    """layout_rules.Reference of the case's (app, precision) at the case's bound; (None, why) when it cannot be had."""
    runs, err = REFERENCES[(case["app"], case["precision"])]
    if err:
        return None, err
    bf16 = bf16_rule(case)
    controls = {f"{t}": runs[f"omp{t}"] for t in CONTROL_THREADS}
    if "im2col" in runs:
        controls["1 (HPCT_CONV=im2col)"] = runs["im2col"]
    name = f"CPU serial {case['app']} {case['precision']}"
    try:
        return Reference(name, runs["serial"], controls, rtol=BF16_RTOL if bf16 else RTOL, gnorm=not bf16), None
    except RuntimeError as e:
        return None, f"{name}: {e}"


# ---------------------------------------------------------------------------------------------------- the kinds
class Verdict:
    def __init__(self):
        self.fails, self.unsupported, self.notes = [], None, []
        self.loss = self.gnorm = None

    def fail(self, msg):
        self.fails.append(msg)


def judge(case, ref, got, v, log, name):
    """Reference.verdict of got (a Run) against the CPU reference, into v; the worst deviations for the record."""
    log.write(f"  {ref.describe()}\n")
    ref.verdict(name, got, v.fail, log=lambda line, **_: log.write(line + "\n"))
    wl, wg, _ = deviation(got, ref.ref, ref.steps, True)
    v.loss = None if math.isinf(wl) else wl
    v.gnorm = None if math.isinf(wg) else wg
    v.notes.append(f"loss {fmt(wl)}, gradient norm {fmt(wg)} from the CPU serial run (limits: {ref.rtol:g} or 10x "
                   f"the rounding envelope, {'losses only' if not ref.gnorm else 'both'})")


def expect_ok(v, what, r, backend, out=None, steps=None):
    """Whether run r ended with exit 0 and (out, steps given) its metrics hold those steps; sets v otherwise."""
    if r.rc != 0 or r.timed_out:
        verdict, msg = failed_run(what, r, backend)
        if verdict == "UNSUPPORTED":
            v.unsupported = msg
        else:
            v.fail(msg)
        return False
    if out is not None:
        got = sorted(read_run(out))
        if got != list(steps):
            v.fail(f"{what}: metrics.jsonl holds steps {got[:3]}..{got[-3:]}, should be {steps[0]}..{steps[-1]}")
            return False
    return True


UNINTERRUPTED = {}  # layout_key -> the Run of a layout case's whole GPU run: a restart's anchored window reuses it
RESTART_SEEDS = (1, 2, 3, 4)  # the restart control: one resume per seed of the noise


def layout_key(case, world, layout, backend):
    return case["app"], case["precision"], world, tuple(layout), backend


def kind_layout(case, backend, ref, v, log, d):
    out = os.path.join(d, "run")
    r = run(case["app"], case["world"], out, run_sets(case, case["layout"], "gpu", backend), run_env("gpu", backend),
            log)
    if expect_ok(v, "the run", r, backend, out, range(1, STEPS + 1)):
        judge(case, ref, read_run(out), v, log, f"{case['id']} {backend}")
        UNINTERRUPTED[layout_key(case, case["world"], case["layout"], backend)] = read_run(out)
    return r, out


def kind_memory(case, backend, ref, v, log, d):
    r, out = kind_layout(case, backend, ref, v, log, d)
    if r.rc != 0 or v.unsupported:
        return r
    with open(os.path.join(out, "metrics.jsonl")) as f:
        first = json.loads(f.readline())
    rec = first.get("memory")
    sets = run_sets(case, case["layout"], "gpu", backend)  # the run's own settings, device included
    p = subprocess.run(plan_cmd(case["app"], case["world"], sets, json_=True), capture_output=True, text=True,
                       errors="replace", timeout=120, env=run_env("gpu", backend))
    log.write(f"\n$ {shlex.join(plan_cmd(case['app'], case['world'], sets, True))}\n{p.stdout[-2000:]}{p.stderr}")
    plans = [json.loads(l) for l in p.stdout.splitlines() if l.startswith('{"plan"')]
    if rec is None or p.returncode != 0 or not plans:
        v.fail(f"memory: no record in the first metrics line ({rec is not None}) or no --plan --json (exit "
               f"{p.returncode})")
        return r
    plan = plans[-1]["plan"].get("memory", {})
    worst, row = 0.0, []
    for k in MEMORY_KINDS:
        a, b = rec.get(k), plan.get(k)
        if a is None or b is None:
            v.fail(f"memory: {k} missing from the record ({a}) or the plan ({b})")
            continue
        dev = abs(a - b) / max(a, 1)
        worst = max(worst, dev)
        row.append(f"{k} {a:.0f}/{b:.0f}")
        if dev > PLAN_TOLERANCE:
            v.fail(f"memory: {k} recorded {a:.0f} bytes, planned {b:.0f} ({100 * dev:.2f}% apart, bound "
                   f"{100 * PLAN_TOLERANCE:g}%)")
    log.write(f"  memory record / --plan {case['world']} (bytes, max over ranks): " + ", ".join(row) + "\n")
    v.notes.append(f"memory record vs --plan: largest difference {100 * worst:.3f}%")
    return r


def kind_restart(case, backend, ref, v, log, d):
    out = os.path.join(d, "run")
    k = case["checkpoint_step"]
    segs = segments(case)
    r = None
    for i, (role, world, layout, device) in enumerate(segs):
        last = i == len(segs) - 1
        extra = ["checkpoint.resume=latest"] if i else []
        sets = run_sets(case, layout, device, backend, extra)
        if not last:
            sets = [s for s in sets if not s.startswith("train.steps=")] + [f"train.steps={k}",
                                                                           "checkpoint.at_end=true"]
        env = run_env(device, backend)
        if i and args.plant_resume_noise:
            env["HPCT_TEST_RESUME_NOISE"] = f"{args.plant_resume_noise:g}:seed=99"
        r = run(case["app"], world, out, sets, env, log)
        what = f"the {'first' if not i else 'resumed'} run ({device} world {world})"
        if not expect_ok(v, what, r, backend, out, range(1, (STEPS if last else k) + 1)):
            return r
    a, b = segs
    v.notes.append(f"checkpoint at step {k} by {a[3]} world {a[1]} [{' '.join(a[2]) or 'serial'}], resumed to "
                   f"{STEPS} by {b[3]} world {b[1]} [{' '.join(b[2]) or 'serial'}]")
    judge_restart(case, backend, ref, read_run(out), v, log, d, os.path.join(out, "checkpoints", f"step_{k:08d}"))
    return r


def judge_restart(case, backend, ref, got, v, log, d, step_dir):
    """A restart against the CPU serial run, as the campaign judges one (validation/equivalence.py, "restart"):
      - steps 1..K (the writer's run) by the rule from the common initialisation (initial window, trajectory);
      - the anchored window K+1..K+ANCHOR_STEPS against the writer's layout uninterrupted (what the checkpoint
        dropped shows there at its full size), within max(rtol, 10 x the window's own rounding envelope: the CPU
        serial run resumed from the same checkpoint at 2, 3 and 4 threads, and the other convolution for the ResNet);
      - steps K+1..STEPS within max(rtol, 10 x the trajectory envelope); where they are not and the checkpoint's
        state differs from the CPU's own at step K (another device's rounding, measured by `ckpt_tool diff`), the
        envelope also holds the restart control: the CPU serial run resumed from its own step-K checkpoint with every
        parameter perturbed by seeded noise of the measured size (HPCT_TEST_RESUME_NOISE, relative amplitude
        sqrt(3) x the relative L2 difference: uniform noise of that amplitude has that L2 size), one run per seed of
        RESTART_SEEDS. A deck that amplifies rounding (resnet_tiny's ReLUs near zero) may move from a perturbed state
        as the restart does from another device's; a checkpoint that lost something fails the anchored window.
    Failures go to v.fail, the figures to v.notes and the log."""
    k = case["checkpoint_step"]
    name = f"{case['id']} {backend}"
    after = list(range(k + 1, STEPS + 1))
    window = after[:ANCHOR_STEPS]
    log.write(f"  {ref.describe()}\n")
    bad = []
    for steps, env in ((ref.window_steps, ref.window), (range(1, k + 1), ref.trajectory)):
        b, line = rule_judge(name, got, ref.ref, env, steps, ref.rtol, ref.gnorm)
        bad += b
        log.write(f"  {line}\n")
    b, note = anchored_window(case, backend, ref, got, step_dir, window, log, d)
    bad += b
    v.notes.append(note)
    state, note = state_difference(case, ref, step_dir, log)
    v.notes.append(note)
    dstate, per_tensor = state or (None, {})
    b, line = rule_judge(name, got, ref.ref, ref.trajectory, after, ref.rtol, ref.gnorm)
    log.write(f"  {line}\n")
    val_env = ref.val
    if (b and not bad or args.restart_control == "always") and dstate:
        env_r, val_r, note = restart_control(case, ref, per_tensor, log)
        v.notes.append(note)
        if env_r is not None:
            widened = Envelope(max(ref.trajectory.loss, env_r.loss), max(ref.trajectory.gnorm, env_r.gnorm),
                               ref.trajectory.controls + env_r.controls)
            b, line = rule_judge(name, got, ref.ref, widened, after, ref.rtol, ref.gnorm)
            log.write(f"  with the restart control: {line}\n")
            if val_env is not None:
                val_env = max([val_env] + val_r)
    elif b and not dstate:
        v.notes.append(f"steps {k + 1}..{STEPS} outside the trajectory envelope from a checkpoint equal to the CPU's "
                       "own: no restart control applies")
    bad += b
    if val_env is not None:
        dv = rel_dev(got.val, ref.ref.val) if got.val is not None else math.inf
        lim = max(ref.rtol, ENVELOPE_FACTOR * val_env)
        log.write(f"  {name}: test loss deviates {fmt(dv)} (limit {fmt(lim)})\n")
        if dv > lim:
            bad.append(f"{name}: test loss {got.val} vs {ref.ref.val} of {ref.name} (deviates {fmt(dv)}, should be <= "
                       f"{fmt(lim)})")
    for msg in bad:
        v.fail(msg)
    wl, wg, _ = deviation(got, ref.ref, ref.steps, True)
    v.loss = None if math.isinf(wl) else wl
    v.gnorm = None if math.isinf(wg) else wg
    v.notes.append(f"loss {fmt(wl)}, gradient norm {fmt(wg)} from the CPU serial run (limits: {ref.rtol:g} or 10x "
                   f"the rounding envelope, {'losses only' if not ref.gnorm else 'both'})")


def cpu_serial_runs(case, jobs, log):
    """reference_run for each (name, kwargs) of jobs, args.jobs at a time; {name: Run}, or (None, why) of the first
    that failed."""
    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        done = list(pool.map(lambda j: (j[0], reference_run(case["app"], case["precision"], j[0], log=log, **j[1])),
                             jobs))
    runs = {}
    for nm, (got, err) in done:
        if err:
            return None, err
        runs[nm] = got
    return runs, None


def anchored_window(case, backend, ref, got, step_dir, window, log, d):
    """(failures, note): the resumed run's first steps against the run that wrote the checkpoint, uninterrupted (the
    layout case's run of the same layout, the CPU reference, or a run made here), both from the same state."""
    app, k = case["app"], window[0] - 1
    _, world, layout, device = segments(case)[0]
    name = f"{case['id']} {backend} anchored window (from step {k})"
    unbroken = UNINTERRUPTED.get(layout_key(case, world, layout, backend)) if device == "gpu" else None
    what = f"the {device} world {world} layout uninterrupted (its layout case's run)"
    if device == "cpu" and world == 1 and list(layout) == list(DOC["reference"][app]):
        unbroken, what = ref.ref, "the CPU serial reference"
    if unbroken is None or any(s not in unbroken for s in window):
        o = os.path.join(d, "uninterrupted")
        sets = [s for s in run_sets(case, layout, device, backend) if not s.startswith("train.steps=")]
        r = run(app, world, o, sets + [f"train.steps={window[-1]}", "checkpoint.at_end=false"],
                run_env(device, backend), log)
        if r.rc != 0 or any(s not in read_run(o) for s in window):
            return [f"{name}: the writer's layout run uninterrupted ({device} world {world}) failed (exit {r.rc}): "
                    "no anchored window"], "anchored window: no uninterrupted run"
        unbroken, what = read_run(o), f"the {device} world {world} layout uninterrupted to step {window[-1]}"
    dl, dg, _ = deviation(got, unbroken, window, ref.gnorm)
    if max(dl, dg) <= ref.rtol and args.restart_control == "auto":
        line = (f"anchored window {window[0]}..{window[-1]} against {what}: loss {fmt(dl)}, gradient norm {fmt(dg)} "
                f"(within {ref.rtol:g}: its rounding envelope cannot change that)")
        log.write(f"  {line}\n")
        return [], line
    resume = [f"checkpoint.resume={step_dir}"]
    jobs = [(f"window_{nm}", dict(threads=t, conv=conv, steps=window[-1], first=k + 1, extra=resume,
                                  out=os.path.join(d, f"window_{nm}")))
            for nm, t, conv in [("anchor", 1, None)] + [(f"omp{t}", t, None) for t in CONTROL_THREADS]
            + ([("im2col", 1, "im2col")] if app == "train_resnet" else [])]
    runs, err = cpu_serial_runs(case, jobs, log)
    if err:
        return [f"{name}: the window's rounding controls failed: {err}"], "anchored window: no controls"
    anchor = runs.pop("window_anchor")
    env = Envelope.measure({nm.replace("window_omp", "").replace("window_im2col", "1 (HPCT_CONV=im2col)"): r
                            for nm, r in runs.items()}, anchor, window, ref.gnorm)
    bad, line = rule_judge(name, got, unbroken, env, window, ref.rtol, ref.gnorm)
    line = f"{line} against {what}; {env.describe()} from the checkpoint's state"
    log.write(f"  {line}\n")
    return bad, line


def state_difference(case, ref, step_dir, log):
    """((the relative L2 difference of the checkpoint's model tensors from the CPU serial run's at the same step, {the
    model's tensor name: its own relative L2 difference, for those that differ}), note); (None, why) where it cannot
    be measured. The CPU's step-K checkpoint is a reference run of K steps, kept."""
    app, prec, k = case["app"], case["precision"], case["checkpoint_step"]
    got, err = reference_run(app, prec, f"ckpt{k}", 1, steps=k, extra=["checkpoint.at_end=true"])
    if err:
        return None, f"state at step {k}: no CPU checkpoint ({err})"
    if any(got.get(s) != ref.ref.get(s) for s in range(1, k + 1)):
        return None, (f"state at step {k}: the CPU's {k}-step run differs from the reference's first {k} steps (a "
                      "non-deterministic CPU run?): not compared")
    cmd = [CKPT_TOOL, "diff", step_dir, cpu_checkpoint_dir(case), "--json"]
    p = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=120, env=ENV)
    log.write(f"\n$ {shlex.join(cmd)}\n# exit {p.returncode}\n{p.stderr[-1500:]}")
    lines = [l for l in p.stdout.splitlines() if l.startswith('{"diff"')]
    if p.returncode != 0 or not lines:
        return None, f"state at step {k}: ckpt_tool diff failed (exit {p.returncode}): {p.stderr.strip()[-300:]}"
    diff = json.loads(lines[-1])["diff"]
    m = diff["model"]
    per_tensor = {t["name"][len("model/"):]: t["relative_l2"] for t in diff["tensors"]
                  if t["name"].startswith("model/") and t["relative_l2"] > 0}
    note = (f"state at step {k}: the checkpoint's model differs from the CPU serial run's by {fmt(m['relative_l2'])} "
            f"relative (L2; {m['unequal']} of {m['values']} values differ"
            + (f", worst tensor {m['worst_tensor']} {fmt(m['worst_relative_l2'])})" if m["worst_tensor"] else ")"))
    log.write(f"  {note}\n")
    return (m["relative_l2"], per_tensor), note


def restart_control(case, ref, per_tensor, log):
    """(Envelope over steps K+1..STEPS, the test-loss deviations, note) of the CPU serial run resumed from its own
    step-K checkpoint with each parameter tensor perturbed by noise of its own measured difference (per_tensor:
    name -> relative L2; relative amplitude sqrt(3) x that, since uniform noise in [-a, a] has RMS a / sqrt(3)), one
    run per seed; (None, [], why) where a run failed. Kept under WORK/reference/ like the references, the noise file
    named by its content."""
    app, prec, k = case["app"], case["precision"], case["checkpoint_step"]
    body = "".join(f"{n} {math.sqrt(3) * r:.6e}\n" for n, r in sorted(per_tensor.items()))
    tag = hashlib.sha1(body.encode()).hexdigest()[:12]
    os.makedirs(reference_dir(app, prec), exist_ok=True)
    noise_file = reference_dir(app, prec, f"noise_{tag}.txt")
    with open(noise_file, "w") as f:
        f.write(body)
    jobs = [(f"resume{k}_noise_{tag}_seed{s}", dict(threads=1, steps=STEPS, first=k + 1, noise=f"@{noise_file}:seed={s}",
                                                   extra=[f"checkpoint.resume={cpu_checkpoint_dir(case)}"]))
            for s in RESTART_SEEDS]
    runs, err = cpu_serial_runs(case, jobs, None)
    if err:
        return None, [], f"restart control: a perturbed resume failed: {err}"
    controls = {f"1 (resumed from step {k} perturbed, seed {s})": runs[nm] for (nm, _), s in zip(jobs, RESTART_SEEDS)}
    env = Envelope.measure(controls, ref.ref, range(k + 1, STEPS + 1), ref.gnorm)
    vals = [rel_dev(r.val, ref.ref.val) for r in runs.values() if r.val is not None and ref.ref.val is not None]
    top = max(per_tensor.items(), key=lambda kv: kv[1])
    note = (f"restart control (the CPU serial run resumed from its step-{k} checkpoint, each of {len(per_tensor)} "
            f"tensors perturbed by relative noise sqrt(3) x its own difference, largest {fmt(math.sqrt(3) * top[1])} "
            f"on {top[0]}; seeds {', '.join(map(str, RESTART_SEEDS))}): envelope over steps {k + 1}..{STEPS} loss "
            f"{fmt(env.loss)}, gradient norm {fmt(env.gnorm)}; per seed "
            + ", ".join(f"{fmt(dl)}/{fmt(dg)}" for _, dl, dg in env.controls))
    log.write(f"  {note}\n")
    return env, vals, note


def bitwise(v, what, got, ref, steps):
    """Losses and gradient norms of got equal ref's bit for bit over steps; else a failure naming the worst."""
    diff = [s for s in steps
            if s not in got or s not in ref or got[s] != ref[s] or got.gnorm.get(s) != ref.gnorm.get(s)]
    wl, wg, _ = deviation(got, ref, steps, True)
    v.loss, v.gnorm = (None if math.isinf(wl) else wl), (None if math.isinf(wg) else wg)
    if diff:
        v.fail(f"{what}: not bitwise equal at steps {diff[:5]} (worst relative loss {fmt(wl)}, gradient norm "
               f"{fmt(wg)})")
    else:
        v.notes.append(f"{what}: {len(steps)} losses and gradient norms bitwise equal")


def same_algorithms(case, run_dir):
    """The --set that makes a run compared bitwise with the one in run_dir compute with its convolution algorithms:
    train_resnet on the GPU times them into conv_algorithms.json, and a fresh timing may choose others (docs/cuda.md,
    'Convolution algorithms')."""
    table = os.path.join(run_dir, "conv_algorithms.json")
    return [f"train.conv_algorithms={table}"] if case["app"] == "train_resnet" and os.path.exists(table) else []


def kind_signal(case, backend, ref, v, log, d):
    out, full = os.path.join(d, "sig"), os.path.join(d, "straight")
    sched = [f"optim.decay_steps={SIGNAL_STEPS}", "train.eval_every=0"]
    base = [s for s in run_sets(case, case["layout"], "gpu", backend) if not s.startswith(("train.steps=",
                                                                                            "optim.decay_steps="))]
    env = run_env("gpu", backend, bitwise=True)
    sent = {"last": 0}

    def on_line(line, sid):
        m = STEP_LINE.match(line)
        if m:
            sent["last"] = int(m.group(1))
        if m and int(m.group(1)) >= SIGNAL_AFTER and "pid" not in sent:
            pid = rank_pid(sid, 1)
            sent["pid"] = pid
            if pid:
                os.kill(pid, signal.SIGUSR1)
                sent["after"] = int(m.group(1))
    r = run(case["app"], case["world"], out, base + sched + [f"train.steps={SIGNAL_STEPS}"], env, log, on_line)
    if not sent.get("pid"):
        if r.rc != 0 or r.timed_out:  # it ended before the signal: that run's failure is the verdict
            expect_ok(v, "the signalled run", r, backend)
        else:
            v.fail("signal: no rank 1 found to signal" if "pid" in sent else
                   f"signal: step {SIGNAL_AFTER} never logged")
        return r
    if r.timed_out and sent["last"] > sent["after"] + 2:
        v.fail(f"signal: SIGUSR1 to rank 1 (pid {sent['pid']}) after step {sent['after']} was logged: the run went on "
               f"to step {sent['last']} and was killed after --timeout {args.timeout:g} s")
        return r
    if r.timed_out or (r.rc not in (0, 3)):
        expect_ok(v, "the signalled run", r, backend)
        return r
    if r.rc != 3:
        v.fail(f"signal: SIGUSR1 to rank 1 (pid {sent['pid']}) after step {sent['after']} was logged: exit {r.rc}, "
               "should be 3")
        return r
    stopped = max(read_run(out), default=0)
    try:
        with open(os.path.join(out, "checkpoints", "latest")) as f:
            latest = f.read().strip()
    except OSError:
        latest = None
    if latest != f"step_{stopped:08d}":
        v.fail(f"signal: stopped after step {stopped} but checkpoints/latest names {latest}")
        return r
    n = stopped + SIGNAL_MORE
    r = run(case["app"], case["world"], out, base + sched + [f"train.steps={n}", "checkpoint.resume=latest"], env, log)
    if not expect_ok(v, "the resumed run", r, backend, out, range(1, n + 1)):
        return r
    r = run(case["app"], case["world"], full, base + sched + [f"train.steps={n}"] + same_algorithms(case, out), env,
            log)
    if not expect_ok(v, "the uninterrupted run", r, backend, full, range(1, n + 1)):
        return r
    v.notes.append(f"SIGUSR1 to rank 1 after step {sent['after']} was logged: exit 3 after step {stopped}, {latest}")
    bitwise(v, f"resumed to {n} vs {n} straight", read_run(out), read_run(full), range(1, n + 1))
    return r


def kind_background(case, backend, ref, v, log, d):
    out, again = os.path.join(d, "run"), os.path.join(d, f"from_step{ASYNC_RESUME_FROM}")
    env = run_env("gpu", backend, bitwise=True)
    sets = run_sets(case, case["layout"], "gpu", backend)
    r = run(case["app"], case["world"], out, sets, env, log)
    if not expect_ok(v, "the run", r, backend, out, range(1, STEPS + 1)):
        return r
    judge(case, ref, read_run(out), v, log, f"{case['id']} {backend}")
    saves = [l for l in r.text.splitlines() if l.startswith("checkpoint") and " step " in l]
    background = [l for l in saves if "background" in l]
    if not background:
        v.fail(f"background_ckpt: {len(saves)} checkpoint lines, none written in the background (checkpoint.async)")
    ck = sorted(x for x in os.listdir(os.path.join(out, "checkpoints")) if x.startswith("step_"))
    if os.access(CKPT_TOOL, os.X_OK):
        bad = []
        for c in ck:
            p = subprocess.run([CKPT_TOOL, "verify", os.path.join(out, "checkpoints", c)], capture_output=True,
                               text=True, errors="replace", timeout=120, env=ENV)
            log.write(f"\n$ ckpt_tool verify {c}: exit {p.returncode}: {p.stdout.strip()[-300:]}\n")
            if p.returncode != 0:
                bad.append(c)
        if bad:
            v.fail(f"background_ckpt: ckpt_tool verify refuses {bad}")
        verified = f"{len(ck)} checkpoints verify"
    else:
        verified = f"{len(ck)} checkpoints (ckpt_tool not found: not verified)"
    step = os.path.join(again, "checkpoints", f"step_{ASYNC_RESUME_FROM:08d}")
    if f"step_{ASYNC_RESUME_FROM:08d}" not in ck:
        v.fail(f"background_ckpt: no step_{ASYNC_RESUME_FROM:08d} among {ck}")
        return r
    shutil.copytree(os.path.join(out, "checkpoints", f"step_{ASYNC_RESUME_FROM:08d}"), step)
    r2 = run(case["app"], case["world"], again, sets + [f"checkpoint.resume={step}"] + same_algorithms(case, out), env,
             log)
    if expect_ok(v, f"the resume from step {ASYNC_RESUME_FROM}", r2, backend, again,
                 range(ASYNC_RESUME_FROM + 1, STEPS + 1)):
        loss, gnorm = v.loss, v.gnorm
        bitwise(v, f"resumed from step {ASYNC_RESUME_FROM} vs the run's own", read_run(again), read_run(out),
                range(ASYNC_RESUME_FROM + 1, STEPS + 1))
        v.loss, v.gnorm = loss, gnorm  # the record's figures: against the CPU reference
    v.notes.append(f"{len(background)} of {len(saves)} saves in the background; {verified}")
    return r2


KIND_FN = dict(layout=kind_layout, restart=kind_restart, memory=kind_memory, signal=kind_signal,
               background_ckpt=kind_background)


def run_case(case, backend):
    """Runs one case with one backend; returns the record."""
    log_path = os.path.join(OUT, f"{case['id']}.{backend}.log")
    d = os.path.join(WORK, case["id"], backend)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    v = Verdict()
    t0 = time.time()
    texts = []
    with open(log_path, "w") as log:
        log.write(f"# {case['id']} ({case['kind']}, {case['app']} world {case['world']} {case['precision']}) backend "
                  f"{backend} on {DEVICE}, commit {COMMIT}{'; planted ' + PLANTED if PLANTED else ''}\n"
                  f"# {case.get('note', '')}\n")
        ref = None
        if case["kind"] != "signal":
            ref, err = reference_for(case)
            if ref is None:
                v.fail(f"no CPU reference: {err}")
        if not DRY and backend == "mpi" and not knows_key(case["app"], "comm.backend"):
            v.unsupported = (f"{case['app']} has no comm.backend key (--help): this build cannot select the "
                             "host-staged MPI backend")
        elif not v.fails:
            class Tee:  # keeps the runs' output for the runtime-libraries line
                def write(self, s):
                    texts.append(s)
                    log.write(s)

                def flush(self):
                    log.flush()
            KIND_FN[case["kind"]](case, backend, ref, v, Tee(), d)
        verdict = "UNSUPPORTED" if v.unsupported and not v.fails else "FAILED" if v.fails else "VALID"
        message = "; ".join(([v.unsupported] if v.unsupported else []) + v.fails + ([] if v.fails else v.notes))
        if PLANTED:
            message = f"planted {PLANTED}: " + message
        log.write(f"\n# verdict {verdict}: {message}\n")
    nccl = nccl_version("".join(texts)) if backend == "nccl" and not DRY else None
    rec = dict(device=DEVICE, device_slug=SLUG, commit=COMMIT, nccl_version=nccl, backend=backend, app=case["app"],
               world=case["world"], layout=list(case["layout"]), precision=case["precision"], verdict=verdict,
               worst_loss_dev=v.loss, worst_gnorm_dev=v.gnorm, message=message, log=rel(log_path))
    assert tuple(rec) == RECORD_KEYS
    shown = "DETECTED" if PLANTED and verdict == "FAILED" else "MISSED" if PLANTED and verdict == "VALID" else verdict
    print(f"{case['id']:<40} {backend:<5} {shown:<11} loss {fmt(v.loss) if v.loss is not None else '-':>9}  gnorm "
          f"{fmt(v.gnorm) if v.gnorm is not None else '-':>9}  ({time.time() - t0:.1f} s)" +
          ("" if verdict == "VALID" else f"  {message[:300]}"), flush=True)
    return rec


# ---------------------------------------------------------------------------------------------------- the report
def write_report():
    """The markdown report from every record of the file: the latest per (case, backend), the case from the log name."""
    latest = {}
    if not os.path.exists(RECORD):
        return
    try:
        with open(RECORD) as f:
            for line in f:
                if line.strip():
                    r = json.loads(line)
                    base = os.path.basename(r.get("log", ""))
                    cid, _, be = base[:-len(".log")].rpartition(".") if base.endswith(".log") else ("", "", "")
                    latest[(cid or f"{r['app']} w{r['world']} {' '.join(r['layout'])}", r["backend"])] = r
    except (OSError, ValueError) as e:
        print(f"  (report not written: {RECORD}: {e})")
        return
    by_id = {c["id"]: c for c in CASES}
    ids = [c["id"] for c in CASES if any((c["id"], b) in latest for b in BACKENDS)] + \
        sorted({i for i, _ in latest if i not in by_id})
    recs = list(latest.values())
    ncc = sorted({r["nccl_version"] for r in recs if r.get("nccl_version")})
    devs = sorted({r["device"] for r in recs})
    commits = sorted({r["commit"] for r in recs})
    n = {k: sum(r["verdict"] == k for r in recs) for k in ("VALID", "FAILED", "UNSUPPORTED")}
    libs = runtime_libraries(recs)
    L = [f"# The layout matrix on one GPU: {', '.join(devs)}", "",
         f"Record `{rel(RECORD)}` ({len(recs)} case runs: {n['VALID']} VALID, {n['FAILED']} FAILED, "
         f"{n['UNSUPPORTED']} UNSUPPORTED); commit {', '.join(commits)}; NCCL {', '.join(ncc) or 'n/a'}; written "
         f"{datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')} by "
         f"`validation/gpu_layouts.py` (cases: `{rel(args.cases)}`).", "",
         "Each case runs several MPI ranks on the one GPU and is judged against the CPU serial run of the same deck "
         "and precision by `validation/layout_rules.py` (the campaign's rule: every step's loss and gradient norm "
         "within max(1e-5, 10 x the rounding envelope of the CPU run at 2, 3 and 4 threads, and for the ResNet with "
         "`HPCT_CONV=im2col`), over steps 1..2 and the whole curve; bf16 cases: losses within max(0.5%, 10 x the "
         "envelope)). Cells: verdict, worst relative deviation of the loss / gradient norm from the CPU run (signal "
         "cases: from the uninterrupted run on the same device). No timings: several ranks share one GPU, so a wall "
         "time says nothing about speed.", "",
         ] + ["What ran (the apps' `runtime libraries:` lines; the bundle keeps the machine's own copies where it has "
              "them):", ""] + [f"- `{l}`" for l in libs] + (["- (no CUDA run logged one)"] if not libs else []) + [
         "", "| case | kind | app | world | precision | layout | mpi | nccl |", "|---|---|---|---|---|---|---|---|"]

    def cell(r):
        if r is None:
            return "-"
        figs = "" if r["worst_loss_dev"] is None else \
            f" {fmt(r['worst_loss_dev'])} / {fmt(r['worst_gnorm_dev']) if r['worst_gnorm_dev'] is not None else '-'}"
        return f"**{r['verdict']}**{figs}"
    for cid in ids:
        c = by_id.get(cid)
        any_r = latest.get((cid, "mpi")) or latest.get((cid, "nccl"))
        kind = c["kind"] if c else "?"
        lay = " ".join((c or any_r)["layout"]) or "serial"
        if c and c["kind"] == "restart":
            seg = c.get("resume_on") or c.get("checkpoint_from")
            lay += (" -> " if "resume_on" in c else " <- ") + f"{seg['device']} w{seg['world']} " + \
                (" ".join(seg["layout"]) or "serial")
        L.append(f"| `{cid}` | {kind} | {(c or any_r)['app']} | {(c or any_r)['world']} | "
                 f"{(c or any_r)['precision']} | `{lay}` | {cell(latest.get((cid, 'mpi')))} | "
                 f"{cell(latest.get((cid, 'nccl')))} |")
    odd = [(cid, b, latest[(cid, b)]) for cid in ids for b in BACKENDS
           if (cid, b) in latest and latest[(cid, b)]["verdict"] != "VALID"]
    if odd:
        L += ["", "## Not VALID", ""]
        for cid, b, r in odd:
            L.append(f"- `{cid}` {b}: **{r['verdict']}**: {r['message']} (log `{r['log']}`)")
    with open(REPORT, "w") as f:
        f.write("\n".join(L) + "\n")


# ---------------------------------------------------------------------------------------------------- main
if args.report_only:
    if not os.path.exists(RECORD):
        die(f"--report-only: {RECORD} does not exist")
    write_report()
    print(f"gpu_layouts: report {rel(REPORT)} from {rel(RECORD)}", flush=True)
    sys.exit(0)
print(f"gpu_layouts: {len(todo)} case runs ({len(selected)} cases x {'/'.join(want)}) on {DEVICE}, commit {COMMIT}"
      f"{'; DRY RUN on the CPU' if DRY else ''}{'; planted ' + PLANTED if PLANTED else ''}", flush=True)
for app in sorted({c["app"] for c, _ in todo}):
    if not knows_key(app, "comm.backend"):
        print(f"  note: {app} --help has no comm.backend: " +
              ("runs without it (the CPU path)" if DRY else "backend nccl runs without the key, mpi is UNSUPPORTED"),
              flush=True)
t_start = time.time()
records, not_run, stopped = [], [], None
try:
    build_references(sorted({(c["app"], c["precision"]) for c, _ in todo if c["kind"] != "signal"}))
    for case, backend in todo:
        rec = run_case(case, backend)
        records.append((case, backend, rec))
        with open(RECORD, "a") as f:
            f.write(json.dumps(rec) + "\n")
except Stop as e:
    stopped = str(e)
    not_run = [f"{c['id']}/{b}" for c, b in todo[len(records):]]
    print(f"gpu_layouts: stopped ({stopped}): {len(not_run)} case runs not run or cut, not recorded: "
          + ", ".join(not_run), flush=True)
write_report()
count = {k: [f"{c['id']}/{b}" for c, b, r in records if r["verdict"] == k] for k in ("VALID", "FAILED", "UNSUPPORTED")}
summary = ", ".join(f"{len(v)} {k}" for k, v in count.items() if v) or "nothing recorded"
print(f"gpu_layouts: {len(records)} case runs in {time.time() - t_start:.0f} s: {summary}; record {rel(RECORD)}, "
      f"report {rel(REPORT)}, logs {rel(OUT)}", flush=True)
if count["UNSUPPORTED"]:
    print("  UNSUPPORTED: " + ", ".join(count["UNSUPPORTED"]), flush=True)
if stopped and stopped.startswith("signal"):
    sys.exit(128 + int(stopped.split()[1]))
if stopped and DRY:
    print(f"FAILED: dry run stopped ({stopped}) before {len(not_run)} of its case runs")
    sys.exit(1)
if PLANTED:
    missed = count["VALID"] + count["UNSUPPORTED"]
    if missed:
        print(f"FAILED: planted {PLANTED}: not detected by {', '.join(missed)}")
        sys.exit(1)
    print(f"VALID: planted {PLANTED}: detected by all {len(records)} case runs")
    sys.exit(0)
if count["FAILED"]:
    print(f"FAILED: {len(count['FAILED'])} of {len(records)} case runs: " + ", ".join(count["FAILED"]))
    sys.exit(1)
if DRY:
    if count["UNSUPPORTED"]:
        print(f"FAILED: dry run: {len(count['UNSUPPORTED'])} case runs UNSUPPORTED on the CPU, where every case runs")
        sys.exit(1)
    print(f"VALID: gpu_layouts dry run: {len(records)} case runs VALID")
