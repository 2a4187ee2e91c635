#!/usr/bin/python3
"""GPU training benchmarks : hpctrain vs PyTorch on the same GPU, in the same run.

  gpt     GPT-2 124M (inputs/gpt2_124m.toml: L12 C768 NH12, T = 1024, vocabulary 50257), one GPU, the micro-batch
          as large as fits (--gpt-micro-batch, else the first of 32 16 8 4 2 1 that `train_gpt --plan` puts under 90%
          of the GPU's memory and that runs; on out-of-memory the next), one micro-batch per step (--accum for more):
          build/apps/train_gpt --set train.device=cuda on a synthetic llm.c-format shard of uniform random tokens
          (the speed does not depend on the tokens; --gpt-data for real shards), vs a nanoGPT-style PyTorch GPT-2
          (validation/torch_models.py) with bf16 autocast, torch.compile where it works (else eager, and the table
          says which), fused AdamW where torch has it, clip 1.0, the same batch and sequence length; plus PyTorch in
          fp32 with TF32 off (the like-for-like line for hpctrain's fp32 row).
  resnet  ResNet-50 at 3x224x224, 1000 classes (inputs/resnet50.toml), micro-batch 256 128 64 32 16 likewise:
          build/apps/train_resnet --set train.device=cuda on a synthetic HDF5 image set (augmentation off: the
          training step, not the host loader, is measured) vs torchvision's resnet50 (or the same network from
          validation/torch_models.py when torchvision is missing) with SGD (Nesterov 0.9, weight decay on
          conv/fc weights), channels_last + bf16 autocast (+ torch.compile where it works), and fp32 NCHW, TF32 off.

Figures: the median step time over the steps after --warmup (hpctrain: metrics.jsonl `ms`; PyTorch: wall time of
the whole step incl. the host-to-device copy of the batch from pinned memory, ending with cuda.synchronize);
tokens/s or images/s from it; MFU with the FLOP counts the apps define and print (`--plan ... --json`: GPT the PaLM
count 6N + 12 L C T flops per token, ResNet 3 x forward FLOPs per image; docs/performance.md), against the bf16 dense
tensor peak of the device (or --peak-tflops: the MFU targets are defined against it), and against the peak of the
precision the row computes in (fp32 without TF32: the FP32 peak; bf16: the bf16 peak); peak GPU memory of the
process, sampled with nvidia-smi every 0.2 s (or the device's used memory above the idle baseline when nvidia-smi does
not show the process, e.g. in a container), and for PyTorch also torch.cuda.max_memory_allocated. The peaks come from
the one table, lib/core/device_peaks.cpp, through `train_gpt DECK --plan 1 --json --device-name <nvidia-smi name>`.
hpctrain runs once per --hp-precisions value (train.precision; default bf16 then fp32: the bf16 row against PyTorch's
bf16 autocast, the fp32 row like-for-like against PyTorch fp32 with TF32 off), each at the largest micro-batch that
fits; PyTorch runs at the first row's micro-batch. --hp-set train.precision=X runs that one precision only.
Targets (printed PASS/MISS, not a failure): GPT-2 124M MFU >= 50% on an H100 (vs the bf16 peak);
ResNet-50 images/s >= PyTorch's best.

usage:
  /usr/bin/python3 validation/bench_gpu.py [--only gpt|resnet] [--record]      # on a GPU machine
  /usr/bin/python3 validation/bench_gpu.py --dry-run [--work DIR]              # anywhere: checks without a GPU
  (one workload takes a few minutes; on a machine with a 10-minute command limit run --only gpt, --only resnet)
options: --build DIR (default build) or --train-gpt / --train-resnet EXE, --steps 40 --warmup 10 (30 measured steps,
  docs/performance.md), --accum 1, --gpt-micro-batch N, --resnet-micro-batch N, --gpt-data TRAIN VAL (real shards),
  --peak-tflops X (bf16 dense), --no-compile, --hp-set KEY=VALUE (extra --set for both apps, e.g. a precision key),
  --timeout S (per run). --record writes validation/results/gpu_<device>.md (gpu_<device>_<only>.md with --only).
--dry-run checks what it can without a GPU: the binaries exist, the decks parse with the benchmark's overrides
(`--plan --json`), the apps' FLOP counts and peak lookup, the whole benchmark orchestration on the CPU
with tiny models (synthetic data, both apps run and parsed, the PyTorch worker in bf16 autocast and fp32, table and
record), the PyTorch models' parameter counts, and the table and record code on FAKE numbers (written under
--work, never to validation/results). Prints VALID at the end (the ctest validation_bench_gpu_dry).
"""
import argparse
import datetime
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GPT_DECK = os.path.join(ROOT, "inputs", "gpt2_124m.toml")
RESNET_DECK = os.path.join(ROOT, "inputs", "resnet50.toml")
GPT_CANDIDATES = [32, 16, 8, 4, 2, 1]
RESNET_CANDIDATES = [256, 128, 64, 32, 16]
OOM = re.compile(r"out of memory|cudaErrorMemoryAllocation|CUBLAS_STATUS_ALLOC_FAILED|CUDNN_STATUS_ALLOC_FAILED|"
                 r"CUDA_ERROR_OUT_OF_MEMORY|OutOfMemoryError", re.I)


def log(msg=""):
    print(msg, flush=True)


# ---------------------------------------------------------------- device facts ----

def sh(cmd, timeout=60):
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                           timeout=timeout)
        return p.returncode, p.stdout
    except (OSError, subprocess.TimeoutExpired) as e:
        return 127, str(e)


def gpu_index():
    v = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip()
    return v if v.isdigit() else "0"


def device_info():
    """nvidia-smi's name, driver, CUDA (driver API) version, total memory (MiB) of the GPU the apps use."""
    rc, out = sh(["nvidia-smi", "-i", gpu_index(), "--query-gpu=name,driver_version,memory.total",
                  "--format=csv,noheader,nounits"])
    if rc != 0 or not out.strip():
        return None
    name, driver, mem = [x.strip() for x in out.strip().splitlines()[0].split(",")]
    _, banner = sh(["nvidia-smi"])
    m = re.search(r"CUDA Version:\s*([\d.]+)", banner)
    _, nvcc = sh(["nvcc", "--version"])
    m2 = re.search(r"release ([\d.]+)", nvcc)
    return {"name": name, "driver": driver, "mem_mib": float(mem), "cuda_driver": m.group(1) if m else "?",
            "nvcc": m2.group(1) if m2 else "not found"}


