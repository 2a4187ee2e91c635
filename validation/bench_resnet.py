#!/usr/bin/python3
"""ResNet-20 training-mode forward + loss + backward on 1x28x28, batch 128, on the CPU: hpctrain fp32 and bf16 against
PyTorch, side by side in one run (docs/performance.md "Benchmark rules"). No optimizer step in any configuration (the
SGD update of 0.27 M parameters is negligible next to ~100 ms).

Configurations, each in its own process, all on --threads threads:
  hpctrain fp32                 build/validation/bench_resnet
  hpctrain bf16                 bench_resnet --precision bf16 (bf16 activations and convolutions, fp32 parameters and
                                gradients, BN statistics in fp32). Counted only when the binary's BENCH_RESNET line
                                says `precision=bf16`: an older bench_resnet ignores unknown options and would time fp32
                                Both take the model's default layout (model.memory_format = auto: channels-last where
                                oneDNN runs every convolution; the BENCH_RESNET line names the layout that ran)
  hpctrain fp32 nchw / bf16 nchw
                                the same with --memory-format nchw: what the channels-last activations are worth (not
                                counted for the target)
  PyTorch 2 eager fp32 / eager bf16 autocast / compile fp32 / compile bf16 autocast
                                PyPI's current torch in a venv created once and cached (validation/torch_venv.py;
                                --skip-torch2 leaves them out)
  PyTorch 1.13 eager fp32       Debian's python3-torch (/usr/bin/python3)
The PyTorch model is tests/reference/resnet_models.py's ResNet-20 (the cross-checks' model), timed by
validation/torch_step_bench.py. Rounds alternate every configuration; per round the median of the steps after
--warmup; the table shows the median of the round medians and their min..max. A failing configuration is reported
with its reason, the others go on.
Target (PASS/MISS, printed): hpctrain bf16 >= 1.2x the fastest PyTorch configuration, judged only on a CPU with AVX-512
BF16. With --profile, then bench_resnet's per-kernel profile (--profile 1): as built, with HPCT_CONV=im2col, and in bf16
when that row ran.
usage: /usr/bin/python3 validation/bench_resnet.py [--threads 2] [--rounds 3] [--steps 35] [--warmup 5] [--batch 128]
       [--exe PATH] [--skip-torch2] [--skip-torch1] [--torch2-python PATH] [--profile]
       [--record [FILE.md]] (default validation/results/bench_resnet_cpu.md)"""
import argparse
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_cpu_common import (ROOT, Row, RowFailed, cpu_info, cpu_line, first_error_line, header,  # noqa: E402
                              ratio_lines, run_rounds, table, torch_rows)

TARGET = 1.2
LINE = re.compile(r"^BENCH_RESNET .*median_ms=([\d.]+) min_ms=([\d.]+) max_ms=([\d.]+).*$", re.M)


def bench_cmd(a, precision, memory_format=None):
    cmd = [a.exe, "--batch", str(a.batch), "--iters", str(a.steps - a.warmup), "--warmup", str(a.warmup)]
    return cmd + (["--precision", precision] if precision != "fp32" else []) + \
        (["--memory-format", memory_format] if memory_format else [])


