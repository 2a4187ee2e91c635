#!/usr/bin/python3
"""The per-kernel table of one GPT-2 124M training step on a GPU, from Nsight Compute's per-kernel summary.

  kernel_table.py (--ncu NCU.csv | --check-self) --screen SCREEN.json --device NAME [--hbm-tbps X]
                  [--peak-tflops X] [--title T] [--out FILE.md]

NCU.csv is `ncu --csv --print-summary per-kernel --metrics gpu__time_duration.sum[,dram__bytes_read.sum,
dram__bytes_write.sum]` over the step (gpu_session.sh --profile brackets one step with train.profile_step and runs ncu
with --profile-from-start off; an older profile that also holds the evaluation's kernels is read the same way).
SCREEN.json is the kernel screen at the profile's micro-batch (`kernel_screen --micro-batch B --eval-batches E
--json F`, tests/cuda_emu/kernel_screen.cpp): the bytes each own kernel moves and the step's GEMM and attention FLOPs,
computed from the shapes. Per kernel name (the template arguments and the launch shapes summed):

  launches, GPU ms, share of the kernels' time;
  bytes: DRAM bytes read + written where the profile has the counters (dram__bytes_*; some GPU machines hide them),
  else the screen's bytes for that kernel (the "bytes from" column says which);
  TB/s and its fraction of the device's HBM peak, for the memory-bound kernels (own kernels without FLOPs);
  TFLOP/s for the GEMMs (cuBLASLt's nvjet / cutlass / splitKreduce kernels: the step's GEMM FLOPs over their summed
  time, one figure for the class) and for attention (cuDNN's or the own flash kernels: forward 2 B NH T^2 HS for the
  causal half, backward 2.5 times that).

The table names each own memory-bound kernel above 1% of the time that runs below 70% of the HBM peak (the target
of the GPU speed work), and the kernels the screen does not know. HBM peaks (TB/s, the datasheets): H100 SXM 3.35,
H100 PCIe 2.0, H100 NVL 3.9, H200 4.8, A100 80GB 2.0, A100 40GB 1.555; --hbm-tbps overrides. The bf16 dense peak
(989.5 TFLOP/s on an H100 / H200 SXM) comes from --peak-tflops, for the GEMMs' fraction.

--check-self runs the parser and the table on the committed profile of 2026-11-28 (an H200, micro-batch 16 with four
evaluation micro-batches, times only) against the screen given, and fails unless the known facts of that profile come
out: LayerNorm's backward below the target and the residual add above it, the GEMMs at 600-800 TFLOP/s, every own
kernel of the profile known to the screen but the masters' one cast before the first step.
"""
import argparse
import csv
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SELF_CHECK_CSV = os.path.join(ROOT, "validation", "results", "gpu_nvidia_h200_2026-11-28",
                              "ncu_gpt2_124m_bf16_mb16.csv")

HBM_TBPS = [("H100 NVL", 3.9), ("H100 PCIE", 2.0), ("H100", 3.35), ("H200", 4.8), ("A100 80GB", 2.0),
            ("A100", 1.555)]  # most specific first: the first substring of the upper-case name wins
