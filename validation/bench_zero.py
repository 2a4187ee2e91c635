#!/usr/bin/python3
"""ZeRO benchmark: the data-parallel communication volume each ZeRO stage moves per step, counted by the communicators
(metrics.jsonl's comm_bytes, rank 0) and converted to bus bytes the nccl-tests way, against the formulas; and the
step time and exposed communication of each stage (docs/parallelism.md, "Data parallelism").

Formulas, per step, for n ranks, m micro-batches per step, G bytes of fp32 gradients (the buckets tile the gradient
slab) and W bytes of them that ZeRO-2 keeps whole (the GPT's tied wte):
  ZeRO-0  allreduce G                                  bus = 2 (n-1)/n G
  ZeRO-1  reduce-scatter G, allgather G (parameters)   bus = 2 (n-1)/n G          (the same volume as ZeRO-0)
  ZeRO-2  reduce-scatter m (G - W) + W, allgather G    bus = (n-1)/n (m (G - W) + W + G)
  ZeRO-3  reduce-scatter as ZeRO-2; allgather          bus = (n-1)/n (m (G - W) + W + A)
          A = W + (G - W) + (m - 1) (G - W - B) + m (L - 1) B
so at one micro-batch ZeRO-2 moves what ZeRO-0 and ZeRO-1 move, and at m micro-batches its reduce-scatter is m times
ZeRO-1's (less the pinned W). ZeRO-3 (parallel/param_gather.hpp: L blocks of B bytes, two alternating slots) gathers
in the first forward everything (W, kept for the step, and the ring G - W); each backward gathers L - 1 blocks (the
head's LayerNorm and the last block are still in the slots; the position embedding is not read); each later forward
everything but block 0 (still in its slot). The textbook ZeRO-3 (every layer gathered again for its backward) moves
1.5x ZeRO-1's bytes at one micro-batch; the table gives both. Scalars (the loss and norm sums, 8 bytes each) ride
along and are left out of the comparison (< 0.01%).

The model: gpt_demo.toml widened (6 layers, 384 channels, 256 tokens: 10.8 M parameters), global batch 16, micro-batch
16 / n (one micro-batch per step) or 4 / n (four), 6 steps, medians over the steps after the first. At np 2 the
targets are ZeRO-2 within 5% and ZeRO-3 within 25% of ZeRO-1's step time at one micro-batch; ZeRO-3 runs with and
without prefetch (parallel.prefetch), the exposed communication column showing what the prefetch hides; np 4 runs
oversubscribed on this machine's cores (figures only).

usage: validation/bench_zero.py [--report validation/results/bench_zero_cpu.md] [--np 2 4] [--steps 6] [--repeat 1]
                                [--train-gpt EXE] [--out DIR]"""
import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from campaign import REPO, machine_info, output_dirs, plan_json, set_args  # noqa: E402

MODEL = ["model.n_layer=6", "model.n_head=6", "model.n_embd=384", "model.seq_len=256", "train.global_batch=16",
         "sample.tokens=0", "train.eval_every=0", "checkpoint.at_end=false", "log.every=1"]
ENV = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")

ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--np", type=int, nargs="+", default=[2, 4])
ap.add_argument("--steps", type=int, default=6)
ap.add_argument("--repeat", type=int, default=1, help="runs of each stage, alternating the stages (median of medians)")
ap.add_argument("--train-gpt", default=os.path.join(REPO, "build", "apps", "train_gpt"))
ap.add_argument("--deck", default=os.path.join(REPO, "inputs", "gpt_demo.toml"))
ap.add_argument("--out", default=os.path.join(REPO, "runs", "bench_zero"), help="work directory (wiped first)")
ap.add_argument("--report", help="write the markdown report here")
args = ap.parse_args()
out_root, art_dir, stem = output_dirs(args.out, args.report, "bench_zero")


def run(name, np_, sets):
    out = os.path.join(out_root, name)
    cmd = ["mpirun", "-np", str(np_), "--oversubscribe", "--bind-to", "none", args.train_gpt, args.deck, "--out",
           out] + set_args(MODEL + sets + [f"train.steps={args.steps}"])
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=ENV)
    if p.returncode != 0:
        sys.exit(f"FAILED: {' '.join(cmd)} exited {p.returncode}: {p.stderr[-800:]}")
    with open(os.path.join(out, "metrics.jsonl")) as f:
        recs = [json.loads(l) for l in f][1:]  # the first step warms up
    vol = recs[-1]["comm_bytes"]
    if any(r["comm_bytes"] != vol for r in recs):
        print(f"  note: {name}: comm_bytes differ between steps")
    return dict(ms=statistics.median(r["ms"] for r in recs),
                exposed=statistics.median(r["comm_exposed_ms"] for r in recs), vol=vol)


