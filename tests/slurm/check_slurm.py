#!/usr/bin/python3
"""The Slurm templates on a real slurmctld + slurmd (tests/slurm/local_slurm.sh, a ctest fixture).

usage: check_slurm.py SCENARIO SLURM_DIR WORK_DIR      (environment: HPCT_ROOT, HPCT_BUILD_DIR)
  gpt       sbatch slurm/train_gpt.sh, gpt_tiny, 2 tasks: COMPLETED, exit 0, loss down, checkpoint written, launch
            facts (job id, restart 0) in the log
  resnet    the same for slurm/train_resnet.sh with resnet_tiny
  preempt   train_gpt, 2 tasks: an uninterrupted job, and a job that gets `scancel --batch --signal=USR1` mid-run:
            it checkpoints, exits 3, requeues itself, resumes (restart 1) and completes; every step's loss and the
            final checkpoint's tensors equal the uninterrupted job's bit for bit
  deadline  train_gpt, 2 tasks, a 1-minute time limit and HPCT_DEADLINE_MARGIN so that train.deadline (from squeue's
            end time) stops each start ~8 s in: stops on the deadline, requeues, completes, equal bit for bit to
            an uninterrupted run
  mpirun    train_resnet through HPCT_LAUNCHER=mpirun (the documented alternative), USR1 mid-run: requeue, resume,
            bitwise equal to an uninterrupted mpirun job
  cancel    `scancel` (SIGTERM) mid-run: a checkpoint is written, the job is CANCELLED and not requeued
  auto      sbatch slurm/train_gpt.sh with HPCT_LAYOUT=auto HPCT_MACHINE=this_cpu: the layout planner's table and
            choice in the output, the app launched with its --set arguments, COMPLETED
  fail      a bad deck key: the job FAILED with the app's error in the output file, not requeued
  scaling   sbatch slurm/scaling.sh with a tiny sweep: COMPLETED, the CSV rows (strong and weak, R = 1 and 2, both apps)
            and the report where HPCT_RESULTS_DIR says
Prints `VALID: SCENARIO` or `FAILED: ...` (exit 1); 77 = skipped (not root)."""
import csv
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import time

scenario, slurm_dir, work = sys.argv[1], os.path.abspath(sys.argv[2]), os.path.abspath(sys.argv[3])
ROOT = os.environ.get("HPCT_ROOT") or os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
ENV = dict(os.environ, SLURM_CONF=os.path.join(slurm_dir, "slurm.conf"), HPCT_ROOT=ROOT)
ENV.setdefault("HPCT_BUILD_DIR", os.path.join(ROOT, "build"))
ENV.pop("HPCT_RUN_DIR", None)
for k in [k for k in ENV if k.startswith("SLURM_") and k != "SLURM_CONF"] + ["OMP_NUM_THREADS"]:
    ENV.pop(k, None)  # a test run inside an allocation must not leak its job into the submissions
ENV.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1")
GPT_DECK = os.path.join(ROOT, "inputs", "gpt_tiny.toml")
RESNET_DECK = os.path.join(ROOT, "inputs", "resnet_tiny.toml")
failures = []


def fail(msg):
    print(f"FAILED: {scenario}: {msg}")
    sys.exit(1)


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print(f"  check failed: {msg}")
    return cond


