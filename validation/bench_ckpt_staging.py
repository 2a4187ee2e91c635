#!/usr/bin/python3
"""Pinned against pageable checkpoint staging: how long the snapshot of a GPT-2 124M bf16 save stalls the step loop
on CUDA when CheckpointStaging's host slabs are page-locked (cudaHostRegister, the default) and when they stay pageable
(HPCT_CKPT_STAGING=pageable, the control; lib/train/checkpoint/protocol.hpp).

Each round runs build/apps/train_gpt inputs/gpt2_124m.toml (train.device=cuda, train.precision=bf16, seq_len 1024,
micro-batch = global batch 4, the kjv token shards of data/) once per (checkpoint.async, staging) pair: checkpoint.async
true and false (--async), staging pinned and pageable, which of the two runs first alternating from round to round; a
checkpoint every --every steps, keep 1, at_end false; one rank, started directly (an MPI singleton, as the GPU bundle
runs it: no mpirun). From each save's log line (validation/ckpt_log.py): the snapshot (rank 0's device-to-host copies
into the staging slabs, the part of the step loop's stall that the staging decides), the stall (background: the
snapshot plus any wait for the previous save; foreground: plus the write) and the write.

Per checkpoint.async value: the median snapshot over every save of each staging mode, the ratio pinned / pageable, and
the target: ratio <= 0.5 (the pinned snapshot stalls the step loop at most half as long). Beside it: the medians
without each run's first save (a pageable slab's first touch falls in it), the median stall and write, and the runs'
wall time (the pinned mode registers its slabs once at the start).

--device cpu: the same protocol on the CPU with inputs/gpt_tiny.toml, a dry run in about 10 s: there both modes are
the same (the staging is a memcpy or zero-copy and HPCT_CKPT_STAGING has no effect), so it checks the runs, the
parsing and the report, not the target.
--budget S: no round starts when the longest round so far says it would end more than S seconds after the start (the
first round always starts), and no run outlives the budget (a round cut short is left out); the report is rewritten
after every round, so a session cut short still brings one back.

usage: validation/bench_ckpt_staging.py [--device cuda|cpu] [--rounds 3] [--steps 16] [--every 5] [--micro-batch 4]
           [--seq-len 1024] [--async true,false] [--budget 480] [--timeout 300] [--build build] [--dir DIR]
           [--commit SHA] [--report F.md]
(the defaults are the cuda ones; --device cpu: 2 rounds, 8 steps, every 3, micro-batch 2, seq_len 64.)
Prints each round's snapshots, the table and one `SUMMARY bench_ckpt_staging ...` line per checkpoint.async value;
exits 0 whatever the verdict, 1 when a run fails, logs other saves than expected or no round completes. Standard
library only (the GPU bundle's environment); the run logs stay in DIR (default BUILD/bench_ckpt_staging_tmp), the
checkpoints are removed after each run."""
import argparse
import os
import random
import shlex
import shutil
import statistics
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckpt_log  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = 0.5
DEFAULTS = {"cuda": dict(deck="gpt2_124m.toml", rounds=3, steps=16, every=5, micro_batch=4, seq_len=1024),
            "cpu": dict(deck="gpt_tiny.toml", rounds=2, steps=8, every=3, micro_batch=2, seq_len=64)}
MODES = ("pinned", "pageable")

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
ap.add_argument("--rounds", type=int)
ap.add_argument("--steps", type=int)
ap.add_argument("--every", type=int)
ap.add_argument("--micro-batch", type=int)
ap.add_argument("--seq-len", type=int)
ap.add_argument("--async", dest="asyncs", default="true,false", help="checkpoint.async values, comma-separated")
ap.add_argument("--budget", type=float, default=480.0, help="seconds for the whole run (0: none)")
ap.add_argument("--timeout", type=float, default=300.0, help="seconds per train_gpt run")
ap.add_argument("--build", default=os.path.join(REPO, "build"))
ap.add_argument("--dir")
ap.add_argument("--commit", help="the commit the binary was built from, when this tree has no .git")
ap.add_argument("--report")
args = ap.parse_args()
for k, v in DEFAULTS[args.device].items():
    if getattr(args, k, None) is None:
        setattr(args, k, v)
