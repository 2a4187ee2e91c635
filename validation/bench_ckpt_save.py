#!/usr/bin/python3
"""Checkpoint save bandwidth of the trainer, side by side with the bare protocol and dd on the same disk.

Each round runs, one after the other (alternating, so that the disk's drift hits all three alike):
  1. train_gpt at GPT-2 124M shapes (inputs/gpt2_124m.toml, seq_len 64, batch 2) for --steps steps at np --np with a
     synchronous checkpoint (checkpoint.async = false; validation/bench_ckpt_async.py measures the background one)
     after every step (keep 1: every save after the first also prunes the previous one), parsing each
     save's log line: size, seconds, and the phase breakdown (snapshot, crc, write, fsync, manifests, index, commit,
     prune; rank 0's clock);
  2. validation/bench_ckpt at the same np and the same number of MiB (the protocol without the trainer), as many saves
     as the trainer's, each pruning the previous one (its medians);
  3. dd if=/dev/zero bs=4M of the same number of MiB with conv=fsync, in the same directory.
The report holds every sample, the medians over the rounds, and the ratios trainer / dd and bench / dd (the target:
a synchronous save at >= 0.8x dd).

usage: validation/bench_ckpt_save.py [--rounds 5] [--np 2] [--steps 3] [--build build] [--dir DIR] [--report F.md]
  --dir     where checkpoints and dd's file go (default BUILD/bench_ckpt_save_tmp; wiped first, removed after)
Prints the table and `SUMMARY ...` with the medians and ratios."""
import argparse
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from campaign import REPO, machine_info  # noqa: E402

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--rounds", type=int, default=5)
ap.add_argument("--np", type=int, default=2)
ap.add_argument("--steps", type=int, default=3)
ap.add_argument("--build", default=os.path.join(REPO, "build"))
ap.add_argument("--dir")
ap.add_argument("--report")
args = ap.parse_args()
if args.rounds < 1 or args.np < 1 or args.steps < 1:
    ap.error("--rounds, --np and --steps must be >= 1")
build = os.path.abspath(args.build)
train_gpt = os.path.join(build, "apps", "train_gpt")
bench = os.path.join(build, "validation", "bench_ckpt")
for exe in (train_gpt, bench):
    if not os.access(exe, os.X_OK):
        sys.exit(f"bench_ckpt_save.py: {exe} not found: build it (cmake --build {build} --target train_gpt bench_ckpt)")
work = os.path.abspath(args.dir or os.path.join(build, "bench_ckpt_save_tmp"))
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
ENV = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
MPI = ["mpirun", "-np", str(args.np), "--oversubscribe", "--bind-to", "none"]
TRAIN = [train_gpt, os.path.join(REPO, "inputs", "gpt2_124m.toml"), "--out", os.path.join(work, "run")]
for s in ("data.train=kjv_train.bin", "data.val=kjv_val.bin", "model.seq_len=64", "train.global_batch=2",
          "train.micro_batch=1", f"train.steps={args.steps}", "checkpoint.every=1", "checkpoint.keep=1",
          "sample.tokens=0", "train.device=cpu", "optim.warmup_steps=1", "train.eval_every=0",
          "checkpoint.async=false"):  # the synchronous save: the step loop waits for all of it
    TRAIN += ["--set", s]
UNIT = {"B": 2**-20, "KiB": 2**-10, "MiB": 1.0, "GiB": 1024.0}
SAVE = re.compile(r"checkpoint \((\w+)\) step (\d+) -> \S+ \| ([0-9.]+) (B|KiB|MiB|GiB) in ([0-9.]+) s .*\| rank 0: "
                  r"snapshot ([0-9.]+) s, crc ([0-9.]+), write ([0-9.]+), fsync ([0-9.]+), manifests ([0-9.]+), "
                  r"index ([0-9.]+), commit ([0-9.]+), prune ([0-9.]+)")
PHASES = ["snapshot", "crc", "write", "fsync", "manifests", "index", "commit", "prune"]
BENCH_PHASES = ["crc", "write", "fsync", "index", "commit", "prune"]


def run(cmd, timeout=900):
    p = subprocess.run(cmd, capture_output=True, text=True, errors="replace", env=ENV, timeout=timeout)
    if p.returncode != 0:
        sys.exit(f"bench_ckpt_save.py: `{shlex.join(cmd)}` exited {p.returncode}:\n{(p.stdout + p.stderr)[-3000:]}")
    return p.stdout + p.stderr


