#!/usr/bin/python3
"""CPU training-step benchmark of the GPT: hpctrain fp32 and bf16 against PyTorch, side by side in one run
(docs/performance.md "Benchmark rules").

Model: inputs/bench_gpt.toml (L4 C256 NH4 T256 B8, byte vocabulary, AdamW, grad clip 1.0). Configurations, each in
its own process, all on --threads threads and one rank:
  hpctrain fp32                 build/apps/train_gpt (train.precision=fp32)
  hpctrain bf16                 the same with --set train.precision=bf16 (bf16 activations and GEMMs, fp32 masters,
                                optimizer and gradient accumulation; docs/precision.md)
  PyTorch 2 eager fp32 / eager bf16 autocast / compile fp32 / compile bf16 autocast
                                PyPI's current torch in a venv this script creates once and caches
                                (validation/torch_venv.py; --skip-torch2 leaves them out, e.g. offline or in CI)
  PyTorch 1.13 eager fp32       Debian's python3-torch through /usr/bin/python3
The PyTorch model is validation/torch_models.GPT (validation/torch_step_bench.py times its step). Every round runs
every configuration once, in that order; a round's figure is the median of the steps after --warmup; the table shows
the median of the round medians and their min..max. A configuration that fails (e.g. a train_gpt that rejects bf16 on
the CPU) is reported with its reason, and the others go on.
Ratios: hpctrain bf16 (and fp32) vs the fastest PyTorch configuration. Target (PASS/MISS, printed, not an exit code):
hpctrain bf16 >= 1.3x the fastest PyTorch, judged only on a CPU with AVX-512 BF16 (lscpu flag avx512_bf16).
Memory: activations fp32 vs bf16 from `train_gpt DECK --plan 1 --json` (and the table it prints) and from the first
metrics record of each hpctrain run (activations, peak, rss).
--record writes validation/results/bench_gpt_cpu.md (command, date, CPU model and bf16 flags, torch versions, table,
rounds, ratios, memory).
usage: /usr/bin/python3 validation/bench_gpt.py [--build build] [--threads 2] [--rounds 3] [--steps 40] [--warmup 5]
       [--skip-torch2] [--skip-torch1] [--torch2-python PATH] [--record]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_cpu_common import (ROOT, Row, RowFailed, cpu_info, cpu_line, first_error_line, header,  # noqa: E402
                              ratio_lines, run_rounds, table, torch_rows)

DECK = os.path.join(ROOT, "inputs", "bench_gpt.toml")
TOKENS_PER_STEP = 8 * 256
TARGET = 1.3
UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}


def hpctrain_row(exe, precision, args):
    def run():
        with tempfile.TemporaryDirectory() as out:
            env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
            cmd = [exe, DECK, "--out", out, "--set", f"train.steps={args.steps}",
                   "--set", f"train.precision={precision}"]
            p = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if p.returncode != 0:
                raise RowFailed(f"train_gpt exit {p.returncode}: {first_error_line(p.stderr + p.stdout)}")
            with open(os.path.join(out, "metrics.jsonl")) as f:
                recs = [json.loads(line) for line in f if line.strip()]
            ms = [r["ms"] for r in recs if "ms" in r][args.warmup:]
            if not ms:
                raise RowFailed("no step times in metrics.jsonl")
            res = {"median_ms": statistics.median(ms), "min_ms": min(ms), "max_ms": max(ms)}
            if recs and "memory" in recs[0]:
                res["memory"] = recs[0]["memory"]
            else:  # train.log's "memory per rank: params X MiB | ... | activations X MiB | ..." line
                log = os.path.join(out, "train.log")
                text = open(log).read() if os.path.exists(log) else p.stdout
                m = re.search(r"memory per rank: (.*)", text)
                if m:
                    res["memory"] = {}
                    for part in m.group(1).split("|"):
                        kv = re.match(r"\s*([a-z_ ]+?) ([\d.]+) (B|KiB|MiB|GiB)\b", part)
                        if kv:
                            res["memory"][kv.group(1).replace(" ", "_")] = float(kv.group(2)) * UNITS[kv.group(3)]
        return res
    return run


def find_key(obj, key):
    if isinstance(obj, dict):
        if key in obj and isinstance(obj[key], (int, float)):
            return obj[key]
        for v in obj.values():
            r = find_key(v, key)
            if r is not None:
                return r
    return None


def plan_memory(exe, precision):
    """{'activations': bytes or None, 'total': bytes or None, 'source': str} from `--plan 1 --json`, or an error str."""
    p = subprocess.run([exe, DECK, "--plan", "1", "--json", "--set", f"train.precision={precision}"],
                       capture_output=True, text=True)
    if p.returncode != 0:
        return f"--plan failed: {first_error_line(p.stderr + p.stdout)}"
    js = None
    for line in p.stdout.splitlines():
        if line.startswith("{"):
            try:
                js = json.loads(line)
            except ValueError:
                pass
    res = {"activations": find_key(js, "activations") if js else None,
           "total": find_key(js, "memory_bytes_max_rank") if js else None,
           "precision": (js or {}).get("plan", {}).get("precision"), "source": "json"}
    if res["activations"] is None:  # today's JSON has no per-kind keys: the text table's activations column
        lines = p.stdout.splitlines()
        for i, line in enumerate(lines):
            if "activations" in line and "params" in line:
                cols = line.replace("|", " ").split()
                for row in lines[i + 1:]:
                    vals = re.findall(r"([\d.]+) (KiB|MiB|GiB|B)\b", row)
                    if vals:
                        names = [c for c in cols if c not in ("pp_rank", "tp_rank", "layers")]
                        if "activations" in names and len(vals) == len(names):
                            v, u = vals[names.index("activations")]
                            res["activations"] = float(v) * UNITS[u]
                            res["source"] = "the plan's table (the JSON has no 'activations' key)"
                        break
                break
    return res


def mib(x):
    return f"{x / 2**20:.2f} MiB" if isinstance(x, (int, float)) else "?"


def memory_lines(exe, rows):
    out = []
    plans = {p: plan_memory(exe, p) for p in ("fp32", "bf16")}
    if all(isinstance(v, dict) and v["activations"] for v in plans.values()):
        a32, a16 = plans["fp32"]["activations"], plans["bf16"]["activations"]
        note = "" if a16 != a32 else " (the same: this train_gpt's plan does not size bf16 activations yet)"
        out.append(f"activation memory, --plan 1 (one micro-batch, {plans['bf16']['source']}): fp32 {mib(a32)}, "
                   f"bf16 {mib(a16)}, bf16/fp32 {a16 / a32:.2f}{note}; plan totals fp32 "
                   f"{mib(plans['fp32']['total'])}, bf16 {mib(plans['bf16']['total'])}")
    else:
        out.append(f"activation memory, --plan 1: fp32 {plans['fp32'] if isinstance(plans['fp32'], str) else 'ok'}, "
                   f"bf16 {plans['bf16'] if isinstance(plans['bf16'], str) else 'no activations figure'}")
    for r in rows:
        m = r.extra.get("memory") if r.kind == "hpctrain" else None
        if m:
            out.append(f"memory of the {r.name} run (metrics record, else train.log): " +
                       ", ".join(f"{k} {mib(v)}" for k, v in m.items() if isinstance(v, (int, float))))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--skip-torch2", action="store_true", help="no PyTorch 2.x rows (no venv: offline, CI)")
    ap.add_argument("--skip-torch1", action="store_true", help="no Debian torch 1.13 row")
    ap.add_argument("--torch2-python", help="a python with torch 2.x to use instead of the cached venv")
    ap.add_argument("--record", action="store_true", help="write validation/results/bench_gpt_cpu.md")
    args = ap.parse_args()
    if args.steps - args.warmup < 30:
        sys.exit("error: need at least 30 measured steps after warm-up (--steps - --warmup >= 30)")
    exe = os.path.join(args.build, "apps", "train_gpt")
    data = os.path.join(os.environ.get("HPCT_DATA_DIR", os.path.join(ROOT, "data")), "kjv_train.bin")
    for path, what in ((exe, "build it: scripts/build.sh"), (data, "prepare it: scripts/prepare_data.sh")):
        if not os.path.exists(path):
            sys.exit(f"error: {path} not found; {what}")
    ci = cpu_info()
    print(f"CPU: {cpu_line(ci)}", flush=True)
    rows = [Row("hpctrain fp32", hpctrain_row(exe, "fp32", args), "hpctrain", "fp32"),
            Row("hpctrain bf16", hpctrain_row(exe, "bf16", args), "hpctrain", "bf16")]
    trows, t2 = torch_rows(args, "gpt")
    rows += trows
    run_rounds(rows, args.rounds)
    hp_bf16 = rows[1]
    lines = table(rows, TOKENS_PER_STEP, "tokens/s", hp_bf16 if hp_bf16.ok else rows[0])
    lines += [""] + ratio_lines(rows, "GPT", TARGET, ci)
    lines += [""] + memory_lines(exe, rows)
    print("\n".join(lines))
    if args.record:
        out = os.path.join(ROOT, "validation", "results", "bench_gpt_cpu.md")
        rounds = []
        for r in rows:
            if r.rounds:
                rounds.append(f"{r.name:<30} " + "  ".join(f"{x['median_ms']:.1f} ({x['min_ms']:.0f}..{x['max_ms']:.0f})"
                                                            for x in r.rounds))
        with open(out, "w") as f:
            f.write("\n".join(header("GPT training step on CPU: hpctrain fp32 / bf16 vs PyTorch", ci, rows, t2, args,
                                     "inputs/bench_gpt.toml (L4 C256 NH4 T256 B8 V256, AdamW, clip 1.0; PyTorch: "
                                     "validation/torch_models.GPT, synthetic tokens)")))
            f.write("\n\n```\n" + "\n".join(lines) + "\n```\n\nPer round: median ms/step (min..max of the round's "
                    "steps)\n\n```\n" + "\n".join(rounds) + "\n```\n")
        print(f"recorded in {out}")


if __name__ == "__main__":
    main()
