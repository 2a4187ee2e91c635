#!/usr/bin/python3
"""Machine calibration for the layout planner: measures this machine and writes its machine file
(`train_gpt DECK --plan WORLD --auto --machine FILE`; TOML with [machine], [compute], [intra], [inter]).

  links:   `mpirun -np P build/apps/bench_collectives --ops allreduce,reduce_scatter,allgather --max-bytes 16M
           --json F` for P in 2 4 8 (oversubscribed where P exceeds the cores); per P and operation the ring model
           t = 2(P-1) alpha + 2(P-1)/P n / busbw (allreduce; reduce-scatter and allgather: (P-1) alpha + (P-1)/P n /
           busbw) fitted by least squares in relative error over the sizes 4 KiB..4 MiB (--fit-min-bytes,
           --fit-max-bytes: the in-cache range the small models' collectives use; below ~4 KiB Open MPI's eager
           protocol follows another line). alpha -> latency_by_ranks (us), busbw -> bandwidth_by_ranks (GB/s), and
           the reduce_scatter_ / allgather_ ones (Open MPI's are not the ring's half of an allreduce); the allreduce
           at P = 2 also gives intra.latency_us / bandwidth_gbs, and [inter] (one node: no inter-node link to
           measure). compute.comm_overlap = 0: MPI moves the bytes through shared memory with the ranks' own cores,
           so communication overlapped with compute still costs their time.
  compute: one-rank train_gpt runs (mpirun -np 1, OMP_NUM_THREADS=1, fp32, train.device=cpu) of inputs/gpt_tiny.toml
           and inputs/bench_gpt.toml at several widths, micro-batch sizes and sequence lengths (11 configurations;
           --quick 5), each also planned (`--plan 1 --auto --machine <provisional file> --json --top 1`, the object
           with "deck": true) for its work per step {gemm_flops, gemm_calls, memory_bytes, optimizer_bytes};
           measured step seconds = a gemm_flops + b gemm_calls + c memory_bytes + d optimizer_bytes fitted
           non-negatively in relative error; peak_tflops = 1/a (gemm_efficiency 1: the measured GEMM rate),
           kernel_overhead_us = b, memory_gbs = 1/c, optimizer_gbs = 1/d.
  sync:    one 4-rank TP job whose step is mostly tensor-parallel collectives (gpt_tiny at C 128, TP 4, micro-batch 1:
           ~150 allreduces a step, 4 ranks on the cores), its fastest run's ms/step; compute.shared_sync_us (a
           collective's wait for a partner descheduled by the shared cores) bisected until the planner's
           prediction of that job equals it
  wait:    one 8-rank pipeline job (bench_gpt at C 128, DP 2 x PP 4, micro-batch 1: 8 ranks on the cores, the
           pipeline's waiting ranks polling MPI), its fastest run's ms/step; compute.shared_wait_share (the fraction of
           a core a waiting rank still takes from the computing ones) bisected in 0..1 until the planner's prediction
           of that job equals it
  sharing: k copies of one one-rank job started at once (k = 1 2 4 8; --quick 1 2); the slowest copy's step time over
           the k = 1 run's -> shared_ranks, shared_slowdown (a synchronous step waits for its slowest rank).
  machine: device "cpu", lscpu's model name, devices_per_node 8 (ranks planned per node, oversubscribed beyond the
           cores), memory_gb = MemTotal in GiB, shared by the node's ranks.
Step times: the median of the steps after the first 5 in the run's metrics.jsonl; each configuration runs --repeats
times round-robin with the others and the fastest run is kept (the one least disturbed by load from outside the job).
About 4 minutes here (5 with --repeats 3, the committed file; --quick about 1); run it on an otherwise idle machine.

usage: validation/calibrate_machine.py [--out FILE.toml] [--build DIR] [--quick] [--json FILE] [--repeats K]
                                       [--work DIR] [--max-residual F]
  --out      the machine file (default inputs/machines/this_cpu.toml; its name is the file's stem)
  --json     also write the raw measurements (collective rows, runs, fits, commands) to this file
  --work     run directories (default /tmp/calibrate_machine, wiped first)
Prints the fits with their residuals and last `VALID` (every run succeeded, every fit has positive rates, the compute
fit reproduces every configuration within --max-residual, default 30%, and the planner accepts the written file) or
`FAILED: <what>` (exit 1; a file whose fits were made is still written, its header says FAILED)."""
import argparse
import itertools
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from campaign import REPO, machine_info  # noqa: E402
from planner_jobs import (WARMUP_STEPS, deck_object, failure_tail, mpirun, plan_objects, preflight,  # noqa: E402
                          rel, run_together, set_args, show, step_ms)

ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--out", default=os.path.join(REPO, "inputs", "machines", "this_cpu.toml"))
ap.add_argument("--build", default=os.path.join(REPO, "build"))
ap.add_argument("--quick", action="store_true",
                help="ranks 2 4, 5 configurations, k 1 2, 8 steps, one run each: a smoke test of this script (its "
                "slowdown stops at 2 ranks, so its shared-core figures do not hold for more)")