def sh(cmd, timeout=60, env=None):
    r = subprocess.run(cmd, env=env or ENV, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        fail(f"{' '.join(cmd)} -> {r.returncode}: {r.stdout}{r.stderr}")
    return r.stdout


def submit(template, args, sbatch_opts=(), env=None, name=None):
    """sbatch a template from WORK (the submit directory: runs/ and the .out file land there); returns the job id."""
    opts = ["--parsable", f"--chdir={work}", "--ntasks=2", "--cpus-per-task=1", *sbatch_opts]
    if name:
        opts.append(f"--job-name={name}")
    jid = sh(["sbatch", *opts, os.path.join(ROOT, "slurm", template), *args],
             env=dict(ENV, **(env or {}))).strip().split(";")[0]
    print(f"  submitted {template} {' '.join(args)} as job {jid} ({' '.join(sbatch_opts)})")
    return jid


def job(jid):
    out = subprocess.run(["scontrol", "show", "job", "-o", jid], env=ENV, capture_output=True, text=True,
                         timeout=30).stdout
    return dict(re.findall(r"(\w+)=(\S*)", out))


def wait(jid, timeout=240, states=("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")):
    t0 = time.time()
    while time.time() - t0 < timeout:
        j = job(jid)
        if j.get("JobState") in states:
            return j
        time.sleep(0.5)
    subprocess.run(["scancel", jid], env=ENV, timeout=30)
    fail(f"job {jid} not done after {timeout} s (state {job(jid).get('JobState')}); output:\n{output(jid)}")


def output(jid, name=None):
    j = job(jid)
    path = j.get("StdOut") or os.path.join(work, f"{name}-{jid}.out")
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return f"(no output file {path})"


def metrics(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def wait_steps(run_dir, n, jid, timeout=120):
    t0 = time.time()
    while time.time() - t0 < timeout:
        try:
            if len(metrics(run_dir)) >= n:
                return
        except (OSError, json.JSONDecodeError):
            pass
        if job(jid).get("JobState") not in ("PENDING", "RUNNING", "CONFIGURING"):
            fail(f"job {jid} ended before step {n}:\n{output(jid)}")
        time.sleep(0.05)
    fail(f"job {jid} did not reach step {n} in {timeout} s")


def run_dir(name, jid):
    return os.path.join(work, "runs", f"{name}-{jid}")


def latest_ckpt(rd):
    with open(os.path.join(rd, "checkpoints", "latest")) as f:
        return os.path.join(rd, "checkpoints", f.read().strip())


def tensors(ckpt):
    import h5py
    import numpy as np
    d = {}
    with h5py.File(os.path.join(ckpt, "index.h5"), "r") as f:
        def visit(name, obj):
            if isinstance(obj, h5py.Dataset) and (name.startswith("model/") or name.startswith("optim/")):
                d[name] = np.asarray(obj[()])
        f.visititems(visit)
    return d


def same_run(ref_dir, got_dir, what):
    """every step's loss bit for bit (the records as JSON text: %.9g round-trips a float) and the final tensors"""
    ref, got = metrics(ref_dir), metrics(got_dir)
    check([r["step"] for r in got] == [r["step"] for r in ref], f"{what}: steps {len(got)} records vs {len(ref)}")
    bad = [r["step"] for r, g in zip(ref, got) if r["loss"] != g["loss"]]
    check(not bad, f"{what}: loss differs from the uninterrupted run at steps {bad[:5]}")
    a, b = tensors(latest_ckpt(ref_dir)), tensors(latest_ckpt(got_dir))
    check(sorted(a) == sorted(b), f"{what}: checkpoint tensor names differ")
    diff = [k for k in a if k in b and not (a[k].shape == b[k].shape and (a[k].view("u1") == b[k].view("u1")).all())]
    check(not diff, f"{what}: final checkpoint tensors differ: {diff[:5]}")
    if not bad and not diff:
        print(f"  {what}: {len(got)} steps' losses and {len(a)} checkpoint tensors equal the uninterrupted run "
              f"bit for bit (final loss {got[-1]['loss']!r})")


def completed(jid, name, restarts=None):
    j = wait(jid)
    text = output(jid, name)
    ok = check(j.get("JobState") == "COMPLETED" and j.get("ExitCode") == "0:0",
               f"job {jid}: state {j.get('JobState')} exit {j.get('ExitCode')}")
    if restarts is not None:
        ok &= check(j.get("Restarts") == str(restarts), f"job {jid}: Restarts={j.get('Restarts')}, expected {restarts}")
    if not ok:
        print(text)
    return j, text


def basic(template, name, deck, steps, extra):
    jid = submit(template, [deck, "--set", f"train.steps={steps}", *extra], name=name)
    j, text = completed(jid, name, restarts=0)
    rd = run_dir(name, jid)
    check(os.path.isdir(rd), f"run directory {rd} missing")
    m = metrics(rd)
    check(len(m) == steps, f"{len(m)} metrics records, expected {steps}")
    first, last = m[0]["loss"], m[-1]["loss"]
    check(last < first, f"loss did not go down: {first} -> {last}")
    ck = latest_ckpt(rd)
    check(ck.endswith(f"step_{steps:08d}") and os.path.isfile(os.path.join(ck, "index.h5")), f"checkpoint {ck}")
    check(re.search(rf"launch: slurm job {jid}\b.*restart 0", text) is not None,
          "the app's launch line (slurm job id, restart count) is missing from the output")
    check(f"train.deadline = end - " in text, "the template did not pass train.deadline from squeue's end time")
    check(re.search(r"layout: ranks 2 ", text) is not None, "the app did not run as one MPI job of 2 ranks")
    print(f"  job {jid}: loss {first:.6f} -> {last:.6f} over {steps} steps, checkpoint {os.path.relpath(ck, work)}")


def interrupted(template, name, deck, args, env, at_step, how):
    """an uninterrupted job and an interrupted one with the same deck and layout; returns (ref run dir, run dir, text)"""
    ref = submit(template, [deck, *args], env=env, name=name + "-ref")
    completed(ref, name + "-ref", restarts=0)
    ref_dir = run_dir(name + "-ref", ref)
    if how == "deadline":
        # squeue's EndTime = start + 60 s; deadline = EndTime - margin = start + 10 s (the app's start-up, a few s on 2
        # loaded cores, must fit before it, or check_deadline refuses a past deadline); --signal moved out of the way
        jid = submit(template, [deck, *args], ["--time=1", "--signal=B:USR1@5"],
                     env=dict(env, HPCT_DEADLINE_MARGIN="50"), name=name)
    else:
        jid = submit(template, [deck, *args], env=env, name=name)
        wait_steps(run_dir(name, jid), at_step, jid)
        sh(["scancel", "--batch", "--signal=USR1", jid])
        print(f"  sent USR1 to the batch shell of job {jid} after step {at_step}")
    j, text = completed(jid, name)
    check(int(j.get("Restarts", "0")) >= 1, f"job {jid} was not requeued (Restarts={j.get('Restarts')})")
    return ref_dir, run_dir(name, jid), text


if os.geteuid() != 0:
    print("SKIPPED: the local Slurm needs root (slurmd runs the job steps)")
    sys.exit(77)
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
ENV["HPCT_RESULTS_DIR"] = os.path.join(work, "results")
t_start = time.time()
QUIET = ["--set", "sample.tokens=0", "--set", "train.eval_every=0", "--set", "log.every=50"]

if scenario == "gpt":
    basic("train_gpt.sh", "t-gpt", GPT_DECK, 10, [])
elif scenario == "resnet":
    basic("train_resnet.sh", "t-resnet", RESNET_DECK, 10, [])
elif scenario in ("preempt", "deadline"):
    steps = 400 if scenario == "preempt" else 1500
    args = ["--set", f"train.steps={steps}", *QUIET]
    ref_dir, rd, text = interrupted("train_gpt.sh", f"t-{scenario}", GPT_DECK, args, {}, 20, scenario)
    why = "SIGUSR1" if scenario == "preempt" else "train.deadline"
    stops = re.findall(r"stopping after step (\d+) \(([^)]*)\)", text)
    check(any(w == why for _, w in stops), f"no stop on {why} in the output (stops: {stops})")
    check(re.search(r"requeueing job \d+ \(restart 1\)", text) is not None, "the template did not requeue the job")
    check(re.search(r"resumed at step \d+", text) is not None, "the requeued start did not resume")
    check(re.search(r"launch: slurm job \d+\b.*restart 1", text) is not None, "the restarted app did not log restart 1")
    print(f"  stops: {stops}")
    same_run(ref_dir, rd, scenario)
elif scenario == "mpirun":
    args = ["--set", "train.steps=300", "--set", "train.epochs=0", "--set", "train.eval_every=0", "--set", "log.every=50"]
    ref_dir, rd, text = interrupted("train_resnet.sh", "t-mpirun", RESNET_DECK, args, {"HPCT_LAUNCHER": "mpirun"}, 20,
                                    "usr1")
    check("launch: mpirun" in text, "the template did not launch with mpirun")
    check(re.search(r"stopping after step \d+ \(SIGUSR1\)", text) is not None, "no stop on SIGUSR1 in the output")
    same_run(ref_dir, rd, "mpirun")
elif scenario == "cancel":
    name = "t-cancel"
    jid = submit("train_gpt.sh", [GPT_DECK, "--set", "train.steps=100000", *QUIET], name=name)
    rd = run_dir(name, jid)
    wait_steps(rd, 20, jid)
    sh(["scancel", jid])
    j = wait(jid)
    time.sleep(1)  # the batch shell's last lines
    text = output(jid, name)
    check(j.get("JobState") == "CANCELLED", f"state {j.get('JobState')}, expected CANCELLED")
    check(j.get("Restarts") == "0", f"a cancelled job was requeued (Restarts={j.get('Restarts')})")
    m = re.search(r"stopping after step (\d+) \(SIGTERM\)", text)
    check(m is not None, "no checkpoint-and-stop on SIGTERM in the output")
    if m:
        ck = latest_ckpt(rd)
        check(ck.endswith(f"step_{int(m.group(1)):08d}"), f"latest checkpoint {ck}, expected step {m.group(1)}")
        print(f"  scancel: stopped after step {m.group(1)} with checkpoint {os.path.relpath(ck, work)}, not requeued")
elif scenario == "auto":
    # HPCT_LAYOUT=auto: the planner picks the layout for the job's 2 tasks at start; the app runs with its --set
    # arguments (the launch line holds them) and completes
    name = "t-auto"
    jid = submit("train_gpt.sh", [GPT_DECK, "--set", "train.steps=10", *QUIET], name=name,
                 env={"HPCT_LAYOUT": "auto", "HPCT_MACHINE": "this_cpu"})
    j, text = completed(jid, name, restarts=0)
    chosen = re.search(r"layout chosen by the planner \(machine this_cpu\): (--set parallel\.tp=.*)", text)
    check(chosen is not None and "auto plan:" in text, "the planner's table and choice are not in the job's output")
    launch = re.search(r"launch: (srun|mpirun) .*", text)
    check(chosen is not None and launch is not None and chosen.group(1).strip() in launch.group(0),
          "the app was not launched with the planner's --set arguments")
    check(len(metrics(run_dir(name, jid))) == 10, "the run did not train its 10 steps")
    print(f"  planner's layout: {chosen.group(1) if chosen else None}")
elif scenario == "fail":
    name = "t-fail"
    jid = submit("train_gpt.sh", [GPT_DECK, "--set", "train.stepz=5"], name=name)
    j = wait(jid)
    text = output(jid, name)
    check(j.get("JobState") == "FAILED" and j.get("ExitCode", "").split(":")[0] not in ("0", "3"),
          f"state {j.get('JobState')} exit {j.get('ExitCode')}, expected FAILED with the app's usage error code")
    check(j.get("Restarts") == "0", "a failed job was requeued")
    check("train.stepz" in text, "the app's error naming the bad key is not in the output file")
    check("requeued" not in text, "the template requeued a failed job")
    print(f"  bad key: job state {j.get('JobState', '').lower()}, exit {j.get('ExitCode')}, not requeued")
elif scenario == "scaling":
    results = ENV["HPCT_RESULTS_DIR"]
    jid = submit("scaling.sh", ["--ranks", "1", "2", "--steps", "3", "--repeat", "1",
                                "--gpt-deck", GPT_DECK, "--resnet-deck", RESNET_DECK], name="t-scaling")
    j, text = completed(jid, "t-scaling", restarts=0)
    stem = os.path.join(results, f"scaling_slurm_{jid}")
    rows = []
    if check(os.path.isfile(stem + ".csv"), f"{stem}.csv missing (results dir: {os.listdir(results) if os.path.isdir(results) else 'none'})"):
        with open(stem + ".csv") as f:
            rows = [r for r in csv.DictReader(f) if r.get("kept", "1") in ("1", "True", "true")]
    got = sorted({(r["app"], r["mode"], int(r["ranks"])) for r in rows if r.get("rc") in ("0", None)})
    want = sorted((a, m, r) for a in ("gpt", "resnet") for m in ("strong", "weak") for r in (1, 2))
    check(got == want, f"CSV rows {got}, expected {want}")
    check(os.path.isfile(stem + ".md"), "the scaling report is missing")
    check("VALID" in text, "scaling.py did not print VALID")
    check("srun" in text, "the sweep did not launch its jobs with srun")
    print(f"  {len(rows)} CSV rows in {os.path.relpath(stem, work)}.csv")
else:
    fail(f"unknown scenario {scenario}")

if failures:
    fail("; ".join(failures))
print(f"VALID: {scenario} ({time.time() - t_start:.1f} s)")
