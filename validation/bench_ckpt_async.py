#!/usr/bin/python3
"""What a background checkpoint costs the step loop: train_gpt at GPT-2 124M with checkpoint.async = true, against the
same run without checkpoints, alternating rounds on the same machine.

Each round runs, one after the other:
  1. the baseline: train_gpt (inputs/gpt2_124m.toml, seq_len 64, batch 2) for --steps steps, no checkpoint; its step
     times (metrics.jsonl "ms") give the undisturbed step time (median over the steps after the first);
  2. the same run with a background checkpoint every --every steps (checkpoint.at_end = false; keep 1), parsing each
     save's log line: the snapshot copy, the step loop's stall (snapshot, and any wait for the previous save), the
     write's duration and the steps it overlapped ("during steps a..b").
Per save: extra = sum over its overlapped steps of (step ms - the round's baseline median): the slowdown of the steps
that ran beside the writer thread. The save stalled the step loop by stall + extra; the target (np 1,
OMP_NUM_THREADS=1, so that a core is free for the writer) is stall + extra <= snapshot + 0.10 x write, i.e.
(stall - snapshot + extra) / write <= 0.10. The report holds every save and the medians over all saves.

usage: validation/bench_ckpt_async.py [--rounds 5] [--np 1] [--steps 14] [--every 5] [--build build] [--dir DIR]
                                      [--report F.md]
Prints the table and `SUMMARY ...` with the medians."""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from campaign import REPO, machine_info  # noqa: E402
import ckpt_log  # noqa: E402

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--rounds", type=int, default=5)
ap.add_argument("--np", type=int, default=1)
ap.add_argument("--steps", type=int, default=14)
ap.add_argument("--every", type=int, default=5)
ap.add_argument("--build", default=os.path.join(REPO, "build"))
ap.add_argument("--dir")
ap.add_argument("--report")
args = ap.parse_args()
if args.rounds < 1 or args.np < 1 or args.every < 2 or args.steps <= args.every:
    ap.error("--rounds, --np >= 1, --every >= 2 (the first step is a warm-up) and --steps > --every")
build = os.path.abspath(args.build)
train_gpt = os.path.join(build, "apps", "train_gpt")
if not os.access(train_gpt, os.X_OK):
    sys.exit(f"bench_ckpt_async.py: {train_gpt} not found: build it (cmake --build {build} --target train_gpt)")
work = os.path.abspath(args.dir or os.path.join(build, "bench_ckpt_async_tmp"))
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
ENV = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
MPI = ["mpirun", "-np", str(args.np), "--oversubscribe", "--bind-to", "none"]
SETS = ["data.train=kjv_train.bin", "data.val=kjv_val.bin", "model.seq_len=64", "train.global_batch=2",
        "train.micro_batch=1", f"train.steps={args.steps}", "checkpoint.keep=1", "checkpoint.at_end=false",
        "sample.tokens=0", "train.device=cpu", "optim.warmup_steps=1", "train.eval_every=0", "checkpoint.async=true"]


def train(out, extra):
    shutil.rmtree(out, ignore_errors=True)
    cmd = MPI + [train_gpt, os.path.join(REPO, "inputs", "gpt2_124m.toml"), "--out", out]
    for s in SETS + extra:
        cmd += ["--set", s]
    p = subprocess.run(cmd, capture_output=True, text=True, errors="replace", env=ENV, timeout=1800)
    if p.returncode != 0:
        sys.exit(f"bench_ckpt_async.py: {' '.join(cmd)} exited {p.returncode}:\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
    with open(os.path.join(out, "metrics.jsonl")) as f:
        ms = {r["step"]: r["ms"] for r in map(json.loads, f)}
    return p.stdout, ms


t_start = time.time()
saves, baselines = [], []
for rnd in range(1, args.rounds + 1):
    _, base_ms = train(os.path.join(work, "base"), ["checkpoint.every=0"])
    base = statistics.median(v for s, v in base_ms.items() if s > 1)
    baselines.append(base)
    log, ms = train(os.path.join(work, "async"), [f"checkpoint.every={args.every}"])
    costs = ckpt_log.background_costs(log, ms, base)
    saves += [dict(c, round=rnd) for c in costs]
    if len(costs) != (args.steps - 1) // args.every:
        sys.exit(f"bench_ckpt_async.py: round {rnd}: {len(costs)} background save lines, expected "
                 f"{(args.steps - 1) // args.every}:\n{log[-3000:]}")
    print(f"round {rnd}: baseline {base:.0f} ms/step | " + " | ".join(
        f"save {s['step']}: snapshot {s['snapshot']:.3f} s, stall {s['stall']:.3f} s, write {s['write']:.2f} s, extra "
        f"{s['extra']:.3f} s over steps {s['steps']} -> {s['over']:.3f} of the write" for s in saves
        if s["round"] == rnd), flush=True)
shutil.rmtree(work, ignore_errors=True)


def med(key):
    return statistics.median(s[key] for s in saves)


over = med("over")
verdict = (f"meets the target ({over:.3f} <= 0.10)" if over <= 0.10 else f"misses the target ({over:.3f} > 0.10)") \
    if args.np == 1 else "(np > 1: recorded, no target)"
summary = (f"SUMMARY bench_ckpt_async np={args.np} rounds={args.rounds} saves={len(saves)} size_mib={med('mib'):.0f} "
           f"baseline_ms={statistics.median(baselines):.0f} snapshot_s={med('snapshot'):.3f} stall_s={med('stall'):.3f} "
           f"write_s={med('write'):.3f} extra_s={med('extra'):.3f} over_snapshot_per_write={over:.3f}")
lines = ["# Background checkpoint: the step loop's stall (train_gpt GPT-2 124M)", "",
         f"Command: `validation/bench_ckpt_async.py {' '.join(sys.argv[1:])}` ({time.time() - t_start:.0f} s). Rounds "
         "alternate a run without checkpoints (the baseline step time) and the same run with a background checkpoint "
         f"every {args.every} steps, at np {args.np}, OMP_NUM_THREADS=1.", "",
         "## Machine", ""] + [f"- {k}: {v}" for k, v in machine_info().items()] + [
         "", "## Medians over all saves", "",
         "| np | MiB | baseline ms/step | snapshot s | stall s | write s | extra step time s | (stall - snapshot + extra) "
         "/ write | verdict |", "|---:|---:|---:|---:|---:|---:|---:|---:|---|",
         f"| {args.np} | {med('mib'):.0f} | {statistics.median(baselines):.0f} | {med('snapshot'):.3f} | "
         f"{med('stall'):.3f} | {med('write'):.3f} | {med('extra'):.3f} | {over:.3f} | {verdict} |", "",
         "stall: the snapshot copy plus any wait for the previous save (the log line's \"step loop stalled\"); extra: "
         "the overlapped steps' time beyond the baseline median; the target at np 1: (stall - snapshot + extra) <= "
         "0.10 x write.", "", "## Every save", "",
         "| round | step | snapshot s | stall s | write s | overlapped steps | extra s | over |",
         "|---:|---:|---:|---:|---:|---|---:|---:|"] + [
         f"| {s['round']} | {s['step']} | {s['snapshot']:.3f} | {s['stall']:.3f} | {s['write']:.3f} | {s['steps']} | "
         f"{s['extra']:.3f} | {s['over']:.3f} |" for s in saves] + ["", summary]
print("\n".join(lines[lines.index("## Medians over all saves"):]))
if args.report:
    with open(args.report, "w") as f:
        f.write("\n".join(lines) + "\n")