# G: the fp32 gradients the buckets tile (the ZeRO-0 plan's grads: the gradient slab); W: the tied wte
base_plan = plan_json(args.train_gpt, args.deck, 1, MODEL + ["parallel.zero=0"], ENV)
G = base_plan["memory"]["grads"]
cfg_vocab, cfg_embd, cfg_seq, cfg_layers = 256, 384, 256, 6  # gpt_demo's byte-level vocabulary, padded; MODEL's
W = ((cfg_vocab + 127) // 128 * 128) * cfg_embd * 4
C = cfg_embd
B = (12 * C * C + 13 * C) * 4  # a block: ln1, qkv, proj, ln2, fc, mlp.proj with biases
if W + cfg_seq * C * 4 + cfg_layers * B + 2 * C * 4 != G:
    sys.exit(f"FAILED: the model's layout is not the one the ZeRO-3 formula assumes (G = {G})")
STAGES = [("ZeRO-0", 0, []), ("ZeRO-1", 1, []), ("ZeRO-2", 2, []), ("ZeRO-3", 3, []),
          ("ZeRO-3 no prefetch", 3, ["parallel.prefetch=false"])]
rows, failures = [], []
for np_ in args.np:
    for micro in (1, 4):
        mb = 16 // (np_ * micro)
        if mb < 1:
            continue
        res = {}
        reps = {label: [] for label, _, _ in STAGES}
        for k in range(args.repeat):  # the stages alternate, so drifts of the machine hit them alike
            for label, zero, extra in STAGES:
                name = f"np{np_}_m{micro}_{label.replace(' ', '_')}_run{k}"
                print(f"== {name}", flush=True)
                reps[label].append(run(name, np_, [f"parallel.zero={zero}", f"train.micro_batch={mb}"] + extra))
        for label, zero, _ in STAGES:
            runs = reps[label]
            r = dict(ms=statistics.median(x["ms"] for x in runs), exposed=statistics.median(x["exposed"] for x in runs),
                     vol=runs[0]["vol"], spread=(min(x["ms"] for x in runs), max(x["ms"] for x in runs)))
            v = r["vol"]
            f = (np_ - 1) / np_
            bus = 2 * f * v["allreduce"] + f * (v["reduce_scatter"] + v["allgather"])
            gathers = G if zero < 3 else W + (G - W) + (micro - 1) * (G - W - B) + micro * (cfg_layers - 1) * B
            want = 2 * f * G if zero < 2 else f * (micro * (G - W) + W + gathers)
            r.update(bus=bus, want=want, ratio=bus / want)
            res[label] = r
            if abs(bus / want - 1) > 1e-3:
                failures.append(f"np {np_} {micro} micro-batches {label}: bus bytes {bus:.0f} vs formula {want:.0f}")
        for label, _, _ in STAGES:
            r = res[label]
            rows.append(f"| {np_} | {micro} | {label} | {r['vol']['allreduce'] / 2**20:.3f} | "
                        f"{r['vol']['reduce_scatter'] / 2**20:.3f} | {r['vol']['allgather'] / 2**20:.3f} | "
                        f"{r['bus'] / 2**20:.3f} | {r['want'] / 2**20:.3f} | {r['ratio']:.5f} | "
                        f"{r['bus'] / res['ZeRO-0']['bus']:.3f} | {r['ms']:.1f} ({r['spread'][0]:.0f}..{r['spread'][1]:.0f}) | "
                        f"{r['ms'] / res['ZeRO-1']['ms']:.3f} | "
                        f"{r['exposed']:.1f} |")

header = ("| np | micro-batches | stage | allreduce (MiB) | reduce-scatter (MiB) | allgather (MiB) | bus (MiB) | "
          "formula (MiB) | bus / formula | bus / ZeRO-0 | ms/step (median, runs' range) | ms / ZeRO-1 | exposed comm (ms) |\n"
          "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
table = header + "\n" + "\n".join(rows)
print(table)
machine = machine_info()
md = ["# ZeRO stages: communication volume and step time (CPU, MPI)", "",
      "Command: `/usr/bin/python3 validation/bench_zero.py " + " ".join(sys.argv[1:]) + "` (mpirun --oversubscribe, "
      "OMP_NUM_THREADS=1). Machine: " + ", ".join(f"{k} {v}" for k, v in machine.items()),
      "", f"Model: {args.deck} with {' '.join(MODEL)}; {args.steps} steps, medians over steps 2..{args.steps}, "
      f"{args.repeat} run(s) of each stage alternating (the median of the runs' medians, their range in brackets). "
      f"G = {G} bytes of gradients (the plan's ZeRO-0 `grads`), W = {W} bytes kept whole by ZeRO-2 and ZeRO-3 (wte), "
      f"B = {B} bytes per block (L = {cfg_layers}). "
      "Volumes are rank 0's `comm_bytes` of one step (the nccl-tests sizes); bus = allreduce x 2(n-1)/n + "
      "(reduce-scatter + allgather) x (n-1)/n.", "", table, ""]
if args.report:
    with open(args.report, "w") as f:
        f.write("\n".join(md))
print("FAILED: " + "; ".join(failures) if failures else "VALID: every stage's bus bytes equal the formula (0.1%)")
sys.exit(1 if failures else 0)
