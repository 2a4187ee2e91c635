#!/usr/bin/python3
"""Memory benchmark: the plan (`train_gpt DECK --plan 4 --json`, formulas only) against the memory record of real runs
(the tagged slabs, metrics.jsonl's first record) and the measured peak resident set (rss), for the GPT at np 4 with
ZeRO 0, 1, 2 and 3, with and without tensor parallelism (docs/contracts.md, "--plan" and the memory record).

For each layout it prints and writes every kind planned and recorded, the largest plan-vs-record difference over the
kinds (the ctest memory_record tests hold it within 5%; it is exact by construction), the peak, rss and what rss holds
beyond the tagged peak (the process and its libraries: the MPI and OpenMP runtimes, oneDNN, the data shards), and the
gradient, optimizer and parameter memory per rank relative to ZeRO-0 (ZeRO-1: optimizer / DP; ZeRO-2: gradients as the
ring of buckets + the tied wte + the shard instead of the whole slab; ZeRO-3: the parameters as the fp32 masters'
shard, the gather slots and the kept wte counted as comm).

The model: gpt_demo.toml widened (6 layers, 384 channels, 256 tokens: 10.8 M parameters), 2 steps per run, buckets of
parallel.bucket_mb (default 1). Writes the table (markdown) and a bar plot (PNG) next to --report.

usage: validation/bench_memory.py [--report validation/results/bench_memory_cpu.md] [--np 4] [--bucket-mb 1]
                                  [--train-gpt EXE] [--out DIR]"""
import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from campaign import REPO, machine_info, output_dirs, plan_json, set_args  # noqa: E402

KINDS = ["params", "grads", "optimizer", "comm", "activations", "workspace", "ckpt_staging"]
MODEL = ["model.n_layer=6", "model.n_head=6", "model.n_embd=384", "model.seq_len=256", "train.global_batch=16",
         "train.micro_batch=2", "sample.tokens=0", "train.eval_every=0", "checkpoint.at_end=false", "log.every=1"]
ENV = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")

ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--np", type=int, default=4, help="ranks (default 4)")
ap.add_argument("--bucket-mb", type=float, default=1.0, help="parallel.bucket_mb (default 1)")
ap.add_argument("--train-gpt", default=os.path.join(REPO, "build", "apps", "train_gpt"))
ap.add_argument("--deck", default=os.path.join(REPO, "inputs", "gpt_demo.toml"))
ap.add_argument("--out", default=os.path.join(REPO, "runs", "bench_memory"), help="work directory (wiped first)")
ap.add_argument("--report", help="write the markdown report here (the PNG goes next to it)")
args = ap.parse_args()
out_root, art_dir, stem = output_dirs(args.out, args.report, "bench_memory")


def planned(sets):
    return plan_json(args.train_gpt, args.deck, args.np, MODEL + sets, ENV)["memory"]


def recorded(name, sets):
    out = os.path.join(out_root, name)
    cmd = ["mpirun", "-np", str(args.np), "--oversubscribe", "--bind-to", "none", args.train_gpt, args.deck,
           "--out", out] + set_args(MODEL + sets + ["train.steps=2"])
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=ENV)
    if p.returncode != 0:
        sys.exit(f"FAILED: {' '.join(cmd)} exited {p.returncode}: {p.stderr[-800:]}")
    with open(os.path.join(out, "metrics.jsonl")) as f:
        recs = [json.loads(l) for l in f]
    mem = recs[0]["memory"]
    mem["rss_last"] = recs[-1]["memory"]["rss"]
    return mem


layouts = []
for tp in (1, 2):
    for zero in (0, 1, 2, 3):
        name = f"tp{tp}_zero{zero}"
        sets = [f"parallel.tp={tp}", f"parallel.zero={zero}", f"parallel.bucket_mb={args.bucket_mb}"]
        print(f"== {name}", flush=True)
        layouts.append(dict(name=name, tp=tp, dp=args.np // tp, zero=zero, plan=planned(sets),
                            record=recorded(name, sets)))


