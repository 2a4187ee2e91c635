#!/usr/bin/python3
"""Calibrates a GPU machine preset's GEMM efficiency on a measured hpctrain step: the layout planner's prediction of
the recorded run (`train_gpt inputs/gpt2_124m.toml --plan 1 --auto --machine FILE` with the record's micro-batch,
bf16, CUDA) made equal to its measured ms/step by bisection on compute.gemm_efficiency, every other key as the
preset has it (the record's device may differ in memory bandwidth: --memory-gbs gives the recorded device's rate for
the calibration only).

usage: validation/calibrate_gpu_preset.py --record validation/results/gpu/DEVICE_DATE.jsonl --preset h100_dgx
                                          [--memory-gbs 3840] [--write] [--train-gpt BIN]
  --record      bench_gpu.py's JSON Lines: the row workload gpt, program hpctrain, precision bf16 (its ms_per_step,
                micro_batch; one GPU, global batch = micro-batch)
  --write       replace the preset's gemm_efficiency line (inputs/machines/PRESET.toml) with the calibrated value
Prints the bisection's result and last `VALID: ...` or `FAILED: ...` (exit 1)."""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ap.add_argument("--record", required=True)
ap.add_argument("--preset", required=True)
ap.add_argument("--memory-gbs", type=float, help="the recorded device's memory rate (GB/s), for the calibration")
ap.add_argument("--write", action="store_true")
ap.add_argument("--train-gpt", default=os.path.join(REPO, "build", "apps", "train_gpt"))
args = ap.parse_args()

rows = [json.loads(line) for line in open(args.record) if line.strip()]
row = next((r for r in rows if r.get("workload") == "gpt" and r.get("program") == "hpctrain"
            and r.get("precision") == "bf16"), None)
if row is None:
    print(f"FAILED: {args.record} has no hpctrain GPT bf16 row")
    sys.exit(1)
preset = os.path.join(REPO, "inputs", "machines", args.preset + ".toml")
text = open(preset).read()
if args.memory_gbs:
    text = re.sub(r"(?m)^memory_gbs = [0-9.eE+-]+", f"memory_gbs = {args.memory_gbs}", text)
mb = row["micro_batch"]
cmd_tail = ["--set", "train.precision=bf16", "--set", "train.device=cuda", "--set", f"train.global_batch={mb}",
            "--set", f"train.micro_batch={mb}"]


def predicted_ms(eff):
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
        f.write(re.sub(r"(?m)^gemm_efficiency = [0-9.eE+-]+", f"gemm_efficiency = {eff}", text))
    try:
        r = subprocess.run([args.train_gpt, os.path.join(REPO, "inputs", "gpt2_124m.toml"), "--plan", "1", "--auto",
                            "--machine", f.name, "--json", "--top", "1"] + cmd_tail,
                           capture_output=True, text=True, timeout=60)
    finally:
        os.remove(f.name)
    deck = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{") and '"deck":true' in line]
    if r.returncode != 0 or not deck:
        print(r.stdout[-2000:], r.stderr[-2000:])
        print("FAILED: the planner did not run")
        sys.exit(1)
    return deck[0]["pred_ms"]


lo, hi = 0.02, 1.0
if not predicted_ms(hi) <= row["ms_per_step"] <= predicted_ms(lo):
    print(f"FAILED: {row['ms_per_step']} ms/step is outside what gemm_efficiency {lo}..{hi} predicts")
    sys.exit(1)
for _ in range(40):
    mid = (lo + hi) / 2
    lo, hi = (mid, hi) if predicted_ms(mid) > row["ms_per_step"] else (lo, mid)
eff = round((lo + hi) / 2, 4)
print(f"record: {row['device']} commit {row['commit'][:12]} GPT-2 124M bf16 micro-batch {mb}: "
      f"{row['ms_per_step']:.1f} ms/step (MFU {row['mfu']:.3f})")
print(f"preset {args.preset}: gemm_efficiency {eff} predicts {predicted_ms(eff):.1f} ms/step"
      + (f" (memory_gbs {args.memory_gbs} for the calibration)" if args.memory_gbs else ""))
if args.write:
    src = open(preset).read()
    open(preset, "w").write(re.sub(r"(?m)^gemm_efficiency = [0-9.eE+-]+", f"gemm_efficiency = {eff}", src))
    print(f"wrote {os.path.relpath(preset, REPO)}")
print(f"VALID: {args.preset} gemm_efficiency = {eff}")
