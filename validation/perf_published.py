#!/usr/bin/python3
"""Performance model against published throughput (configurations nobody here ran): `perf_model.py --published`.

Projects the step time of published GPT training configurations with a 3D (DP x TP x PP) extension of
perf_model.py's model and compares it with the published figure, row by row:

  - llm.c GPT-2 1558M on 8 x H100 SXM: 2.80 s per step of 1,048,576 tokens (karpathy/llm.c scripts/run_gpt2_1558M.sh)
  - llm.c GPT-2 124M on 8 x A100 80GB SXM: ~300 ms per step of 524,288 tokens (karpathy/llm.c scripts/run_gpt2_124M.sh)
  - Narayanan et al. 2021 (arXiv 2104.04473), Table 1: ten GPT models 1.7B..1T on 32..3072 A100 80GB (Selene),
    achieved TFLOP/s per GPU in the paper's count (96 B s l h^2 (1 + s/6h + V/16lh) per step, full recompute).

Model (per row; inputs in INPUTS below, the same for every row of a GPU generation, none tuned per row):
  T_step = (T_compute + T_tp) x (1 + bubble) + T_p2p + T_dp
  T_compute = executed FLOPs per GPU / (peak x kernel MFU); executed FLOPs = train_gpt --plan's flops_per_token
              (6N + 12 L C T) x tokens, plus one extra forward of the transformer layers when the run recomputes
              activations (Narayanan: full recompute), / (TP x PP x DP)
  T_tp      = per micro-batch per layer held: 4 allreduces (Megatron: 2 forward, 2 backward) + 2 more for the
              recomputed forward, each of b s h bf16 values, ring over TP GPUs at the NVLink bus bandwidth
  bubble    = (PP - 1) / m, m = micro-batches per pipeline per step (1F1B, non-interleaved, micro-batch 1)
  T_p2p     = 2 (m + PP - 1) boundary sends of b s h bf16 / TP (scatter/gather) over one GPU's IB link, not hidden
  T_dp      = gradient allreduce (2 B/param) over DP, hierarchical: NVLink within the node, the GPU's own IB rail
              across nodes; not overlapped (Megatron 2021 reduces after the backward; llm.c's ZeRO-1
              reduce-scatter + allgather costs the same bytes)

usage: validation/perf_model.py --published [--report F.md] [--train-gpt BIN] [--tolerance 0.25]
Prints the table and last a verdict line `VALID: ...` (the target met: within tolerance on most rows, every row
outside it explained) or `FAILED: <what>` (exit 1)."""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from campaign import REPO, run_plan  # noqa: E402

# ------------------------------------------------------------------------------------------------ inputs
# Link figures: per GPU, per direction, from the DGX datasheets; EFF = the fraction NCCL's ring reaches in
# nccl-tests (busbw), one figure for NVLink and one for IB, not per row.
NVL_EFF, IB_EFF = 0.80, 0.85
A_NVL, A_IB = 3e-6, 6e-6  # latency per ring step (s)
HW = {
    "A100": dict(device_name="A100 SXM", nvlink_gbs=300.0, ib_gbs=25.0, gpus_per_node=8,
                 links="DGX A100: NVLink 3 (12 links, 300 GB/s per direction per GPU), 8 x HDR 200 Gb/s IB per node "
                       "(one 25 GB/s rail per GPU)"),
    "H100": dict(device_name="H100 SXM", nvlink_gbs=450.0, ib_gbs=50.0, gpus_per_node=8,
                 links="DGX H100: NVLink 4 (18 links, 450 GB/s per direction per GPU), 8 x NDR 400 Gb/s IB per node "
                       "(one 50 GB/s rail per GPU)"),
}
GRAD_BYTES = 2  # bytes per parameter in the DP gradient reduction (fp16 / bf16 gradients)
ACT_BYTES = 2   # activation bytes (bf16 / fp16)

LLMC_1558 = "karpathy/llm.c scripts/run_gpt2_1558M.sh (commit 039904ee): `-b 16 -t 1024 -d 1048576 -r 0 -z 1 -e d48`, " \
            "mpirun -np 8, comment: 'on 8X H100 80GB SXM ($28/hr) steps in 2.80s/iter'"
