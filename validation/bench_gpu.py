#!/usr/bin/python3
"""GPU training benchmarks : hpctrain vs PyTorch on the same GPU, in the same run.

  gpt     GPT-2 124M (inputs/gpt2_124m.toml: L12 C768 NH12, T = 1024, vocabulary 50257), one GPU, the micro-batch
          as large as fits (--gpt-micro-batch, else the first of 64 48 32 16 8 4 2 1 that `train_gpt --plan` puts
          under 90% of the GPU's memory and that runs; on out-of-memory the next), one micro-batch per step (--accum
          for more): build/apps/train_gpt --set train.device=cuda on a synthetic llm.c-format shard of uniform random
          tokens (the speed does not depend on the tokens; --gpt-data for real shards), vs a nanoGPT-style PyTorch
          GPT-2 (validation/torch_models.py, SDPA attention) with bf16 autocast, torch.compile in its default mode
          where it works (else eager, and the table says which) and with --max-autotune also in mode "max-autotune",
          fused AdamW where torch has it, clip 1.0, the same batch and sequence length; plus PyTorch in fp32 with
          TF32 off (the like-for-like line for hpctrain's fp32 row).
  resnet  ResNet-50 at 3x224x224, 1000 classes (inputs/resnet50.toml), micro-batch 256 128 64 32 16 likewise:
          build/apps/train_resnet --set train.device=cuda on a synthetic HDF5 image set (augmentation off: the
          training step, not the host loader, is measured; hpctrain's tensors are NCHW) vs torchvision's resnet50
          (or the same network from validation/torch_models.py when torchvision is missing) with SGD (Nesterov 0.9,
          weight decay on conv/fc weights), channels_last + bf16 autocast (+ torch.compile, default mode and with
          --max-autotune "max-autotune", where it works), the same in eager mode, and in eager mode with
          torch.backends.cudnn.deterministic = True (cuDNN's deterministic algorithms only, the fastest of them still
          chosen by cudnn.benchmark: the cost of determinism apart from the implementation's), and fp32 NCHW, TF32
          off.

Figures: the median step time over the steps after --warmup (hpctrain: metrics.jsonl `ms`; PyTorch: wall time of
the whole step incl. the host-to-device copy of the batch from pinned memory, ending with cuda.synchronize; compiling
and autotuning happen in the first steps, inside the warm-up);
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
hpctrain's first bf16 row (the first row when none is bf16) runs a second time with the same settings
(--bitwise-rerun, the default; --no-bitwise-rerun skips it): its losses and gradient norms (metrics.jsonl) must be
equal step for step as float64 hex; the timing is the first run's.
The comparison is against PyTorch's best row (highest throughput: the peer) and hpctrain's best.
Targets (printed PASS/MISS, not a failure): GPT-2 124M MFU >= 50% on an H100 (vs the bf16 peak);
ResNet-50 images/s >= PyTorch's best.

The record (JSON Lines, appended, one object per measured row of the tables; a failed row stays in the markdown
only): validation/results/gpu/<device_slug>_<date>.jsonl with --record (else WORK/gpu/), device_slug the driver's
device name in lower case with `_` for other characters (nvidia_h100_80gb_hbm3), date the UTC day (YYYY-MM-DD); each
row's log (command, step times, the bitwise rerun's verdict, the program's output) in logs/<device_slug>_<date>/ next
to it. Keys, exactly: device, device_slug, commit (`git rev-parse HEAD`, +dirty for a modified tree; --commit where
the tree has no .git), torch_version and cudnn_version (the torch that ran: torch.__version__,
torch.backends.cudnn.version(); null without torch), workload (gpt|resnet), program (hpctrain|pytorch), mode
(compile|compile_max_autotune|eager|none: the mode that actually ran, eager when compiling failed; hpctrain none),
precision (bf16|fp32|tf32), layout (channels_last|nchw|none: none for gpt, nchw for hpctrain's ResNet), deterministic
(hpctrain true, bitwise reproducible by design; PyTorch true for the ResNet row with cudnn.deterministic set, false
for the others: no deterministic algorithms set), micro_batch,
ms_per_step, throughput, unit (tokens/s|images/s), mfu (a fraction of the dense bf16 peak; null when the peak is
unknown), peak_mem_gib (nvidia-smi; null when it saw nothing), bitwise_rerun (hpctrain: true / false from the rerun,
null when not rerun; PyTorch null), log (the row's log, repository-relative). Every record passes validate_record()
before it is written (a malformed one is not written and makes the exit status 1).

usage:
  /usr/bin/python3 validation/bench_gpu.py [--only gpt|resnet] [--record] [--max-autotune]     # on a GPU machine
  /usr/bin/python3 validation/bench_gpu.py --dry-run [--work DIR]              # anywhere: checks without a GPU
  (one workload takes a few minutes, more with --max-autotune; under a 10-minute command limit run --only gpt and
  --only resnet separately)
options: --build DIR (default build) or --train-gpt / --train-resnet EXE, --steps 40 --warmup 10 (30 measured steps,
  docs/performance.md), --accum 1, --gpt-micro-batch N, --resnet-micro-batch N, --gpt-data TRAIN VAL (real shards),
  --peak-tflops X (bf16 dense), --no-compile, --max-autotune, --no-bitwise-rerun, --hp-set KEY=VALUE (extra --set for
  both apps, e.g. a precision key), --timeout S (per run), --commit SHA. --record writes
  validation/results/gpu_<device>.md (gpu_<device>_<only>.md with --only) and the JSON Lines record above.
--dry-run checks what it can without a GPU: the binaries exist, the decks parse with the benchmark's overrides
(`--plan --json`), the apps' FLOP counts and peak lookup, the whole benchmark orchestration on the CPU
with tiny models (synthetic data, both apps run and parsed, the bitwise rerun, the PyTorch worker in bf16 autocast and
fp32, table, markdown and JSON Lines record with device_slug cpu_dry_run), the PyTorch models' parameter counts, and
the table and record code on FAKE numbers (device_slug fake_gpu), every record through validate_record() and
malformed ones refused (all written under --work, never to validation/results). Prints VALID at the end (the ctest
validation_bench_gpu_dry).
"""
import argparse
import datetime
import json
import math
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
GPT_CANDIDATES = [64, 48, 32, 16, 8, 4, 2, 1]
RESNET_CANDIDATES = [256, 128, 64, 32, 16]
OOM = re.compile(r"out of memory|cudaErrorMemoryAllocation|CUBLAS_STATUS_ALLOC_FAILED|CUDNN_STATUS_ALLOC_FAILED|"
                 r"CUDA_ERROR_OUT_OF_MEMORY|OutOfMemoryError", re.I)


def log(msg=""):
    print(msg, flush=True)


# ---------------------------------------------------------------- device facts ----

def torch_env():
    """The environment PyTorch runs in: the library path the machine had before validation/gpu_bundle.sh unpack put
    the bundle's and the machine's CUDA libraries first (HPCT_HOST_LD_LIBRARY_PATH, exported by the unpack), so that
    torch loads the cuDNN, cuBLAS and NCCL of its own wheels, as a user's PyTorch does; a system cuDNN older than the
    one torch was built with makes torch turn cuDNN off (torch.backends.cudnn.version() None), and the ResNet rows
    would then measure PyTorch without cuDNN. Unchanged where no bundle was unpacked."""
    env = dict(os.environ)
    if "HPCT_HOST_LD_LIBRARY_PATH" in env:
        host = env["HPCT_HOST_LD_LIBRARY_PATH"]
        if host:
            env["LD_LIBRARY_PATH"] = host
        else:
            env.pop("LD_LIBRARY_PATH", None)
    return env


