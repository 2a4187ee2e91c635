#!/usr/bin/python3
"""Checkpoint save speed of the trainer in every checkpoint.files mode, foreground and background, against dd.

Each round runs, one after the other (alternating, so that the disk's drift hits everything alike):
  1. dd if=/dev/zero bs=4M conv=fsync of the checkpoint's size, in the same directory;
  2. per files mode (per_rank, per_node, single): train_gpt at GPT-2 124M shapes (inputs/gpt2_124m.toml, seq_len 64,
     batch 2) at np --np for --steps steps with a foreground save after every step (checkpoint.async = false, keep 1:
     every save after the first also prunes the one before, and the later saves run with the earlier checkpoints'
     pages around, which is when buffered writes were slow); each save's rate = its size / its time (snapshot +
     write: what the step loop waits for);
  3. dd again;
  4. the baseline: the same run without checkpoints for --bg-steps steps (its median step time);
  5. per files mode: the same run with a background save every --every steps (checkpoint.async = true); per save,
     extra = the steps it overlapped beyond the baseline median, and (stall - snapshot + extra) / write, the share of
     the write the step loop paid for (validation/bench_ckpt_async.py's measure).
Targets (printed with a verdict): foreground per_rank >= 0.8x dd (medians), every per_rank save within 1.5x of their
median; per_node and single >= 0.7x per_rank's rate; background (stall - snapshot + extra) / write <= 0.10 (median
over the saves of each mode).

usage: validation/bench_ckpt_save.py [--rounds 5] [--np 2] [--steps 4] [--bg-steps 14] [--every 5]
                                     [--modes per_rank,per_node,single] [--build build] [--dir DIR] [--report F.md]
  --dir     where checkpoints and dd's file go (default BUILD/bench_ckpt_save_tmp; wiped first, removed after)
Prints the tables and `SUMMARY ...`. Environment: OMP_NUM_THREADS=1 for every run; HPCT_CKPT_IO passes through (=buffered
measures the page-cache path)."""
import argparse
import json
import os
import shlex
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
ap.add_argument("--np", type=int, default=2)
ap.add_argument("--steps", type=int, default=4)
ap.add_argument("--bg-steps", type=int, default=14)
ap.add_argument("--every", type=int, default=5)
ap.add_argument("--modes", default="per_rank,per_node,single")
ap.add_argument("--build", default=os.path.join(REPO, "build"))
ap.add_argument("--dir")
ap.add_argument("--report")
args = ap.parse_args()
MODES = args.modes.split(",")
if args.rounds < 1 or args.np < 1 or args.steps < 1 or args.every < 2 or args.bg_steps <= args.every:
    ap.error("--rounds, --np, --steps >= 1, --every >= 2 (the first step is a warm-up) and --bg-steps > --every")
if not MODES or any(m not in ("per_rank", "per_node", "single") for m in MODES) or "per_rank" not in MODES:
    ap.error(f"--modes {args.modes}: a comma-separated list of per_rank, per_node, single that holds per_rank")
build = os.path.abspath(args.build)
train_gpt = os.path.join(build, "apps", "train_gpt")
if not os.access(train_gpt, os.X_OK):
    sys.exit(f"bench_ckpt_save.py: {train_gpt} not found: build it (cmake --build {build} --target train_gpt)")
work = os.path.abspath(args.dir or os.path.join(build, "bench_ckpt_save_tmp"))
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
ENV = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
MPI = ["mpirun", "-np", str(args.np), "--oversubscribe", "--bind-to", "none"]
if "HPCT_CKPT_IO" in os.environ:
    MPI += ["-x", "HPCT_CKPT_IO"]
BASE = ["data.train=kjv_train.bin", "data.val=kjv_val.bin", "model.seq_len=64", "train.global_batch=2",
        "train.micro_batch=1", "checkpoint.keep=1", "sample.tokens=0", "train.device=cpu", "optim.warmup_steps=1",
        "train.eval_every=0"]


def train_cmd(out, sets):
    cmd = MPI + [train_gpt, os.path.join(REPO, "inputs", "gpt2_124m.toml"), "--out", out]
    for s in BASE + sets:
        cmd += ["--set", s]
    return cmd


def run(cmd, timeout=1800):
    p = subprocess.run(cmd, capture_output=True, text=True, errors="replace", env=ENV, timeout=timeout)
    if p.returncode != 0:
        sys.exit(f"bench_ckpt_save.py: `{shlex.join(cmd)}` exited {p.returncode}:\n{(p.stdout + p.stderr)[-3000:]}")
    return p.stdout + p.stderr


def train(out, sets):
    """One run: (its log, {step: ms} from metrics.jsonl)."""
    shutil.rmtree(out, ignore_errors=True)
    log = run(train_cmd(out, sets))
    with open(os.path.join(out, "metrics.jsonl")) as f:
        ms = {r["step"]: r["ms"] for r in map(json.loads, f)}
    shutil.rmtree(out, ignore_errors=True)
    return log, ms