ap.add_argument("--json", help="write the raw measurements here")
ap.add_argument("--repeats", type=int, help="runs per configuration, round-robin, fastest kept (default 2; --quick 1)")
ap.add_argument("--work", default="/tmp/calibrate_machine")
ap.add_argument("--fit-min-bytes", type=int, default=4096)
ap.add_argument("--fit-max-bytes", type=int, default=4 * 2**20)
ap.add_argument("--max-residual", type=float, default=0.30)
ap.add_argument("--timeout", type=float, default=300, help="seconds per job (or set of copies) before it fails")
args = ap.parse_args()

MiB = 2**20
COLS = ("gemm_flops", "gemm_calls", "memory_bytes", "optimizer_bytes")  # the work columns the compute fit prices
REPEATS = max(1, args.repeats or (1 if args.quick else 2))
STEPS = 8 if args.quick else 15
SHARE_STEPS = 8 if args.quick else 20  # longer: the copies start a little apart, their timed steps must overlap
LINK_RANKS = (2, 4) if args.quick else (2, 4, 8)
SHARE_K = (1, 2) if args.quick else (1, 2, 4, 8)
TRAIN_GPT = os.path.join(args.build, "apps", "train_gpt")
BENCH = os.path.join(args.build, "apps", "bench_collectives")
NAME = os.path.splitext(os.path.basename(args.out))[0]
COMMAND = "/usr/bin/python3 validation/calibrate_machine.py" + "".join(" " + a for a in sys.argv[1:])

# (deck, n_embd, n_head, micro_batch, global_batch, seq_len or None for the deck's): the number of micro-batches (1 to
# 16) moves the GEMM calls at a fixed FLOP count, the width the FLOPs per memory-bound byte (C^2 against C), the one
# short sequence of the last two the optimizer's share of the step (its update streams the whole model's state for a
# handful of tokens), so the four work columns do not grow together and the fit can tell their rates apart.
CONFIGS = [("gpt_tiny", 64, 4, 1, 16, None), ("gpt_tiny", 64, 4, 16, 16, None), ("gpt_tiny", 64, 4, 8, 64, None),
           ("gpt_tiny", 128, 4, 2, 8, None), ("gpt_tiny", 128, 4, 16, 32, None), ("bench_gpt", 128, 4, 4, 8, None),
           ("bench_gpt", 256, 4, 1, 4, None), ("bench_gpt", 256, 4, 4, 8, None), ("bench_gpt", 384, 6, 2, 4, None),
           ("bench_gpt", 256, 4, 1, 1, 16), ("bench_gpt", 384, 6, 1, 1, 32)]
if args.quick:
    CONFIGS = [CONFIGS[i] for i in (0, 1, 3, 5, 9)]
SHARE_CONFIG = ("bench_gpt", 128, 4, 4, 8, None)  # ~0.1-0.2 s steps: long enough to time, short enough for 8 copies
OPS = ("allreduce", "reduce_scatter", "allgather")

failures = []


def fail_now(msg):
    print(f"FAILED: {msg}")
    sys.exit(1)


problem = preflight(TRAIN_GPT)
if problem:
    fail_now(problem)
if not os.access(BENCH, os.X_OK):
    fail_now(f"{BENCH} is not an executable (build the apps, or pass --build)")
shutil.rmtree(args.work, ignore_errors=True)
os.makedirs(args.work)


