#!/usr/bin/python3
"""CPU training-step benchmark: hpctrain's train_gpt vs PyTorch on the same GPT (docs/performance.md, "Benchmark rules").

Model: inputs/bench_gpt.toml (L=4, C=256, NH=4, T=256, B=8, vocab 256, fp32 AdamW). Both programs run
on the same number of threads (PyTorch pinned with torch.set_num_threads, hpctrain with OMP_NUM_THREADS),
alternate `--rounds` times, and each round reports the median step time over the steps after
`--warmup`. The figure is the median over rounds; the spread is the min..max of the round medians.
Prints a table and the ratio (PyTorch ms / hpctrain ms = hpctrain's speed-up in tokens/s) and, with
--record, writes it to validation/results/bench_gpt_cpu.md.
usage: /usr/bin/python3 validation/bench_gpt.py [--build build] [--threads 2] [--rounds 3] [--steps 40] [--record]
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))


def run_hpctrain(exe, steps, warmup, threads):
    with tempfile.TemporaryDirectory() as out:
        env = dict(os.environ, OMP_NUM_THREADS=str(threads))
        subprocess.run([exe, os.path.join(ROOT, "inputs", "bench_gpt.toml"), "--out", out,
                        "--set", f"train.steps={steps}"], check=True, env=env, capture_output=True)
        with open(os.path.join(out, "metrics.jsonl")) as f:
            ms = [json.loads(line)["ms"] for line in f]
    return statistics.median(ms[warmup:])


def run_torch(steps, warmup, threads, data_path):
    import torch
    from gpt_reference import Gpt
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    L, C, NH, T, B, V = 4, 256, 4, 256, 8, 256
    cfg = dict(n_layer=L, n_head=NH, n_embd=C, seq_len=T, vocab_size=V, padded_vocab=V, bias=True)
    rng = np.random.default_rng(0)
    params = {"wte": rng.normal(0, 0.02, (V, C)), "wpe": rng.normal(0, 0.02, (T, C))}
    for l in range(L):
        h = f"h.{l}."
        params.update({h + "ln1.weight": np.ones(C), h + "ln1.bias": np.zeros(C),
                       h + "attn.qkv.weight": rng.normal(0, 0.02, (3, NH, C // NH, C)),
                       h + "attn.qkv.bias": np.zeros((3, NH, C // NH)),
                       h + "attn.proj.weight": rng.normal(0, 0.02, (C, C)), h + "attn.proj.bias": np.zeros(C),
                       h + "ln2.weight": np.ones(C), h + "ln2.bias": np.zeros(C),
                       h + "mlp.fc.weight": rng.normal(0, 0.02, (4 * C, C)), h + "mlp.fc.bias": np.zeros(4 * C),
                       h + "mlp.proj.weight": rng.normal(0, 0.02, (C, 4 * C)), h + "mlp.proj.bias": np.zeros(C)})
    params.update({"lnf.weight": np.ones(C), "lnf.bias": np.zeros(C)})
    model = Gpt(cfg, params)
    decay = [p for n, p in zip(model.names, model.params.values()) if p.dim() >= 2]
    other = [p for n, p in zip(model.names, model.params.values()) if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.95), eps=1e-8)
    tokens = np.memmap(data_path, dtype=np.uint16, mode="r", offset=1024)
    times = []
    for s in range(steps):
        offs = rng.integers(0, len(tokens) - T - 1, B)
        x = torch.from_numpy(np.stack([tokens[o:o + T] for o in offs]).astype(np.int64))
        y = torch.from_numpy(np.stack([tokens[o + 1:o + T + 1] for o in offs]).astype(np.int64))
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times[warmup:])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--record", action="store_true")
    args = ap.parse_args()
    if args.steps - args.warmup < 30:
        sys.exit("error: need at least 30 measured steps after warm-up (--steps - --warmup >= 30)")
    exe = os.path.join(args.build, "apps", "train_gpt")
    data = os.path.join(os.environ.get("HPCT_DATA_DIR", os.path.join(ROOT, "data")), "kjv_train.bin")
    for path, what in ((exe, "build it: scripts/build.sh"), (data, "prepare it: scripts/prepare_data.sh")):
        if not os.path.exists(path):
            sys.exit(f"error: {path} not found; {what}")

    hp, pt = [], []
    for r in range(args.rounds):
        hp.append(run_hpctrain(exe, args.steps, args.warmup, args.threads))
        pt.append(run_torch(args.steps, args.warmup, args.threads, data))
        print(f"round {r + 1}: hpctrain {hp[-1]:8.1f} ms/step   pytorch {pt[-1]:8.1f} ms/step", flush=True)
    tokens = 8 * 256
    h, p = statistics.median(hp), statistics.median(pt)
    lines = [
        f"{'program':<10} {'ms/step':>9} {'spread (min..max of rounds)':>28} {'tokens/s':>10}",
        f"{'hpctrain':<10} {h:9.1f} {f'{min(hp):.1f}..{max(hp):.1f}':>28} {tokens / h * 1e3:10.0f}",
        f"{'pytorch':<10} {p:9.1f} {f'{min(pt):.1f}..{max(pt):.1f}':>28} {tokens / p * 1e3:10.0f}",
        f"speed-up (pytorch ms / hpctrain ms): {p / h:.2f}x",
    ]
    print("\n".join(lines))
    if args.record:
        import torch
        cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
        out = os.path.join(ROOT, "validation", "results", "bench_gpt_cpu.md")
        with open(out, "w") as f:
            f.write(f"# GPT training step on CPU: hpctrain vs PyTorch\n\n"
                    f"- date: {datetime.date.today()}\n- machine: {cpu}, {os.cpu_count()} cores, {platform.platform()}\n"
                    f"- PyTorch {torch.__version__}, {args.threads} threads; hpctrain OMP_NUM_THREADS={args.threads}\n"
                    f"- model: inputs/bench_gpt.toml (L4 C256 NH4 T256 B8 V256, fp32 AdamW)\n"
                    f"- method: {args.rounds} alternated rounds, median of {args.steps - args.warmup} steps after "
                    f"{args.warmup} warm-up steps per round; median over rounds\n"
                    f"- command: `/usr/bin/python3 validation/bench_gpt.py --threads {args.threads} "
                    f"--rounds {args.rounds} --steps {args.steps} --record`\n\n```\n" + "\n".join(lines) + "\n```\n")
        print(f"recorded in {out}")


if __name__ == "__main__":
    main()