def peaks_for(train_gpt, name, override):
    """{'label', 'bf16', 'tf32', 'fp32', 'fp16'} (TFLOP/s, dense) for the device name, from the apps' peak table
    (lib/core/device_peaks.cpp) through `train_gpt --plan 1 --json --device-name NAME`; --peak-tflops sets bf16."""
    pl = plan_json(train_gpt, GPT_DECK, ["--plan", "1"] + (["--device-name", name] if name else []))[0]
    e = pl["device_peaks"]
    p = {"label": e["label"], **{k: float(e[k]) for k in ("bf16", "tf32", "fp32", "fp16")}} if e else \
        {"label": "unknown device", "bf16": None, "tf32": None, "fp32": None, "fp16": None}
    if override:
        p["bf16"] = override
        p["label"] += f", bf16 peak {override:g} from --peak-tflops"
    return p


def slug(name):
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


class GpuMemSampler:
    """Peak GPU memory (MiB) of one process, from nvidia-smi every 0.2 s; falls back to the device's used memory
    above the baseline before the start when nvidia-smi does not list the process (another PID namespace)."""

    def __init__(self, enabled):
        self.enabled = enabled
        self.proc_max = 0.0
        self.dev_max = 0.0
        self.base = self._dev_used() if enabled else 0.0
        self.pid = None
        self._stop = threading.Event()
        self._thread = None

    def _dev_used(self):
        rc, out = sh(["nvidia-smi", "-i", gpu_index(), "--query-gpu=memory.used", "--format=csv,noheader,nounits"])
        try:
            return float(out.strip().splitlines()[0]) if rc == 0 else 0.0
        except (ValueError, IndexError):
            return 0.0

    def _loop(self):
        while not self._stop.is_set():
            rc, out = sh(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"])
            for line in out.splitlines() if rc == 0 else []:
                parts = [x.strip() for x in line.split(",")]
                if len(parts) == 2 and parts[0] == str(self.pid):
                    try:
                        self.proc_max = max(self.proc_max, float(parts[1]))
                    except ValueError:
                        pass
            self.dev_max = max(self.dev_max, self._dev_used() - self.base)
            self._stop.wait(0.2)

    def start(self, pid):
        self.pid = pid
        if self.enabled:
            self._thread = threading.Thread(target=self._loop, daemon=True)
            self._thread.start()

    def stop(self):
        """(MiB or None, source)."""
        if not self.enabled:
            return None, "n/a (no nvidia-smi)"
        self._stop.set()
        self._thread.join()
        if self.proc_max > 0:
            return self.proc_max, "nvidia-smi, process"
        if self.dev_max > 0:
            return self.dev_max, "nvidia-smi, device used above idle"
        return None, "n/a (nvidia-smi saw nothing)"


# ---------------------------------------------------------------- decks ----

def read_deck(path):
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        import tomli as tomllib
    with open(path, "rb") as f:
        return tomllib.load(f)


# ---------------------------------------------------------------- synthetic data ----

def write_token_shard(path, n, vocab, seed):
    """An llm.c-format shard (lib/data/token_shard.hpp) of n uniform random tokens < vocab."""
    import numpy as np
    header = np.zeros(256, dtype="<i4")
    header[:3] = (20240520, 1, n)
    toks = np.random.default_rng(seed).integers(0, vocab, n, dtype=np.uint16)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(toks.astype("<u2").tobytes())


def write_image_set(path, n, hw, classes, seed):
    """An HDF5 image set as train_resnet reads it (README "Image datasets"): uint8 /images, int32 /labels."""
    import h5py
    import numpy as np
    rng = np.random.default_rng(seed)
    with h5py.File(path, "w") as f:
        f.create_dataset("images", data=rng.integers(0, 256, (n, 3, hw, hw), dtype=np.uint8))
        f.create_dataset("labels", data=rng.integers(0, classes, n).astype("int32"))
        f.attrs["num_classes"] = classes


# ---------------------------------------------------------------- hpctrain ----

def plan_json(exe, deck, args):
    """Runs `exe deck ARGS --json` (ARGS: --plan ..., --set ...) and returns (its {"plan": ...} object, the output).
    Raises RuntimeError with the app's message when the deck does not parse."""
    cmd = [exe, deck] + args + ["--json"]
    rc, out = sh(cmd, timeout=120)
    if rc != 0:
        raise RuntimeError(f"{' '.join(cmd)} -> rc {rc}: {out.strip()[-500:]}")
    lines = [l for l in out.splitlines() if l.startswith('{"plan":')]
    if len(lines) != 1:
        raise RuntimeError(f"{' '.join(cmd)}: expected one {{\"plan\": ...}} line in: {out[-800:]}")
    return json.loads(lines[0])["plan"], out


def plan(exe, deck, sets, gpt):
    """`--plan --json` with the benchmark's overrides: the app's plan object (train_gpt: parameters, flops_per_token,
    memory_bytes_max_rank, ...; train_resnet: parameters, flops_per_image_forward, flops_per_image_training,
    memory_bytes, ...) plus memory_gib (the largest rank's plan). Raises RuntimeError when the deck does not parse."""
    args = ["--plan", "1"]
    for s in sets:
        args += ["--set", s]
    p = plan_json(exe, deck, args)[0]
    p["memory_gib"] = p["memory_bytes_max_rank" if gpt else "memory_bytes"] / 2 ** 30
    return p


def help_precision(exe):
    """(key, default) of a precision deck key if the app has one (e.g. train.precision), else (None, None)."""
    _, out = sh([exe, "--help"])
    m = re.search(r"^\s+(\S*precision\S*)\s+string\s+=\s+\"([^\"]*)\"", out, re.M)
    return (m.group(1), m.group(2)) if m else (None, None)


def last_line(text):
    """The last non-empty line of a program's output (its error message), fit for a table cell."""
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    return (lines[-1] if lines else "no output").replace("|", "/")[:300]


def run_hpctrain(exe, deck, sets, work, name, timeout, warmup, sample_mem):
    """Runs one app; returns a result dict: ms (median after warm-up), ms_all, perf (the PERFORMANCE figures),
    mem_mib, mem_src, cmd; or {'oom': True} / {'error': text}."""
    out = os.path.join(work, name)
    shutil.rmtree(out, ignore_errors=True)
    cmd = [exe, deck, "--out", out]
    for s in sets:
        cmd += ["--set", s]
    sampler = GpuMemSampler(sample_mem)
    t0 = time.time()
    with open(os.path.join(work, name + ".log"), "w") as logf:
        p = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, text=True)
        sampler.start(p.pid)
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            rc = None
    mem, src = sampler.stop()
    with open(os.path.join(work, name + ".log"), errors="replace") as f:
        text = f.read()
    res = {"cmd": cmd, "wall_s": time.time() - t0}
    log(f"  {name}: rc {rc} in {res['wall_s']:.1f} s")
    if rc != 0:
        if OOM.search(text):
            return dict(res, oom=True)
        log("    " + "\n    ".join(text.strip().splitlines()[-6:]))
        return dict(res, error=f"rc {rc}: {last_line(text)}")
    with open(os.path.join(out, "metrics.jsonl")) as f:
        ms = [json.loads(l)["ms"] for l in f]
    perf = [l for l in text.splitlines() if l.startswith("PERFORMANCE")]
    figs = perf[-1].split("|")[1].split() if len(perf) >= 2 else []
    if len(ms) <= warmup:
        return dict(res, error=f"{len(ms)} steps recorded, need more than --warmup {warmup}")
    return dict(res, ms=statistics.median(ms[warmup:]), ms_all=ms, perf=figs, mem_mib=mem, mem_src=src,
                measured=len(ms) - warmup)