def sh(cmd, timeout=60, env=None):
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                           timeout=timeout, env=env)
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
    """An HDF5 image set as train_resnet reads it (docs/apps.md "Data"): uint8 /images, int32 /labels."""
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


def metrics_steps(path):
    """[(step, loss, grad_norm)] of a metrics.jsonl, the numbers as Python floats of the file's decimal strings
    (None for null)."""
    with open(path) as f:
        recs = [json.loads(l) for l in f if l.strip()]
    return [(r.get("step"), r.get("loss"), r.get("grad_norm")) for r in recs]


def fhex(x):
    return None if x is None else float(x).hex()


def same_bits(a, b):
    """(equal, message): two runs' metrics_steps() compared step by step, loss and gradient norm as float64 hex."""
    if not a or len(a) != len(b):
        return False, f"{len(a)} vs {len(b)} steps recorded"
    for (s1, l1, g1), (s2, l2, g2) in zip(a, b):
        if s1 != s2 or fhex(l1) != fhex(l2) or fhex(g1) != fhex(g2):
            return False, (f"differ at step {s1}: loss {fhex(l1)} vs {fhex(l2)}, grad_norm {fhex(g1)} vs "
                           f"{fhex(g2)}")
    return True, f"{len(a)} steps: every loss and gradient norm equal as float64 hex"


def run_hpctrain(exe, deck, sets, work, name, timeout, warmup, sample_mem):
    """Runs one app; returns a result dict: ms (median after warm-up), ms_all, steps (metrics_steps), perf (the
    PERFORMANCE figures), mem_mib, mem_src, cmd, log_path (the app's output); or {'oom': True} / {'error': text}."""
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
    res = {"cmd": cmd, "wall_s": time.time() - t0, "log_path": os.path.join(work, name + ".log")}
    log(f"  {name}: rc {rc} in {res['wall_s']:.1f} s")
    if rc != 0:
        if OOM.search(text):
            return dict(res, oom=True)
        log("    " + "\n    ".join(text.strip().splitlines()[-6:]))
        return dict(res, error=f"rc {rc}: {last_line(text)}")
    with open(os.path.join(out, "metrics.jsonl")) as f:
        ms = [json.loads(l)["ms"] for l in f]
    steps = metrics_steps(os.path.join(out, "metrics.jsonl"))
    perf = [l for l in text.splitlines() if l.startswith("PERFORMANCE")]
    figs = perf[-1].split("|")[1].split() if len(perf) >= 2 else []
    if len(ms) <= warmup:
        return dict(res, error=f"{len(ms)} steps recorded, need more than --warmup {warmup}")
    return dict(res, ms=statistics.median(ms[warmup:]), ms_all=ms, steps=steps, perf=figs, mem_mib=mem, mem_src=src,
                measured=len(ms) - warmup)


def bench_hpctrain(kind, exe, deck, base_sets, candidates, mem_gib, work, args, unit_per_mb, sample_mem, rerun=False,
                   tag=""):
    """Largest micro-batch that fits: candidates whose plan is under 90% of mem_gib (all when mem_gib is None),
    tried in descending order, the next on out-of-memory. rerun: the run that measured runs once more with the same
    settings, and bitwise_rerun says whether both gave the same losses and gradient norms (same_bits; None when the
    rerun failed); the timing is the first run's. Returns (result, micro_batch, plans)."""
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
        name = f"hpctrain_{kind}{tag}_mb{mb}"
        r = run_hpctrain(exe, deck, base_sets(mb), work, name, args.timeout, args.warmup, sample_mem)
        if r.get("oom"):
            log(f"  out of memory at micro-batch {mb}: trying the next")
            continue
        if "error" in r:
            log(f"  run failed: {r['error']}")
        r["throughput"] = unit_per_mb * mb / r["ms"] * 1e3 if "ms" in r else None
        if rerun and "ms" in r:
            # a ResNet on CUDA timed its convolution algorithms into its run directory: the rerun computes with that
            # table, as a rerun of a user's run does (docs/cuda.md), so that the comparison is of the same algorithms
            table = os.path.join(work, name, "conv_algorithms.json")
            rerun_sets = base_sets(mb) + ([f"train.conv_algorithms={table}"] if os.path.exists(table) else [])
            log(f"  hpctrain {kind} micro-batch {mb}: the same settings again (bitwise rerun"
                + (", with the first run's convolution algorithms)" if os.path.exists(table) else ")"))
            r2 = run_hpctrain(exe, deck, rerun_sets, work, name + "_rerun", args.timeout, args.warmup, sample_mem)
            if "steps" in r2:
                r["bitwise_rerun"], r["rerun_msg"] = same_bits(r["steps"], r2["steps"])
            else:
                r["bitwise_rerun"], r["rerun_msg"] = None, "the rerun failed: " + r2.get("error", "out of memory")
            r["rerun"] = {k: r2.get(k) for k in ("cmd", "log_path", "ms", "ms_all")}
            log(f"  bitwise rerun: {r['bitwise_rerun']} ({r['rerun_msg']})")
        return r, mb, plans
    return {"error": "out of memory at every micro-batch"}, None, plans


# ---------------------------------------------------------------- PyTorch worker ----

def torch_worker(spec):
    """Runs in a subprocess: spec = {model, device, precision (bf16|fp32), compile (None, "default" or a
    torch.compile mode such as "max-autotune"), deterministic (cudnn.deterministic), batch, steps, warmup, tiny};
    prints `RESULT <json>` last (mode: what ran, in words; mode_key: compile | compile_max_autotune | eager)."""
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
        torch.backends.cudnn.benchmark = True  # with deterministic: the fastest deterministic algorithm
        torch.backends.cudnn.deterministic = bool(spec.get("deterministic"))
    B, steps, warmup = spec["batch"], spec["steps"], spec["warmup"]
    torch.manual_seed(0)
    info = {"torch": torch.__version__, "torch_cuda": getattr(torch.version, "cuda", None),
            "cudnn": cudnn_version(torch)}  # build() adds to it
    if cuda and info["cudnn"] is None:
        # torch's own check refused the cuDNN it loaded (or found none): the row's convolutions may not use cuDNN
        print("warning: torch.backends.cudnn.version() is None: torch reports no usable cuDNN (LD_LIBRARY_PATH "
              f"{os.environ.get('LD_LIBRARY_PATH', '(unset)')})", file=sys.stderr, flush=True)

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

    def attempt(compile_mode):
        m, opt, pool = build()
        fwd = m
        if compile_mode == "default":
            fwd = torch.compile(m)
        elif compile_mode:
            fwd = torch.compile(m, mode=compile_mode)
        return run(fwd, opt, pool)

    result = {}
    try:
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        mode, mode_key, times = "eager", "eager", None
        cm = spec["compile"]
        if cm and hasattr(torch, "compile"):
            try:
                times, losses = attempt(cm)
                mode = "torch.compile" + ("" if cm == "default" else f" {cm}")
                mode_key = "compile" if cm == "default" else "compile_" + re.sub(r"[^a-z0-9]+", "_", cm.lower())
            except Exception as e:  # noqa: BLE001 -- any compile failure: measure eager instead, say why
                if "out of memory" in str(e).lower():
                    raise
                first = str(e).splitlines()[0][:160] if str(e) else ""
                mode = f"eager (torch.compile{'' if cm == 'default' else ' ' + cm} failed: {type(e).__name__}: {first})"
        elif spec["compile"]:
            mode = "eager (torch.compile not in this torch)"
        if times is None:  # outside the except block: the failed attempt's model and optimizer are freed by now
            if cuda:
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
            times, losses = attempt(False)
        result.update(mode=mode, mode_key=mode_key, ms=statistics.median(times[warmup:]), ms_all=times, loss_first=losses[0],
                      loss_last=losses[-1], measured=len(times) - warmup)
        if cuda:
            result["max_allocated_mib"] = torch.cuda.max_memory_allocated() / 2 ** 20
            result["max_reserved_mib"] = torch.cuda.max_memory_reserved() / 2 ** 20
    except RuntimeError as e:
        if "out of memory" not in str(e).lower():
            raise
        result["oom"] = True
    print("RESULT " + json.dumps(dict(info, **result)), flush=True)