def hpctrain_row(a, precision, memory_format=None):
    def run():
        env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
        p = subprocess.run(bench_cmd(a, precision, memory_format), capture_output=True, text=True, env=env)
        m = LINE.search(p.stdout)
        if p.returncode != 0 or not m:
            raise RowFailed(f"bench_resnet exit {p.returncode}: {first_error_line(p.stderr + p.stdout)}")
        if precision != "fp32" and f"precision={precision}" not in m.group(0):
            raise RowFailed(f"this bench_resnet has no {precision} mode (its line lacks `precision={precision}`; "
                            f"an older binary ignores --precision and would time fp32): {m.group(0)}")
        if memory_format and f"memory_format={memory_format}" not in m.group(0):
            raise RowFailed(f"the model did not run {memory_format}: {m.group(0)}")
        return {"median_ms": float(m.group(1)), "min_ms": float(m.group(2)), "max_ms": float(m.group(3)),
                "line": m.group(0)}
    return run


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=35, help="steps per round and configuration, warm-up included")
    ap.add_argument("--iters", type=int, help="measured steps (the former option): --steps = --iters + --warmup")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--exe", default=os.path.join(ROOT, "build", "validation", "bench_resnet"))
    ap.add_argument("--skip-torch2", action="store_true", help="no PyTorch 2.x rows (no venv: offline, CI)")
    ap.add_argument("--skip-torch1", action="store_true", help="no Debian torch 1.13 row")
    ap.add_argument("--torch2-python", help="a python with torch 2.x to use instead of the cached venv")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--record", nargs="?", const=os.path.join(ROOT, "validation", "results", "bench_resnet_cpu.md"))
    a = ap.parse_args()
    if a.iters:
        a.steps = a.iters + a.warmup
    if a.steps - a.warmup < 30:
        sys.exit("error: need at least 30 measured steps after warm-up (--steps - --warmup >= 30)")
    if not os.path.exists(a.exe):
        sys.exit(f"error: {a.exe} not found; build it: scripts/build.sh")
    ci = cpu_info()
    print(f"CPU: {cpu_line(ci)}", flush=True)
    rows = [Row("hpctrain fp32", hpctrain_row(a, "fp32"), "hpctrain", "fp32"),
            Row("hpctrain bf16", hpctrain_row(a, "bf16"), "hpctrain", "bf16"),
            Row("hpctrain fp32 nchw", hpctrain_row(a, "fp32", "nchw"), "hpctrain nchw", "fp32"),
            Row("hpctrain bf16 nchw", hpctrain_row(a, "bf16", "nchw"), "hpctrain nchw", "bf16")]
    trows, t2 = torch_rows(a, "resnet", extra_args=("--batch", str(a.batch)))
    rows += trows
    run_rounds(rows, a.rounds)
    ref = rows[1] if rows[1].ok else rows[0]
    lines = table(rows, a.batch, "images/s", ref)
    lines += [""] + ratio_lines(rows, "ResNet-20", TARGET, ci)
    print("\n".join(lines))

    profiles = []
    if a.profile:
        env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
        runs = [("fp32, as built (oneDNN convolutions)", "fp32", {}),
                ("fp32, HPCT_CONV=im2col (im2col + OpenBLAS convolutions)", "fp32", {"HPCT_CONV": "im2col"})]
        if rows[1].ok:
            runs.append(("bf16, as built", "bf16", {}))
        for title, prec, extra in runs:
            p = subprocess.run(bench_cmd(a, prec) + ["--profile", "1"], capture_output=True, text=True,
                               env=dict(env, **extra))
            prof = [l for l in p.stdout.splitlines() if l.startswith("PROFILE")]
            profiles.append((title, prof))
            print(f"profile, {title}:\n" + "\n".join(r for r in prof if not r.startswith("PROFILE_ROW")), flush=True)
    ran = [re.search(r"memory_format=(\w+)", r.rounds[-1]["line"]) for r in rows[:2] if r.ok]
    layout = ", ".join(sorted({m.group(1) for m in ran if m})) or "unknown"
    print(f"hpctrain fp32 / bf16 ran in the default layout: {layout}")
    if a.record:
        rounds = [f"{r.name:<30} " + "  ".join(f"{x['median_ms']:.1f} ({x['min_ms']:.0f}..{x['max_ms']:.0f})"
                                               for x in r.rounds) for r in rows if r.rounds]
        with open(a.record, "w") as f:
            f.write("\n".join(header("ResNet-20 training-mode forward + backward on CPU: hpctrain fp32 / bf16 vs "
                                     "PyTorch", ci, rows, t2, a,
                                     f"CIFAR-style ResNet-20 (width 16) on 1x28x28, batch {a.batch}, forward + "
                                     "cross-entropy + backward, no optimizer step; hpctrain: "
                                     f"{os.path.relpath(a.exe, ROOT)} (its default rows in {layout}, the layout "
                                     "model.memory_format = auto chose); PyTorch: "
                                     "tests/reference/resnet_models.py, synthetic images")))
            f.write("\n\n```\n" + "\n".join(lines) + "\n```\n\nPer round: median ms/step (min..max of the round's "
                    "steps)\n\n```\n" + "\n".join(rounds) + "\n```\n")
            for title, prof in profiles:
                f.write(f"\nPer-kernel profile, {title} (bench_resnet --profile 1: ms per step by kernel kind, then "
                        "by op or conv phase and layer shape):\n\n```\n" + "\n".join(prof) + "\n```\n")
        print(f"recorded in {a.record}")


if __name__ == "__main__":
    main()