def bench_hpctrain(kind, exe, deck, base_sets, candidates, mem_gib, work, args, unit_per_mb, sample_mem):
    """Largest micro-batch that fits: candidates whose plan is under 90% of mem_gib (all when mem_gib is None),
    tried in descending order, the next on out-of-memory. Returns (result, micro_batch, plans)."""
    plans = {}
    for mb in candidates:
        try:
            plans[mb] = plan(exe, deck, base_sets(mb), kind == "gpt")
        except RuntimeError as e:
            log(f"  plan at micro-batch {mb} fails: {e}")
    # a candidate without a plan is tried too (the out-of-memory fallback decides)
    fitting = [mb for mb in candidates
               if mb not in plans or mem_gib is None or plans[mb]["memory_gib"] <= 0.9 * mem_gib]
    if not fitting:
        fitting = candidates[-1:]
    for mb in fitting:
        log(f"  hpctrain {kind} micro-batch {mb}"
            + (f" (plan {plans[mb]['memory_gib']:.1f} GiB of {mem_gib:.1f})" if mb in plans and mem_gib else ""))
        r = run_hpctrain(exe, deck, base_sets(mb), work, f"hpctrain_{kind}_mb{mb}", args.timeout, args.warmup,
                         sample_mem)
        if r.get("oom"):
            log(f"  out of memory at micro-batch {mb}: trying the next")
            continue
        if "error" in r:
            log(f"  run failed: {r['error']}")
        r["throughput"] = unit_per_mb * mb / r["ms"] * 1e3 if "ms" in r else None
        return r, mb, plans
    return {"error": "out of memory at every micro-batch"}, None, plans


# ---------------------------------------------------------------- PyTorch worker ----

def torch_worker(spec):
    """Runs in a subprocess: spec = {model, device, precision (bf16|fp32), compile, batch, steps, warmup, tiny};
    prints `RESULT <json>` last."""
    import torch
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import torch_models
    dev = torch.device(spec["device"])
    cuda = dev.type == "cuda"
    bf16 = spec["precision"] == "bf16"
    if cuda:
        # fp32: TF32 off (hpctrain's fp32 GEMMs and convolutions are full fp32); bf16: TF32 for what autocast leaves
        torch.backends.cuda.matmul.allow_tf32 = bf16
        torch.backends.cudnn.allow_tf32 = bf16
        torch.backends.cudnn.benchmark = True
    B, steps, warmup = spec["batch"], spec["steps"], spec["warmup"]
    torch.manual_seed(0)
    info = {"torch": torch.__version__, "torch_cuda": getattr(torch.version, "cuda", None)}  # build() adds to it

    def build():
        if spec["model"] == "gpt":
            c = spec["tiny"] or dict(n_layer=12, n_head=12, n_embd=768, seq_len=1024, vocab_size=50257)
            m = torch_models.GPT(**c).to(dev)
            decay = [p for p in m.parameters() if p.dim() >= 2]
            other = [p for p in m.parameters() if p.dim() < 2]
            kw = {}
            import inspect
            if cuda and "fused" in inspect.signature(torch.optim.AdamW).parameters:
                kw["fused"] = True
            opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                                    lr=6e-4, betas=(0.9, 0.95), eps=1e-8, **kw)
            info["optimizer"] = "AdamW " + ("fused" if kw else "(not fused: torch lacks fused=)")
            info["model_src"] = "validation/torch_models.py GPT"
            gen = torch.Generator().manual_seed(1)
            pool = [torch.randint(0, c["vocab_size"], (B, c["seq_len"] + 1), generator=gen) for _ in range(2)]
        else:
            t = spec["tiny"] or {"width": 64, "hw": 224}
            m, src = torch_models.resnet50(1000, t["width"])
            m = m.to(dev)
            if bf16 and cuda:
                m = m.to(memory_format=torch.channels_last)
            decay = [p for n, p in m.named_parameters() if p.dim() > 1]
            other = [p for n, p in m.named_parameters() if p.dim() <= 1]
            opt = torch.optim.SGD([{"params": decay, "weight_decay": 1e-4}, {"params": other, "weight_decay": 0.0}],
                                  lr=0.1, momentum=0.9, nesterov=True)
            info["optimizer"] = "SGD Nesterov 0.9"
            info["model_src"] = src
            gen = torch.Generator().manual_seed(1)
            pool = [(torch.randn(B, 3, t["hw"], t["hw"], generator=gen), torch.randint(0, 1000, (B,), generator=gen))
                    for _ in range(2)]
        if cuda:
            pool = [tuple(x.pin_memory() for x in p) if isinstance(p, tuple) else p.pin_memory() for p in pool]
        return m, opt, pool

    def step(m, opt, batch):
        if spec["model"] == "gpt":
            b = batch.to(dev, non_blocking=True)
            x, y = b[:, :-1], b[:, 1:]
        else:
            x, y = (t.to(dev, non_blocking=True) for t in batch)
            if bf16 and cuda:
                x = x.contiguous(memory_format=torch.channels_last)
        opt.zero_grad(set_to_none=True)
        if bf16:
            with torch.autocast(device_type=dev.type, dtype=torch.bfloat16):
                out = m(x, y) if spec["model"] == "gpt" else torch.nn.functional.cross_entropy(m(x).float(), y)
        else:
            out = m(x, y) if spec["model"] == "gpt" else torch.nn.functional.cross_entropy(m(x), y)
        out.backward()
        if spec["model"] == "gpt":
            torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
        return out

    def run(m, opt, pool):
        times, losses = [], []
        for s in range(steps):
            t0 = time.perf_counter()
            loss = step(m, opt, pool[s % len(pool)])
            if cuda:
                torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) * 1e3)
            losses.append(float(loss.detach()))
        return times, losses

    def attempt(compiled):
        m, opt, pool = build()
        fwd = m
        if compiled:
            fwd = torch.compile(m)
        return run(fwd, opt, pool)

    result = {}
    try:
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        mode, times = "eager", None
        if spec["compile"] and hasattr(torch, "compile"):
            try:
                times, losses = attempt(True)
                mode = "torch.compile"
            except Exception as e:  # noqa: BLE001 -- any compile failure: measure eager instead, say why
                if "out of memory" in str(e).lower():
                    raise
                first = str(e).splitlines()[0][:160] if str(e) else ""
                mode = f"eager (torch.compile failed: {type(e).__name__}: {first})"
        elif spec["compile"]:
            mode = "eager (torch.compile not in this torch)"
        if times is None:  # outside the except block: the failed attempt's model and optimizer are freed by now
            if cuda:
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
            times, losses = attempt(False)
        result.update(mode=mode, ms=statistics.median(times[warmup:]), ms_all=times, loss_first=losses[0],
                      loss_last=losses[-1], measured=len(times) - warmup)
        if cuda:
            result["max_allocated_mib"] = torch.cuda.max_memory_allocated() / 2 ** 20
            result["max_reserved_mib"] = torch.cuda.max_memory_reserved() / 2 ** 20
    except RuntimeError as e:
        if "out of memory" not in str(e).lower():
            raise
        result["oom"] = True
    print("RESULT " + json.dumps(dict(info, **result)), flush=True)


