#!/usr/bin/python3
"""train.device on a machine without a usable GPU ("train.device=auto falls back to CPU with a log line when no
GPU is visible"), through the apps' contracts only (command line, stdout/stderr, exit codes, metrics.jsonl, the
final checkpoint). For one app (train_gpt or train_resnet) and its tiny deck, 3 steps:

  auto   train.device=auto runs on the CPU (the layout line says `device cpu`), prints the fallback line
         `train.device = auto: <cause>: running on the CPU` exactly once (rank 0, stdout; also in train.log), and
         trains bit for bit like train.device=cpu: every metrics.jsonl loss / grad_norm / val_loss equal, and every
         tensor of the final checkpoint (parameters, optimizer state, BN statistics) equal bitwise (h5py).
         Then at np 2 (the decision is collective): exit 0, the line once (not once per rank), losses equal np 2 cpu.
  cuda   train.device=cuda exits 2 before any work with exactly one stderr line naming the cause (no usable CUDA
         device, or no CUDA backend in this build) and the fix (--set train.device=cpu); at np 2 too (one line).

On a machine where CUDA is usable (auto picks `device cuda`), prints `SKIPPED: ...` and exits 77 (these checks are
about the fallback; the GPU runs are check_cuda_run.py's).
usage: check_device_fallback.py APP_EXE DECK WORKDIR
Prints VALID: device_fallback, or FAILED: <what> and exits 1."""
import json
import os
import re
import shutil
import subprocess
import sys
import time

exe, deck, work = sys.argv[1:4]
app = os.path.basename(exe)
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
ENV = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1")
STEPS = ["train.steps=3", "train.eval_every=3", "log.every=1"] + (["sample.tokens=8"] if app == "train_gpt" else [])
FALLBACK = re.compile(r"^train\.device = auto: (.+): running on the CPU$")
CUDA_ERROR = re.compile(r'^' + re.escape(app) + r': error: deck .*: train\.device = "cuda" but '
                        r'(no usable CUDA device|this build has no CUDA backend|this build has the CUDA kernels but no '
                        r'NCCL).*--set train\.device=cpu')
failures = []


def fail(msg):
    failures.append(msg)
    print("  FAIL:", msg, flush=True)


def run(name, device, np=1, expect=0):
    out = os.path.join(work, name)
    c = [exe, deck, "--out", out, "--set", f"train.device={device}"]
    for s in STEPS:
        c += ["--set", s]
    if np > 1:
        c = ["mpirun", "-q", "-np", str(np), "--oversubscribe", "--bind-to", "none"] + c
    t0 = time.time()
    p = subprocess.run(c, capture_output=True, text=True, errors="replace", timeout=300, env=ENV)
    print(f"  {name}: np {np} train.device={device} -> rc {p.returncode} in {time.time() - t0:.1f} s", flush=True)
    if p.returncode != expect:
        print(p.stdout[-3000:], p.stderr[-3000:])
        print(f"FAILED: {app} np {np} train.device={device} exited with {p.returncode}, should be {expect}")
        sys.exit(1)
    return out, p


def records(out):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def layout_device(stdout):
    m = re.search(r"^layout: .*\| device (\w+) \|", stdout, re.M)
    return m.group(1) if m else None


def same_metrics(a, b, what):
    ra, rb = records(a), records(b)
    if len(ra) != len(rb) or not ra:
        fail(f"{what}: {len(rb)} metrics records, should be {len(ra)} (> 0)")
        return
    for x, y in zip(ra, rb):
        for key in ("loss", "grad_norm", "lr", "val_loss", "val_acc", "acc"):
            if x.get(key) != y.get(key):
                fail(f"{what}: step {x['step']} {key} is {y.get(key)!r}, should be {x.get(key)!r} (bit for bit)")


def same_checkpoint(a, b, what):
    try:
        import h5py
        import numpy as np
    except ImportError:
        print("  (h5py not importable: checkpoint comparison skipped)")
        return
    def final(out):
        root = os.path.join(out, "checkpoints")
        with open(os.path.join(root, "latest")) as f:
            return os.path.join(root, f.read().strip(), "index.h5")
    with h5py.File(final(a), "r") as fa, h5py.File(final(b), "r") as fb:
        names = []
        fa.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
        if not names:
            fail(f"{what}: the checkpoint holds no tensors")
        for n in names:
            if n not in fb:
                fail(f"{what}: checkpoint tensor {n} missing")
                continue
            x, y = np.asarray(fa[n]), np.asarray(fb[n])
            if x.shape != y.shape or x.tobytes() != y.tobytes():
                fail(f"{what}: checkpoint tensor {n} differs (should be bitwise equal)")
        print(f"  {what}: {len(names)} checkpoint tensors compared bitwise")


# ---- auto: the fallback line once, then exactly the CPU run ----
cpu_out, cpu = run("cpu", "cpu")
auto_out, auto = run("auto", "auto")
dev = layout_device(auto.stdout)
if dev == "cuda":
    print(f"SKIPPED: CUDA is usable here (train.device=auto picked device cuda); the fallback is not testable")
    sys.exit(77)
if dev != "cpu":
    fail(f"auto: the layout line names device {dev!r}, should be 'cpu'")
if layout_device(cpu.stdout) != "cpu":
    fail("cpu: the layout line does not name device cpu")
lines = [l for l in auto.stdout.splitlines() if l.startswith("train.device")]
if len(lines) != 1 or not FALLBACK.match(lines[0]):
    fail(f"auto: {len(lines)} train.device lines on stdout ({lines}), should be one matching {FALLBACK.pattern}")
else:
    print(f"  auto: {lines[0]}")
with open(os.path.join(auto_out, "train.log"), errors="replace") as f:
    if sum(1 for l in f if FALLBACK.match(l.rstrip("\n"))) != 1:
        fail("auto: the fallback line is not in train.log exactly once")
if any(l.startswith("train.device") for l in cpu.stdout.splitlines()):
    fail("cpu: train.device=cpu printed a train.device line (it should say nothing)")
if "train.device" in auto.stderr:
    fail(f"auto: the fallback went to stderr: {auto.stderr.strip()}")
same_metrics(cpu_out, auto_out, "auto vs cpu")
same_checkpoint(cpu_out, auto_out, "auto vs cpu")

# np 2: every rank agrees, rank 0 alone says so
cpu2_out, _ = run("cpu_np2", "cpu", np=2)
auto2_out, auto2 = run("auto_np2", "auto", np=2)
n2 = sum(1 for l in auto2.stdout.splitlines() if FALLBACK.match(l))
if n2 != 1:
    fail(f"auto np 2: the fallback line printed {n2} times, should be once (rank 0)")
if layout_device(auto2.stdout) != "cpu":
    fail("auto np 2: not on the CPU")
same_metrics(cpu2_out, auto2_out, "auto vs cpu at np 2")

# ---- cuda: exit 2, one line naming the cause and the fix, before any work ----
for np in (1, 2):
    out, p = run(f"cuda_np{np}", "cuda", np=np, expect=2)
    err = p.stderr.strip().splitlines()
    if len(err) != 1 or not CUDA_ERROR.match(err[0]):
        fail(f"cuda np {np}: stderr is {err}, should be one line matching {CUDA_ERROR.pattern}")
    else:
        print(f"  cuda np {np}: {err[0]}")
    if os.path.exists(os.path.join(out, "metrics.jsonl")):
        fail(f"cuda np {np}: metrics.jsonl exists: work started before the device error")

if failures:
    print(f"FAILED: {len(failures)} check(s): {failures[0]}")
    sys.exit(1)
print("VALID: device_fallback")