trainer, benches, dds = [], [], []  # per sample: dict(mib, s, phases...)
size_mib = None
t_start = time.time()
for rnd in range(1, args.rounds + 1):
    shutil.rmtree(os.path.join(work, "run"), ignore_errors=True)
    text = run(MPI + TRAIN)
    saves = [m.groups() for m in SAVE.finditer(text)]
    if len(saves) != args.steps:
        sys.exit(f"bench_ckpt_save.py: train_gpt logged {len(saves)} saves, expected {args.steps}:\n{text[-3000:]}")
    for why, step, size, unit, secs, *ph in saves:
        mib = float(size) * UNIT[unit]
        size_mib = mib
        trainer.append(dict(round=rnd, step=int(step), mib=mib, s=float(secs), **dict(zip(PHASES, map(float, ph)))))
    mib_int = max(1, round(size_mib))
    # as many saves as the trainer's, each pruning the one before (commit keep 1): the BENCH_CKPT line's medians
    text = run(MPI + [bench, "--dir", os.path.join(work, "bench"), "--size-mib", str(mib_int), "--reps", str(args.steps)])
    m = re.search(r"^BENCH_CKPT .*total_s=([0-9.]+)", text, re.M)
    kv = dict(re.findall(r"(\w+)=([0-9.]+)", m.group(0))) if m else None
    if kv is None:
        sys.exit(f"bench_ckpt_save.py: no BENCH_CKPT line:\n{text[-2000:]}")
    benches.append(dict(round=rnd, mib=float(mib_int), s=float(kv["total_s"]),
                        **{p: float(kv[p + "_s"]) for p in BENCH_PHASES}))
    dd_file = os.path.join(work, "dd.bin")
    t0 = time.time()
    run(["dd", "if=/dev/zero", f"of={dd_file}", "bs=4M", f"count={mib_int // 4}", "conv=fsync"])
    dds.append(dict(round=rnd, mib=float(mib_int // 4 * 4), s=time.time() - t0))
    os.remove(dd_file)
    print(f"round {rnd}: trainer " + " ".join(f"{T['mib'] / T['s']:.0f}" for T in trainer if T["round"] == rnd)
          + f" MiB/s | bench {benches[-1]['mib'] / benches[-1]['s']:.0f} MiB/s | dd {dds[-1]['mib'] / dds[-1]['s']:.0f} "
          "MiB/s", flush=True)
shutil.rmtree(work, ignore_errors=True)


def med(rows, key):
    return statistics.median(r[key] for r in rows)


def rate(rows):
    return statistics.median(r["mib"] / r["s"] for r in rows)


tr, be, dd = rate(trainer), rate(benches), rate(dds)
summary = (f"SUMMARY bench_ckpt_save np={args.np} size_mib={size_mib:.0f} rounds={args.rounds} trainer_MiB_per_s={tr:.1f} "
           f"bench_MiB_per_s={be:.1f} dd_MiB_per_s={dd:.1f} ratio_trainer_dd={tr / dd:.2f} ratio_bench_dd={be / dd:.2f}")
lines = ["# Checkpoint save bandwidth: train_gpt vs the bare protocol vs dd", "",
         f"Command: `validation/bench_ckpt_save.py {' '.join(sys.argv[1:])}` ({time.time() - t_start:.0f} s). "
         f"Rounds alternate trainer, bench_ckpt and dd on the same directory ({work}); medians over all samples.", "",
         "## Machine", ""] + [f"- {k}: {v}" for k, v in machine_info().items()] + [
         f"- disk: {subprocess.run(['df', '-hT', os.path.dirname(work)], capture_output=True, text=True).stdout.splitlines()[-1]}",
         "", "## Medians", "",
         "| what | MiB | seconds | MiB/s | vs dd |", "|---|---:|---:|---:|---:|",
         f"| train_gpt save (np {args.np}) | {size_mib:.0f} | {med(trainer, 's'):.3f} | {tr:.0f} | {tr / dd:.2f} |",
         f"| bench_ckpt (np {args.np}) | {benches[0]['mib']:.0f} | {med(benches, 's'):.3f} | {be:.0f} | "
         f"{be / dd:.2f} |",
         f"| dd bs=4M conv=fsync | {dds[0]['mib']:.0f} | {med(dds, 's'):.3f} | {dd:.0f} | 1.00 |", "",
         "Phases (seconds, medians; the trainer's are rank 0's clock, bench_ckpt's shard phases the slowest rank's):", "",
         "| phase | " + " | ".join(PHASES) + " |", "|---|" + "---:|" * len(PHASES),
         "| train_gpt | " + " | ".join(f"{med(trainer, p):.3f}" for p in PHASES) + " |",
         "| bench_ckpt | " + " | ".join(f"{med(benches, p):.3f}" if p in BENCH_PHASES else "—" for p in PHASES) + " |",
         "", "## Samples", "", "| round | what | step | MiB | s | MiB/s |", "|---:|---|---:|---:|---:|---:|"]
for T in trainer:
    lines.append(f"| {T['round']} | train_gpt | {T['step']} | {T['mib']:.0f} | {T['s']:.3f} | {T['mib'] / T['s']:.0f} |")
for B in benches:
    lines.append(f"| {B['round']} | bench_ckpt | — | {B['mib']:.0f} | {B['s']:.3f} | {B['mib'] / B['s']:.0f} |")
for D in dds:
    lines.append(f"| {D['round']} | dd | — | {D['mib']:.0f} | {D['s']:.3f} | {D['mib'] / D['s']:.0f} |")
lines += ["", "Commands: `" + shlex.join(MPI + TRAIN) + "`; `" + shlex.join(MPI + [bench, "--size-mib", "N", "--reps", str(args.steps)])
          + "`; `dd if=/dev/zero of=DIR/dd.bin bs=4M count=N/4 conv=fsync`.", "", summary, ""]
print("\n".join(lines[lines.index("## Medians"):]))
if args.report:
    with open(args.report, "w") as f:
        f.write("\n".join(lines))
    print(f"report: {args.report}")