def run_torch(spec, timeout, sample_mem, log_path):
    """The worker in a subprocess (a clean CUDA context and memory peak per configuration)."""
    cmd = [sys.executable, os.path.abspath(__file__), "--torch-worker", json.dumps(spec)]
    sampler = GpuMemSampler(sample_mem)
    t0 = time.time()
    with open(log_path, "w") as logf:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=logf, text=True)
        sampler.start(p.pid)
        try:
            out, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
    mem, src = sampler.stop()
    res = [json.loads(l[7:]) for l in out.splitlines() if l.startswith("RESULT ")]
    name = f"pytorch {spec['model']} {spec['precision']} mb {spec['batch']}"
    log(f"  {name}: rc {p.returncode} in {time.time() - t0:.1f} s")
    if p.returncode != 0 or not res:
        with open(log_path, errors="replace") as f:
            text = f.read()
        log("    " + "\n    ".join(text.strip().splitlines()[-6:]))
        return {"error": f"rc {p.returncode}: {last_line(text)}", "cmd": cmd}
    return dict(res[0], mem_mib=mem, mem_src=src, cmd=cmd)


def bench_torch(model, precision, batch, args, device, sample_mem, work, tiny=None):
    """PyTorch at `batch`, halving on out-of-memory. Returns (result, batch)."""
    while batch >= 1:
        spec = {"model": model, "device": device, "precision": precision, "batch": batch, "steps": args.steps,
                "warmup": args.warmup, "compile": (not args.no_compile) and precision == "bf16", "tiny": tiny}
        r = run_torch(spec, args.timeout, sample_mem, os.path.join(work, f"torch_{model}_{precision}_mb{batch}.log"))
        if not r.get("oom"):
            return r, batch
        log(f"  PyTorch out of memory at batch {batch}: halving")
        batch //= 2
    return {"error": "out of memory at every batch"}, None


# ---------------------------------------------------------------- table ----

def fmt(x, spec, na="n/a"):
    return na if x is None else format(x, spec)


def pct(x):
    return "n/a" if x is None else f"{100 * x:.1f}%"


