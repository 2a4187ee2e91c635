#!/usr/bin/python3
"""Exposed data-parallel communication, with and without overlap (the data-parallel overlap figure).

Runs train_gpt on inputs/bench_gpt.toml at np 2 (one OpenMP thread per rank on a 2-core machine) with
parallel.overlap = true / false (and ZeRO-1 with overlap), alternating the configurations --rounds times,
and reads each run's PERFORMANCE line: median ms/step and median comm_exposed_ms (the time the step blocks
in the gradient sync after backward, plus the ZeRO parameter allgather). Prints a table and the summary:
  exposed fraction = comm_exposed_ms / ms_step;  hidden = 1 - exposed(overlap) / exposed(no overlap)
usage: validation/dp_overlap.py [--np 2] [--rounds 3] [--steps 40] [--bucket-mb 1] [--record FILE.md]"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import time

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(here)
ap = argparse.ArgumentParser()
ap.add_argument("--np", type=int, default=2)
ap.add_argument("--rounds", type=int, default=3)
ap.add_argument("--steps", type=int, default=40)
ap.add_argument("--bucket-mb", type=float, default=1.0)
ap.add_argument("--exe", default=os.path.join(root, "build", "apps", "train_gpt"))
ap.add_argument("--deck", default=os.path.join(root, "inputs", "bench_gpt.toml"))
ap.add_argument("--record")
a = ap.parse_args()

env = dict(os.environ, OMP_NUM_THREADS=str(max(1, os.cpu_count() // a.np)), OMPI_ALLOW_RUN_AS_ROOT="1",
           OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
configs = {"overlap": ["parallel.overlap=true"], "no overlap": ["parallel.overlap=false"],
           "ZeRO-1 overlap": ["parallel.overlap=true", "parallel.zero=1"]}
perf = re.compile(r"PERFORMANCE (\d+) (\d+) 1 1 \| ([\d.]+) (\d+) (\d+) \S+ \| \S+ \S+ \| ([\d.]+) ([\d.]+)")
results = {k: [] for k in configs}
mem = {}
for r in range(a.rounds):
    for name, sets in configs.items():
        cmd = ["mpirun", "-np", str(a.np), "--oversubscribe", "--bind-to", "none", a.exe, a.deck, "--out",
               f"/tmp/hpct_dp_overlap_{name.replace(' ', '_')}", "--set", "train.micro_batch=4", "--set",
               f"train.steps={a.steps}", "--set", f"parallel.bucket_mb={a.bucket_mb}", "--set", "checkpoint.at_end=false"]
        for s in sets:
            cmd += ["--set", s]
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1200)
        m = perf.search(p.stdout)
        if p.returncode != 0 or not m:
            print(p.stdout[-2000:], p.stderr[-2000:])
            sys.exit(f"FAILED: {name} run exited {p.returncode}")
        ms, exposed = float(m.group(3)), float(m.group(6))
        results[name].append((ms, exposed))
        mm = re.search(r"memory per rank: .*optimizer ([\d.]+ \w+) \(unsharded ([\d.]+ \w+)\)", p.stdout)
        mem[name] = (mm.group(1), mm.group(2)) if mm else ("?", "?")
        bk = re.search(r"gradient sync: (.*)", p.stdout)
        print(f"round {r + 1} {name:15s}: {ms:8.2f} ms/step, comm exposed {exposed:7.2f} ms | {bk.group(1) if bk else ''}",
              flush=True)

lines = [f"# np {a.np}, {os.path.basename(a.deck)} (micro_batch 4, {a.steps} steps, bucket {a.bucket_mb} MiB), "
         f"OMP_NUM_THREADS={env['OMP_NUM_THREADS']}, {a.rounds} alternating rounds; medians over rounds of the runs' medians",
         f"{'configuration':16s} {'ms/step':>9s} {'exposed ms':>11s} {'exposed frac':>13s} {'optimizer/rank':>15s}"]
summary = {}
for name in configs:
    ms = statistics.median(x[0] for x in results[name])
    ex = statistics.median(x[1] for x in results[name])
    summary[name] = (ms, ex)
    lines.append(f"{name:16s} {ms:9.2f} {ex:11.2f} {ex / ms:13.3f} {mem[name][0]:>15s}")
on, off = summary["overlap"], summary["no overlap"]
hidden = 1 - on[1] / off[1] if off[1] > 0 else float("nan")
lines.append(f"SUMMARY dp_overlap np={a.np} exposed_frac_overlap={on[1] / on[0]:.3f} "
             f"exposed_frac_no_overlap={off[1] / off[0]:.3f} hidden={hidden:.3f} speedup={off[0] / on[0]:.3f} "
             f"zero1_optimizer={mem['ZeRO-1 overlap'][0]} unsharded={mem['overlap'][1]}")
print("\n".join(lines))
if a.record:
    with open(a.record, "w") as f:
        f.write(f"# Exposed data-parallel communication, with and without overlap (CPU)\n\n")
        f.write(f"- Command: `/usr/bin/python3 validation/dp_overlap.py --np {a.np} --rounds {a.rounds} "
                f"--steps {a.steps} --bucket-mb {a.bucket_mb} --record {a.record}`\n")
        f.write(f"- Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; machine: 2-core VM (AMD EPYC), "
                f"Open MPI 4.1.4, Release build\n\n```\n" + "\n".join(lines) + "\n```\n")
