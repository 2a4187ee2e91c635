#!/usr/bin/python3
"""ResNet-20 training-mode forward + loss + backward on 1x28x28, batch 128: hpctrain (build/validation/bench_resnet)
vs PyTorch (Debian's torch, the same model as tests/reference/resnet_reference.py), both pinned to the same threads,
alternated --rounds times, each round the median of --iters steps after warm-up (docs/performance.md). No optimizer step in
either (the SGD update of 0.27 M parameters is negligible next to ~100+ ms).
With --profile, then the per-kernel profile of our step (bench_resnet --profile 1) twice: as built (oneDNN convolutions
when found) and with HPCT_CONV=im2col (the im2col + OpenBLAS convolutions that preceded them), both into the record.
usage: validation/bench_resnet.py [--threads 2] [--rounds 3] [--iters 30] [--exe PATH] [--profile] [--record FILE.md]"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import time

here = os.path.dirname(os.path.abspath(__file__))
ap = argparse.ArgumentParser()
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--rounds", type=int, default=3)
ap.add_argument("--iters", type=int, default=30)
ap.add_argument("--batch", type=int, default=128)
ap.add_argument("--exe", default=os.path.join(os.path.dirname(here), "build", "validation", "bench_resnet"))
ap.add_argument("--record")
ap.add_argument("--profile", action="store_true")
a = ap.parse_args()

TORCH = r'''
import os, sys, time, statistics, torch, torch.nn.functional as F
sys.argv = ["x", "/dev/null"]
torch.set_num_threads(%d)
depth, w, H, K, B, n, Cin = 20, 16, 28, 10, %d, 3, 1
import torch.nn as nn
ref = "%s"
sys.path.insert(0, ref)
from resnet_models import build_resnet  # the shared PyTorch model of the cross-checks
net = build_resnet(False, depth, w, Cin, K).train()
x = torch.randn(B, 1, H, H); y = torch.randint(0, K, (B,))
ms = []
for it in range(5 + %d):
    t = time.perf_counter()
    net.zero_grad(set_to_none=False)
    F.cross_entropy(net(x), y).backward()
    if it >= 5: ms.append((time.perf_counter() - t) * 1e3)
ms.sort()
print("TORCH median_ms=%%.2f min_ms=%%.2f max_ms=%%.2f" %% (ms[len(ms)//2], ms[0], ms[-1]))
''' % (a.threads, a.batch, os.path.join(os.path.dirname(here), "tests", "reference"), a.iters)

env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
ours, theirs = [], []
for r in range(a.rounds):
    p = subprocess.run([a.exe, "--batch", str(a.batch), "--iters", str(a.iters)], capture_output=True, text=True,
                       env=env, check=True)
    m = re.search(r"median_ms=([\d.]+) min_ms=([\d.]+) max_ms=([\d.]+)", p.stdout)
    ours.append(tuple(map(float, m.groups())))
    p = subprocess.run(["/usr/bin/python3", "-c", TORCH], capture_output=True, text=True, env=env, check=True)
    m = re.search(r"median_ms=([\d.]+) min_ms=([\d.]+) max_ms=([\d.]+)", p.stdout)
    theirs.append(tuple(map(float, m.groups())))
    print(f"round {r + 1}: hpctrain {ours[-1][0]:.1f} ms, PyTorch {theirs[-1][0]:.1f} ms", flush=True)
o = statistics.median(x[0] for x in ours)
t = statistics.median(x[0] for x in theirs)
line = (f"SUMMARY bench_resnet depth=20 batch={a.batch} threads={a.threads} hpctrain_ms={o:.2f} "
        f"({min(x[1] for x in ours):.1f}..{max(x[2] for x in ours):.1f}) pytorch_ms={t:.2f} "
        f"({min(x[1] for x in theirs):.1f}..{max(x[2] for x in theirs):.1f}) speedup={t / o:.3f} "
        f"hpctrain_images_per_s={a.batch / o * 1e3:.0f}")
print(line)
profiles = []
if a.profile:
    for title, extra in (("as built (oneDNN convolutions)", {}), ("HPCT_CONV=im2col (im2col + OpenBLAS convolutions)",
                                                                   {"HPCT_CONV": "im2col"})):
        p = subprocess.run([a.exe, "--batch", str(a.batch), "--iters", str(a.iters), "--profile", "1"],
                           capture_output=True, text=True, env=dict(env, **extra), check=True)
        rows = [l for l in p.stdout.splitlines() if l.startswith("PROFILE")]
        profiles.append((title, rows))
        print(f"profile, {title}:\n" + "\n".join(r for r in rows if not r.startswith("PROFILE_ROW")), flush=True)
if a.record:
    with open(a.record, "w") as f:
        f.write("# ResNet-20 training-mode forward + backward, hpctrain vs PyTorch (CPU)\n\n")
        exe = "" if a.exe == ap.get_default("exe") else f" --exe {a.exe}"
        f.write(f"- Command: `/usr/bin/python3 validation/bench_resnet.py --threads {a.threads} --rounds {a.rounds} "
                f"--iters {a.iters}{exe}{' --profile' if a.profile else ''} --record {a.record}`\n")
        f.write(f"- Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; machine: 2-core VM (AMD EPYC, AVX-512), "
                "Debian torch 1.13.1 (oneDNN 2.6.3), OpenMP OpenBLAS; no optimizer step in either program.\n\n```\n")
        for i, (x, y) in enumerate(zip(ours, theirs)):
            f.write(f"round {i + 1}: hpctrain {x[0]:.2f} ms ({x[1]:.1f}..{x[2]:.1f}), PyTorch {y[0]:.2f} ms "
                    f"({y[1]:.1f}..{y[2]:.1f})\n")
        f.write(line + "\n```\n")
        for title, rows in profiles:
            f.write(f"\nPer-kernel profile, {title} (bench_resnet --profile 1: ms per step by kernel kind, then by op or "
                    "conv phase and layer shape):\n\n```\n" + "\n".join(rows) + "\n```\n")
