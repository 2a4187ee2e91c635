#!/usr/bin/python3
"""The local scaling-validation campaign in one command: runs, one after the other,
  1. apps/bench_collectives at np 2 and np 4 (every op, 8 B .. 64 MiB, JSON),
  2. validation/equivalence.py (every layout at world 4 and 8 vs serial, restarts across layouts),
  3. validation/scaling.py (strong and weak scaling of train_gpt and train_resnet at R = 1, 2, 4),
  4. validation/perf_model.py (alpha-beta fits of step 1's JSON, predicted vs measured step times of step 3's CSV,
     projection to GPUs),
and writes one markdown report that holds the four reports (tables inline), shows their plots (loss curves of all layouts, throughput
and efficiency vs ranks, busbw vs size with the fits, predicted vs measured) and ends in one verdict: VALID when all
four are VALID, else FAILED naming which. ~4.5 minutes on the 2-core development machine; `--quick` (~30 s: the
tools' quick modes, bench_collectives up to 1 MiB, the model checked against the recorded full scaling CSV) is the
ctest.
usage: validation/campaign_run.py [--quick] [--out DIR] [--report F.md] [--build DIR]"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from campaign import REPO, machine_info, output_dirs  # noqa: E402

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--quick", action="store_true", help="the tools' quick modes (the ctest)")
ap.add_argument("--out", default=os.path.join(REPO, "runs", "campaign"), help="work directory (wiped first)")
ap.add_argument("--report", help="the combined markdown report (each tool's report goes next to it)")
ap.add_argument("--build", default=os.path.join(REPO, "build"), help="build directory holding apps/")
args = ap.parse_args()
out_root, art_dir, stem = output_dirs(args.out, args.report, "campaign")
apps = os.path.join(os.path.abspath(args.build), "apps")
PY = "/usr/bin/python3"
here = os.path.dirname(os.path.abspath(__file__))
ENV = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
steps = []  # (name, command, rc, seconds, verdict line, report path or None)


def run(name, cmd, report=None, timeout=1800):
    t0 = time.time()
    log = os.path.join(out_root, name + ".log")
    with open(log, "w") as f:
        try:
            rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=ENV, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            rc = 124
    dt = time.time() - t0
    text = open(log, errors="replace").read()
    verdicts = re.findall(r"^(VALID.*|FAILED.*)$", text, re.M)
    verdict = verdicts[-1] if verdicts else f"FAILED: no verdict (exit code {rc}; log {log})"
    if rc != 0 and verdict.startswith("VALID"):
        verdict = f"FAILED: exit code {rc} (log {log})"
    steps.append((name, " ".join(cmd), rc, dt, verdict, report))
    print(f"{name:<18} {dt:6.1f} s  {verdict}", flush=True)


def rpath(name):
    return os.path.join(art_dir, f"{stem}_{name}.md")


bench = os.path.join(apps, "bench_collectives")
max_bytes = "1M" if args.quick else "64M"
jsons = []
for np_ in (2, 4):
    j = os.path.join(out_root, f"collectives_np{np_}.json")
    jsons.append(j)
    run(f"collectives_np{np_}", ["mpirun", "-np", str(np_), "--oversubscribe", "--bind-to", "none", bench,
                                 "--max-bytes", max_bytes, "--json", j])
merged = os.path.join(art_dir, f"{stem}_collectives.json")
runs = [json.load(open(j)) for j in jsons if os.path.exists(j)]  # perf_model.py's merged format
with open(merged, "w") as f:
    json.dump({"tool": "bench_collectives (merged by validation/campaign_run.py)",
               "commands": [c for n, c, *_ in steps if n.startswith("collectives")], "runs": runs}, f, indent=1)
quick = ["--quick"] if args.quick else []
run("equivalence", [PY, os.path.join(here, "equivalence.py"), *quick, "--out", os.path.join(out_root, "equivalence"),
                    "--report", rpath("equivalence"), "--train-gpt", os.path.join(apps, "train_gpt"),
                    "--train-resnet", os.path.join(apps, "train_resnet"), "--ckpt-tool", os.path.join(apps, "ckpt_tool")],
    rpath("equivalence"))
run("scaling", [PY, os.path.join(here, "scaling.py"), *quick, "--out", os.path.join(out_root, "scaling"),
                "--report", rpath("scaling"), "--train-gpt", os.path.join(apps, "train_gpt"),
                "--train-resnet", os.path.join(apps, "train_resnet")], rpath("scaling"))
# --quick: a 5-step single-run scaling CSV is too noisy (+-25%) for the model's 25% check, so the quick chain checks
# the tools against the recorded full campaign's scaling CSV (with its calibration runs); the full campaign uses its own
# fresh CSV.
scaling_csv = (os.path.join(REPO, "validation", "results", "campaign_cpu_scaling.csv") if args.quick
               else os.path.join(art_dir, f"{stem}_scaling.csv"))
run("perf_model", [PY, os.path.join(here, "perf_model.py"), "--collectives", merged, "--scaling", scaling_csv,
                   "--bench", bench, "--train-gpt", os.path.join(apps, "train_gpt"), "--report", rpath("perf_model")],
    rpath("perf_model"))

bad = [s for s in steps if not s[4].startswith("VALID")]
final = "VALID" if not bad else f"FAILED: {', '.join(s[0] for s in bad)} ({bad[0][4]})"
if args.report:
    machine = machine_info()
    md = ["# Scaling-validation campaign" + (" (quick)" if args.quick else ""), "",
          "One command: `validation/campaign_run.py " + " ".join(sys.argv[1:]) + "`. Each tool drives the apps "
          "through their contracts (docs/contracts.md) and writes its own report next to this one.", "", "## Machine", ""]
    md += [f"- {k}: {v}" for k, v in machine.items()] + ["", "## Steps", "",
                                                           "| step | time (s) | verdict | report |", "|---|---:|---|---|"]
    for name, cmd, rc, dt, verdict, rep in steps:
        link = f"[{os.path.basename(rep)}]({os.path.basename(rep)})" if rep and os.path.exists(rep) else "—"
        md.append(f"| {name} | {dt:.1f} | {verdict} | {link} |")
    md += ["", f"Collectives (bench_collectives JSON, np 2 and 4): `{os.path.basename(merged)}`; every command and "
           f"log: `{out_root}`.", "", "## Plots", ""]
    for name, title in (("equivalence", "Loss curves of every layout vs serial"),
                        ("scaling", "Throughput and efficiency vs ranks"),
                        ("perf_model", "busbw vs size (measured and fitted), predicted vs measured step time")):
        png = os.path.join(art_dir, f"{stem}_{name}.png")
        if os.path.exists(png):
            md += [f"### {title}", "", f"![{name}]({os.path.basename(png)})", ""]
    # each tool's report inline (headings demoted one level, its plot links kept): one file with every table
    for name, cmd, rc, dt, verdict, rep in steps:
        if rep and os.path.exists(rep):
            body = open(rep).read().splitlines()
            md += [f"## {name} (from {os.path.basename(rep)})", ""]
            md += [("#" + line if line.startswith("#") else line) for line in body[1:]] + [""]
    md += ["## Verdict", "", final, ""]
    with open(args.report, "w") as f:
        f.write("\n".join(md))
    print(f"report: {args.report}")
print(final)
sys.exit(0 if final == "VALID" else 1)
