"""The PyTorch side of the CPU benchmarks (validation/bench_gpt.py, validation/bench_resnet.py), run as a subprocess of
whichever interpreter holds the torch to measure (Debian's /usr/bin/python3 for torch 1.13, the venv of
validation/torch_venv.py for 2.x); it imports nothing but torch and the repository's model files.

  gpt:    one AdamW training step of validation/torch_models.GPT (nanoGPT-style GPT-2 with tied embeddings; attention
          through F.scaled_dot_product_attention on 2.x, masked softmax on 1.13) at inputs/bench_gpt.toml's shape:
          zero_grad, forward + loss, backward, clip_grad_norm_(1.0), AdamW (lr 1e-3, betas 0.9/0.95, weight decay
          0.1 on 2-D tensors; fused=True where the torch has a fused CPU AdamW, else its default);
  resnet: one training-mode forward + cross-entropy + backward of ResNet-20 (tests/reference/resnet_models.py, the
          model of the cross-checks) on 1x28x28, as validation/bench_resnet.cpp times it (no optimizer step).
--autocast bf16: the forward (and loss) under torch.autocast('cpu', dtype=torch.bfloat16), fp32 parameters, fp32
optimizer; --compile: the module through torch.compile (inductor), its compilation in the first (warm-up) step.
Synthetic inputs (random tokens / images): the step time does not depend on them.
Prints one line `TORCH_BENCH {json}`: torch version, median_ms, min_ms, max_ms over the steps after --warmup,
compile_s (the first step's time when compiled), adamw (the implementation used), threads, ms (every step).
usage: PYTHON torch_step_bench.py --model gpt|resnet [--autocast none|bf16] [--compile] [--threads 2] [--steps 40]
       [--warmup 5] [--batch B]"""
import argparse
import contextlib
import json
import os
import statistics
import sys
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(0, os.path.join(os.path.dirname(here), "tests", "reference"))

ap = argparse.ArgumentParser()
ap.add_argument("--model", choices=("gpt", "resnet"), required=True)
ap.add_argument("--autocast", choices=("none", "bf16"), default="none")
ap.add_argument("--compile", action="store_true")
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--steps", type=int, default=40)
ap.add_argument("--warmup", type=int, default=5)
ap.add_argument("--batch", type=int, default=0, help="sequences (gpt, default 8) or images (resnet, default 128)")
# the GPT's shape: inputs/bench_gpt.toml's
ap.add_argument("--gpt-shape", default="4,4,256,256,256", help="n_layer,n_head,n_embd,seq_len,vocab")
a = ap.parse_args()

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

torch.set_num_threads(a.threads)
torch.manual_seed(0)
info = {"torch": torch.__version__, "threads": torch.get_num_threads(), "model": a.model, "autocast": a.autocast,
        "compile": a.compile}
if a.compile and not hasattr(torch, "compile"):
    sys.exit(f"error: torch {torch.__version__} has no torch.compile")
ctx = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if a.autocast == "bf16" else contextlib.nullcontext

if a.model == "gpt":
    from torch_models import GPT
    L, NH, C, T, V = (int(v) for v in a.gpt_shape.split(","))
    B = a.batch or 8
    model = GPT(L, NH, C, T, V, bias=True).train()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    other = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}]
    opt, info["adamw"] = None, "default"
    try:
        opt = torch.optim.AdamW(groups, lr=1e-3, betas=(0.9, 0.95), eps=1e-8, fused=True)
        info["adamw"] = "fused"
    except (TypeError, RuntimeError, ValueError):
        opt = torch.optim.AdamW(groups, lr=1e-3, betas=(0.9, 0.95), eps=1e-8)
    run = torch.compile(model) if a.compile else model
    x = torch.randint(0, V, (B, T))
    y = torch.randint(0, V, (B, T))

    def step():
        opt.zero_grad(set_to_none=True)
        with ctx():
            loss = run(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss
else:
    from resnet_models import build_resnet
    B = a.batch or 128
    model = build_resnet(False, 20, 16, 1, 10).train()
    run = torch.compile(model) if a.compile else model
    x = torch.randn(B, 1, 28, 28)
    y = torch.randint(0, 10, (B,))

    def step():
        model.zero_grad(set_to_none=False)
        with ctx():
            loss = F.cross_entropy(run(x), y)
        loss.backward()
        return loss

ms = []
for it in range(a.steps):
    t0 = time.perf_counter()
    loss = step()
    ms.append((time.perf_counter() - t0) * 1e3)
    if it == 0:
        info["first_step_s"] = ms[0] / 1e3
        if not torch.isfinite(loss.detach()).item():
            sys.exit("error: non-finite loss")
meas = ms[a.warmup:]
info.update(median_ms=statistics.median(meas), min_ms=min(meas), max_ms=max(meas), steps=len(meas), batch=B,
            ms=[round(v, 1) for v in ms])
if a.compile:
    info["compile_s"] = info["first_step_s"]
print("TORCH_BENCH " + json.dumps(info), flush=True)