def dd(mib):
    path = os.path.join(work, "dd.bin")
    t0 = time.time()
    run(["dd", "if=/dev/zero", f"of={path}", "bs=4M", f"count={mib // 4}", "conv=fsync"])
    s = time.time() - t0
    os.remove(path)
    return dict(mib=float(mib // 4 * 4), s=s)


fg = {m: [] for m in MODES}  # per save: round, step, mib, s, phases
bg = {m: [] for m in MODES}  # per save: round, step, mib, snapshot, stall, write, extra, over
dds, baselines = [], []
size_mib = None
t_start = time.time()
FG_SETS = [f"train.steps={args.steps}", "checkpoint.every=1", "checkpoint.async=false"]
BG_SETS = [f"train.steps={args.bg_steps}", f"checkpoint.every={args.every}", "checkpoint.at_end=false",
           "checkpoint.async=true"]
for rnd in range(1, args.rounds + 1):
    if size_mib is not None:
        dds.append(dict(round=rnd, **dd(round(size_mib))))
    for m in MODES:
        log, _ = train(os.path.join(work, "run"), FG_SETS + [f"checkpoint.files={m}"])
        saves = ckpt_log.saves(log)
        if len(saves) != args.steps or any(s["mode"] != "foreground" for s in saves):
            sys.exit(f"bench_ckpt_save.py: {m}: {len(saves)} foreground save lines, expected {args.steps}:\n{log[-3000:]}")
        for s in saves:
            size_mib = s["mib"]
            fg[m].append(dict(round=rnd, step=s["step"], mib=s["mib"], s=s["total_s"], snapshot=s["snapshot"],
                              **s["phases"]))
    if rnd == 1:  # the first round's first dd: once the checkpoint's size is known
        dds.append(dict(round=rnd, **dd(round(size_mib))))
    dds.append(dict(round=rnd, **dd(round(size_mib))))
    _, base_ms = train(os.path.join(work, "run"), [f"train.steps={args.bg_steps}", "checkpoint.every=0",
                                                   "checkpoint.at_end=false"])
    base = statistics.median(v for s, v in base_ms.items() if s > 1)
    baselines.append(base)
    for m in MODES:
        log, ms = train(os.path.join(work, "run"), BG_SETS + [f"checkpoint.files={m}"])
        costs = ckpt_log.background_costs(log, ms, base)
        bg[m] += [dict(c, round=rnd) for c in costs]
        if len(costs) != (args.bg_steps - 1) // args.every:
            sys.exit(f"bench_ckpt_save.py: {m}: {len(costs)} background save lines, expected "
                     f"{(args.bg_steps - 1) // args.every}:\n{log[-3000:]}")
    print(f"round {rnd}: dd " + " ".join(f"{d['mib'] / d['s']:.0f}" for d in dds if d["round"] == rnd) + " MiB/s | "
          + " | ".join(f"{m} fg " + " ".join(f"{r['mib'] / r['s']:.0f}" for r in fg[m] if r["round"] == rnd)
                       + " MiB/s, bg " + " ".join(f"{r['over']:.2f}" for r in bg[m] if r["round"] == rnd)
                       for m in MODES), flush=True)
shutil.rmtree(work, ignore_errors=True)


def rate(rows):
    return statistics.median(r["mib"] / r["s"] for r in rows)


def med(rows, key):
    return statistics.median(r[key] for r in rows)


dd_rate = rate(dds)
pr = rate(fg["per_rank"])
spread = [r["mib"] / r["s"] / pr for r in fg["per_rank"]]
verdicts = [("foreground per_rank >= 0.8x dd", pr / dd_rate >= 0.8, f"{pr / dd_rate:.2f}x"),
            ("every foreground per_rank save within 1.5x of their median",
             all(1 / 1.5 <= x <= 1.5 for x in spread), f"{min(spread):.2f}..{max(spread):.2f} of the median")]
for m in MODES:
    if m != "per_rank":
        verdicts.append((f"foreground {m} >= 0.7x per_rank", rate(fg[m]) / pr >= 0.7, f"{rate(fg[m]) / pr:.2f}x"))
for m in MODES:
    o = med(bg[m], "over")
    verdicts.append((f"background {m}: (stall - snapshot + extra) / write <= 0.10", o <= 0.10, f"{o:.3f}"))
PHASES = ["snapshot", "crc", "metadata", "write", "fsync", "manifests", "index", "commit", "prune"]
summary = (f"SUMMARY bench_ckpt_save np={args.np} size_mib={size_mib:.0f} rounds={args.rounds} dd_MiB_per_s={dd_rate:.1f} "
           + " ".join(f"fg_{m}_MiB_per_s={rate(fg[m]):.1f}" for m in MODES) + f" ratio_per_rank_dd={pr / dd_rate:.2f} "
           + " ".join(f"bg_{m}_over={med(bg[m], 'over'):.3f}" for m in MODES)
           + f" verdicts_met={sum(v[1] for v in verdicts)}/{len(verdicts)}")
io = os.environ.get("HPCT_CKPT_IO", "direct")
lines = [f"# Checkpoint saves: every files mode, foreground and background, against dd (train_gpt GPT-2 124M, np "
         f"{args.np})", "",
         f"Command: `validation/bench_ckpt_save.py {' '.join(sys.argv[1:])}` ({time.time() - t_start:.0f} s; "
         f"HPCT_CKPT_IO={io}). Rounds alternate dd, a foreground run per mode (a save after every step), dd, a "
         "run without checkpoints (the baseline step time) and a background run per mode (a save every "
         f"{args.every} steps), on the same directory ({work}); OMP_NUM_THREADS=1.", "",
         "## Machine", ""] + [f"- {k}: {v}" for k, v in machine_info().items()] + [
         f"- disk: {subprocess.run(['df', '-hT', os.path.dirname(work)], capture_output=True, text=True).stdout.splitlines()[-1]}",
         "", "## Targets", "", "| target | measured | verdict |", "|---|---|---|"] + [
         f"| {t} | {v} | {'met' if ok else 'MISSED'} |" for t, ok, v in verdicts] + [
         "", "## Foreground saves (medians over every save of every round)", "",
         "| mode | MiB | seconds | MiB/s | vs dd | vs per_rank | slowest / fastest save MiB/s |",
         "|---|---:|---:|---:|---:|---:|---|"] + [
         f"| {m} | {size_mib:.0f} | {med(fg[m], 's'):.3f} | {rate(fg[m]):.0f} | {rate(fg[m]) / dd_rate:.2f} | "
         f"{rate(fg[m]) / pr:.2f} | {min(r['mib'] / r['s'] for r in fg[m]):.0f} / "
         f"{max(r['mib'] / r['s'] for r in fg[m]):.0f} |" for m in MODES] + [
         f"| dd bs=4M conv=fsync | {dds[0]['mib']:.0f} | {med(dds, 's'):.3f} | {dd_rate:.0f} | 1.00 | | "
         f"{min(d['mib'] / d['s'] for d in dds):.0f} / {max(d['mib'] / d['s'] for d in dds):.0f} |", "",
         "Phases of the foreground saves (seconds, medians, rank 0's clock; crc is part of write):", "",
         "| mode | " + " | ".join(PHASES) + " |", "|---|" + "---:|" * len(PHASES)] + [
         f"| {m} | " + " | ".join(f"{med(fg[m], p):.3f}" for p in PHASES) + " |" for m in MODES] + [
         "", "## Background saves (medians over every save)", "",
         "| mode | baseline ms/step | snapshot s | stall s | write s | extra step time s | (stall - snapshot + extra) / "
         "write |", "|---|---:|---:|---:|---:|---:|---:|"] + [
         f"| {m} | {statistics.median(baselines):.0f} | {med(bg[m], 'snapshot'):.3f} | {med(bg[m], 'stall'):.3f} | "
         f"{med(bg[m], 'write'):.3f} | {med(bg[m], 'extra'):.3f} | {med(bg[m], 'over'):.3f} |" for m in MODES] + [
         "", "## Every save", "", "| round | mode | kind | step | MiB/s or over | s |", "|---:|---|---|---:|---:|---:|"]
for m in MODES:
    lines += [f"| {r['round']} | {m} | foreground | {r['step']} | {r['mib'] / r['s']:.0f} | {r['s']:.3f} |"
              for r in fg[m]]
    lines += [f"| {r['round']} | {m} | background (steps {r['steps']}, extra {r['extra']:.3f} s) | {r['step']} | "
              f"{r['over']:.3f} | {r['write']:.3f} |" for r in bg[m]]
lines += [f"| {d['round']} | dd | — | — | {d['mib'] / d['s']:.0f} | {d['s']:.3f} |" for d in dds]
lines += ["", "Commands: `" + shlex.join(train_cmd(os.path.join(work, "run"), FG_SETS + ["checkpoint.files=MODE"]))
          + "`; the background runs with `" + " ".join(f"--set {s}" for s in BG_SETS) + "`; `dd if=/dev/zero "
          "of=DIR/dd.bin bs=4M count=N/4 conv=fsync`.", "", summary, ""]
print("\n".join(lines[lines.index("## Targets"):]))
if args.report:
    with open(args.report, "w") as f:
        f.write("\n".join(lines))
    print(f"report: {args.report}")