def make_rows(results, peaks):
    """Markdown rows from the per-configuration results: each {workload, program, precision, mb, res, unit,
    flops_per_unit, peak_key}."""
    rows = []
    hp_tp = {r["workload"]: r["res"].get("throughput") for r in results if r["program"].startswith("hpctrain")}
    for r in results:
        res = r["res"]
        tput = res.get("throughput")
        achieved = tput * r["flops_per_unit"] / 1e12 if tput and r["flops_per_unit"] else None
        mfu = achieved / peaks["bf16"] if achieved and peaks["bf16"] else None
        own_peak = peaks.get(r["peak_key"])
        mfu_own = achieved / own_peak if achieved and own_peak else None
        r["mfu"] = mfu
        mem = res.get("mem_mib")
        mem_s = f"{mem / 1024:.1f} GiB" if mem else "n/a"
        if res.get("max_allocated_mib"):
            mem_s += f" (alloc {res['max_allocated_mib'] / 1024:.1f})"
        ratio = ""
        if not r["program"].startswith("hpctrain") and tput and hp_tp.get(r["workload"]):
            ratio = f"{hp_tp[r['workload']] / tput:.2f}x"
        status = res.get("error") and "run failed: " + res["error"][:120]
        rows.append(f"| {r['workload']} | {r['program']} | {r['precision']} | {fmt(r['mb'], 'd')} | "
                    + (f"{status} | | | | | | |" if status else
                       f"{res['ms']:.1f} | {tput:,.0f} {r['unit']} | {fmt(achieved, '.1f')} | "
                       f"{pct(mfu)} | {pct(mfu_own)} ({r['peak_key']}) | {mem_s} | {ratio} |"))
    head = ["| workload | program | precision | micro-batch | ms/step (median) | throughput | TFLOP/s | MFU (bf16 peak) "
            "| MFU (own precision's peak) | peak GPU memory | hpctrain / this |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    return head + rows


def targets(results, dev_name):
    """The two performance targets as PASS / MISS lines (not failures)."""
    lines = []
    hp = {r["workload"]: r for r in results if r["program"].startswith("hpctrain")}
    g = hp.get("GPT-2 124M")
    if g is not None:
        mfu = g.get("mfu")
        on_h100 = bool(re.search(r"H100|H200", dev_name or ""))
        verdict = "n/a (no MFU)" if mfu is None else ("PASS" if mfu >= 0.5 else "MISS")
        lines.append(f"TARGET GPT-2 124M MFU >= 50% on an H100 (bf16 peak): {verdict} "
                     f"(hpctrain {pct(mfu)} on {dev_name}"
                     f"{'' if on_h100 else '; not an H100: the target is stated for an H100'})")
    r = hp.get("ResNet-50")
    if r is not None:
        pt = [x for x in results if x["workload"] == "ResNet-50" and not x["program"].startswith("hpctrain")
              and x["res"].get("throughput")]
        best = max(pt, key=lambda x: x["res"]["throughput"]) if pt else None
        hp_t = r["res"].get("throughput")
        if best is None or not hp_t:
            lines.append("TARGET ResNet-50 images/s >= PyTorch's: n/a (a run failed)")
        else:
            bt = best["res"]["throughput"]
            lines.append(f"TARGET ResNet-50 images/s >= PyTorch's: {'PASS' if hp_t >= bt else 'MISS'} "
                         f"(hpctrain {hp_t:,.0f} vs PyTorch {best['precision']} {bt:,.0f} images/s, "
                         f"{hp_t / bt:.2f}x)")
    return lines


def rel(cmd):
    return " ".join(shlex.quote(os.path.relpath(c, ROOT) if os.path.isabs(c) and c.startswith(ROOT) else c)
                    for c in cmd)


def report(path, title, dev, torch_info, peaks, args, table, target_lines, results, notes):
    commit = sh(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"])[1].strip() or "?"
    dirty = sh(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"])[1].strip()
    lines = [f"# {title}", "",
             f"- date: {datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}",
             f"- device: {dev['name']} ({dev['mem_mib'] / 1024:.0f} GiB), driver {dev['driver']}, CUDA (driver) "
             f"{dev['cuda_driver']}, nvcc {dev['nvcc']}",
             f"- PyTorch {torch_info.get('torch', '?')} (CUDA {torch_info.get('torch_cuda', '?')}); hpctrain "
             f"{commit}{' (+ local changes)' if dirty else ''}",
             f"- peaks (dense TFLOP/s, {peaks['label']}): bf16 {fmt(peaks['bf16'], 'g')}, tf32 "
             f"{fmt(peaks['tf32'], 'g')}, fp32 {fmt(peaks['fp32'], 'g')}",
             f"- method: median step time over the steps after {args.warmup} warm-up steps of {args.steps}; MFU = "
             "achieved FLOP/s / peak, GPT 6N + 12 L C T flops per token (PaLM), ResNet 3 x forward FLOPs per image "
             "(both from the apps' --plan --json; peaks: lib/core/device_peaks.cpp); memory: nvidia-smi sampled every 0.2 s (alloc: torch.cuda.max_memory_allocated)",
             f"- command: `/usr/bin/python3 validation/bench_gpu.py {' '.join(args.argv)}`", ""]
    lines += notes + ["", *table, "", "```", *target_lines, "```", "", "## Commands", ""]
    for r in results:
        if r["res"].get("cmd"):
            lines.append(f"- {r['workload']}, {r['program']} {r['precision']}: `{rel(r['res']['cmd'])}`")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


# ---------------------------------------------------------------- main ----

def gpt_sets(mb, args, train_bin, val_bin, peak):
    return ["train.device=cuda", f"train.steps={args.steps}", f"train.micro_batch={mb}",
            f"train.global_batch={mb * args.accum}", f"data.train={train_bin}", f"data.val={val_bin}",
            "data.eval_sequences=64", "train.eval_every=0", "sample.tokens=0", "checkpoint.at_end=false",
            f"optim.warmup_steps={args.steps // 4}", "optim.decay_steps=0",
            "checkpoint.every=0", "log.every=1"] + ([f"log.peak_tflops={peak}"] if peak else []) + args.hp_set


def resnet_sets(mb, args, train_h5, test_h5, peak):
    return ["train.device=cuda", "train.epochs=0", f"train.steps={args.steps}", f"train.micro_batch={mb}",
            f"train.global_batch={mb * args.accum}", f"data.train={train_h5}", f"data.test={test_h5}",
            "data.eval_images=64", "data.crop_pad=0", "data.flip=false", f"train.eval_every={args.steps}",
            "checkpoint.at_end=false", "checkpoint.every=0", "checkpoint.every_minutes=0", "log.every=1"] + \
        ([f"log.peak_tflops={peak}"] if peak else []) + args.hp_set


def precision_label(exe, hp_set):
    key, default = help_precision(exe)
    if key is None:
        return "fp32"
    for s in hp_set:
        if s.startswith(key + "="):
            return s.split("=", 1)[1]
    return default


def hp_precisions(exe, args, on_gpu):
    """[(label, extra --set)] of the hpctrain rows: each of --hp-precisions (default bf16,fp32) on a GPU, unless
    --hp-set fixes the precision key; the CPU (--dry-run) computes fp32 only."""
    key, _ = help_precision(exe)
    fixed = [s for s in args.hp_set if key and s.startswith(key + "=")]
    if key is None or fixed or not on_gpu:
        return [(precision_label(exe, args.hp_set), [])]
    return [(p, [f"{key}={p}"]) for p in args.hp_precisions.split(",") if p]


def peak_key(precision):
    return precision if precision in ("fp32", "tf32", "bf16", "fp16") else "bf16"


def app_paths(args):
    return {"train_gpt": args.train_gpt or os.path.join(args.build, "apps", "train_gpt"),
            "train_resnet": args.train_resnet or os.path.join(args.build, "apps", "train_resnet")}


def main_gpu(args):
    dev = device_info()
    if dev is None:
        sys.exit("error: nvidia-smi lists no GPU: run this on a GPU machine, or --dry-run here")
    train_gpt = app_paths(args)["train_gpt"]
    if not os.path.exists(train_gpt):
        sys.exit(f"error: {train_gpt} not found: build it (scripts/build.sh -DCMAKE_CUDA_ARCHITECTURES=90)")
    peaks = peaks_for(train_gpt, dev["name"], args.peak_tflops)
    log(f"device: {dev['name']}, driver {dev['driver']}, CUDA {dev['cuda_driver']}; peaks {peaks}")
    work = args.work or tempfile.mkdtemp(prefix="bench_gpu_")
    os.makedirs(work, exist_ok=True)
    results, notes, torch_info = run_suite(args, dev, peaks, work, "cuda", tiny=False)
    path = None
    if args.record:
        os.makedirs(os.path.join(ROOT, "validation", "results"), exist_ok=True)
        path = os.path.join(ROOT, "validation", "results",
                            f"gpu_{slug(dev['name'])}{'_' + args.only if args.only else ''}.md")
    finish(results, dev, torch_info, peaks, args, notes, f"GPU training benchmarks: hpctrain vs PyTorch on "
           f"{dev['name']}", path)


def run_suite(args, dev, peaks, work, device, tiny):
    """Both workloads (or --only one): hpctrain at the largest micro-batch that fits, PyTorch bf16 and fp32 at the
    same batch. device 'cpu' + tiny: the same orchestration with tiny models on the CPU (--dry-run)."""
    exes = app_paths(args)
    for e in exes.values():
        if not os.path.exists(e):
            sys.exit(f"error: {e} not found: build it (scripts/build.sh -DCMAKE_CUDA_ARCHITECTURES=90)")
    os.makedirs(work, exist_ok=True)
    on_gpu = device == "cuda"
    mem_gib = dev["mem_mib"] / 1024 if on_gpu else None
    results, notes, torch_info = [], [], {}

    def dev_sets(sets):
        return [f"train.device={device}" if s.startswith("train.device=") else s for s in sets]

    if args.only in (None, "gpt"):
        d = read_deck(GPT_DECK)["model"]
        L, NH, C, T, V = d["n_layer"], d["n_head"], d["n_embd"], d["seq_len"], d["vocab_size"]
        tiny_sets = []
        if tiny:
            L, NH, C, T = 2, 2, 64, 64
            tiny_sets = [f"model.n_layer={L}", f"model.n_head={NH}", f"model.n_embd={C}", f"model.seq_len={T}"]
        fpt, n_flops = None, None  # from train_gpt --plan --json
        if args.gpt_data:
            tr, va = args.gpt_data
        else:
            tr, va = os.path.join(work, "gpt_train.bin"), os.path.join(work, "gpt_val.bin")
            write_token_shard(tr, (1 << 16) if tiny else (8 << 20), V, 1)
            write_token_shard(va, 128 * T, V, 2)
            notes.append(f"- GPT data: synthetic llm.c shards of uniform random tokens (vocabulary {V})")
        log("== GPT-2 124M" + (" (tiny: L2 C64 T64, CPU)" if tiny else ""))
        cands = [args.gpt_micro_batch] if args.gpt_micro_batch else ([2] if tiny else GPT_CANDIDATES)
        first_mb = None
        for prec, psets in hp_precisions(exes["train_gpt"], args, on_gpu):
            hp, mb, plans = bench_hpctrain(
                "gpt", exes["train_gpt"], GPT_DECK,
                lambda m: dev_sets(gpt_sets(m, args, tr, va, peaks["bf16"])) + psets + tiny_sets,
                cands, mem_gib, work, args, T * args.accum, on_gpu)
            first_mb = first_mb or mb
            if plans and fpt is None:
                pl = next(iter(plans.values()))
                fpt, n_flops = pl["flops_per_token"], pl["parameters_for_flops"]
            results.append({"workload": "GPT-2 124M", "program": "hpctrain", "precision": prec, "mb": mb, "res": hp,
                            "unit": "tok/s", "flops_per_unit": fpt, "peak_key": peak_key(prec)})
            if hp.get("perf"):
                notes.append(f"- train_gpt ({prec}) own PERFORMANCE figures (ms/step tokens/s tokens/s/rank MFU): "
                             f"{' '.join(hp['perf'])}")
        tb = first_mb or args.gpt_micro_batch or 8
        tcfg = dict(n_layer=L, n_head=NH, n_embd=C, seq_len=T, vocab_size=V) if tiny else None
        for p in ("bf16", "fp32"):
            r, b = bench_torch("gpt", p, tb * args.accum, args, device, on_gpu, work, tcfg)
            torch_info = {k: r.get(k) for k in ("torch", "torch_cuda")} if r.get("torch") else torch_info
            results.append({"workload": "GPT-2 124M", "program": f"PyTorch {r.get('mode', '')}".strip(),
                            "precision": p + (" autocast" if p == "bf16" else ", TF32 off"),
                            "mb": b, "res": dict(r, throughput=(T * b / r["ms"] * 1e3) if "ms" in r else None),
                            "unit": "tok/s", "flops_per_unit": fpt, "peak_key": p})
        notes.append(f"- GPT flops per token 6N + 12 L C T = {fmt(fpt and fpt / 1e6, '.1f')} M (N = "
                     f"{fmt(n_flops, ',')}; train_gpt --plan --json); one micro-batch per step x --accum {args.accum}")
    if args.only in (None, "resnet"):
        log("== ResNet-50" + (" (tiny: width 8, 3x64x64, CPU)" if tiny else ""))
        hw = 64 if tiny else 224
        tiny_sets = ["model.base_width=8", "optim.lr=0.001"] if tiny else []
        cands = [args.resnet_micro_batch] if args.resnet_micro_batch else ([2] if tiny else RESNET_CANDIDATES)
        n = max(2 * cands[0] * args.accum, 8 if tiny else 128)
        tr, te = os.path.join(work, "resnet_train.h5"), os.path.join(work, "resnet_test.h5")
        write_image_set(tr, n, hw, 1000, 1)
        write_image_set(te, 64, hw, 1000, 2)
        notes.append(f"- ResNet data: synthetic HDF5, {n} random 3x{hw}x{hw} images of 1000 classes; augmentation "
                     "off (data.crop_pad=0, data.flip=false); PyTorch: random float batches copied from pinned memory")
        first_mb, fpi = None, None
        for prec, psets in hp_precisions(exes["train_resnet"], args, on_gpu):
            hp, mb, plans = bench_hpctrain(
                "resnet", exes["train_resnet"], RESNET_DECK,
                lambda m: dev_sets(resnet_sets(m, args, tr, te, peaks["bf16"])) + psets + tiny_sets,
                cands, mem_gib, work, args, args.accum, on_gpu)
            first_mb = first_mb or mb
            fpi = fpi or (next(iter(plans.values()))["flops_per_image_training"] if plans else None)
            results.append({"workload": "ResNet-50", "program": "hpctrain", "precision": prec, "mb": mb, "res": hp,
                            "unit": "img/s", "flops_per_unit": fpi, "peak_key": peak_key(prec)})
            if hp.get("perf"):
                notes.append(f"- train_resnet ({prec}) own PERFORMANCE figures (ms/step images/s images/s/rank MFU): "
                             f"{' '.join(hp['perf'])}")
        tb = first_mb or args.resnet_micro_batch or 64
        for p in ("bf16", "fp32"):
            r, b = bench_torch("resnet", p, tb * args.accum, args, device, on_gpu, work,
                               {"width": 8, "hw": hw} if tiny else None)
            torch_info = {k: r.get(k) for k in ("torch", "torch_cuda")} if r.get("torch") else torch_info
            results.append({"workload": "ResNet-50", "program": f"PyTorch {r.get('mode', '')}".strip(),
                            "precision": p + (" autocast, channels_last" if p == "bf16" else ", NCHW, TF32 off"),
                            "mb": b, "res": dict(r, throughput=(b / r["ms"] * 1e3) if "ms" in r else None),
                            "unit": "img/s", "flops_per_unit": fpi, "peak_key": p})
    for w in ("GPT-2 124M", "ResNet-50"):
        srcs = sorted({f"{r['res']['model_src']}, {r['res']['optimizer']}" for r in results
                       if r["workload"] == w and r["res"].get("model_src")})
        if srcs:
            notes.append(f"- {w} PyTorch model and optimizer: {'; '.join(srcs)}")
    return results, notes, torch_info


def finish(results, dev, torch_info, peaks, args, notes, title, path):
    table = make_rows(results, peaks)
    tl = targets(results, dev["name"])
    log("")
    log(title)
    log("\n".join(table))
    log("\n".join(tl))
    if path:
        report(path, title, dev, torch_info, peaks, args, table, tl, results, notes)
        log(f"recorded in {path}")
    return table, tl, path


def main_dry(args):
    """Everything that can be checked without a GPU; raises / exits non-zero on the first problem."""
    problems = []

    def check(ok, what):
        log(f"  {'ok  ' if ok else 'FAIL'} {what}")
        if not ok:
            problems.append(what)

    work = args.work or tempfile.mkdtemp(prefix="bench_gpu_dry_")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    exes = app_paths(args)
    log("== binaries and decks")
    for k, e in exes.items():
        check(os.path.exists(e), f"{e} exists")
    if problems:
        sys.exit("FAILED: " + "; ".join(problems))
    d = read_deck(GPT_DECK)["model"]
    L, C, T, V = d["n_layer"], d["n_embd"], d["seq_len"], d["vocab_size"]
    args.steps, args.warmup = 40, 10
    def dry_plan(exe, deck, sets, gpt):
        """The plan with the benchmark's exact overrides; should --plan ever refuse train.device=cuda on a machine
        without a GPU, the same overrides on the CPU (said so)."""
        try:
            return plan(exe, deck, sets, gpt)
        except RuntimeError as e:
            log(f"  note: --plan with train.device=cuda fails here ({str(e)[-200:]}); planning with train.device=cpu")
            return plan(exe, deck, [s.replace("train.device=cuda", "train.device=cpu") for s in sets], gpt)

    for mb in GPT_CANDIDATES[:2]:
        gp = dry_plan(exes["train_gpt"], GPT_DECK, gpt_sets(mb, args, "x.bin", "y.bin", 989.0), True)
        gib, params = gp["memory_gib"], gp["parameters"]
        check(gib > 0, f"gpt2_124m.toml parses with the benchmark's overrides at micro-batch {mb}: plan {gib:.1f} GiB")
        check(gp["tokens_per_step"] == mb * args.accum * T and
              gp["training_flops_per_step"] == gp["flops_per_token"] * gp["tokens_per_step"],
              f"train_gpt --plan --json: {gp['tokens_per_step']:,} tokens and {gp['training_flops_per_step']:.4g} "
              f"FLOPs per step at micro-batch {mb}")
    fpt = gp["flops_per_token"]
    check(fpt == 855_166_464 and gp["parameters_for_flops"] < params,
          f"GPT-2 124M flops per token {fpt:,} (6N + 12 L C T, N = {gp['parameters_for_flops']:,} of {params:,} "
          "parameters: train_gpt --plan --json)")
    # train_resnet --plan reads the datasets' shapes: the synthetic writer at full size (256 images of 3x224x224)
    big_tr, big_te = os.path.join(work, "img224_train.h5"), os.path.join(work, "img224_test.h5")
    write_image_set(big_tr, 256, 224, 1000, 1)
    write_image_set(big_te, 64, 224, 1000, 2)
    rp = dry_plan(exes["train_resnet"], RESNET_DECK, resnet_sets(256, args, big_tr, big_te, 989.0), False)
    rparams, gflop, fpi_train = rp["parameters"], rp["flops_per_image_forward"] / 1e9, rp["flops_per_image_training"]
    check(rparams == 25_557_032 and gflop > 4 and fpi_train == 3 * rp["flops_per_image_forward"]
          and rp["training_flops_per_step"] == 256 * args.accum * fpi_train,
          f"resnet50.toml parses with the benchmark's overrides: {rparams:,} parameters, {gflop:.3f} GFLOP/image "
          f"forward, 3x that for training, plan {rp['memory_gib']:.1f} GiB at micro-batch 256")
    gpt_exe = exes["train_gpt"]
    h100 = peaks_for(gpt_exe, "NVIDIA H100 80GB HBM3", None)
    check(h100["bf16"] == 989.5 and peaks_for(gpt_exe, "NVIDIA H200", None) == h100
          and peaks_for(gpt_exe, "NVIDIA H100 PCIe", None)["bf16"] < h100["bf16"]
          and peaks_for(gpt_exe, "NVIDIA H100 NVL", None)["label"] not in (h100["label"], "unknown device")
          and peaks_for(gpt_exe, "Tesla X", None)["bf16"] is None
          and peaks_for(gpt_exe, "Tesla X", 100.0)["bf16"] == 100.0,
          f"peak table through train_gpt --plan --json --device-name (H100 SXM {h100}, H200, PCIe, NVL, unknown, "
          "--peak-tflops)")

    # an out-of-memory message is recognised (descending micro-batch search) and other failures are not
    check(bool(OOM.search("CUDA error: out of memory (cudaErrorMemoryAllocation)")) and
          not OOM.search("deck x: unknown key"), "out-of-memory messages recognised, other errors not")

    log("== the benchmark's orchestration on the CPU with tiny models (hpctrain and the PyTorch worker, bf16 and fp32;"
        " not a measurement)")
    args.steps, args.warmup, args.no_compile = 4, 1, True
    cpu_dev = {"name": "CPU dry run", "driver": "-", "mem_mib": 0.0, "cuda_driver": "-", "nvcc": "-"}
    cpu_peaks = peaks_for(gpt_exe, "", 1.0)
    results, notes, torch_info = run_suite(args, cpu_dev, cpu_peaks, os.path.join(work, "suite"), "cpu", tiny=True)
    for r in results:
        res = r["res"]
        ok = "ms" in res and res["measured"] == 3 and res.get("throughput", 0) > 0
        if r["program"] == "hpctrain":
            ok = ok and len(res.get("perf", [])) >= 4
        else:
            ok = ok and all(x == x and abs(x) < 1e4 for x in (res["loss_first"], res["loss_last"]))
        check(ok, f"{r['workload']} {r['program']} {r['precision']} micro-batch {r['mb']}: median {res.get('ms', 0):.1f}"
                  f" ms over {res.get('measured')} steps, {res.get('throughput') or 0:.0f} {r['unit']}"
                  + (f", PERFORMANCE {res['perf']}" if res.get("perf") else "")
                  + (f", {res.get('optimizer')}, {res.get('model_src')}" if res.get("optimizer") else "")
                  + (f" ({res['error']})" if "error" in res else ""))
    check(len(results) == 6, f"6 result rows (2 workloads x hpctrain, PyTorch bf16, fp32): {len(results)}")
    table, tl, path = finish(results, cpu_dev, torch_info, cpu_peaks, args, notes,
                             "DRY RUN on the CPU with tiny models (bench_gpu.py --dry-run: not a measurement)",
                             os.path.join(work, "suite", "dry_run_cpu.md"))
    check(os.path.exists(path) and len(table) == 8, f"the dry run's table and record ({path})")

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import torch_models
    g = torch_models.GPT(L, d["n_head"], C, T, V)
    check(sum(p.numel() for p in g.parameters()) == params,
          f"the PyTorch GPT-2 124M has train_gpt's {params:,} parameters (padded vocabulary)")
    del g
    rn, src = torch_models.resnet50()
    check(sum(p.numel() for p in rn.parameters()) == rparams, f"the PyTorch ResNet-50 ({src}) has {rparams:,} parameters")
    own = torch_models.ResNet50()
    check([(k, v.shape) for k, v in own.state_dict().items()] == [(k, v.shape) for k, v in rn.state_dict().items()],
          "validation/torch_models.ResNet50 has torchvision's state_dict names and shapes")

    log("== table and record on FAKE numbers")
    dev = {"name": "FAKE GPU (dry run) H100", "driver": "FAKE", "mem_mib": 81559.0, "cuda_driver": "FAKE",
           "nvcc": "FAKE"}
    peaks = h100
    args.steps, args.warmup = 40, 10
    fake = lambda ms, tput, **kw: dict(ms=ms, throughput=tput, mem_mib=40000.0, mem_src="FAKE", cmd=["FAKE"], **kw)
    results = [
        {"workload": "GPT-2 124M", "program": "hpctrain", "precision": "fp32", "mb": 16, "res": fake(1000.0, 16384.0),
         "unit": "tok/s", "flops_per_unit": fpt, "peak_key": "fp32"},
        {"workload": "GPT-2 124M", "program": "PyTorch torch.compile", "precision": "bf16 autocast", "mb": 16,
         "res": fake(100.0, 163840.0, max_allocated_mib=30000.0), "unit": "tok/s", "flops_per_unit": fpt,
         "peak_key": "bf16"},
        {"workload": "ResNet-50", "program": "hpctrain", "precision": "fp32", "mb": 128, "res": fake(200.0, 640.0),
         "unit": "img/s", "flops_per_unit": fpi_train, "peak_key": "fp32"},
        {"workload": "ResNet-50", "program": "PyTorch eager", "precision": "fp32, NCHW, TF32 off", "mb": 128,
         "res": {"error": "FAKE failure to show the failed-row format"}, "unit": "img/s",
         "flops_per_unit": fpi_train, "peak_key": "fp32"},
    ]
    table, tl, path = finish(results, dev, torch_info, peaks, args, ["- FAKE notes line"],
                             "FAKE NUMBERS (bench_gpu.py --dry-run: the table and record code on made-up figures, not "
                             "a measurement)", os.path.join(work, "gpu_FAKE_dry_run.md"))
    # 16384 tok/s x 855.2 MFLOP = 14.0 TFLOP/s: 1.4% of 989 (bf16), 20.9% of 67 (fp32); PyTorch 10x that
    check(len(table) == 6 and "| 14.0 | 1.4% | 20.9% (fp32) |" in table[2] and "| 0.10x |" in table[3]
          and "run failed: FAKE" in table[5], "table: TFLOP/s, both MFUs, the hpctrain / PyTorch ratio, a failed row")
    check(any("MISS" in l for l in tl) and any("n/a" in l for l in tl), "targets: GPT MISS, ResNet n/a (failed run)")
    check(path is not None and path.startswith(work) and os.path.exists(path) and
          "FAKE NUMBERS" in open(path).read(), f"record written under --work only ({path})")
    check(not os.path.exists(os.path.join(ROOT, "validation", "results", "gpu_FAKE_dry_run.md")),
          "nothing written to validation/results")
    if problems:
        print("FAILED: " + "; ".join(problems))
        sys.exit(1)
    print("VALID: bench_gpu dry run (everything but the GPU measurements)")


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--torch-worker":
        torch_worker(json.loads(sys.argv[2]))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n", 2)[2])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--train-gpt", help="the train_gpt binary (default BUILD/apps/train_gpt)")
    ap.add_argument("--train-resnet", help="the train_resnet binary (default BUILD/apps/train_resnet)")
    ap.add_argument("--only", choices=["gpt", "resnet"])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--accum", type=int, default=1, help="micro-batches per step (default 1)")
    ap.add_argument("--gpt-micro-batch", type=int)
    ap.add_argument("--resnet-micro-batch", type=int)
    ap.add_argument("--gpt-data", nargs=2, metavar=("TRAIN_BIN", "VAL_BIN"), help="real GPT-2 shards")
    ap.add_argument("--peak-tflops", type=float, help="bf16 dense peak of the device (default: the table)")
    ap.add_argument("--no-compile", action="store_true", help="PyTorch eager only")
    ap.add_argument("--hp-set", action="append", default=[], metavar="KEY=VALUE", help="extra --set for the apps")
    ap.add_argument("--hp-precisions", default="bf16,fp32",
                    help="train.precision values hpctrain runs at, one row each (default bf16,fp32; GPU only)")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per run (default 900)")
    ap.add_argument("--work", help="work directory (default: a new temporary one)")
    ap.add_argument("--record", action="store_true", help="write validation/results/gpu_<device>.md")
    ap.add_argument("--dry-run", action="store_true", help="check everything that needs no GPU (FAKE table)")
    args = ap.parse_args()
    args.argv = sys.argv[1:]
    if args.steps - args.warmup < 10 and not args.dry_run:
        sys.exit("error: need at least 10 measured steps (--steps - --warmup >= 10)")
    if args.dry_run:
        main_dry(args)
    else:
        main_gpu(args)


if __name__ == "__main__":
    main()
