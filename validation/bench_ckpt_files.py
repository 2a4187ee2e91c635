#!/usr/bin/python3
"""Checkpoint write bandwidth and files per checkpoint of the three checkpoint.files modes: per_rank (a file per rank,
write_shard), per_node (one file per node, write_shared_shard over the node's ranks) and single (one file, all ranks).

Runs validation/bench_ckpt (the whole protocol: shards, manifests to rank 0, index, commit, barrier) at each np of --nps
for each mode, under mpirun --oversubscribe --bind-to none with OMP_NUM_THREADS=1. Each round runs every (np, mode) once,
the modes alternating, so that the disk's drift hits every mode alike; each run reports the median of its --reps saves;
the table holds the median over the rounds, the spread (min-max) and the ratio to per_rank at the same np. per_node
groups ranks by rank / --ranks-per-node (HPCT_CKPT_RANKS_PER_NODE: one machine stands for several nodes); 0 uses the real
nodes (MPI_COMM_TYPE_SHARED: on one machine the same as single).

What it measures on one machine: the cost of the shared file's protocol (allgather of the pieces, rank 0's HDF5 metadata
for every rank, the offsets broadcast, the checksums gathered) against the per-rank files'; the metadata-server load that per-rank files put on a parallel file system at
scale (what shared files remove) does not show here.

usage: validation/bench_ckpt_files.py [--nps 2,4,8] [--rounds 3] [--size-mib 512] [--reps 3] [--ranks-per-node 2]
                                      [--build build] [--dir DIR] [--report F.md]
  --dir     where the checkpoints go (default BUILD/bench_ckpt_files_tmp; wiped first, removed after)
Prints the markdown table and `SUMMARY bench_ckpt_files ...`."""
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

MODES = ["per_rank", "per_node", "single"]
ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--nps", default="2,4,8")
ap.add_argument("--rounds", type=int, default=3)
ap.add_argument("--size-mib", type=int, default=512)
ap.add_argument("--reps", type=int, default=3)
ap.add_argument("--ranks-per-node", type=int, default=2)
ap.add_argument("--build", default=os.path.join(REPO, "build"))
ap.add_argument("--dir")
ap.add_argument("--report")
args = ap.parse_args()
nps = [int(x) for x in args.nps.split(",") if x.strip()]
if args.rounds < 1 or args.reps < 1 or args.size_mib < 1 or not nps or min(nps) < 1 or args.ranks_per_node < 0:
    ap.error("--rounds, --reps, --size-mib and every np must be >= 1, --ranks-per-node >= 0")
build = os.path.abspath(args.build)
bench = os.path.join(build, "validation", "bench_ckpt")
if not os.access(bench, os.X_OK):
    sys.exit(f"bench_ckpt_files.py: {bench} not found: build it (cmake --build {build} --target bench_ckpt)")
work = os.path.abspath(args.dir or os.path.join(build, "bench_ckpt_files_tmp"))
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
ENV = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
if args.ranks_per_node > 0:
    ENV["HPCT_CKPT_RANKS_PER_NODE"] = str(args.ranks_per_node)
else:
    ENV.pop("HPCT_CKPT_RANKS_PER_NODE", None)
LINE = re.compile(r"^BENCH_CKPT np=(\d+) files_mode=(\w+) files=(\d+) .*write_s=([0-9.]+) fsync_s=([0-9.]+) .*"
                  r"total_s=([0-9.]+) MiB_per_s=([0-9.]+) ", re.M)


def command(np_, mode):
    return ["mpirun", "-np", str(np_), "--oversubscribe", "--bind-to", "none", bench, "--dir", os.path.join(work, "ckpt"),
            "--size-mib", str(args.size_mib), "--reps", str(args.reps), "--files", mode]


def run(cmd, timeout=900):
    p = subprocess.run(cmd, capture_output=True, text=True, errors="replace", env=ENV, timeout=timeout)
    if p.returncode != 0:
        sys.exit(f"bench_ckpt_files.py: `{shlex.join(cmd)}` exited {p.returncode}:\n{(p.stdout + p.stderr)[-3000:]}")
    return p.stdout + p.stderr


samples = {}  # (np, mode) -> list of dict(files, write_s, fsync_s, total_s, mib_s)
t_start = time.time()
for rnd in range(1, args.rounds + 1):
    for np_ in nps:
        # the modes' order turns every round, so that no mode always runs right after another
        for mode in MODES[rnd % 3:] + MODES[:rnd % 3]:
            text = run(command(np_, mode))
            m = LINE.search(text)
            if not m:
                sys.exit(f"bench_ckpt_files.py: no BENCH_CKPT line from np {np_} {mode}:\n{text[-2000:]}")
            s = dict(files=int(m.group(3)), write_s=float(m.group(4)), fsync_s=float(m.group(5)),
                     total_s=float(m.group(6)), mib_s=float(m.group(7)))
            samples.setdefault((np_, mode), []).append(s)
            print(f"round {rnd}: np {np_} {mode:8s} files {s['files']:3d} {s['mib_s']:8.1f} MiB/s", flush=True)
shutil.rmtree(work, ignore_errors=True)


def med(np_, mode, key):
    return statistics.median(s[key] for s in samples[(np_, mode)])


lines = ["# Checkpoint files per save: per_rank vs per_node vs single", "",
         f"Command: `validation/bench_ckpt_files.py {' '.join(sys.argv[1:])}` ({time.time() - t_start:.0f} s). "
         f"{args.size_mib} MiB of f32 per checkpoint, split over the ranks; each run the median of {args.reps} saves "
         f"(validation/bench_ckpt); {args.rounds} rounds, modes alternating; medians over the rounds. per_node: "
         + (f"{args.ranks_per_node} ranks per emulated node (HPCT_CKPT_RANKS_PER_NODE)." if args.ranks_per_node
            else "real nodes (MPI_COMM_TYPE_SHARED).")
         + " files: files one checkpoint creates, index.h5 included.", "",
         "## Machine", ""] + [f"- {k}: {v}" for k, v in machine_info().items()] + [
         f"- disk: {subprocess.run(['df', '-hT', os.path.dirname(work)], capture_output=True, text=True).stdout.splitlines()[-1]}",
         "", "## Results", "",
         "| np | mode | files | MiB/s | spread (MiB/s) | ratio to per_rank | write_s | fsync_s |",
         "|---:|---|---:|---:|---:|---:|---:|---:|"]
summary = ["SUMMARY bench_ckpt_files", f"size_mib={args.size_mib}", f"rounds={args.rounds}"]
for np_ in nps:
    base = med(np_, "per_rank", "mib_s")
    for mode in MODES:
        rates = [s["mib_s"] for s in samples[(np_, mode)]]
        r = med(np_, mode, "mib_s")
        lines.append(f"| {np_} | {mode} | {samples[(np_, mode)][0]['files']} | {r:.1f} | {min(rates):.0f}-{max(rates):.0f} "
                     f"| {r / base:.2f} | {med(np_, mode, 'write_s'):.3f} | {med(np_, mode, 'fsync_s'):.3f} |")
        summary.append(f"np{np_}_{mode}_MiB_per_s={r:.1f}")
lines += ["", "Command of one run: `" + shlex.join(command("N", "MODE")) + "`.", "", " ".join(summary), ""]
print("\n".join(lines[lines.index("## Results"):]))
if args.report:
    with open(args.report, "w") as f:
        f.write("\n".join(lines))
    print(f"report: {args.report}")