TIME, READ, WRITE = "gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum"
UNIT = {"ns": 1e-9, "usecond": 1e-6, "us": 1e-6, "msecond": 1e-3, "ms": 1e-3, "nsecond": 1e-9, "second": 1.0,
        "byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "KB": 1e3, "MB": 1e6, "GB": 1e9}
TARGET_FRACTION, TARGET_SHARE = 0.70, 0.01


def hbm_peak(device, override):
    if override:
        return override * 1e12
    up = device.upper()
    for key, tbps in HBM_TBPS:
        if key in up:
            return tbps * 1e12
    return None


def base_name(kernel):
    """'void hpct::<unnamed>::layernorm_backward_kernel<__nv_bfloat16, 8>(...)' -> 'layernorm_backward_kernel';
    'nvjet_sm90_tst_...' stays as it is."""
    name = kernel.replace("<unnamed>", "anon").replace("(anonymous namespace)", "anon")
    name = re.split(r"[<(]", name, maxsplit=1)[0].strip()  # the template arguments and the parameters go
    return name.split(" ")[-1].split("::")[-1]  # 'void' and the namespaces go


def kernel_class(name):
    low = name.lower()
    if low.startswith("nvjet") or "cutlass" in low or "splitkreduce" in low or "gemm" in low or "sm90_xmma" in low:
        return "gemm"
    if "sdpa" in low or "fmha" in low or "flash" in low or low.startswith("cudnn") or name in (
            "forward_tc_kernel", "backward_dq_tc_kernel", "backward_dkv_tc_kernel", "forward_kernel",
            "backward_dq_kernel", "backward_dkv_kernel", "rowdot_kernel"):  # the own flash kernels
        return "attention"
    return "own"


def number(text):
    """ncu's figure ('1,159,264.00'), or None for one it could not collect ('n/a')."""
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def read_ncu(path):
    """{base name: {'launches', 's', 'dram' (bytes or None)}} from ncu's per-kernel CSV."""
    rows = {}
    with open(path, newline="") as f:
        lines = [ln for ln in f if ln.startswith('"')]  # ncu's own log lines (==PROF==) are not CSV
    for r in csv.DictReader(lines):
        name = base_name(r["Kernel Name"])
        metric, unit = r["Metric Name"], r.get("Metric Unit", "")
        if unit not in UNIT and metric in (TIME, READ, WRITE):
            raise SystemExit(f"kernel_table: unknown unit '{unit}' of {metric} in {path}")
        launches, average = int(number(r["Invocations"]) or 0), number(r["Average"])
        if average is None:
            continue  # a metric ncu could not collect for this kernel: the kernel keeps its other figures
        total = average * UNIT[unit] * launches
        e = rows.setdefault(name, {"launches": 0, "s": 0.0, "read": None, "write": None})
        if metric == TIME:
            e["launches"] += launches
            e["s"] += total
        elif metric in (READ, WRITE):
            slot = "read" if metric == READ else "write"
            e[slot] = (e[slot] or 0.0) + total
    for e in rows.values():
        e["dram"] = (e["read"] or 0.0) + (e["write"] or 0.0) if e["read"] is not None or e["write"] is not None \
            else None
    return rows


def screen_bytes(screen):
    """{kernel: {'bytes', 'launches', 'flops'}} summed over the screen's rows of each kernel name."""
    out = {}
    for k in screen["kernels"]:
        e = out.setdefault(k["kernel"], {"bytes": 0.0, "launches": 0, "flops": 0.0})
        e["bytes"] += k["bytes"]
        e["launches"] += k["launches"]
        e["flops"] += k["flops"]
    return out


def attention_flops(screen):
    """Forward 2 B NH T^2 HS (the causal half of 4 B NH T^2 HS), backward 2.5 times that, per layer, for every
    micro-batch of the screen's step (training) and its evaluation micro-batches (forward only)."""
    m, run = screen["model"], screen["run"]
    fwd = 2.0 * run["micro_batch"] * m["n_embd"] * float(m["seq_len"]) ** 2 * m["n_layer"]
    return fwd * 3.5 * run["micro_batches_per_step"] + fwd * run["eval_micro_batches"]


def build(ncu, screen, device, hbm, peak_tflops):
    known = screen_bytes(screen)
    total_s = sum(e["s"] for e in ncu.values())
    gemm_s = sum(e["s"] for n, e in ncu.items() if kernel_class(n) == "gemm")
    attn_s = sum(e["s"] for n, e in ncu.items() if kernel_class(n) == "attention")
    gemm_tflops = screen["gemms"]["flops"] / gemm_s * 1e-12 if gemm_s > 0 else None
    attn_tflops = attention_flops(screen) / attn_s * 1e-12 if attn_s > 0 else None
    rows, unknown, below = [], [], []
    for name, e in sorted(ncu.items(), key=lambda kv: -kv[1]["s"]):
        cls = kernel_class(name)
        share = e["s"] / total_s
        row = {"kernel": name, "class": cls, "launches": e["launches"], "ms": e["s"] * 1e3, "share": share,
               "bytes": None, "bytes_from": "", "tbps": None, "of_peak": None, "tflops": None}
        if cls == "own":
            if e["dram"] is not None:
                row["bytes"], row["bytes_from"] = e["dram"], "DRAM counters"
            elif name in known and known[name]["flops"] == 0:
                row["bytes"], row["bytes_from"] = known[name]["bytes"], "the screen"
                if known[name]["launches"] != e["launches"]:
                    row["bytes_from"] += f" ({known[name]['launches']} launches there)"
            elif name not in known:
                unknown.append(name)
            if row["bytes"] is not None and e["s"] > 0:
                row["tbps"] = row["bytes"] / e["s"] * 1e-12
                row["of_peak"] = row["bytes"] / e["s"] / hbm if hbm else None
                if share > TARGET_SHARE and row["of_peak"] is not None and row["of_peak"] < TARGET_FRACTION:
                    below.append(name)
        elif cls == "gemm":
            row["tflops"] = gemm_tflops
        else:
            row["tflops"] = attn_tflops
        rows.append(row)
    return {"rows": rows, "total_ms": total_s * 1e3, "gemm_ms": gemm_s * 1e3, "attention_ms": attn_s * 1e3,
            "gemm_tflops": gemm_tflops, "attention_tflops": attn_tflops, "unknown": unknown, "below": below,
            "device": device, "hbm": hbm, "peak_tflops": peak_tflops,
            "dram": any(e["dram"] is not None for e in ncu.values())}


def fmt(v, spec):
    return "" if v is None else format(v, spec)


def shown_path(path):
    """A path inside the repository relative to it, any other as given."""
    return os.path.relpath(path, ROOT) if path.startswith(ROOT + os.sep) else path


def markdown(t, title, screen, ncu_path, screen_path):
    run = screen["run"]
    lines = [f"# {title}", "",
             f"Device: {t['device']}; HBM peak {fmt(t['hbm'] and t['hbm'] * 1e-12, '.2f')} TB/s"
             + (f", bf16 dense peak {t['peak_tflops']:g} TFLOP/s" if t["peak_tflops"] else "") + ".",
             f"Profile: `{shown_path(ncu_path)}` (Nsight Compute, gpu__time_duration"
             + (", DRAM bytes" if t["dram"] else "; no DRAM counters: own kernels' bytes from the screen") + ").",
             f"Shapes: `{shown_path(screen_path)}` "
             f"(kernel screen at micro-batch {run['micro_batch']}, {run['micro_batches_per_step']} micro-batch(es) "
             f"per step, {run['eval_micro_batches']} evaluation micro-batch(es)).", "",
             f"Kernels: {t['total_ms']:.2f} ms; GEMMs {t['gemm_ms']:.2f} ms"
             + (f" at {t['gemm_tflops']:.0f} TFLOP/s" if t["gemm_tflops"] else "")
             + (f" ({t['gemm_tflops'] / t['peak_tflops']:.0%} of the peak)" if t["gemm_tflops"] and t["peak_tflops"]
                else "")
             + f"; attention {t['attention_ms']:.2f} ms"
             + (f" at {t['attention_tflops']:.0f} TFLOP/s" if t["attention_tflops"] else "") + ".", "",
             "| kernel | class | launches | GPU ms | share | GB moved | bytes from | TB/s | of HBM peak | TFLOP/s |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in t["rows"]:
        lines.append(f"| `{r['kernel']}` | {r['class']} | {r['launches']} | {r['ms']:.3f} | {r['share']:.1%} | "
                     f"{fmt(r['bytes'] and r['bytes'] * 1e-9, '.3f')} | {r['bytes_from']} | {fmt(r['tbps'], '.2f')} | "
                     f"{fmt(r['of_peak'], '.0%')} | {fmt(r['tflops'], '.0f')} |")
    lines.append("")
    lines.append("Own memory-bound kernels above 1% of the time below 70% of the HBM peak: "
                 + (", ".join(f"`{k}`" for k in t["below"]) if t["below"] else "none") + ".")
    if t["unknown"]:
        lines.append("Own kernels the screen does not know (no bytes): " + ", ".join(f"`{k}`" for k in t["unknown"])
                     + ".")
    return "\n".join(lines) + "\n"


def check_dram_path(screen, hbm):
    """A profile with DRAM counters (ncu --print-units base): the bytes are the counters', not the screen's."""
    import tempfile
    head = '"Kernel Name","Grid Size","Block Size","Invocations","Metric Name","Metric Unit","Minimum","Maximum",' \
           '"Average"\n'
    own = '"void hpct::<unnamed>::residual_kernel<__nv_bfloat16, false>(T1 *, long)","(64, 1, 1)","(256, 1, 1)","2",'
    body = (own + f'"{TIME}","nsecond","1","1","100,000"\n' + own + f'"{READ}","byte","1","1","300,000,000"\n'
            + own + f'"{WRITE}","byte","1","1","100,000,000"\n'
            + f'"nvjet_sm90_x","(2, 66, 1)","(384, 1, 1)","1","{TIME}","nsecond","1","1","n/a"\n')
    with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
        f.write("==PROF== a log line\n" + head + body)
    try:
        t = build(read_ncu(f.name), screen, "NVIDIA H200", hbm, None)
    finally:
        os.unlink(f.name)
    row = t["rows"][0]
    want_tbps = 2 * 400e6 / (2 * 100e-6) * 1e-12  # two launches of 400 MB in 100 us each: 4 TB/s
    if row["bytes_from"] != "DRAM counters" or abs(row["tbps"] - want_tbps) > 1e-9:
        return [f"the DRAM path: {row['bytes_from']!r} at {row['tbps']} TB/s, expected the counters' 4 TB/s"]
    return []


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ncu", help="the profile; --check-self reads the committed one")
    ap.add_argument("--screen", required=True)
    ap.add_argument("--device", default="NVIDIA H200")
    ap.add_argument("--hbm-tbps", type=float, default=None)
    ap.add_argument("--peak-tflops", type=float, default=None)
    ap.add_argument("--title", default="Where one GPT-2 124M training step spends its GPU time")
    ap.add_argument("--out", default=None)
    ap.add_argument("--check-self", action="store_true")
    args = ap.parse_args()
    if args.check_self == bool(args.ncu):
        ap.error("give either --ncu or --check-self (which reads the committed profile of 2026-11-28)")
    if args.check_self:
        args.ncu = SELF_CHECK_CSV
    hbm = hbm_peak(args.device, args.hbm_tbps)
    with open(args.screen) as f:
        screen = json.load(f)
    ncu = read_ncu(args.ncu)
    if not ncu:
        raise SystemExit(f"kernel_table: no kernel rows in {args.ncu}")
    t = build(ncu, screen, args.device, hbm, args.peak_tflops)
    md = markdown(t, args.title, screen, os.path.abspath(args.ncu), os.path.abspath(args.screen))
    if args.out:
        with open(args.out, "w") as f:
            f.write(md)
    print(md, end="")
    print(f"kernel_table: {len(t['rows'])} kernels, {t['total_ms']:.2f} ms; below 70% of the HBM peak: "
          f"{', '.join(t['below']) or 'none'}" + (f"; written to {args.out}" if args.out else ""))
    if args.check_self:
        problems = []
        if "layernorm_backward_kernel" not in t["below"]:
            problems.append("LayerNorm's backward (0.8 TB/s of 4.8 in that profile) is not flagged below 70%")
        if "residual_kernel" in t["below"]:
            problems.append("residual_kernel (about 4 TB/s there) is flagged")
        if not t["gemm_tflops"] or not 600 <= t["gemm_tflops"] <= 800:
            problems.append(f"the GEMMs at {t['gemm_tflops']} TFLOP/s, not 600-800")
        # that profile covered the whole run, so it holds the one cast of the masters into the compute copy before
        # the first step, which the screen (the step's kernels) leaves out
        if set(t["unknown"]) != {"cast_kernel"}:
            problems.append(f"own kernels unknown to the screen: {t['unknown']}, expected only cast_kernel")
        if base_name("void a::<unnamed>::k<float, (int)8>(T1 *, const T2 *)") != "k" or \
                base_name("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_bias_TNT") != \
                "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_bias_TNT":
            problems.append("base_name does not strip a kernel's signature")
        problems += check_dram_path(screen, hbm)
        sys.stdout.flush()
        for p in problems:
            print(f"kernel_table self-check: FAILED: {p}", file=sys.stderr)
        if problems:
            return 1
        print("kernel_table self-check: VALID")
    return 0


if __name__ == "__main__":
    sys.exit(main())