# ------------------------------------------------------------------------------------------------------ the CPU
def cpu_description():
    """(lscpu's model name, CPUs, MemTotal in GiB, a summary line with the bf16 instructions) from lscpu,
    /proc/cpuinfo and /proc/meminfo."""
    lscpu = {}
    for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
        k, _, v = line.partition(":")
        lscpu[k.strip()] = v.strip()
    with open("/proc/cpuinfo") as f:
        flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    with open("/proc/meminfo") as f:
        mem_gib = int(next(line for line in f if line.startswith("MemTotal")).split()[1]) / 2**20
    model = lscpu.get("Model name", "unknown CPU")
    cpus = int(lscpu.get("CPU(s)", os.cpu_count() or 1))
    tpc = int(lscpu.get("Thread(s) per core", 1))
    line = (f"{model} (lscpu), {cpus} CPUs ({tpc} thread(s) per core), avx512_bf16: "
            f"{'yes' if 'avx512_bf16' in flags else 'no'}, amx: {'yes' if 'amx_bf16' in flags else 'no'}, "
            f"MemTotal {mem_gib:.2f} GiB")
    return model, cpus, mem_gib, line


CPU_MODEL, CPUS, MEM_GIB, CPU_LINE = cpu_description()
print(f"CPU: {CPU_LINE}", flush=True)


# ---------------------------------------------------------------------------------------------------- 1. links
def fit_ring(rows, p, op):
    """Least squares in relative error (weights 1/t) of t_us = s (p-1) alpha + s (p-1)/p n / busbw over rows (s = 2
    for an allreduce, 1 for a reduce-scatter or an allgather of n bytes in all); returns (alpha us, busbw GB/s,
    per-row residuals t_fit / t - 1, note). A negative alpha (the rows' latency below the fit's resolution) is
    refitted as 0, said in the note."""
    n = np.array([r["bytes"] for r in rows], float)
    t = np.array([r["time_us"] for r in rows], float)
    steps = 2.0 if op == "allreduce" else 1.0
    A = np.stack([np.full_like(n, steps * (p - 1)), steps * (p - 1) / p * n], axis=1)
    coef, *_ = np.linalg.lstsq(A / t[:, None], np.ones_like(t), rcond=None)
    note = ""
    if coef[0] < 0:
        coef = np.array([0.0, np.linalg.lstsq(A[:, 1:] / t[:, None], np.ones_like(t), rcond=None)[0][0]])
        note = "alpha fitted negative, set to 0"
    alpha, inv_bw = float(coef[0]), float(coef[1])  # us, us per byte
    busbw = 1e-3 / inv_bw if inv_bw > 0 else float("nan")
    return alpha, busbw, [float(x) for x in (A @ coef) / t - 1], note


link_cmds, link_rows, op_links = [], {}, {op: {} for op in OPS}
links = op_links["allreduce"]
for p in LINK_RANKS:
    jf = os.path.join(args.work, f"collectives_np{p}.json")
    cmd = mpirun(p) + [BENCH, "--ops", ",".join(OPS), "--max-bytes", "16M", "--json", jf]
    link_cmds.append("OMP_NUM_THREADS=1 " + show(cmd))
    print("running:", link_cmds[-1], flush=True)
    (rc, _), = run_together([(cmd, os.path.join(args.work, f"collectives_np{p}"))], args.timeout)
    if rc != 0 or not os.path.exists(jf):
        fail_now(f"bench_collectives -np {p}: {failure_tail(os.path.join(args.work, f'collectives_np{p}'), rc)}")
    with open(jf) as f:
        link_rows[p] = [x for x in json.load(f)["rows"] if x["op"] in OPS]
    for op in OPS:
        sel = [x for x in link_rows[p] if x["op"] == op and args.fit_min_bytes <= x["bytes"] <= args.fit_max_bytes]
        if len(sel) < 3:
            fail_now(f"np {p}: {len(sel)} {op} rows in {args.fit_min_bytes}..{args.fit_max_bytes} bytes, need 3")
        alpha, busbw, res, note = fit_ring(sel, p, op)
        op_links[op][p] = dict(latency_us=alpha, bandwidth_gbs=busbw, note=note,
                               residuals=[(x["bytes"], x["time_us"], e) for x, e in zip(sel, res)])
        if not busbw > 0:
            failures.append(f"{op} np {p}: no positive bandwidth in the fit")
        print(f"  np {p} {op}: latency {alpha:.2f} us per ring step, busbw {busbw:.3f} GB/s"
              f"{' (' + note + ')' if note else ''}; residuals "
              + " ".join(f"{b // 1024}K:{e:+.0%}" for b, _, e in op_links[op][p]["residuals"]), flush=True)