asyncs = [a.strip() for a in args.asyncs.split(",") if a.strip()]
if not asyncs or any(a not in ("true", "false") for a in asyncs) or len(set(asyncs)) != len(asyncs):
    ap.error("--async: true, false or true,false")
if args.rounds < 1 or args.every < 2 or args.steps < args.every or args.micro_batch < 1 or args.seq_len < 1:
    ap.error("--rounds >= 1, --every >= 2 (the first step is a warm-up), --steps >= --every, --micro-batch and "
             "--seq-len >= 1")
EXPECTED = args.steps // args.every  # CheckpointCadence: a save after every step s with s % every == 0
build = os.path.abspath(args.build)
train_gpt = os.path.join(build, "apps", "train_gpt")
if not os.access(train_gpt, os.X_OK):
    sys.exit(f"bench_ckpt_staging.py: {train_gpt} not found: build it (cmake --build {build} --target train_gpt)")
work = os.path.abspath(args.dir or os.path.join(build, "bench_ckpt_staging_tmp"))
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
deck = os.path.join(REPO, "inputs", args.deck)
t_start = time.time()


def sh(cmd):
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=60)
        return p.stdout.strip() if p.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError):
        return ""


def rel(path):
    return os.path.relpath(path, REPO) if os.path.isabs(path) and path.startswith(REPO + os.sep) else path


def token_shard(path, n, seed):
    """An llm.c-format shard (lib/data/token_shard.hpp) of n byte-valued random tokens (when data/ has no kjv)."""
    rng = random.Random(seed)
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
        f.write(struct.pack(f"<{n}H", *(rng.randrange(256) for _ in range(n))))


# ---- the machine ----
gpu = sh(["nvidia-smi", "-i", (os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip() or "0"),
          "--query-gpu=name,driver_version", "--format=csv,noheader"]).splitlines()
gpu = gpu[0] if gpu else "n/a (nvidia-smi lists no GPU)"
if args.commit:
    commit = args.commit