LLMC_124 = "karpathy/llm.c scripts/run_gpt2_124M.sh (commit 039904ee): `-b 64 -t 1024 -d 524288 -r 0 -z 1 -e d12`, " \
           "mpirun -np 8, comment: 'on 8X A100 80GB SXM ($14/hr) steps in ~300ms/iter'"
NARAYANAN = "Narayanan et al. 2021, arXiv 2104.04473, Table 1 (A100 80GB, Selene; V 51200, s 2048)"

# name, source, gpu, L, h, heads, s, V, TP, PP, GPUs, batch (sequences), micro-batch, recompute,
# published value, published unit ('s/step' or 'TFLOP/s/GPU')
ROWS = [
    ("llm.c GPT-2 1558M", LLMC_1558, "H100", 48, 1600, 25, 1024, 50257, 1, 1, 8, 1024, 16, False, 2.80, "s/step"),
    ("llm.c GPT-2 124M", LLMC_124, "A100", 12, 768, 12, 1024, 50257, 1, 1, 8, 512, 64, False, 0.300, "s/step"),
]
for p_b, heads, h, l, t, p, n, B, x in (
        (1.7, 24, 2304, 24, 1, 1, 32, 512, 137), (3.6, 32, 3072, 30, 2, 1, 64, 512, 138),
        (7.5, 32, 4096, 36, 4, 1, 128, 512, 142), (18.4, 48, 6144, 40, 8, 1, 256, 1024, 135),
        (39.1, 64, 8192, 48, 8, 2, 512, 1536, 138), (76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140),
        (145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148), (310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155),
        (529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163), (1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163)):
    ROWS.append((f"Megatron GPT {p_b}B", NARAYANAN, "A100", l, h, heads, 2048, 51200, t, p, n, B, 1, True, x,
                 "TFLOP/s/GPU"))

# One kernel MFU per GPU generation, each taken from ONE calibration row (pred = pub there by construction);
# every other row is a prediction.
CALIBRATION = {"H100": "llm.c GPT-2 1558M", "A100": "Megatron GPT 1.7B"}


def find_train_gpt(arg):
    if arg:
        return arg
    d = os.getcwd()
    while True:
        if os.path.exists(os.path.join(d, "CMakeCache.txt")) and os.path.exists(os.path.join(d, "apps", "train_gpt")):
            return os.path.join(d, "apps", "train_gpt")
        if os.path.dirname(d) == d:
            break
        d = os.path.dirname(d)
    return os.path.join(REPO, "build", "apps", "train_gpt")


def plan(train_gpt, row, cmds):
    name, _, gpu, L, h, nh, s, V, *_ = row
    cmd = [train_gpt, os.path.join(REPO, "inputs", "gpt2_124m.toml"), "--plan", "1", "--json", "--device-name",
           HW[gpu]["device_name"]]
    for kv in (f"model.n_layer={L}", f"model.n_embd={h}", f"model.n_head={nh}", f"model.seq_len={s}",
               f"model.vocab_size={V}", "train.global_batch=1", "train.micro_batch=1", "train.precision=bf16"):
        cmd += ["--set", kv]
    return run_plan(cmd, cmds, timeout=60)


def paper_flops(B, s, L, h, V):
    """FLOPs per optimizer step in Narayanan et al. 2021's count (full recompute included):
    96 B s l h^2 (1 + s/6h + V/16lh)."""
    return 96 * B * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h))


def narayanan_rows():
    """The Narayanan et al. 2021 Table 1 rows of ROWS ("Megatron GPT ...B")."""
    return [r for r in ROWS if r[1] == NARAYANAN]


def ring_ar(n, p, bw, a):
    return 0.0 if p <= 1 else 2 * (p - 1) / p * n / bw + 2 * (p - 1) * a