if failures:
    fail_now("; ".join(failures))


# --------------------------------------------------------------------------------------------- the machine file
def tf(x):
    """A TOML float (a whole number keeps its '.0': TOML reads '5' as an integer)."""
    s = f"{x:.6g}"
    return s if any(c in s for c in ".e") else s + ".0"


def tarr(xs):
    return "[" + ", ".join(tf(x) for x in xs) + "]"


def kv(key, value, comment=""):
    """A key line, its comment aligned."""
    line = f"{key} = {value}"
    return f"{line:<36} # {comment}" if comment else line


def machine_toml(compute, shared, header):
    """The machine file: header comment lines, then the four tables; compute = dict(peak_tflops, kernel_overhead_us,
    memory_gbs, optimizer_gbs, note lines), shared = (ranks, slowdowns, note)."""
    p2 = links[2]
    ranks = sorted(links)
    L = [f"# {h}" for h in header]
    L += ["[machine]", kv("name", json.dumps(NAME)), kv("device", '"cpu"'), kv("device_name", json.dumps(CPU_MODEL)),
          kv("devices_per_node", "8", f"ranks planned on the node; beyond its {CPUS} cores they share them"),
          kv("memory_gb", f"{MEM_GIB:.2f}", "MemTotal of /proc/meminfo in GiB (2^30 bytes)"),
          kv("memory_per", '"node"', "the node's ranks share it"), ""]
    L += [f"# {c}" for c in compute["note"]]
    L += ["[compute]",
          kv("peak_tflops", tf(compute["peak_tflops"]), "1/a: the measured fp32 GEMM rate of one rank (one thread)"),
          kv("gemm_efficiency", "1.0"),
          kv("kernel_overhead_us", tf(compute["kernel_overhead_us"]), "b: per GEMM call"),
          kv("memory_gbs", tf(compute["memory_gbs"]), "1/c: the memory-bound kernels"),
          kv("optimizer_gbs", tf(compute["optimizer_gbs"]), "1/d: the optimizer's update"),
          kv("comm_overlap", "0.0", "MPI's shared-memory copies are the ranks' own core time"),
          kv("shared_ranks", tarr(shared[0])), kv("shared_slowdown", tarr(shared[1]), shared[2]),
          kv("shared_sync_us", tf(compute.get("shared_sync_us", 0.0)), compute.get("sync_note", "")),
          kv("shared_wait_share", tf(compute.get("shared_wait_share", 0.0)), compute.get("wait_note", "")), ""]
    L += ["# ring allreduce, t = 2(P-1) latency + 2(P-1)/P n / bandwidth (reduce-scatter, allgather: (P-1) latency + "
          f"(P-1)/P n / bandwidth), fitted per P to bench_collectives rows {args.fit_min_bytes} B.."
          f"{args.fit_max_bytes // MiB} MiB in relative error (one thread per rank; P above the {CPUS} cores "
          "oversubscribed); the two scalars are the allreduce's P = 2 fit",
          "[intra]", f"bandwidth_gbs = {tf(p2['bandwidth_gbs'])}", f"latency_us = {tf(p2['latency_us'])}",
          f"ranks = {tarr(ranks)}", f"bandwidth_by_ranks = {tarr(links[p]['bandwidth_gbs'] for p in ranks)}",
          f"latency_by_ranks = {tarr(links[p]['latency_us'] for p in ranks)}"]
    for op in OPS[1:]:
        L += [f"{op}_bandwidth_by_ranks = {tarr(op_links[op][p]['bandwidth_gbs'] for p in ranks)}",
              f"{op}_latency_by_ranks = {tarr(op_links[op][p]['latency_us'] for p in ranks)}"]
    L += ["",
          "# one node: no inter-node link was measured; the intra-node P = 2 fit stands for it",
          "[inter]", f"bandwidth_gbs = {tf(p2['bandwidth_gbs'])}", f"latency_us = {tf(p2['latency_us'])}"]
    return "\n".join(L) + "\n"