else:
    commit = sh(["git", "-C", REPO, "rev-parse", "HEAD"]) or "unknown (no git here: pass --commit)"
    if sh(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"]):
        commit += " + uncommitted changes in the tree"
cpu_model = next((ln.split(":", 1)[1].strip() for ln in sh(["lscpu"]).splitlines() if ln.startswith("Model name")),
                 "?")
with open(train_gpt, "rb") as f:
    reads_env = b"HPCT_CKPT_STAGING" in f.read()
if args.device == "cuda" and not reads_env:
    print(f"bench_ckpt_staging.py: warning: {train_gpt} does not contain HPCT_CKPT_STAGING: a build from before the "
          "pinned staging, whose two modes are the same", file=sys.stderr, flush=True)

# ---- the runs ----
train_bin, val_bin = (os.path.join(REPO, "data", f"kjv_{s}.bin") for s in ("train", "val"))
data_note = "kjv token shards (data/kjv_train.bin, data/kjv_val.bin; byte-valued tokens)"
if not (os.path.exists(train_bin) and os.path.exists(val_bin)):
    train_bin, val_bin = os.path.join(work, "train.bin"), os.path.join(work, "val.bin")
    token_shard(train_bin, 1 << 20, 1)
    token_shard(val_bin, 65 * args.seq_len + 1, 2)
    data_note = "synthetic token shards of byte-valued random tokens (data/kjv_*.bin not found)"
SETS = [f"train.device={args.device}", "train.precision=bf16", f"model.seq_len={args.seq_len}",
        f"train.micro_batch={args.micro_batch}", f"train.global_batch={args.micro_batch}", f"train.steps={args.steps}",
        f"data.train={train_bin}", f"data.val={val_bin}", "data.eval_sequences=64", "train.eval_every=0",
        "sample.tokens=0", "optim.warmup_steps=1", "optim.decay_steps=0", "log.every=1",
        f"checkpoint.every={args.every}", "checkpoint.every_minutes=0", "checkpoint.keep=1", "checkpoint.at_end=false"]
OMP = os.environ.get("OMP_NUM_THREADS") or ("4" if args.device == "cuda" else "1")
BASE_ENV = {k: v for k, v in os.environ.items() if k != "HPCT_CKPT_STAGING"}
BASE_ENV.update(OMP_NUM_THREADS=OMP, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")


def command(out, asy):
    cmd = [train_gpt, deck, "--out", out]
    for s in SETS + [f"checkpoint.async={asy}"]:
        cmd += ["--set", s]
    return cmd


class RunFailed(Exception):
    pass


class OutOfBudget(Exception):
    pass


setup = {}  # the runs' "checkpoints:" line per (checkpoint.async, staging) and the first "device:" line


def run(rnd, asy, mode, timeout, budget_cap):
    """One train_gpt run; returns (wall seconds, its saves as ckpt_log.saves gives them)."""
    name = f"r{rnd}_async_{asy}_{mode}"
    out = os.path.join(work, name)
    cmd = command(out, asy)
    env = dict(BASE_ENV, HPCT_CKPT_STAGING="pageable") if mode == "pageable" else BASE_ENV
    t0 = time.time()
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, timeout=timeout)
        text, rc = p.stdout.decode(errors="replace"), p.returncode
    except subprocess.TimeoutExpired as e:
        text, rc = (e.output or b"").decode(errors="replace"), None
    wall = time.time() - t0
    with open(os.path.join(work, name + ".log"), "w") as f:
        f.write(text)
    shutil.rmtree(out, ignore_errors=True)  # the checkpoints (1.4 GiB at GPT-2 124M)
    where = f"round {rnd}, checkpoint.async={asy}, {mode} (log {rel(os.path.join(work, name + '.log'))})"
    if rc is None:
        if budget_cap:
            raise OutOfBudget(f"{where}: stopped after {timeout:.0f} s by the budget")
        raise RunFailed(f"{where}: no end after {timeout:.0f} s (--timeout):\n{text[-3000:]}")
    if rc != 0:
        raise RunFailed(f"{where}: exited {rc}:\n{text[-3000:]}")
    saves = ckpt_log.saves(text)
    if len(saves) != EXPECTED:
        raise RunFailed(f"{where}: {len(saves)} save lines, expected {EXPECTED}:\n{text[-3000:]}")
    for ln in text.splitlines():
        if ln.startswith("checkpoints: "):
            setup.setdefault(f"checkpoints, checkpoint.async={asy}, {mode}", ln)
        if ln.startswith("device: "):
            setup.setdefault("device", ln)
    return wall, saves


# ---- statistics and the report ----
records = []  # one per save: round, async, mode, first (the run's first save), wall, and ckpt_log's fields


def med(rows, key):
    vals = [r[key] for r in rows]
    return statistics.median(vals) if vals else float("nan")


def ratio(a, b):
    return a / b if b > 0 else None


def fr(x):
    return "n/a" if x is None or x != x else f"{x:.3f}"


def stats(asy):
    """Per staging mode the medians, then the ratios and the verdict, for one checkpoint.async value."""
    s = {}
    for mode in MODES:
        rows = [r for r in records if r["async"] == asy and r["mode"] == mode]
        later = [r for r in rows if not r["first"]]
        runs = {r["round"]: r["wall"] for r in rows}
        s[mode] = dict(n=len(rows), mib=med(rows, "mib"), snap=med(rows, "snapshot"), later=med(later, "snapshot"),
                       lo=min((r["snapshot"] for r in rows), default=float("nan")),
                       hi=max((r["snapshot"] for r in rows), default=float("nan")),
                       stall=med(rows, "stall"), write=med(rows, "write"),
                       wall=statistics.median(runs.values()) if runs else float("nan"),
                       written=sorted({r["where"] for r in rows}))
    r_all = ratio(s["pinned"]["snap"], s["pageable"]["snap"])
    r_later = ratio(s["pinned"]["later"], s["pageable"]["later"])
    if args.device == "cpu":
        verdict, word = "n/a (CPU dry run: both modes are the same)", "n/a"
    elif r_all is None:
        verdict, word = "n/a (no pageable snapshot time)", "n/a"
    elif r_all <= TARGET:
        verdict, word = f"meets the target ({r_all:.3f} <= {TARGET})", "met"
    else:
        verdict, word = f"misses the target ({r_all:.3f} > {TARGET})", "missed"
    return s, r_all, r_later, verdict, word


def summary(asy, rounds_done, status):
    s, r_all, r_later, _, word = stats(asy)
    return (f"SUMMARY bench_ckpt_staging device={args.device} async={asy} rounds={rounds_done} status={status} "
            f"saves={s['pinned']['n']},{s['pageable']['n']} size_mib={s['pinned']['mib']:.0f} "
            f"pinned_snapshot_s={fr(s['pinned']['snap'])} pageable_snapshot_s={fr(s['pageable']['snap'])} "
            f"ratio={fr(r_all)} ratio_later={fr(r_later)} pinned_stall_s={fr(s['pinned']['stall'])} "
            f"pageable_stall_s={fr(s['pageable']['stall'])} target<={TARGET} verdict={word}")


def report(rounds_done, ending):
    status = "failed" if failed else "budget" if ending else "complete" if rounds_done == args.rounds else "partial"
    if status == "partial":
        ending = "; in progress"
    dev_title = gpu if args.device == "cuda" else f"CPU dry run, {cpu_model}"
    one = " ".join(shlex.quote(rel(c)) for c in command(os.path.join(work, "RUN"), "true")).replace(REPO + os.sep, "")
    lines = [f"# Checkpoint staging, pinned vs pageable: the snapshot's stall (train_gpt {args.deck}, bf16, "
             f"{dev_title})", "",
             f"Command: `validation/bench_ckpt_staging.py {' '.join(shlex.quote(a) for a in sys.argv[1:])}` "
             f"({time.time() - t_start:.0f} s; {rounds_done} of {args.rounds} rounds{ending}). Each round runs "
             f"every pair of checkpoint.async ({', '.join(asyncs)}) and staging (pinned: the default; pageable: "
             "`HPCT_CKPT_STAGING=pageable`), the staging order alternating between rounds; one run (one rank, "
             f"started directly, OMP_NUM_THREADS={OMP}):", "", f"    {one}", "",
             f"(checkpoint.async=false in the foreground runs). A save every {args.every} steps of {args.steps}: "
             f"{EXPECTED} saves per run. Data: {data_note}.", "",
             "## Machine", "",
             f"- GPU (nvidia-smi name, driver): {gpu}",
             f"- train_gpt: {setup.get('device', '(no device line: the CPU)')}",
             f"- CPU: {cpu_model}, {os.cpu_count()} logical CPUs",
             f"- commit: {commit}",
             f"- binary: {rel(train_gpt)}, reads HPCT_CKPT_STAGING: {'yes' if reads_env else 'NO (both modes alike)'}"]
    lines += [f"- {k}: `{v}`" for k, v in sorted(setup.items()) if k != "device"]
    lines += ["", "## Medians per staging mode", "",
              "| checkpoint.async | staging | saves | MiB | snapshot s | min..max s | snapshot s, later saves | "
              "stall s | write s | run wall s | written |", "|---|---|---:|---:|---:|---|---:|---:|---:|---:|---|"]
    results = []
    for asy in asyncs:
        s, r_all, r_later, verdict, _ = stats(asy)
        results.append((asy, r_all, r_later, verdict))
        for mode in MODES:
            m = s[mode]
            lines.append(f"| {asy} | {mode} | {m['n']} | {m['mib']:.0f} | {fr(m['snap'])} | {fr(m['lo'])}.."
                         f"{fr(m['hi'])} | {fr(m['later'])} | {fr(m['stall'])} | {m['write']:.3f} | {m['wall']:.1f} | "
                         f"{', '.join(m['written'])} |")
    lines += ["", "snapshot: rank 0's copy of the parameters and optimizer state into the host staging slabs (the log "
              "line's \"snapshot\"); later saves: without each run's first save; stall: the step loop's whole stall "
              "(background: the snapshot and any wait for the previous save; foreground: the write too); run wall: "
              "the whole train_gpt run, start-up (and the pinned slabs' registration) included.", "",
              f"## Pinned / pageable and the target (<= {TARGET})", "",
              "| checkpoint.async | snapshot pinned / pageable | later saves | verdict |", "|---|---:|---:|---|"]
    lines += [f"| {asy} | {fr(r)} | {fr(rl)} | {v} |" for asy, r, rl, v in results]
    lines += ["", "## Every save", "",
              "| round | checkpoint.async | staging | run order | step | written | snapshot s | stall s | write s |",
              "|---:|---|---|---:|---:|---|---:|---:|---:|"]
    lines += [f"| {r['round']} | {r['async']} | {r['mode']} | {r['order']} | {r['step']} | {r['where']} | "
              f"{r['snapshot']:.3f} | {r['stall']:.3f} | {r['write']:.3f} |" for r in records]
    lines += [""] + [summary(asy, rounds_done, status) for asy in asyncs]
    if args.report:
        with open(args.report, "w") as f:
            f.write("\n".join(lines) + "\n")
    return lines


rounds_done, ending, failed, longest = 0, "", None, 0.0
for rnd in range(1, args.rounds + 1):
    elapsed = time.time() - t_start
    if args.budget > 0 and rnd > 1 and elapsed + longest > args.budget:
        ending = f"; round {rnd} not started: {elapsed:.0f} s + {longest:.0f} s > --budget {args.budget:g}"
        print(f"round {rnd}: not started (budget: {elapsed:.0f} s spent, a round takes up to {longest:.0f} s)",
              flush=True)
        break
    order = MODES if rnd % 2 == 1 else MODES[::-1]
    t_round, got, k = time.time(), [], 0
    try:
        for asy in asyncs:
            for mode in order:
                k += 1
                left = args.budget - (time.time() - t_start) if args.budget > 0 else float("inf")
                timeout = min(args.timeout, max(left, 1.0))
                wall, saves = run(rnd, asy, mode, timeout, budget_cap=left < args.timeout)
                for i, sv in enumerate(saves):
                    got.append(dict(sv, round=rnd, order=k, first=(i == 0), wall=wall, where=sv["mode"], mode=mode,
                                    **{"async": asy}))
    except OutOfBudget as e:
        ending = f"; round {rnd} cut short by the budget and left out"
        print(f"round {rnd}: {e}; the round is left out", flush=True)
        break
    except RunFailed as e:
        failed = str(e)
        ending = f"; FAILED in round {rnd}: {failed.splitlines()[0]}"
        print(f"bench_ckpt_staging.py: {failed}", file=sys.stderr, flush=True)
        break
    records += got
    rounds_done = rnd
    longest = max(longest, time.time() - t_round)
    parts = []
    for asy in asyncs:
        for mode in order:
            snaps = " ".join(f"{r['snapshot']:.3f}" for r in got if r["async"] == asy and r["mode"] == mode)
            parts.append(f"async={asy} {mode}: snapshots {snaps} s")
    print(f"round {rnd} ({time.time() - t_round:.0f} s): " + " | ".join(parts), flush=True)
    report(rounds_done, "")

lines = report(rounds_done, ending)
print("\n".join(lines[lines.index("## Medians per staging mode"):]))
print(f"run logs: {work}" + (f"; report: {args.report}" if args.report else ""))
if failed or not records:
    sys.exit(1)
