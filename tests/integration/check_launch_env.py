#!/usr/bin/python3
"""The launch line (lib/parallel/launch_env.hpp) of a training app under mpirun -np 2, with and without a Slurm
job's variables: stdout and train.log hold one `launch: ...` line right after the app's `hpctrain APP | deck` line,
naming the job, its restart count and the node-local layout MPI sees; the end checkpoint's index.h5 records
restart_count (and slurm_job_id under Slurm).
The Slurm variables reach the ranks through `env` after mpirun, so that mpirun itself does not see an allocation.
usage: check_launch_env.py MPIEXEC APP CKPT_TOOL DECK WORKDIR [--set k=v ...]"""
import os
import re
import shutil
import subprocess
import sys

mpiexec, exe, ckpt_tool, deck, work = sys.argv[1:6]
extra = sys.argv[6:]
app = os.path.basename(exe)
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
failures = []

SLURM = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NAME": "hpct-launch", "SLURM_RESTART_COUNT": "2",
         "SLURM_JOB_NODELIST": "node[01-02]", "SLURM_JOB_NUM_NODES": "2", "SLURM_CPUS_PER_TASK": "1"}


def run(name, env_vars, expect):
    out = os.path.join(work, name)
    cmd = [mpiexec, "-np", "2", "--oversubscribe", "--bind-to", "none", "/usr/bin/env"]
    cmd += [f"{k}={v}" for k, v in env_vars.items()]
    cmd += [exe, deck, "--out", out] + extra
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}  # also when ctest runs in a Slurm job
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, errors="replace", timeout=300)
    if p.returncode != 0:
        print(p.stdout, p.stderr)
        print(f"FAILED: {name}: {app} exited with {p.returncode}")
        sys.exit(1)
    lines = p.stdout.splitlines()
    launch = [i for i, l in enumerate(lines) if l.startswith("launch:")]
    if len(launch) != 1:
        failures.append(f"{name}: {len(launch)} launch lines on stdout, should be 1")
        return
    line = lines[launch[0]]
    print(f"{name}: {line}")
    if not re.fullmatch(expect, line):
        failures.append(f"{name}: launch line is '{line}', should match /{expect}/")
    if launch[0] == 0 or not lines[launch[0] - 1].startswith(f"hpctrain {app} | deck"):
        failures.append(f"{name}: the launch line does not follow the 'hpctrain {app} | deck' line")
    with open(os.path.join(out, "train.log"), errors="replace") as f:  # the GPT sample is raw bytes
        if line not in f.read().splitlines():
            failures.append(f"{name}: the launch line is not in train.log")
    if "warning" in p.stderr:
        failures.append(f"{name}: unexpected warning on stderr: {p.stderr.strip()}")
    return out


def attrs(out):
    p = subprocess.run([ckpt_tool, "inspect", out], capture_output=True, text=True, errors="replace", timeout=120)
    if p.returncode != 0:
        failures.append(f"ckpt_tool inspect {out} exited with {p.returncode}: {p.stderr.strip()}")
        return {}
    return dict(re.findall(r"^  (restart_count|slurm_job_id) +(\S+)$", p.stdout, re.M))


out = run("slurm", SLURM,
          r"launch: slurm job 4242 'hpct-launch' \(restart 2\) via mpirun on node\[01-02\] \(2 nodes; MPI sees 1\) "
          r"\| rank 0 on \S+, local rank 0 of 2, 1 CPU per task")
if out:
    a = attrs(out)
    if a != {"restart_count": "2", "slurm_job_id": "4242"}:
        failures.append(f"slurm: index.h5 launch attributes are {a}, should be restart_count 2, slurm_job_id 4242")
out = run("plain", {}, r"launch: no scheduler, mpirun, 1 node \| rank 0 on \S+, local rank 0 of 2")
if out:
    a = attrs(out)
    if a != {"restart_count": "0"}:
        failures.append(f"plain: index.h5 launch attributes are {a}, should be restart_count 0 and no slurm_job_id")

for f in failures:
    print("FAILED:", f)
if not failures:
    print(f"VALID: launch_env {app}")
sys.exit(1 if failures else 0)