# The work of a configuration does not depend on the machine's rates: a provisional file with the links measured
# and rough compute rates serves the --plan runs that read it.
provisional = os.path.join(args.work, "provisional.toml")
with open(provisional, "w") as f:
    f.write(machine_toml(dict(peak_tflops=0.1, kernel_overhead_us=5.0, memory_gbs=10.0, optimizer_gbs=10.0,
                              note=["provisional"]),
                         ([1, 2, 4, 8], [1, 2, 4, 8], "provisional"), ["provisional: only for --plan's work figures"]))


# -------------------------------------------------------------------------------------------------- 2. compute
def config_sets(cfg, steps):
    deck, c, nh, mb, gb, seq = cfg
    return [f"model.n_embd={c}", f"model.n_head={nh}", f"train.micro_batch={mb}", f"train.global_batch={gb}",
            f"train.steps={steps}", "train.eval_every=0", "train.device=cpu", "train.precision=fp32",
            "sample.tokens=0", "checkpoint.every=0", "checkpoint.at_end=false", "log.every=5"] + \
        ([f"model.seq_len={seq}"] if seq else [])


def config_name(cfg):
    deck, c, nh, mb, gb, seq = cfg
    return f"{deck} C{c} H{nh} mb{mb} gb{gb}" + (f" T{seq}" if seq else "")


def deck_path(cfg):
    return os.path.join(REPO, "inputs", cfg[0] + ".toml")


def timed_runs(label, jobs_of, repeats, steps):
    """Runs the jobs of each key of jobs_of (key -> a function of the repeat giving the (command, out) pairs to start
    together) `repeats` times, round-robin over the keys; returns key -> per repeat each copy's step ms (None for a
    failed copy, its failure in `failures`)."""
    times = {k: [] for k in jobs_of}
    for rep in range(repeats):
        for k, make in jobs_of.items():
            jobs = make(rep)
            res = run_together(jobs, args.timeout * len(jobs))
            per_copy = []
            for (cmd, out), (rc, _) in zip(jobs, res):
                ms, prob = step_ms(out, steps) if rc == 0 else (None, failure_tail(out, rc))
                if prob:
                    failures.append(f"{label} {k}: {prob} ({show(cmd)})")
                per_copy.append(ms)
            times[k].append(per_copy)
            shown = " ".join(f"{x:.1f}" if x is not None else "-" for x in per_copy)
            print(f"  {label} {k} run {rep + 1}: ms/step {shown}", flush=True)
    return times


plan_cmds, run_cmds, configs = [], {}, []
for cfg in CONFIGS:
    sets = config_sets(cfg, STEPS)
    cmd = [TRAIN_GPT, deck_path(cfg), "--plan", "1", "--auto", "--machine", provisional, "--json", "--top", "1"] + \
        set_args(sets)
    plan_cmds.append(show(cmd))
    objs, prob = plan_objects(cmd)
    d = deck_object(objs)
    if prob or d is None or not all(k in d.get("work", {}) for k in COLS):
        fail_now(prob or f"{show(cmd)}: no object with \"deck\": true and its \"work\"")
    configs.append(dict(name=config_name(cfg), cfg=cfg, work=d["work"], planned_ms=d.get("pred_ms")))
    run_cmds[config_name(cfg)] = "OMP_NUM_THREADS=1 " + show(mpirun(1) + [TRAIN_GPT, deck_path(cfg)] +
                                                             set_args(sets) + ["--out", "DIR"])


def one_rank_job(cfg, steps, tag):
    def make(rep):
        out = os.path.join(args.work, f"{tag}_run{rep}")
        return [(mpirun(1) + [TRAIN_GPT, deck_path(cfg)] + set_args(config_sets(cfg, steps)) + ["--out", out], out)]
    return make


print(f"compute: {len(CONFIGS)} one-rank configurations x {REPEATS} run(s), {STEPS} steps", flush=True)
ctimes = timed_runs("compute", {config_name(c): one_rank_job(c, STEPS, f"compute_{i}")
                                for i, c in enumerate(CONFIGS)}, REPEATS, STEPS)
for c in configs:
    ok = [r[0] for r in ctimes[c["name"]] if r[0] is not None]
    c["runs_ms"] = [r[0] for r in ctimes[c["name"]]]
    c["ms"] = min(ok) if ok else None
if failures:
    fail_now("; ".join(failures))

