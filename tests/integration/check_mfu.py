#!/usr/bin/python3
"""MFU is per rank in both apps (docs/performance.md): mfu = (job FLOP/s / world size) / one device's peak.

Runs APP DECK at world size 1 and 2 (mpirun --oversubscribe) with log.peak_tflops set, and checks every
metrics.jsonl record: mfu x (ms / 1e3) x world x peak = the FLOPs of one step, the same at both world sizes (a formula
that divides by one device's peak only would give twice that at world size 2). For train_gpt the FLOPs of a step are
also computed here independently, from the deck: the PaLM count (6 N + 12 L C T) x tokens per step, N = the parameters
except the position embedding and the vocabulary padding. The throughput stays the job's: tokens_per_s or images_per_s
x ms / 1e3 = the global batch's tokens or images.
usage: check_mfu.py MPIEXEC APP DECK WORKDIR"""
import json
import os
import shutil
import subprocess
import sys
import tomllib

mpiexec, app, deck, work = sys.argv[1:5]
PEAK = 0.5  # TFLOP/s: any positive value; the relation is what is checked
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
failures = []
is_gpt = os.path.basename(app).startswith("train_gpt")


def run(world):
    out = os.path.join(work, f"np{world}")
    cmd = [mpiexec, "-np", str(world), "--oversubscribe", app, deck, "--out", out, "--set", "train.steps=3",
           "--set", f"log.peak_tflops={PEAK}", "--set", "checkpoint.at_end=false"]
    if is_gpt:
        cmd += ["--set", "sample.tokens=0"]
    p = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=600)
    if p.returncode != 0:
        print(p.stdout[-3000:], p.stderr[-3000:])
        print(f"FAILED: {' '.join(cmd)} exited {p.returncode}")
        sys.exit(1)
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def close(a, b, rel=2e-6):  # metrics.jsonl prints %.9g
    return abs(a - b) <= rel * max(abs(a), abs(b))


with open(deck, "rb") as f:
    d = tomllib.load(f)
gb = d["train"]["global_batch"]
if is_gpt:
    m = d["model"]
    L, C, T, V = m["n_layer"], m["n_embd"], m["seq_len"], m.get("vocab_size", 256)
    bias = m.get("bias", True)
    per_layer = 12 * C * C + (13 * C if bias else 4 * C)  # ln1, qkv, proj, ln2, fc, fc proj
    n = V * C + L * per_layer + (2 * C if bias else C)     # wte (true vocabulary) + blocks + final LayerNorm
    expected_flops = (6 * n + 12 * L * C * T) * gb * T
    samples, rate_key = gb * T, "tokens_per_s"
else:
    expected_flops, samples, rate_key = None, gb, "images_per_s"

step_flops = {}
for world in (1, 2):
    for r in run(world):
        if r.get("mfu") is None:
            failures.append(f"np{world} step {r['step']}: mfu is null with log.peak_tflops = {PEAK}")
            continue
        flops = r["mfu"] * (r["ms"] / 1e3) * world * PEAK * 1e12
        step_flops.setdefault(world, []).append(flops)
        if expected_flops is not None and not close(flops, expected_flops):
            failures.append(f"np{world} step {r['step']}: mfu x s x world x peak = {flops:.6g} FLOPs, should be "
                            f"{expected_flops:.6g} (the PaLM count of one step)")
        if not close(r[rate_key] * r["ms"] / 1e3, samples, 1e-5):
            failures.append(f"np{world} step {r['step']}: {rate_key} x s = {r[rate_key] * r['ms'] / 1e3:.6g}, should be "
                            f"{samples} (the job's throughput)")
if 1 in step_flops and 2 in step_flops and not close(step_flops[1][0], step_flops[2][0]):
    failures.append(f"the FLOPs of a step implied by mfu differ between world sizes 1 and 2 ({step_flops[1][0]:.6g} vs "
                    f"{step_flops[2][0]:.6g}): mfu is not per rank")
for f in failures:
    print("FAILED:", f)
if not failures:
    print(f"VALID: mfu per rank ({os.path.basename(app)}, world sizes 1 and 2, {len(step_flops[1])} steps each)")
sys.exit(1 if failures else 0)