def cudnn_version(torch):
    """torch.backends.cudnn.version() (an int such as 91002), None when torch has no cuDNN."""
    try:
        v = torch.backends.cudnn.version()
        return int(v) if v is not None else None
    except Exception:  # noqa: BLE001 -- a CPU-only torch may raise instead of returning None
        return None


def torch_versions(python=None):
    """{'torch': torch.__version__, 'cudnn': cuDNN version} of the torch the PyTorch worker imports (the same
    interpreter), None values without torch."""
    code = ("import json, torch\ntry:\n    c = torch.backends.cudnn.version()\nexcept Exception:\n    c = None\n"
            "print('TORCH ' + json.dumps({'torch': torch.__version__, 'cudnn': int(c) if c is not None else None}))")
    rc, out = sh([python or sys.executable, "-c", code], timeout=300, env=torch_env())
    lines = [l for l in out.splitlines() if l.startswith("TORCH ")]
    return json.loads(lines[-1][6:]) if rc == 0 and lines else {"torch": None, "cudnn": None}


def run_torch(spec, timeout, sample_mem, log_path):
    """The worker in a subprocess (a clean CUDA context and memory peak per configuration)."""
    cmd = [sys.executable, os.path.abspath(__file__), "--torch-worker", json.dumps(spec)]
    sampler = GpuMemSampler(sample_mem)
    t0 = time.time()
    with open(log_path, "w") as logf:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=logf, text=True, env=torch_env())
        sampler.start(p.pid)
        try:
            out, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
    mem, src = sampler.stop()
    res = [json.loads(l[7:]) for l in out.splitlines() if l.startswith("RESULT ")]
    name = f"pytorch {spec['model']} {spec['precision']}{' ' + spec['compile'] if spec['compile'] else ''} mb " \
           f"{spec['batch']}"
    log(f"  {name}: rc {p.returncode} in {time.time() - t0:.1f} s")
    if p.returncode != 0 or not res:
        with open(log_path, errors="replace") as f:
            text = f.read()
        log("    " + "\n    ".join(text.strip().splitlines()[-6:]))
        return {"error": f"rc {p.returncode}: {last_line(text)}", "cmd": cmd, "log_path": log_path}
    return dict(res[0], mem_mib=mem, mem_src=src, cmd=cmd, log_path=log_path,
                result_line=[l for l in out.splitlines() if l.startswith("RESULT ")][0])


def bench_torch(model, precision, batch, args, device, sample_mem, work, tiny=None, compile_mode="default",
                deterministic=False):
    """PyTorch at `batch`, halving on out-of-memory; torch.compile in compile_mode ("default", "max-autotune"; None:
    eager) for bf16 unless --no-compile, fp32 eager; deterministic: cudnn.deterministic. Returns (result, batch)."""
    cm = compile_mode if (not args.no_compile) and precision == "bf16" else None
    while batch >= 1:
        spec = {"model": model, "device": device, "precision": precision, "batch": batch, "steps": args.steps,
                "warmup": args.warmup, "compile": cm, "deterministic": deterministic, "tiny": tiny}
        mode_tag = ("_eager" if precision == "bf16" else "") if cm is None else (
            "" if cm == "default" else "_" + re.sub(r"[^a-z0-9]+", "_", cm))
        tag = mode_tag + ("_deterministic" if deterministic else "")
        r = run_torch(spec, args.timeout, sample_mem, os.path.join(work, f"torch_{model}_{precision}{tag}_mb{batch}.log"))
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


def best_row(results, workload, hpctrain):
    """The row of highest throughput of hpctrain's (hpctrain True) or PyTorch's rows of a workload (PyTorch's: the
    peer), None when none measured."""
    rows = [r for r in results if r["workload"] == workload and r["program"].startswith("hpctrain") == hpctrain
            and r["res"].get("throughput")]
    return max(rows, key=lambda r: r["res"]["throughput"]) if rows else None