def fit_compute(X, t):
    """Non-negative least squares in relative error of t = X @ coef: the best of the unconstrained fits on every
    subset of the columns whose coefficients are all >= 0 (every support of the non-negative optimum is tried, so
    this is that optimum); the columns left out get 0."""
    best = None
    for k in range(len(COLS), 0, -1):
        for cols in itertools.combinations(range(len(COLS)), k):
            A = X[:, cols] / t[:, None]
            sol, *_ = np.linalg.lstsq(A, np.ones_like(t), rcond=None)
            if (sol < 0).any():
                continue
            coef = np.zeros(len(COLS))
            coef[list(cols)] = sol
            err = float(np.sum(((X @ coef) / t - 1) ** 2))
            if best is None or err < best[1]:
                best = (coef, err)
    return best[0]


X = np.array([[float(c["work"][k]) for k in COLS] for c in configs])
t_s = np.array([c["ms"] / 1e3 for c in configs])
coef = fit_compute(X, t_s)
a, b, cc, dd = (float(x) for x in coef)
print("compute fit: step_s = a gemm_flops + b gemm_calls + c memory_bytes + d optimizer_bytes: "
      f"a = {a:.4g} s/FLOP, b = {b:.4g} s/call, c = {cc:.4g} s/B, d = {dd:.4g} s/B")
print(f"  {'configuration':<34} {'GFLOP':>9} {'calls':>7} {'MB':>8} {'opt MB':>8} {'meas ms':>9} {'fit ms':>9} "
      f"{'resid':>7}")
for c, x, t in zip(configs, X, t_s):
    c["fit_ms"] = float(x @ coef) * 1e3
    c["residual"] = float(x @ coef) / t - 1
    print(f"  {c['name']:<34} {x[0] / 1e9:9.3f} {x[1]:7.0f} {x[2] / 1e6:8.2f} {x[3] / 1e6:8.2f} {t * 1e3:9.2f} "
          f"{c['fit_ms']:9.2f} {c['residual']:+7.1%}")
worst = max(configs, key=lambda c: abs(c["residual"]))
compute_note = [f"compute: step seconds = a gemm_flops + b gemm_calls + c memory_bytes + d optimizer_bytes, fitted "
                f"non-negatively in "
                f"relative error to {len(configs)} one-rank train_gpt runs (fp32, one thread, the fastest of "
                f"{REPEATS} run(s), median of steps {WARMUP_STEPS + 1}..{STEPS}); worst residual "
                f"{worst['residual']:+.1%} ({worst['name']})"]
if a <= 0:
    failures.append("the compute fit gives no GEMM rate (a = 0)")
    peak = 0.0
else:
    peak = 1 / a / 1e12
if cc <= 0:  # the memory-bound time is not resolved by these runs: a rate so high that it costs nothing
    memory_gbs = 1e6
    compute_note.append("memory_gbs: the fit left the memory-bound term out (c = 0); 1e6 GB/s makes it free")
else:
    memory_gbs = 1 / cc / 1e9
if dd <= 0:
    optimizer_gbs = 1e6
    compute_note.append("optimizer_gbs: the fit left the optimizer's term out (d = 0); 1e6 GB/s makes it free")
else:
    optimizer_gbs = 1 / dd / 1e9
if abs(worst["residual"]) > args.max_residual:
    failures.append(f"compute fit: {worst['name']} off by {worst['residual']:+.1%} "
                    f"(limit {args.max_residual:.0%})")
compute = dict(peak_tflops=peak, kernel_overhead_us=b * 1e6, memory_gbs=memory_gbs, optimizer_gbs=optimizer_gbs,
               note=compute_note)

# -------------------------------------------------------------------------------------------------- 3. sharing


def copies_job(k):
    def make(rep):
        return [(mpirun(1) + [TRAIN_GPT, deck_path(SHARE_CONFIG)] + set_args(config_sets(SHARE_CONFIG, SHARE_STEPS)) +
                 ["--out", out], out) for out in (os.path.join(args.work, f"share_k{k}_run{rep}_copy{i}")
                                                  for i in range(k))]
    return make


print(f"sharing: {config_name(SHARE_CONFIG)}, k = {' '.join(map(str, SHARE_K))} copies at once x {REPEATS} run(s), "
      f"{SHARE_STEPS} steps", flush=True)
