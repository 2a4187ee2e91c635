#!/usr/bin/python3
"""Runs train_gpt on a deck and checks its outputs against the contracts of docs/contracts.md:
metrics.jsonl has one record per step with the required fields, the loss goes down, the val loss is
recorded on evaluation steps, stdout ends with a PERFORMANCE line, and a second identical run
reproduces the losses bit for bit (invariant 1: the same layout reproduces itself).
usage: check_gpt_run.py TRAIN_GPT DECK WORKDIR [--set k=v ...]"""
import json
import os
import shutil
import subprocess
import sys

exe, deck, work = sys.argv[1:4]
extra = sys.argv[4:]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
failures = []


def run(out):
    p = subprocess.run([exe, deck, "--out", out] + extra, capture_output=True, text=True, errors="replace", timeout=600)
    if p.returncode != 0:
        print(p.stdout, p.stderr)
        print(f"FAILED: train_gpt exited with {p.returncode}")
        sys.exit(1)
    with open(os.path.join(out, "metrics.jsonl")) as f:
        recs = [json.loads(line) for line in f]
    return p.stdout, recs


stdout, recs = run(os.path.join(work, "a"))
steps = len(recs)
required = ["step", "loss", "lr", "grad_norm", "ms", "tokens_per_s", "mfu"]
for i, r in enumerate(recs):
    if r.get("step") != i + 1:
        failures.append(f"record {i} has step {r.get('step')}, should be {i + 1}")
    for k in required:
        if k not in r:
            failures.append(f"step {i + 1}: field {k} missing")
    if r.get("mfu") is not None:
        failures.append(f"step {i + 1}: mfu should be null on CPU without log.peak_tflops")
if steps < 2:
    failures.append(f"only {steps} records")
first, last = recs[0]["loss"], recs[-1]["loss"]
print(f"{steps} steps: loss {first:.6f} -> {last:.6f}")
if not last < first:
    failures.append(f"loss did not decrease (is {last}, should be < {first})")
if "val_loss" not in recs[-1]:
    failures.append("no val_loss on the last step")
perf = [l for l in stdout.splitlines() if l.startswith("PERFORMANCE")]
if len(perf) != 2:
    failures.append(f"{len(perf)} PERFORMANCE lines, should be 2 (header and figures)")
else:
    print(perf[0]); print(perf[1])
if not os.path.exists(os.path.join(work, "a", "train.log")):
    failures.append("no train.log in the output directory")

_, recs2 = run(os.path.join(work, "b"))
diff = [r1["step"] for r1, r2 in zip(recs, recs2) if r1["loss"] != r2["loss"] or r1["grad_norm"] != r2["grad_norm"]]
if diff or len(recs2) != steps:
    failures.append(f"a second run differs at steps {diff[:5]}")
else:
    print("second run reproduces every loss and grad norm bit for bit")

if failures:
    print("FAILED: " + "; ".join(failures))
    sys.exit(1)
print("VALID")