def make_rows(results, peaks):
    """Markdown rows from the per-configuration results: each {workload, program, precision, mb, res, unit,
    flops_per_unit, peak_key}. The ratio column is hpctrain's best row over each PyTorch row."""
    rows = []
    hp_tp = {w: b["res"]["throughput"] for w in {r["workload"] for r in results}
             for b in [best_row(results, w, True)] if b}
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
    hp = {w: best_row(results, w, True) or next(r for r in results if r["workload"] == w and
                                                 r["program"].startswith("hpctrain"))
          for w in {r["workload"] for r in results if r["program"].startswith("hpctrain")}}
    for w in ("GPT-2 124M", "ResNet-50"):
        h, peer = best_row(results, w, True), best_row(results, w, False)
        if h and peer:
            ht, pt = h["res"]["throughput"], peer["res"]["throughput"]
            lines.append(f"PEER {w}: hpctrain's best ({h['precision']}, micro-batch {h['mb']}) {ht:,.0f} {h['unit']} "
                         f"vs PyTorch's best ({peer['program']}, {peer['precision']}) {pt:,.0f} {peer['unit']}: "
                         f"{ht / pt:.2f}x")
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
        best = best_row(results, "ResNet-50", False)
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
    commit = getattr(args, "commit_id", None) or "unknown"
    lines = [f"# {title}", "",
             f"- date: {datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}",
             f"- device: {dev['name']} ({dev['mem_mib'] / 1024:.0f} GiB), driver {dev['driver']}, CUDA (driver) "
             f"{dev['cuda_driver']}, nvcc {dev['nvcc']}",
             f"- PyTorch {torch_info.get('torch', '?')} (CUDA {torch_info.get('torch_cuda', '?')}, cuDNN "
             f"{torch_info.get('cudnn', '?')}); hpctrain {commit}",
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


# ---------------------------------------------------------------- the JSON Lines record ----

RECORD_KEYS = ("device", "device_slug", "commit", "torch_version", "cudnn_version", "workload", "program", "mode",
               "precision", "layout", "deterministic", "micro_batch", "ms_per_step", "throughput", "unit", "mfu",
               "peak_mem_gib", "bitwise_rerun", "log")
RECORD_ENUMS = {"workload": ("gpt", "resnet"), "program": ("hpctrain", "pytorch"),
                "mode": ("compile", "compile_max_autotune", "eager", "none"), "precision": ("bf16", "fp32", "tf32"),
                "layout": ("channels_last", "nchw", "none"), "unit": ("tokens/s", "images/s")}
RECORD_UNIT = {"gpt": "tokens/s", "resnet": "images/s"}
WORKLOAD_KEY = {"GPT-2 124M": "gpt", "ResNet-50": "resnet"}
LOG_CAP = 256 * 1024  # characters of one program's output kept in a row's log (its start and its end)


def git_commit(override=None):
    """--commit when given; else `git rev-parse HEAD` of this tree (+dirty when tracked files are modified); None
    when the tree is not a git checkout of its own (a copy without .git)."""
    if override:
        return override
    rc, top = sh(["git", "-C", ROOT, "rev-parse", "--show-toplevel"])
    if rc != 0 or os.path.realpath(top.strip()) != os.path.realpath(ROOT):
        return None
    rc, head = sh(["git", "-C", ROOT, "rev-parse", "HEAD"])
    if rc != 0 or not re.fullmatch(r"[0-9a-f]{40}", head.strip()):
        return None
    dirty = sh(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"])[1].strip()
    return head.strip() + ("+dirty" if dirty else "")


def resolve_commit(args):
    c = git_commit(args.commit)
    if c is None:
        log("warning: no .git here and no --commit: the record's commit is 'unknown' (pass --commit SHA)")
    return c or "unknown"


def validate_record(rec, root=ROOT):
    """The problems of one record against the record format (an empty list: well-formed): exactly RECORD_KEYS in
    that order, each of its type and values, the keys that go together, the log file present, JSON without NaN."""
    if not isinstance(rec, dict):
        return [f"not an object: {rec!r}"[:200]]
    p = []
    if list(rec) != list(RECORD_KEYS):
        p.append(f"keys {list(rec)} are not exactly {list(RECORD_KEYS)}")

    def num(v):
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)

    def want(k, ok, what):
        if k in rec and not ok(rec[k]):
            p.append(f"{k} = {rec[k]!r}: not {what}")

    want("device", lambda v: isinstance(v, str) and v.strip() != "", "a non-empty string")
    want("device_slug", lambda v: isinstance(v, str) and re.fullmatch(r"[a-z0-9]+(_[a-z0-9]+)*", v)
         and v == slug(rec.get("device") or ""), "the device's name in lower case with _ (slug())")
    want("commit", lambda v: isinstance(v, str) and re.fullmatch(r"\S+", v), "a string without blanks")
    want("torch_version", lambda v: v is None or (isinstance(v, str) and v.strip() != ""), "a string or null")
    want("cudnn_version", lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool) and v > 0),
         "a positive integer or null")
    for k, vals in RECORD_ENUMS.items():
        want(k, lambda v, vals=vals: isinstance(v, str) and v in vals, "one of " + " | ".join(vals))
    want("deterministic", lambda v: isinstance(v, bool), "true or false")
    want("micro_batch", lambda v: isinstance(v, int) and not isinstance(v, bool) and v > 0, "a positive integer")
    want("ms_per_step", lambda v: num(v) and v > 0, "a positive number")
    want("throughput", lambda v: num(v) and v > 0, "a positive number")
    want("mfu", lambda v: v is None or (num(v) and 0 < v <= 1), "a fraction in (0, 1] or null")
    want("peak_mem_gib", lambda v: v is None or (num(v) and v > 0), "a positive number or null")
    want("bitwise_rerun", lambda v: v is None or isinstance(v, bool), "true, false or null")
    want("log", lambda v: isinstance(v, str) and v != "" and os.path.isfile(os.path.join(root, v))
         and (os.path.isabs(v) or not v.startswith("..")), "an existing log file (repository-relative)")
    w, prog = rec.get("workload"), rec.get("program")
    if w in RECORD_UNIT and rec.get("unit") != RECORD_UNIT[w]:
        p.append(f"unit {rec.get('unit')!r} for workload {w}: not {RECORD_UNIT[w]}")
    if w == "gpt" and rec.get("layout") != "none":
        p.append(f"layout {rec.get('layout')!r} for gpt: not none")
    if w == "resnet" and rec.get("layout") == "none":
        p.append("layout none for resnet: channels_last or nchw")
    if prog == "hpctrain":
        for k, v in (("mode", "none"), ("deterministic", True)):
            if rec.get(k) != v:
                p.append(f"{k} {rec.get(k)!r} for hpctrain: not {json.dumps(v)}")
    if prog == "pytorch":
        if rec.get("mode") == "none":
            p.append("mode none for pytorch: compile, compile_max_autotune or eager")
        if rec.get("bitwise_rerun") is not None:
            p.append(f"bitwise_rerun {rec.get('bitwise_rerun')!r} for pytorch: not null")
    try:
        json.dumps(rec, allow_nan=False)
    except (TypeError, ValueError) as e:
        p.append(f"not JSON: {e}")
    return p


def read_jsonl(path):
    try:
        with open(path) as f:
            return [json.loads(l) for l in f if l.strip()]
    except OSError:
        return []