def model_row(row, pl, mfu):
    name, _, gpu, L, h, nh, s, V, t, p, n, B, b, recompute, pub, unit = row
    hw = HW[gpu]
    G = hw["gpus_per_node"]
    bw_nvl, bw_ib = hw["nvlink_gbs"] * 1e9 * NVL_EFF, hw["ib_gbs"] * 1e9 * IB_EFF
    peak = pl["peak_tflops"] * 1e12
    d = n // (t * p)
    fpt = pl["flops_per_token"]
    fpt_exec = fpt + ((fpt - 6 * V * h) / 3 if recompute else 0.0)  # + one forward of the layers
    tokens = B * s
    m = B // (d * b)  # micro-batches per pipeline per step
    Tc = fpt_exec * tokens / n / (peak * mfu)
    layers_per_stage = L / p
    n_ar = 4 + (2 if recompute else 0)
    t_tp = m * layers_per_stage * n_ar * ring_ar(b * s * h * ACT_BYTES, t, bw_nvl, A_NVL)
    bubble = (p - 1) / m
    msg = b * s * h * ACT_BYTES / t
    t_p2p = 0.0 if p == 1 else 2 * (m + p - 1) * (msg / bw_ib + A_IB)
    grad = GRAD_BYTES * pl["parameters"] / (t * p)
    g_in = max(1, min(d, G // (t * p)))  # DP members inside one node
    nodes = d // g_in
    t_dp = 0.0
    if g_in > 1:
        t_dp += 2 * ((g_in - 1) / g_in * grad / bw_nvl + (g_in - 1) * A_NVL)
    if nodes > 1:
        t_dp += ring_ar(grad / g_in, nodes, bw_ib, A_IB)
    T = (Tc + t_tp) * (1 + bubble) + t_p2p + t_dp
    step_flops = paper_flops(B, s, L, h, V)
    if unit == "s/step":
        pred = T
    else:
        pred = step_flops / (T * n) / 1e12
    return dict(name=name, gpu=gpu, L=L, h=h, heads=nh, s=s, V=V, tp=t, pp=p, dp=d, gpus=n, batch=B, micro_batch=b,
                micro_batches=m, recompute=recompute, params=pl["parameters"], flops_per_token=fpt,
                flops_per_token_executed=fpt_exec, paper_flops_per_token=step_flops / tokens, kernel_mfu=mfu,
                T_compute_s=Tc, T_tp_s=t_tp, bubble=bubble, T_bubble_s=(Tc + t_tp) * bubble, T_p2p_s=t_p2p,
                T_dp_s=t_dp, step_s=T, model_mfu=fpt * tokens / n / T / peak, published=pub, unit=unit, pred=pred,
                err=pred / pub - 1)


def calibrate(row, pl):
    lo, hi = 0.01, 1.0
    for _ in range(80):
        mid = (lo + hi) / 2
        r = model_row(row, pl, mid)
        # s/step falls with mfu; TFLOP/s rises with mfu
        too_fast = r["pred"] < r["published"] if r["unit"] == "s/step" else r["pred"] > r["published"]
        lo, hi = (lo, mid) if too_fast else (mid, hi)
    return (lo + hi) / 2


# Rows outside the tolerance, and what the model omits there (checked: a row outside without an entry fails).
EXPLAIN = {
    "Megatron GPT 529.6B": "under-predicted: the model keeps the kernel MFU of the 1.7B row (h 2304), but the rate "
    "the rows imply rises with h (implied-MFU column, 0.45 at h 2304 to 0.63 at h 20480-25600): GEMM FLOPs per token "
    "grow as h^2 while the memory-bound work (LayerNorm, dropout, GeLU ~ s h; the s x s attention scores and their "
    "softmax/dropout, ~ a s, which Megatron 2021 materialises) grows as h or slower, and large GEMMs run nearer "
    "peak. Second, smaller: the 1F1B bubble (PP-1)/m = 12% is non-interleaved here; the paper's interleaved "
    "schedule (from memory of its section 5.1, not confirmed here) would shrink it",
    "Megatron GPT 1008.0B": "under-predicted, as the 529.6B row: kernel efficiency rising with h (h 25600, implied "
    "MFU 0.63 vs the 0.45 calibrated at h 2304) and a 12% non-interleaved bubble the paper's interleaved schedule "
    "would shrink",
    "llm.c GPT-2 124M": "over-predicted: a different software generation on the same GPU. The A100 kernel MFU is "
    "calibrated on Megatron 2021 (mixed precision, full recompute, materialised s x s attention at s 2048); llm.c (2024) runs "
    "bf16 with cuDNN attention (the script builds with USE_CUDNN=1) and no recompute (-r 0), and implies MFU 0.60 on its own. One MFU "
    "per GPU generation cannot cover both frameworks; the row needs a per-software kernel rate (or a model of the "
    "memory-bound work) the model does not have",
}


def fmt_pub(r, key):
    return f"{r[key]:.3f}" if r["unit"] == "s/step" else f"{r[key]:.1f}"


def report(args, res, mfu, cmds, tg):
    tol = args.tolerance
    pred_rows = [r for r in res if not r["calibration"]]
    inside = [r for r in pred_rows if abs(r["err"]) <= tol]
    outside = [r for r in pred_rows if abs(r["err"]) > tol]
    unexplained = [r["name"] for r in outside if r["name"] not in EXPLAIN]
    failures = []
    if len(inside) * 2 <= len(pred_rows):
        failures.append(f"only {len(inside)}/{len(pred_rows)} predicted rows within {tol:.0%} (target: most)")
    if unexplained:
        failures.append("rows outside without an explanation: " + ", ".join(unexplained))
    summary = (f"{len(inside)}/{len(pred_rows)} predicted rows within {tol:.0%} (+ {len(res) - len(pred_rows)} "
               f"calibration rows); outside: " + (", ".join(f"{r['name']} {r['err']:+.1%}" for r in outside) or "none")
               + ("; every row outside explained" if not unexplained else ""))
    verdict = ("VALID: " + summary) if not failures else "FAILED: " + "; ".join(failures)

    L = []
    L.append("# Performance model against published throughput (MODEL vs results nobody here measured)\n")
    L.append("`validation/perf_model.py --published` (module `validation/perf_published.py`) projects published GPT "
             "training configurations with the 3D (DP x TP x PP) extension of the performance model and compares "
             "them with the published figures. Nothing in this report was run on a GPU here: the published numbers "
             "are the sources', the predictions the model's.\n")
    L.append("## Sources\n")
    L.append(f"- llm.c GPT-2 1558M, 8 x H100 SXM: {LLMC_1558}. https://github.com/karpathy/llm.c/blob/master/scripts/run_gpt2_1558M.sh")
    L.append(f"- llm.c GPT-2 124M, 8 x A100 80GB SXM: {LLMC_124}. https://github.com/karpathy/llm.c/blob/master/scripts/run_gpt2_124M.sh. "
             "'~300ms' is the script's own rounding.")
    L.append(f"- {NARAYANAN}: https://arxiv.org/abs/2104.04473. The rows (params, heads, h, layers, t, p, GPUs, batch, "
             "achieved TFLOP/s per GPU) are from memory of the paper, and match, row for row, third-party "
             "transcriptions of Table 1 found in public notes on the paper (the code index's excerpts; they name no "
             "repository, so they are corroboration, not a citation); the paper itself was not opened here. The "
             "parameter counts agree with train_gpt --plan to 0.1% (table below), which checks l, h and V. Not in "
             "Table 1 and assumed here: micro-batch 1, non-interleaved 1F1B, fp16 gradients reduced after the "
             "backward, full activation recomputation (the paper's FLOP formula counts it).\n")
    L.append("## FLOP counts\n")
    L.append("- The model's compute term uses train_gpt's count (`--plan 1 --json`: flops_per_token = 6N + 12 L C T, the "
             "PaLM count, N without the position embedding) plus, where the run recomputes activations, one more "
             "forward of the transformer layers: executed = fpt + (fpt - 6 V h) / 3. For Megatron's shapes this "
             "equals the paper's 96 B s l h^2 (1 + s/6h + V/16lh) per token to within biases and LayerNorms "
             "(column `paper/executed`), so the published TFLOP/s and the predicted ones are in the same (paper's, "
             "recompute-inclusive) count: predicted TFLOP/s/GPU = paper FLOPs per step / (GPUs x predicted step).")
    L.append("- llm.c rows run without recompute (`-r 0`): executed = fpt, compared as seconds per step.\n")
    L.append("## Inputs (the same for every row of a GPU generation)\n")
    for gpu, hw in HW.items():
        L.append(f"- {gpu}: bf16/fp16 dense peak {PEAKS[gpu]:g} TFLOP/s (lib/core/device_peaks.cpp via --plan "
                 f"--device-name \"{hw['device_name']}\"); {hw['links']}; effective NVLink busbw "
                 f"{hw['nvlink_gbs'] * NVL_EFF:g} GB/s, IB {hw['ib_gbs'] * IB_EFF:g} GB/s per GPU; **kernel MFU "
                 f"{mfu[gpu]:.3f}**, calibrated on the row `{CALIBRATION[gpu]}` (pred = published there by "
                 f"construction)")
    L.append(f"- link efficiencies (fraction of the per-direction link rate NCCL's ring reaches, nccl-tests order): "
             f"NVLink {NVL_EFF:.2f}, IB {IB_EFF:.2f}; latency per ring step {A_NVL * 1e6:g} us (NVLink), "
             f"{A_IB * 1e6:g} us (IB)")
    L.append(f"- gradients {GRAD_BYTES} B/param in the DP reduction, activations {ACT_BYTES} B/value")
    L.append("- Why these calibration rows: for H100 the llm.c 1558M row is the only H100 row, so it is an input, "
             "not a check. For A100, the 1.7B row is the one whose step the model explains almost entirely by "
             "compute (TP 1, PP 1, the DP allreduce 1.5% of the step), so it measures the kernel rate and nothing "
             "else; this choice was written into the code before the comparison was first run.\n")
    L.append("## Model\n")
    L.append("T_step = (T_compute + T_tp) x (1 + bubble) + T_p2p + T_dp, per GPU:\n")
    L.append("- T_compute = executed FLOPs / (TP PP DP) / (peak x kernel MFU)")
    L.append("- T_tp = m x (layers per stage) x (4 + 2 if recompute) allreduces of b s h activations, ring over TP "
             "at the NVLink busbw (Megatron: 2 forward + 2 backward per layer, and the recomputed forward's 2), not "
             "overlapped")
    L.append("- bubble = (PP - 1) / m, m = batch / (DP x micro-batch) (1F1B, non-interleaved)")
    L.append("- T_p2p = 2 (m + PP - 1) boundary messages of b s h / TP values (scatter/gather) over one IB rail, "
             "not overlapped")
    L.append("- T_dp = gradient allreduce of 2 B x params / (TP PP): within the node over NVLink (reduce-scatter + "
             "allgather) among the DP members there, across nodes a ring over each GPU's own IB rail; not "
             "overlapped (Megatron 2021 reduces after the last backward; llm.c's ZeRO-1 reduce-scatter + "
             "allgather moves the same bytes)")
    L.append("- omitted: optimizer step, data loading, kernel launch gaps, stragglers, and any dependence of the "
             "kernel rate on the shapes (one MFU per GPU generation): see the rows outside.\n")
    L.append("## Predicted vs published\n")
    L.append("| config | GPU | TP | PP | DP | GPUs | batch (seq x len) | m | params (plan) | paper/executed FLOPs | "
             "compute s | TP comm s | bubble | p2p s | DP s | step s | published | predicted | pred/pub - 1 | "
             f"within {tol:.0%}? | implied MFU |")
    L.append("|---|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|")
    for r in res:
        unit = " s/step" if r["unit"] == "s/step" else " TFLOP/s/GPU"
        ratio = (f"{r['paper_flops_per_token'] / r['flops_per_token_executed']:.3f}" if r["recompute"] else "-")
        within = ("calibration" if r["calibration"] else ("yes" if abs(r["err"]) <= tol else "**no** (below)"))
        L.append(f"| {r['name']} | {r['gpu']} | {r['tp']} | {r['pp']} | {r['dp']} | {r['gpus']} | {r['batch']} x "
                 f"{r['s']} | {r['micro_batches']} | {r['params'] / 1e9:.2f} B | {ratio} | {r['T_compute_s']:.3f} | "
                 f"{r['T_tp_s']:.3f} | {r['bubble']:.1%} | {r['T_p2p_s']:.3f} | {r['T_dp_s']:.3f} | "
                 f"{r['step_s']:.3f} | {fmt_pub(r, 'published')}{unit} | {fmt_pub(r, 'pred')} | {r['err']:+.1%} | "
                 f"{within} | {r['implied_mfu']:.3f} |")
    L.append("\n`m` = micro-batches per pipeline per step; `implied MFU` = the kernel MFU that would make this row "
             "exact on its own (a diagnostic, not an input).\n")
    L.append("## Rows outside the tolerance, and what the model omits\n")
    for r in outside:
        L.append(f"- **{r['name']}** ({r['err']:+.1%}): {EXPLAIN.get(r['name'], 'NOT EXPLAINED')}.")
    if not outside:
        L.append("- none")
    L.append("\nReading: with one kernel rate per GPU generation the 3D model lands within 25% on the rows up to "
             "310B, and its errors drift in one direction with model width (-6% at 3.6B to -28% at 1T): the "
             "communication terms it adds are small at these batch sizes (TP comm 4-15%, bubble <= 12%, DP <= 4% "
             "of the step), so what it mostly omits is the kernel rate's dependence on the shapes. The implied-MFU column "
             "is what a per-shape kernel model would have to supply. For a --plan-style projection on a cluster "
             "the project never ran on, the usable statement is therefore: the communication and pipeline terms "
             "are a small part of the step at these scales, so even a large error in them moves the prediction by a "
             "few percent (they are not checked separately by these rows); the compute term is as good as the "
             "kernel MFU fed in, which should come from a measurement of the same software at a similar width "
             "(for scale: perf_model.py's H100 projection assumes MFU 0.40; llm.c's 1558M row implies 0.49; this "
             "project measured 27.1% for its own GPT-2 124M on one H100, "
             "validation/results/gpu_nvidia_h100_80gb_hbm3_2026-11-26.md).\n")
    L.append("## Commands\n")
    L.append(f"- this report: `validation/perf_model.py {' '.join(sys.argv[1:])}`")
    L.append("- FLOPs, parameters, peaks: " + "; ".join(f"`{c}`" for c in cmds[:1]) +
             f" (and {len(cmds) - 1} more, one per row, with that row's shape)")
    L.append(f"- date: {time.strftime('%Y-%m-%d', time.gmtime())}\n")
    L.append(verdict)
    md = "\n".join(L) + "\n"
    if args.report:
        stem = os.path.splitext(os.path.abspath(args.report))[0]
        os.makedirs(os.path.dirname(stem), exist_ok=True)
        with open(stem + ".md", "w") as f:
            f.write(md)
        with open(stem + ".json", "w") as f:
            json.dump(dict(rows=res, kernel_mfu=mfu, calibration=CALIBRATION, hw=HW, nvl_eff=NVL_EFF,
                           ib_eff=IB_EFF, tolerance=tol, explanations=EXPLAIN, verdict=verdict), f, indent=1)
    print("\n".join(l for l in md.split("## Predicted vs published")[1].split("## Rows outside")[0].splitlines()
                    if l.startswith("|")))
    for gpu in mfu:
        print(f"kernel MFU {gpu}: {mfu[gpu]:.3f} (calibrated on {CALIBRATION[gpu]})")
    for r in outside:
        print(f"outside: {r['name']} {r['err']:+.1%}: {EXPLAIN.get(r['name'], 'NOT EXPLAINED')[:100]}...")
    print(verdict)
    return 0 if not failures else 1


PEAKS = {}


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--published", action="store_true")
    ap.add_argument("--report", help="markdown report (a JSON next to it, same stem)")
    ap.add_argument("--train-gpt", help="train_gpt binary (FLOPs per token, parameters, peaks via --plan --json)")
    ap.add_argument("--tolerance", type=float, default=0.25)
    args = ap.parse_args(argv)
    tg = find_train_gpt(args.train_gpt)
    cmds = []
    plans = [plan(tg, r, cmds) for r in ROWS]
    for r, pl in zip(ROWS, plans):
        PEAKS[r[2]] = pl["peak_tflops"]
    mfu = {}
    for gpu, cname in CALIBRATION.items():
        i = next(k for k, r in enumerate(ROWS) if r[0] == cname)
        mfu[gpu] = calibrate(ROWS[i], plans[i])
    res = [model_row(r, pl, mfu[r[2]]) for r, pl in zip(ROWS, plans)]
    for r in res:
        r["calibration"] = CALIBRATION[r["gpu"]] == r["name"]
        r["implied_mfu"] = calibrate(ROWS[[x[0] for x in ROWS].index(r["name"])], plans[res.index(r)])
    return report(args, res, mfu, cmds, tg)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