stimes = timed_runs("sharing k =", {k: copies_job(k) for k in SHARE_K}, REPEATS, SHARE_STEPS)
slowest = {}  # k -> the fastest run's slowest copy
for k in SHARE_K:
    ok = [max(r) for r in stimes[k] if None not in r]
    slowest[k] = min(ok) if ok else None
if failures or slowest[1] is None:
    fail_now("; ".join(failures) or "sharing: no k = 1 run")
shared = (list(SHARE_K), [slowest[k] / slowest[1] for k in SHARE_K],
          f"{config_name(SHARE_CONFIG)}: k copies at once, the slowest copy's ms/step over one alone "
          f"({slowest[1]:.1f} ms)")
print("sharing: " + ", ".join(f"k={k}: {slowest[k]:.1f} ms, x{slowest[k] / slowest[1]:.2f}" for k in SHARE_K))

# ------------------------------------------------------------------------------------------ 4. sync and 5. wait
def fastest_job_ms(label, cfg, ranks, sets):
    """(the fastest of REPEATS runs' ms/step, every run's) of one multi-rank job."""
    def job(rep):
        out = os.path.join(args.work, f"{label}_run{rep}")
        return [(mpirun(ranks) + [TRAIN_GPT, deck_path(cfg)] + set_args(sets) + ["--out", out], out)]
    runs = timed_runs(label, {label: job}, REPEATS, STEPS)[label]
    ok = [r[0] for r in runs if r[0] is not None]
    if failures or not ok:
        fail_now("; ".join(failures) or f"{label}: no run")
    return min(ok), runs


def predicted_ms(key, value, cfg, ranks, sets):
    """The planner's ms/step for the job with the file as measured so far and compute[key] = value."""
    path = os.path.join(args.work, f"{key}_trial.toml")
    with open(path, "w") as f:
        f.write(machine_toml(dict(compute, **{key: value}), shared, [f"{key} trial"]))
    cmd = [TRAIN_GPT, deck_path(cfg), "--plan", str(ranks), "--auto", "--machine", path, "--json", "--top", "1"] + \
        set_args(sets)
    objs, prob = plan_objects(cmd)
    d = deck_object(objs)
    if prob or d is None:
        fail_now(prob or f"{show(cmd)}: no object with \"deck\": true")
    return d["pred_ms"]


def bisect_key(key, lo, hi, measured_ms, cfg, ranks, sets):
    """compute[key] in lo..hi at which the planner predicts measured_ms for the job (the prediction grows with the
    key): lo when lo already predicts it or more, hi when even hi predicts less, else bisected."""
    if predicted_ms(key, lo, cfg, ranks, sets) >= measured_ms:
        return lo
    if predicted_ms(key, hi, cfg, ranks, sets) <= measured_ms:
        return hi
    for _ in range(30):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if predicted_ms(key, mid, cfg, ranks, sets) < measured_ms else (lo, mid)
    return (lo + hi) / 2


def fit_to_job(label, key, lo, hi, cfg, ranks, layout, what):
    """Measures the job (cfg at `ranks` ranks with the `layout` sets) and sets compute[key] so that the planner
    predicts it; compute[label + "_note"] says so. Returns (its ms/step, every run's)."""
    sets = config_sets(cfg, STEPS) + layout
    print(f"{label}: {config_name(cfg)} {what} on {ranks} ranks x {REPEATS} run(s)", flush=True)
    ms, runs = fastest_job_ms(label, cfg, ranks, sets)
    compute[key] = bisect_key(key, lo, hi, ms, cfg, ranks, sets)
    compute[label + "_note"] = f"{config_name(cfg)} {what} at {ranks} ranks: {ms:.1f} ms/step measured = predicted"
    print(f"{label}: {ms:.1f} ms/step measured; {key} {compute[key]:.4g} ({key} = 0 predicts "
          f"{predicted_ms(key, 0.0, cfg, ranks, sets):.1f} ms)")
    return ms, runs


# A TP-heavy job on more ranks than cores: what its collectives wait beyond the alpha-beta ring is the partners'
# scheduling; shared_sync_us is the wait per collective that makes the planner predict the measured step.
SYNC_CONFIG, SYNC_RANKS = ("gpt_tiny", 128, 4, 1, 8, None), 4
sync_ms, sync_runs = fit_to_job("sync", "shared_sync_us", 0.0, 50000.0, SYNC_CONFIG, SYNC_RANKS,
                                [f"parallel.tp={SYNC_RANKS}"], f"TP {SYNC_RANKS}")