def mib(x):
    return f"{x / 2**20:.2f}"


rows = []
header = ("| layout | " + " | ".join(f"{k} plan / record (MiB)" for k in KINDS) +
          " | peak plan / record (MiB) | max diff | rss (MiB) | rss - peak (MiB) | params vs ZeRO-0 | grads vs ZeRO-0 | "
          "optimizer vs ZeRO-0 |")
rows.append(header)
rows.append("|" + "---|" * (len(KINDS) + 8))
base = {}
for L in layouts:
    p, r = L["plan"], L["record"]
    worst = max(abs(p[k] - r[k]) / max(r[k], 1) for k in KINDS + ["peak"])
    L["worst"] = worst
    if L["zero"] == 0:
        base[L["tp"]] = r
    b = base[L["tp"]]
    rows.append(f"| dp {L['dp']} tp {L['tp']} ZeRO-{L['zero']} | " +
                " | ".join(f"{mib(p[k])} / {mib(r[k])}" for k in KINDS) +
                f" | {mib(p['peak'])} / {mib(r['peak'])} | {100 * worst:.3f}% | {mib(r['rss'])} | "
                f"{mib(r['rss'] - r['peak'])} | {r['params'] / b['params']:.3f} | {r['grads'] / b['grads']:.3f} | "
                f"{r['optimizer'] / b['optimizer']:.3f} |")
table = "\n".join(rows)
print(table)

import matplotlib  # noqa: E402
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

fig, ax = plt.subplots(figsize=(13, 4.5))
x = range(len(layouts))
w = 0.27
ax.bar([i - w for i in x], [L["plan"]["peak"] / 2**20 for L in layouts], w, label="plan peak (--plan, formulas)")
ax.bar(list(x), [L["record"]["peak"] / 2**20 for L in layouts], w, label="record peak (tagged slabs)")
ax.bar([i + w for i in x], [L["record"]["rss"] / 2**20 for L in layouts], w, label="rss (peak resident set)")
for i, L in enumerate(layouts):
    ax.text(i - w, L["plan"]["peak"] / 2**20,
            f"p {mib(L['record']['params'])}\ng {mib(L['record']['grads'])}\no {mib(L['record']['optimizer'])}",
            ha="center", va="bottom", fontsize=7)
ax.set_xticks(list(x), [f"dp{L['dp']} tp{L['tp']}\nZeRO-{L['zero']}" for L in layouts])
ax.set_ylabel("MiB per rank (max over ranks)")
ax.set_title(f"GPT (6 x 384, 10.8 M parameters) at np {args.np}: plan vs record vs rss (p: params, g: grads, "
             "o: optimizer, MiB)")
ax.legend(fontsize=8)
fig.tight_layout()
png = os.path.join(art_dir, stem + ".png")
fig.savefig(png, dpi=110)

machine = machine_info()
cmd = "/usr/bin/python3 validation/bench_memory.py " + " ".join(sys.argv[1:])
md = [f"# Memory: plan vs record vs rss, GPT at np {args.np}", "",
      f"Command: `{cmd}` (mpirun -np {args.np} --oversubscribe, OMP_NUM_THREADS=1). Machine: " +
      ", ".join(f"{k} {v}" for k, v in machine.items()), "",
      f"Model: {args.deck} with {' '.join(MODEL)}; parallel.bucket_mb = {args.bucket_mb}; 2 steps per layout. "
      "Each figure is the maximum over ranks (the memory record's rule); plan = `train_gpt DECK --plan "
      f"{args.np} --json` with the same settings.", "", table, "",
      f"![plan vs record vs rss]({os.path.basename(png)})", ""]
if args.report:
    with open(args.report, "w") as f:
        f.write("\n".join(md))
bad = [L["name"] for L in layouts if L["worst"] > 0.05]
print(f"FAILED: plan and record differ by more than 5% for {bad}" if bad else
      f"VALID: plan within {100 * max(L['worst'] for L in layouts):.3f}% of the record for every kind and layout")
sys.exit(1 if bad else 0)
