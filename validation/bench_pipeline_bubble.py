#!/usr/bin/env python3
"""Pipeline bubble: plain vs interleaved 1F1B, measured against (p - 1) / (v m + p - 1).

Runs validation/bench_pipeline (synthetic stages: a chunk's forward F / v, backward 2F / v, so every rank computes
m * 3F per step whatever v) under mpirun at p ranks for each virtual-stage count, transport and busy mode, and prints
one table row per run: the theory, the measured idle fraction 1 - compute / total (per step the mean over ranks; the
median and the best over the timed steps), the difference in percentage points, and the step time against the ideal
(v m + p - 1) 3F / v. Target: the median within --tolerance-pp (5) points of the theory for every sleep run; spin
runs are reported, not judged (oversubscribed spinning ranks share the cores; see the results file). Ends in a
greppable verdict: VALID or FAILED: <what>.

  /usr/bin/python3 validation/bench_pipeline_bubble.py [--build build] [--np 4] [--micro 8] [--virtual 1 2]
      [--transport mpi link] [--busy sleep spin] [--fwd-ms 40] [--steps 5] [--report results/pipeline_interleaved_cpu.md]
"""
import argparse
import datetime
import json
import os
import platform
import shlex
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def cpu_model():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except (OSError, subprocess.CalledProcessError):
        pass
    return platform.processor() or "unknown"


def loadavg():
    try:
        return " ".join(open("/proc/loadavg").read().split()[:3])
    except OSError:
        return "?"


def run_one(args, v, transport, busy):
    exe = os.path.join(args.build, "validation", "bench_pipeline")
    cmd = ["mpirun", "-np", str(args.np), "--oversubscribe", "--bind-to", "none", exe, "--micro", str(args.micro),
           "--virtual", str(v), "--fwd-ms", str(args.fwd_ms), "--transport", transport, "--busy", busy,
           "--steps", str(args.steps)]
    env = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stdout}\n{p.stderr}")
    start = p.stdout.index("{")
    r = json.loads(p.stdout[start:])
    shown = [os.path.relpath(c, ROOT) if c == exe else c for c in cmd]
    r["command"] = " ".join(shlex.quote(c) for c in shown)
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--np", type=int, default=4)
    ap.add_argument("--micro", type=int, default=8)
    ap.add_argument("--virtual", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--transport", nargs="+", default=["mpi", "link"])
    ap.add_argument("--busy", nargs="+", default=["sleep", "spin"])
    ap.add_argument("--fwd-ms", type=float, default=40.0)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--tolerance-pp", type=float, default=5.0)
    ap.add_argument("--report", help="write the markdown table here")
    args = ap.parse_args()

    load_before = loadavg()
    rows, failures = [], []
    for busy in args.busy:
        for transport in args.transport:
            for v in args.virtual:
                r = run_one(args, v, transport, busy)
                med, best = r["bubble_median"], min(r["bubble_mean"])
                diff_pp = 100.0 * (med - r["theory"])
                judged = busy == "sleep"
                ok = abs(diff_pp) <= args.tolerance_pp
                if r["verdict"] != "VALID":
                    failures.append(f"v {v} {transport} {busy}: {r['verdict']}")
                if judged and not ok:
                    failures.append(f"bubble v {v} {transport} {busy} (is {med:.4f}, should be {r['theory']:.4f} "
                                    f"+- {args.tolerance_pp / 100:.2f})")
                rows.append((busy, transport, v, r, med, best, diff_pp,
                             ("PASS" if ok else "MISS") if judged else ("(within)" if ok else "(off)")))
    load_after = loadavg()

    head = (f"| busy | transport | v | slots (rank 0) | theory (p-1)/(vm+p-1) | measured median | best step | "
            f"median - theory (pp) | step ms median (ideal) | target +-{args.tolerance_pp:g} pp |")
    lines = [head, "|" + "---|" * 10]
    for busy, transport, v, r, med, best, diff_pp, verdict in rows:
        lines.append(f"| {busy} | {transport} | {v} | {r['slots']} | {r['theory']:.4f} | {med:.4f} | {best:.4f} | "
                     f"{diff_pp:+.1f} | {r['step_ms_median']:.0f} ({r['ideal_step_ms']:.0f}) | {verdict} |")
    table = "\n".join(lines)
    verdict = "VALID" if not failures else "FAILED: " + "; ".join(failures)
    print(f"pipeline bubble: p {args.np}, m {args.micro}, F {args.fwd_ms:g} ms per rank (F/v per chunk, backward "
          f"twice), {args.steps} timed steps; load average {load_before} before, {load_after} after")
    print(table)
    print(verdict)
    if args.report:
        cmdline = "/usr/bin/python3 validation/bench_pipeline_bubble.py " + " ".join(
            shlex.quote(a) for a in sys.argv[1:] if a != args.report and a != "--report")
        with open(args.report, "w") as f:
            f.write(REPORT.format(date=datetime.date.today().isoformat(), cpu=cpu_model(), cores=os.cpu_count(),
                                  np=args.np, micro=args.micro, fwd=args.fwd_ms, steps=args.steps,
                                  cmdline=cmdline, example=rows[0][3]["command"], table=table, verdict=verdict,
                                  load_before=load_before, load_after=load_after,
                                  total=args.micro * 3 * args.fwd_ms))
    return 0 if not failures else 1


REPORT = """# Pipeline bubble: plain vs interleaved 1F1B (CPU VM)

Machine: {cpu}, {cores} cores; {date}. Load average {load_before} before the runs, {load_after} after
(other work was running on the shared machine).

```
{cmdline}
```

(each row is one `mpirun`, e.g. `{example}`)

p = {np} ranks, m = {micro} micro-batches, F = {fwd:g} ms of forward per rank and micro-batch, backward 2F; with v
chunks per rank each chunk takes F / v and 2F / v, so every rank computes m * 3F = {total:g} ms per step whatever v
and only the schedule changes. Measured bubble = 1 - compute / total per rank (PipelineStats: the window between the
entry and exit barriers), per step the mean over the ranks; median and best of {steps} timed steps after one untimed.

{table}

{verdict}
"""

if __name__ == "__main__":
    sys.exit(main())