# A pipeline on more ranks than cores: its ranks waiting in the bubble poll MPI and keep part of a core from the ones
# computing; shared_wait_share is that part which makes the planner predict the measured step (the sync wait above
# already in the file: the pipeline's messages pay it too).
WAIT_CONFIG, WAIT_RANKS, WAIT_LAYOUT = ("bench_gpt", 128, 4, 1, 8, None), 8, ["parallel.pp=4", "parallel.schedule=1f1b"]
wait_ms, wait_runs = fit_to_job("wait", "shared_wait_share", 0.0, 1.0, WAIT_CONFIG, WAIT_RANKS, WAIT_LAYOUT,
                                "DP 2 x PP 4")

# ----------------------------------------------------------------------------------------------------- outputs
date = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
git = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
header = [f"Machine file of this CPU for the layout planner (train_gpt DECK --plan WORLD --auto --machine {NAME}).",
          f"written by: {COMMAND}", f"date: {date} (git {git})", f"CPU: {CPU_LINE}",
          "one OpenMP thread per rank, fp32; Open MPI shared memory, `mpirun --oversubscribe --bind-to "
          "core:overload-allowed --map-by core` (ranks round-robin on the cores)"]
if failures:
    header.append("FAILED: " + "; ".join(failures))
text = machine_toml(compute, shared, header)
os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
with open(args.out, "w") as f:
    f.write(text)
print(f"wrote {args.out}")

# the planner must accept what was written (its schema rejects unknown keys and wrong types)
check = [TRAIN_GPT, os.path.join(REPO, "inputs", "gpt_tiny.toml"), "--plan", "2", "--auto", "--machine",
         os.path.abspath(args.out), "--json", "--top", "1"]
objs, prob = plan_objects(check)
if prob:
    failures.append(f"the planner does not accept the file: {prob}")

if args.json:
    raw = dict(command=COMMAND, date=date, git=git, cpu=CPU_LINE, machine=machine_info(), machine_file=args.out,
               collectives=dict(commands=link_cmds, rows=link_rows,
                                fits={op: {p: dict(latency_us=v["latency_us"], bandwidth_gbs=v["bandwidth_gbs"],
                                                   note=v["note"], residuals=v["residuals"]) for p, v in fits.items()}
                                      for op, fits in op_links.items()},
                                fit_bytes=[args.fit_min_bytes, args.fit_max_bytes]),
               compute=dict(plan_commands=plan_cmds, run_commands=run_cmds, steps=STEPS, repeats=REPEATS,
                            configs=configs, coef=dict(zip(COLS, (a, b, cc, dd))), machine_file_values=compute),
               sharing=dict(config=config_name(SHARE_CONFIG), steps=SHARE_STEPS,
                            runs={k: stimes[k] for k in SHARE_K}, slowest_ms=slowest, slowdown=shared[1]),
               sync=dict(config=config_name(SYNC_CONFIG), tp=SYNC_RANKS, runs=sync_runs, ms=sync_ms,
                         shared_sync_us=compute["shared_sync_us"]),
               wait=dict(config=config_name(WAIT_CONFIG), ranks=WAIT_RANKS, layout=WAIT_LAYOUT, runs=wait_runs,
                         ms=wait_ms, shared_wait_share=compute["shared_wait_share"]),
               planner_check=show(check), verdict_failures=failures)
    with open(args.json, "w") as f:
        json.dump(raw, f, indent=1)
    print(f"wrote {args.json}")

print(f"machine {NAME}: peak {peak:.4g} TFLOP/s, kernel overhead {b * 1e6:.2f} us, memory {memory_gbs:.4g} GB/s, "
      f"optimizer {optimizer_gbs:.4g} GB/s, "
      f"slowdown {' '.join(f'{x:.2f}' for x in shared[1])}; intra P=2 {links[2]['bandwidth_gbs']:.2f} GB/s "
      f"{links[2]['latency_us']:.2f} us")
print(f"VALID: {rel(args.out)} written and accepted by the planner" if not failures
      else "FAILED: " + "; ".join(failures))
sys.exit(0 if not failures else 1)