def read_text(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except (OSError, TypeError):
        return None


def capped(text, cap=LOG_CAP):
    if len(text) <= cap:
        return text
    head = cap // 4
    return text[:head] + f"\n[... {len(text) - cap:,} characters left out here ...]\n" + text[-(cap - head):]


class Recorder:
    """The JSON Lines record of one invocation (appended to PATH): add() turns a measured table row into a record,
    writes the row's log into logs/<PATH's name>/ beside PATH, checks the record with validate_record() and appends
    it; a malformed record is not written and lands in .problems; a row without a measurement (a failed run) stays
    in the markdown only."""

    def __init__(self, path, device, commit, torch_info, peaks, args, stamp):
        self.path, self.device, self.slug, self.commit = path, device, slug(device), commit
        self.torch_info, self.peaks, self.args, self.stamp = torch_info or {}, peaks, args, stamp
        self.log_dir = os.path.join(os.path.dirname(path), "logs", os.path.splitext(os.path.basename(path))[0])
        self.records, self.problems, self.skipped = [], [], []

    def _row_log(self, e, rec):
        res = e["res"]
        base = f"{self.stamp}_{rec['workload']}_{rec['program']}_{rec['mode']}_{rec['precision']}_mb{rec['micro_batch']}"
        path, n = os.path.join(self.log_dir, base + ".log"), 1
        while os.path.exists(path):
            n += 1
            path = os.path.join(self.log_dir, f"{base}_{n}.log")
        os.makedirs(self.log_dir, exist_ok=True)
        ms_all = res.get("ms_all") or []
        lines = [f"# bench_gpu.py row: {e['workload']} | {e['program']} | {e['precision']} | micro-batch {e['mb']}",
                 f"# device {self.device}, commit {self.commit}, recorded "
                 f"{datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M:%S')} UTC",
                 f"# command: {rel(res.get('cmd') or ['?'])}",
                 f"# step times (ms, {len(ms_all)} steps): " + " ".join(f"{x:.3f}" for x in ms_all),
                 f"# ms/step: the median of the {res.get('measured')} steps after --warmup {self.args.warmup}: "
                 f"{res['ms']:.3f}; throughput {res['throughput']:.1f} {rec['unit']}",
                 f"# peak GPU memory: {fmt(res.get('mem_mib'), '.0f')}{' MiB' if res.get('mem_mib') else ''} "
                 f"({res.get('mem_src', 'n/a')})"
                 + (f"; torch max_memory_allocated {res['max_allocated_mib']:.0f} MiB"
                    if res.get("max_allocated_mib") else "")]
        if res.get("steps"):
            lines.append("# metrics.jsonl per step: loss, grad_norm (as written, then float64 hex)")
            lines += [f"#   step {st}: loss {l!r} {fhex(l)} grad_norm {g!r} {fhex(g)}" for st, l, g in res["steps"]]
        if "bitwise_rerun" in res:
            rr = res.get("rerun") or {}
            lines += [f"# bitwise rerun: {json.dumps(res['bitwise_rerun'])} ({res.get('rerun_msg', '')})",
                      f"# rerun command: {rel(rr.get('cmd') or ['?'])}",
                      "# rerun step times (ms): " + " ".join(f"{x:.3f}" for x in rr.get("ms_all") or [])]
        if res.get("result_line"):
            lines.append(f"# worker {res['result_line']}")
        for what, lp in (("the run", res.get("log_path")), ("the rerun", (res.get("rerun") or {}).get("log_path"))):
            if what == "the rerun" and not lp:
                continue
            text = read_text(lp) if lp else None
            lines.append(f"===== output of {what}" + (f" ({os.path.basename(lp)})" if lp else "") + " =====")
            lines.append(capped(text).rstrip("\n") if text is not None else "(no program output: "
                         + ("FAKE row" if res.get("cmd") == ["FAKE"] else "none kept") + ")")
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        return path

    def add(self, e):
        res, meta = e["res"], e["rec"]
        what = f"{e['workload']} {e['program']} {e['precision']}"
        if "ms" not in res or not res.get("throughput"):
            self.skipped.append(what)
            log(f"  record: {what}: not recorded (no measurement: {res.get('error', 'failed')})")
            return None
        tput = res["throughput"]
        fpu = e.get("flops_per_unit")
        mfu = tput * fpu / 1e12 / self.peaks["bf16"] if fpu and self.peaks.get("bf16") else None
        pytorch = meta["program"] == "pytorch"
        tv = (res.get("torch") if pytorch and res.get("torch") else self.torch_info.get("torch"))
        cv = (res.get("cudnn") if pytorch and res.get("torch") else self.torch_info.get("cudnn"))
        rec = dict(device=self.device, device_slug=self.slug, commit=self.commit, torch_version=tv, cudnn_version=cv,
                   workload=meta["workload"], program=meta["program"],
                   mode=(res.get("mode_key") or meta["mode"]) if pytorch else "none",
                   precision=meta["precision"], layout=meta["layout"], deterministic=meta["deterministic"],
                   micro_batch=e["mb"], ms_per_step=float(res["ms"]), throughput=float(tput),
                   unit=RECORD_UNIT.get(meta["workload"], "?"), mfu=mfu,
                   peak_mem_gib=res["mem_mib"] / 1024 if res.get("mem_mib") else None,
                   bitwise_rerun=None if pytorch else res.get("bitwise_rerun"), log=None)
        lp = self._row_log(e, rec)
        rec["log"] = os.path.relpath(lp, ROOT) if os.path.abspath(lp).startswith(ROOT + os.sep) else os.path.abspath(lp)
        bad = validate_record(rec)
        if bad:
            self.problems.append(f"{what}: " + "; ".join(bad))
            log(f"  record: {what}: MALFORMED, not written: {'; '.join(bad)}")
            return None
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        with open(self.path, "a") as f:
            f.write(json.dumps(rec, allow_nan=False) + "\n")
        self.records.append(rec)
        log(f"  record: {what} -> {os.path.relpath(self.path, ROOT) if self.path.startswith(ROOT) else self.path}")
        return rec

    def note(self):
        where = os.path.relpath(self.path, ROOT) if self.path.startswith(ROOT + os.sep) else self.path
        return (f"- JSON Lines record: `{where}` ({len(self.records)} rows appended"
                + (f"; not recorded, no measurement: {', '.join(self.skipped)}" if self.skipped else "")
                + (f"; MALFORMED, not written: {len(self.problems)}" if self.problems else "")
                + "), each row's log in `" + (os.path.relpath(self.log_dir, ROOT) if self.log_dir.startswith(
                    ROOT + os.sep) else self.log_dir) + "/`")


def make_recorder(args, dev_name, peaks, rec_dir, torch_info=None):
    """A Recorder for `<rec_dir>/<device_slug>_<UTC date>.jsonl`; torch_info: the worker's torch (torch_versions()
    unless given)."""
    now = datetime.datetime.now(datetime.timezone.utc)
    path = os.path.join(rec_dir, f"{slug(dev_name)}_{now.strftime('%Y-%m-%d')}.jsonl")
    tv = torch_info if torch_info is not None else torch_versions()
    return Recorder(path, dev_name, args.commit_id, tv, peaks, args, now.strftime("%H%M%S"))


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


def parse_variant(text):
    """--gpt-variant NAME=KEY=VALUE[,KEY=VALUE...] -> (NAME, [KEY=VALUE, ...])."""
    name, eq, rest = text.partition("=")
    sets = [s for s in rest.split(",") if s]
    if not eq or not re.fullmatch(r"[A-Za-z0-9_.+-]+", name) or not sets or any("=" not in s for s in sets):
        raise argparse.ArgumentTypeError(f"'{text}': should be NAME=KEY=VALUE[,KEY=VALUE...]")
    return name, sets


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
    args.commit_id = resolve_commit(args)
    recorder = make_recorder(args, dev["name"], peaks, os.path.join(ROOT, "validation", "results", "gpu")
                             if args.record else os.path.join(work, "gpu"))
    log(f"commit {args.commit_id}; torch {recorder.torch_info.get('torch')}, cuDNN {recorder.torch_info.get('cudnn')}"
        f"; record {recorder.path}")
    results, notes, torch_info = run_suite(args, dev, peaks, work, "cuda", tiny=False, recorder=recorder)
    path = None
    if args.record:
        os.makedirs(os.path.join(ROOT, "validation", "results"), exist_ok=True)
        path = os.path.join(ROOT, "validation", "results",
                            f"gpu_{slug(dev['name'])}{'_' + args.only if args.only else ''}.md")
    finish(results, dev, torch_info, peaks, args, notes, f"GPU training benchmarks: hpctrain vs PyTorch on "
           f"{dev['name']}", path, recorder)
    if recorder.problems:
        print("FAILED: malformed records (not written): " + " | ".join(recorder.problems))
        sys.exit(1)


def torch_configs(args, workload):
    """[(precision, torch.compile mode or None for eager, cudnn.deterministic)] of a workload's PyTorch rows: bf16 in
    the default mode, bf16 in "max-autotune" with --max-autotune; for the ResNet also bf16 eager, and bf16 eager with
    cuDNN's deterministic algorithms (hpctrain's convolutions are deterministic: this row shows what that costs
    PyTorch); fp32 (eager)."""
    rows = [("bf16", "default", False)]
    if args.max_autotune and not args.no_compile:
        rows.append(("bf16", "max-autotune", False))
    if workload == "resnet":  # (under --no-compile the first row is eager already)
        rows += ([] if args.no_compile else [("bf16", None, False)]) + [("bf16", None, True)]
    return rows + [("fp32", None, False)]


def torch_program(r, cmode, deterministic=False):
    """The table's program cell of a PyTorch row: the mode that ran (a failed run: the mode asked for)."""
    det = ", cudnn.deterministic" if deterministic else ""
    if r.get("mode"):
        return f"PyTorch {r['mode']}{det}"
    return "PyTorch" + (f" (torch.compile {cmode} asked)" if cmode and cmode != "default" else "") + det


def torch_meta(workload, precision, cmode, layout, args, deterministic=False):
    """The record's fields of a PyTorch row known before it runs (mode: the one asked for; Recorder.add takes the one
    that ran from the result)."""
    asked = "eager" if args.no_compile or not cmode else (
        "compile" if cmode == "default" else "compile_" + re.sub(r"[^a-z0-9]+", "_", cmode))
    # deterministic: cudnn.deterministic (the convolutions); torch.use_deterministic_algorithms is never set
    return {"workload": workload, "program": "pytorch", "mode": asked, "precision": precision, "layout": layout,
            "deterministic": deterministic}


def hp_meta(workload, precision, res=None):
    """The record's fields of an hpctrain row; the ResNet's layout as the run logged it (res: bench_hpctrain's
    result, whose log has train_resnet's "activation layout:" line; nchw where it has none)."""
    return {"workload": workload, "program": "hpctrain", "mode": "none", "precision": precision,
            "layout": "none" if workload == "gpt" else resnet_layout(res), "deterministic": True}


def resnet_layout(res):
    """channels_last or nchw: the activation layout train_resnet logged in the run behind `res` (an executable
    from before the line, or a run that left no log: nchw, the only layout it had)."""
    path = (res or {}).get("log_path")
    if path and os.path.exists(path):
        with open(path, errors="replace") as f:
            for line in f:
                if "activation layout:" in line:
                    return "channels_last" if "channels-last" in line else "nchw"
    return "nchw"


def rerun_index(precs, args):
    """The hpctrain row that runs twice (--bitwise-rerun): the first bf16 one, else the first; None when off."""
    if not args.bitwise_rerun or not precs:
        return None
    return next((i for i, (p, _) in enumerate(precs) if p == "bf16"), 0)


def run_suite(args, dev, peaks, work, device, tiny, recorder=None):
    """Both workloads (or --only one): hpctrain at the largest micro-batch that fits, PyTorch bf16 (torch.compile,
    and max-autotune with --max-autotune) and fp32 at the same batch; each row to the recorder as it is measured.
    device 'cpu' + tiny: the same orchestration with tiny models on the CPU (--dry-run)."""
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

    def add(entry):
        results.append(entry)
        if recorder is not None:
            recorder.add(entry)

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
        precs = hp_precisions(exes["train_gpt"], args, on_gpu)
        for i, (prec, psets) in enumerate(precs):
            hp, mb, plans = bench_hpctrain(
                "gpt", exes["train_gpt"], GPT_DECK,
                lambda m: dev_sets(gpt_sets(m, args, tr, va, peaks["bf16"])) + psets + tiny_sets,
                cands, mem_gib, work, args, T * args.accum, on_gpu, rerun=i == rerun_index(precs, args),
                tag=f"_{prec}" if len(precs) > 1 else "")
            first_mb = first_mb or mb
            if plans and fpt is None:
                pl = next(iter(plans.values()))
                fpt, n_flops = pl["flops_per_token"], pl["parameters_for_flops"]
            add({"workload": "GPT-2 124M", "program": "hpctrain", "precision": prec, "mb": mb, "res": hp,
                 "unit": "tok/s", "flops_per_unit": fpt, "peak_key": peak_key(prec), "rec": hp_meta("gpt", prec)})
            if "bitwise_rerun" in hp:
                notes.append(f"- GPT-2 124M hpctrain {prec} micro-batch {mb}, run twice with the same settings: "
                             f"bitwise_rerun {json.dumps(hp['bitwise_rerun'])} ({hp['rerun_msg']})")
            if hp.get("perf"):
                notes.append(f"- train_gpt ({prec}) own PERFORMANCE figures (ms/step tokens/s tokens/s/rank MFU): "
                             f"{' '.join(hp['perf'])}")
        for name, vsets in args.gpt_variant:  # the same settings as the first row, plus the variant's keys
            prec, psets = precs[0]
            hp, mb, _ = bench_hpctrain(
                "gpt", exes["train_gpt"], GPT_DECK,
                lambda m: dev_sets(gpt_sets(m, args, tr, va, peaks["bf16"])) + psets + vsets + tiny_sets,
                [first_mb] if first_mb else cands, mem_gib, work, args, T * args.accum, on_gpu, tag=f"_{name}")
            add({"workload": "GPT-2 124M", "program": "hpctrain", "precision": f"{prec}, {name}", "mb": mb, "res": hp,
                 "unit": "tok/s", "flops_per_unit": fpt, "peak_key": peak_key(prec), "rec": hp_meta("gpt", prec)})
            notes.append(f"- GPT-2 124M hpctrain {prec}, {name}: the first row's settings plus {' '.join(vsets)}")
        tb = first_mb or args.gpt_micro_batch or 8
        tcfg = dict(n_layer=L, n_head=NH, n_embd=C, seq_len=T, vocab_size=V) if tiny else None
        for p, cmode, _ in torch_configs(args, "gpt"):
            r, b = bench_torch("gpt", p, tb * args.accum, args, device, on_gpu, work, tcfg, cmode)
            torch_info = {k: r.get(k) for k in ("torch", "torch_cuda", "cudnn")} if r.get("torch") else torch_info
            add({"workload": "GPT-2 124M", "program": torch_program(r, cmode),
                 "precision": p + (" autocast" if p == "bf16" else ", TF32 off"),
                 "mb": b, "res": dict(r, throughput=(T * b / r["ms"] * 1e3) if "ms" in r else None),
                 "unit": "tok/s", "flops_per_unit": fpt, "peak_key": p,
                 "rec": torch_meta("gpt", p, cmode, "none", args)})
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
        precs = hp_precisions(exes["train_resnet"], args, on_gpu)
        for i, (prec, psets) in enumerate(precs):
            hp, mb, plans = bench_hpctrain(
                "resnet", exes["train_resnet"], RESNET_DECK,
                lambda m: dev_sets(resnet_sets(m, args, tr, te, peaks["bf16"])) + psets + tiny_sets,
                cands, mem_gib, work, args, args.accum, on_gpu, rerun=i == rerun_index(precs, args),
                tag=f"_{prec}" if len(precs) > 1 else "")
            first_mb = first_mb or mb
            fpi = fpi or (next(iter(plans.values()))["flops_per_image_training"] if plans else None)
            add({"workload": "ResNet-50", "program": "hpctrain", "precision": prec, "mb": mb, "res": hp,
                 "unit": "img/s", "flops_per_unit": fpi, "peak_key": peak_key(prec),
                 "rec": hp_meta("resnet", prec, hp)})
            if "bitwise_rerun" in hp:
                notes.append(f"- ResNet-50 hpctrain {prec} micro-batch {mb}, run twice with the same settings: "
                             f"bitwise_rerun {json.dumps(hp['bitwise_rerun'])} ({hp['rerun_msg']})")
            if hp.get("perf"):
                notes.append(f"- train_resnet ({prec}) own PERFORMANCE figures (ms/step images/s images/s/rank MFU): "
                             f"{' '.join(hp['perf'])}")
        for name, vsets in args.resnet_variant:  # the same settings as the first row, plus the variant's keys
            prec, psets = precs[0]
            hp, mb, _ = bench_hpctrain(
                "resnet", exes["train_resnet"], RESNET_DECK,
                lambda m: dev_sets(resnet_sets(m, args, tr, te, peaks["bf16"])) + psets + vsets + tiny_sets,
                [first_mb] if first_mb else cands, mem_gib, work, args, args.accum, on_gpu, tag=f"_{name}")
            add({"workload": "ResNet-50", "program": "hpctrain", "precision": f"{prec}, {name}", "mb": mb, "res": hp,
                 "unit": "img/s", "flops_per_unit": fpi, "peak_key": peak_key(prec),
                 "rec": hp_meta("resnet", prec, hp)})
            notes.append(f"- ResNet-50 hpctrain {prec}, {name}: the first row's settings plus {' '.join(vsets)}")
        tb = first_mb or args.resnet_micro_batch or 64
        for p, cmode, det in torch_configs(args, "resnet"):
            r, b = bench_torch("resnet", p, tb * args.accum, args, device, on_gpu, work,
                               {"width": 8, "hw": hw} if tiny else None, cmode, det)
            torch_info = {k: r.get(k) for k in ("torch", "torch_cuda", "cudnn")} if r.get("torch") else torch_info
            # the worker puts the model and the input in channels_last for bf16 on a GPU only
            layout = "channels_last" if p == "bf16" and on_gpu else "nchw"
            add({"workload": "ResNet-50", "program": torch_program(r, cmode, det),
                 "precision": p + (", NCHW, TF32 off" if p == "fp32" else
                                   " autocast, channels_last" if on_gpu else " autocast, NCHW on the CPU"),
                 "mb": b, "res": dict(r, throughput=(b / r["ms"] * 1e3) if "ms" in r else None),
                 "unit": "img/s", "flops_per_unit": fpi, "peak_key": p,
                 "rec": torch_meta("resnet", p, cmode, layout, args, det)})
    for w in ("GPT-2 124M", "ResNet-50"):
        srcs = sorted({f"{r['res']['model_src']}, {r['res']['optimizer']}" for r in results
                       if r["workload"] == w and r["res"].get("model_src")})
        if srcs:
            notes.append(f"- {w} PyTorch model and optimizer: {'; '.join(srcs)}")
    return results, notes, torch_info


def finish(results, dev, torch_info, peaks, args, notes, title, path, recorder=None):
    table = make_rows(results, peaks)
    if recorder is not None:
        notes = notes + [recorder.note()]
        log(recorder.note()[2:])
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
    args.steps, args.warmup, args.no_compile, args.bitwise_rerun = 4, 1, True, True
    args.gpt_variant = [parse_variant("own_gelu=train.gelu_epilogue=false")]  # a variant row (inert on the CPU)
    args.resnet_variant = [parse_variant("nchw=model.memory_format=nchw")]  # the layout row of a GPU session
    # the ResNet rows' layout is what the run logged
    fake_log = os.path.join(work, "layout_probe.log")
    for line, want_layout in (("activation layout: channels-last (N,H,W,C) (model.memory_format = auto)",
                               "channels_last"), ("activation layout: NCHW (model.memory_format = nchw)", "nchw"),
                              ("model: ResNet-50", "nchw")):
        with open(fake_log, "w") as f:
            f.write(f"[rank 0] {line}\n")
        check(resnet_layout({"log_path": fake_log}) == want_layout, f"layout {want_layout} read from '{line}'")
    args.commit_id = resolve_commit(args)
    cpu_dev = {"name": "CPU dry run", "driver": "-", "mem_mib": 0.0, "cuda_driver": "-", "nvcc": "-"}
    cpu_peaks = peaks_for(gpt_exe, "", 1.0)
    suite_rec = make_recorder(args, cpu_dev["name"], cpu_peaks, os.path.join(work, "suite", "gpu"))
    results, notes, torch_info = run_suite(args, cpu_dev, cpu_peaks, os.path.join(work, "suite"), "cpu", tiny=True,
                                           recorder=suite_rec)
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
    check(len(results) == 9, f"9 result rows (2 workloads x hpctrain, PyTorch bf16, fp32; the GPT's --gpt-variant row, "
                             f"the ResNet's --resnet-variant row and PyTorch bf16 with cudnn.deterministic): "
                             f"{len(results)}")
    table, tl, path = finish(results, cpu_dev, torch_info, cpu_peaks, args, notes,
                             "DRY RUN on the CPU with tiny models (bench_gpu.py --dry-run: not a measurement)",
                             os.path.join(work, "suite", "dry_run_cpu.md"), suite_rec)
    check(os.path.exists(path) and len(table) == 11, f"the dry run's table and record ({path})")
    recs = suite_rec.records
    check(len(recs) == 9 and not suite_rec.problems and all(validate_record(r) == [] for r in recs),
          f"9 well-formed JSON Lines records of the CPU rows ({suite_rec.path}){suite_rec.problems or ''}")
    check(read_jsonl(suite_rec.path) == recs and os.path.basename(suite_rec.path) ==
          f"cpu_dry_run_{datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d')}.jsonl",
          "the record file holds exactly those records, named <device_slug>_<UTC date>.jsonl")
    want = [("gpt", "hpctrain", "none", "fp32", "none", True, True),
            ("gpt", "hpctrain", "none", "fp32", "none", None, True),  # --gpt-variant own_gelu
            ("gpt", "pytorch", "eager", "bf16", "none", None, False),
            ("gpt", "pytorch", "eager", "fp32", "none", None, False),
            ("resnet", "hpctrain", "none", "fp32", "nchw", True, True),
            ("resnet", "hpctrain", "none", "fp32", "nchw", None, True),  # --resnet-variant nchw
            ("resnet", "pytorch", "eager", "bf16", "nchw", None, False),
            ("resnet", "pytorch", "eager", "bf16", "nchw", None, True),  # cudnn.deterministic
            ("resnet", "pytorch", "eager", "fp32", "nchw", None, False)]
    got = [(r["workload"], r["program"], r["mode"], r["precision"], r["layout"], r["bitwise_rerun"],
            r["deterministic"]) for r in recs]
    check(got == want, f"records' workload, program, mode, precision, layout, bitwise_rerun, deterministic: {got}")
    check(all(r["device_slug"] == "cpu_dry_run" and r["commit"] == args.commit_id and r["torch_version"] ==
              torch_info.get("torch") for r in recs),
          f"device_slug cpu_dry_run, commit {args.commit_id}, torch {torch_info.get('torch')} (cuDNN "
          f"{torch_info.get('cudnn')}); deterministic: hpctrain, and PyTorch's ResNet row with cudnn.deterministic")
    hp_log = read_text(os.path.join(ROOT, recs[0]["log"])) or "" if recs else ""
    check("# bitwise rerun: true" in hp_log and "===== output of the rerun" in hp_log and "PERFORMANCE" in hp_log
          and re.search(r"#   step 1: loss \S+ 0x", hp_log) is not None,
          f"the hpctrain row's log: command, per-step loss and gradient norm in hex, the rerun's verdict and both "
          f"outputs ({recs[0]['log'] if recs else 'none'})")

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

    log("== table, markdown and JSON Lines record on FAKE numbers")
    dev = {"name": "FAKE GPU", "driver": "FAKE", "mem_mib": 81559.0, "cuda_driver": "FAKE", "nvcc": "FAKE"}
    peaks = h100
    args.steps, args.warmup = 40, 10
    fake = lambda ms, tput, **kw: dict(ms=ms, throughput=tput, mem_mib=40000.0, mem_src="FAKE", cmd=["FAKE"],
                                       measured=30, ms_all=[ms] * 40, **kw)
    g = lambda prog, prec, mb, res, pk, rec: {"workload": "GPT-2 124M", "program": prog, "precision": prec, "mb": mb,
                                             "res": res, "unit": "tok/s", "flops_per_unit": fpt, "peak_key": pk,
                                             "rec": rec}
    rn = lambda prog, prec, mb, res, pk, rec: {"workload": "ResNet-50", "program": prog, "precision": prec, "mb": mb,
                                              "res": res, "unit": "img/s", "flops_per_unit": fpi_train,
                                              "peak_key": pk, "rec": rec}
    args.no_compile = False
    results = [
        g("hpctrain", "bf16", 64, fake(500.0, 131072.0, bitwise_rerun=True, rerun_msg="FAKE: 40 steps equal"),
          "bf16", hp_meta("gpt", "bf16")),
        g("hpctrain", "fp32", 16, fake(1000.0, 16384.0), "fp32", hp_meta("gpt", "fp32")),
        g("PyTorch torch.compile", "bf16 autocast", 16, fake(100.0, 163840.0, max_allocated_mib=30000.0,
                                                            mode_key="compile"), "bf16",
          torch_meta("gpt", "bf16", "default", "none", args)),
        g("PyTorch torch.compile max-autotune", "bf16 autocast", 16,
          fake(90.0, 182044.4, mode_key="compile_max_autotune"), "bf16",
          torch_meta("gpt", "bf16", "max-autotune", "none", args)),
        rn("hpctrain", "fp32", 128, fake(200.0, 640.0), "fp32", hp_meta("resnet", "fp32")),
        rn("PyTorch eager (torch.compile failed: FAKE)", "bf16 autocast, channels_last", 128,
           fake(150.0, 853.3, mode_key="eager"), "bf16", torch_meta("resnet", "bf16", "default", "channels_last", args)),
        rn("PyTorch eager", "fp32, NCHW, TF32 off", 128, {"error": "FAKE failure to show the failed-row format"},
           "fp32", torch_meta("resnet", "fp32", None, "nchw", args)),
    ]
    fake_rec = make_recorder(args, dev["name"], peaks, os.path.join(work, "gpu"), suite_rec.torch_info)
    for e in results:
        fake_rec.add(e)
    table, tl, path = finish(results, dev, torch_info, peaks, args, ["- FAKE notes line"],
                             "FAKE NUMBERS (bench_gpu.py --dry-run: the table and record code on made-up figures, not "
                             "a measurement)", os.path.join(work, "gpu_FAKE_dry_run.md"), fake_rec)
    # 16384 tok/s x 855.2 MFLOP = 14.0 TFLOP/s: 1.4% of 989 (bf16), 20.9% of 67 (fp32); hpctrain's best row (bf16,
    # 131,072 tok/s) over PyTorch's: 0.80x, 0.72x
    check(len(table) == 9 and "| 14.0 | 1.4% | 20.9% (fp32) |" in table[3] and "| 0.80x |" in table[4]
          and "| 0.72x |" in table[5] and "run failed: FAKE" in table[8],
          "table: TFLOP/s, both MFUs, hpctrain's best row over each PyTorch row, a failed row")
    check(any(l.startswith("PEER GPT-2 124M") and "max-autotune" in l and "0.72x" in l for l in tl)
          and any(l.startswith("PEER ResNet-50") and "torch.compile failed" in l for l in tl),
          "the comparison against PyTorch's best row (GPT: max-autotune; ResNet: the eager fallback)")
    check(any("MISS (hpctrain 11.3%" in l for l in tl) and any("ResNet-50 images/s >= PyTorch's: MISS" in l and
                                                               "0.75x" in l for l in tl),
          "targets: GPT MISS on hpctrain's best row (11.3%), ResNet MISS against PyTorch's best measured row")
    check(path is not None and path.startswith(work) and os.path.exists(path) and
          "FAKE NUMBERS" in open(path).read() and "JSON Lines record" in open(path).read(),
          f"markdown written under --work only ({path}), naming the JSON Lines record")
    frecs = fake_rec.records
    check(len(frecs) == 6 and fake_rec.skipped == ["ResNet-50 PyTorch eager fp32, NCHW, TF32 off"]
          and not fake_rec.problems and read_jsonl(fake_rec.path) == frecs
          and all(validate_record(r) == [] for r in frecs),
          f"6 well-formed records, the failed row not recorded ({fake_rec.path})")
    got = [(r["program"], r["mode"], r["precision"], r["layout"], r["bitwise_rerun"]) for r in frecs]
    check(got == [("hpctrain", "none", "bf16", "none", True), ("hpctrain", "none", "fp32", "none", None),
                  ("pytorch", "compile", "bf16", "none", None), ("pytorch", "compile_max_autotune", "bf16", "none", None),
                  ("hpctrain", "none", "fp32", "nchw", None), ("pytorch", "eager", "bf16", "channels_last", None)],
          f"FAKE records: program, mode (the eager fallback says eager), precision, layout, bitwise_rerun: {got}")
    r0 = frecs[0] if frecs else {}
    check(r0.get("device_slug") == "fake_gpu" and r0.get("unit") == "tokens/s" and r0.get("micro_batch") == 64
          and abs(r0.get("mfu", 0) - 131072.0 * fpt / 989.5e12) < 1e-12 and abs(r0.get("peak_mem_gib", 0) - 40000 / 1024)
          < 1e-12 and r0.get("ms_per_step") == 500.0 and r0.get("cudnn_version") == suite_rec.torch_info.get("cudnn"),
          "device_slug fake_gpu; unit, micro-batch, MFU of the bf16 peak, memory in GiB, ms/step, cuDNN as the torch's")
    log("  record example: " + json.dumps(r0))
    # malformed records are refused
    bad_cases = {
        "a key missing": {k: v for k, v in r0.items() if k != "log"},
        "a key too many": dict(r0, error="x"),
        "keys in another order": dict(reversed(list(r0.items()))),
        "ms_per_step a string": dict(r0, ms_per_step="500.0"),
        "micro_batch a bool": dict(r0, micro_batch=True),
        "mode outside the enum": dict(r0, mode="max-autotune"),
        "precision fp16": dict(r0, precision="fp16"),
        "deterministic a string": dict(r0, deterministic="true"),
        "hpctrain not deterministic": dict(r0, deterministic=False),
        "hpctrain with a mode": dict(r0, mode="compile"),
        "pytorch with bitwise_rerun": dict(r0, program="pytorch", mode="compile", deterministic=False),
        "gpt in images/s": dict(r0, unit="images/s"),
        "gpt with a layout": dict(r0, layout="nchw"),
        "mfu above 1": dict(r0, mfu=1.5),
        "mfu NaN": dict(r0, mfu=float("nan")),
        "cudnn_version a string": dict(r0, cudnn_version="9.1"),
        "slug not the device's": dict(r0, device_slug="fake"),
        "log missing": dict(r0, log="validation/results/gpu/logs/none.log"),
        "commit empty": dict(r0, commit=""),
    }
    missed = [k for k, v in bad_cases.items() if not validate_record(v)]
    check(frecs and not missed, f"validate_record refuses {len(bad_cases)} malformed records"
          + (f"; accepted: {missed}" if missed else ""))
    n_before = len(read_jsonl(fake_rec.path))
    fake_rec.add(g("hpctrain", "fp16", 8, fake(300.0, 27306.7), "fp16", hp_meta("gpt", "fp16")))
    check(len(fake_rec.problems) == 1 and "precision" in fake_rec.problems[0]
          and len(read_jsonl(fake_rec.path)) == n_before,
          "a malformed record (precision fp16) is not written and is listed as a problem (a real run exits 1)")
    gpu_dir = os.path.join(ROOT, "validation", "results", "gpu")
    written = [os.path.join(dp, n) for dp, dns, fns in os.walk(gpu_dir) for n in dns + fns
               if n.startswith(("fake_gpu", "cpu_dry_run"))]
    check(not os.path.exists(os.path.join(ROOT, "validation", "results", "gpu_FAKE_dry_run.md")) and not written,
          "nothing written to validation/results" + (f": {written}" if written else ""))
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
    ap.add_argument("--max-autotune", action="store_true",
                    help="also PyTorch bf16 with torch.compile(mode='max-autotune') (a row of its own)")
    ap.add_argument("--bitwise-rerun", action=argparse.BooleanOptionalAction, default=True,
                    help="run hpctrain's first bf16 row twice and compare losses and gradient norms bitwise "
                         "(default on; --no-bitwise-rerun: bitwise_rerun null)")
    ap.add_argument("--commit", help="the commit the record names (default git rev-parse HEAD; for a tree without "
                                     ".git)")
    ap.add_argument("--hp-set", action="append", default=[], metavar="KEY=VALUE", help="extra --set for the apps")
    ap.add_argument("--gpt-variant", action="append", default=[], type=parse_variant, metavar="NAME=KEY=VALUE[,...]",
                    help="one more hpctrain GPT row: the first GPT row's settings and micro-batch plus these --set "
                         "keys, labelled NAME (e.g. own_gelu=train.gelu_epilogue=false); repeatable")
    ap.add_argument("--resnet-variant", action="append", default=[], type=parse_variant,
                    metavar="NAME=KEY=VALUE[,...]",
                    help="one more hpctrain ResNet row likewise (e.g. nchw=model.memory_format=nchw); repeatable")
    ap.add_argument("--hp-precisions", default="bf16,fp32",
                    help="train.precision values hpctrain runs at, one row each (default bf16,fp32; GPU only)")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per run (default 900)")
    ap.add_argument("--work", help="work directory (default: a new temporary one)")
    ap.add_argument("--record", action="store_true",
                    help="write validation/results/gpu_<device>.md and append validation/results/gpu/"
                         "<device_slug>_<date>.jsonl (else WORK/gpu/)")
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
