#!/usr/bin/python3
"""PyTorch cross-check of hpctrain's GPT (model-level reference, docs/style.md "Tests like llm.c").

Reads the HDF5 file written by `train_gpt DECK --dump FILE.h5` (lib/train/reference_dump.hpp): the
initial parameters, every step's token batches, hpctrain's per-step losses and step-1 gradients.
Builds the same GPT-2 in PyTorch (Debian's python3-torch, CPU, fp32) from those weights, replays the
same batches with torch.optim.AdamW (decoupled weight decay on the tensors hpctrain decays: 2-D weights
and embeddings), clip_grad_norm_, and hpctrain's per-step learning rates, and compares:
  - every gradient of step 1, per tensor: ||dg||_2 / ||g||_2 <= 1e-5 and max|dg| <= 1e-4 max|g|;
  - the loss of every step: |dl| / |l| <= 1e-5 (fp32 end to end; reduction order differs).
Prints one line per check and a final VALID / FAILED verdict; exits 1 on FAILED.
Run with /usr/bin/python3 (the pyenv python3 on PATH cannot see Debian's torch and h5py).
"""
import argparse
import math
import sys

import h5py
import numpy as np
import torch
import torch.nn.functional as F

torch.set_num_threads(2)


class Gpt(torch.nn.Module):
    """GPT-2 as in nanoGPT, parameters named as hpctrain names them, qkv as (3, NH, HS, C).
    cfg: n_layer, n_head, n_embd, seq_len, vocab_size, padded_vocab, bias; params: name -> float32 array."""

    def __init__(self, cfg, params):
        super().__init__()
        self.L, self.NH, self.C = int(cfg["n_layer"]), int(cfg["n_head"]), int(cfg["n_embd"])
        self.T, self.V, self.Vp = int(cfg["seq_len"]), int(cfg["vocab_size"]), int(cfg["padded_vocab"])
        self.bias = bool(cfg["bias"])
        self.names = list(params.keys())
        self.params = torch.nn.ParameterDict()
        for name, arr in params.items():
            self.params[name.replace(".", "__")] = torch.nn.Parameter(torch.from_numpy(np.asarray(arr, np.float32)))
        self.register_buffer("mask", torch.tril(torch.ones(self.T, self.T, dtype=torch.bool)))

    def p(self, name):
        return self.params[name.replace(".", "__")]

    def pb(self, name):
        return self.p(name) if self.bias else None

    def forward(self, idx, targets):
        B, T = idx.shape
        C, NH = self.C, self.NH
        HS = C // NH
        x = self.p("wte")[idx] + self.p("wpe")[:T]
        for l in range(self.L):
            h = f"h.{l}."
            y = F.layer_norm(x, (C,), self.p(h + "ln1.weight"), self.pb(h + "ln1.bias"), eps=1e-5)
            wqkv = self.p(h + "attn.qkv.weight").reshape(3 * C, C)
            bqkv = self.p(h + "attn.qkv.bias").reshape(3 * C) if self.bias else None
            qkv = F.linear(y, wqkv, bqkv)
            q, k, v = qkv.split(C, dim=2)
            q = q.view(B, T, NH, HS).transpose(1, 2)
            k = k.view(B, T, NH, HS).transpose(1, 2)
            v = v.view(B, T, NH, HS).transpose(1, 2)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(HS))
            att = att.masked_fill(~self.mask[:T, :T], float("-inf")).softmax(dim=-1)
            y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
            x = x + F.linear(y, self.p(h + "attn.proj.weight"), self.pb(h + "attn.proj.bias"))
            y = F.layer_norm(x, (C,), self.p(h + "ln2.weight"), self.pb(h + "ln2.bias"), eps=1e-5)
            y = F.gelu(F.linear(y, self.p(h + "mlp.fc.weight"), self.pb(h + "mlp.fc.bias")), approximate="tanh")
            x = x + F.linear(y, self.p(h + "mlp.proj.weight"), self.pb(h + "mlp.proj.bias"))
        x = F.layer_norm(x, (C,), self.p("lnf.weight"), self.pb("lnf.bias"), eps=1e-5)
        logits = F.linear(x, self.p("wte"))[:, :, : self.V]  # padded vocabulary masked out
        return F.cross_entropy(logits.reshape(-1, self.V), targets.reshape(-1))


def decays(name, shape):
    # hpctrain's rule (lib/models/gpt/gpt.cpp parameter_layout): weights of Linear layers and embeddings
    return name in ("wte", "wpe") or name.endswith(".weight") and len(shape) >= 2


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dump", help="HDF5 file written by train_gpt --dump")
    ap.add_argument("--loss-rtol", type=float, default=1e-5)
    ap.add_argument("--grad-rel-l2", type=float, default=1e-5)
    ap.add_argument("--grad-rel-max", type=float, default=1e-4)
    args = ap.parse_args()

    f = h5py.File(args.dump, "r")
    a = f.attrs
    init = {}
    f["init"].visititems(lambda name, obj: init.__setitem__(name, np.array(obj)) if isinstance(obj, h5py.Dataset) else None)
    model = Gpt(a, init)
    inputs = torch.from_numpy(np.array(f["batches/inputs"], dtype=np.int64))
    targets = torch.from_numpy(np.array(f["batches/targets"], dtype=np.int64))
    lrs = np.array(f["steps/lr"])
    hp_loss = np.array(f["steps/loss"])
    steps = int(a["steps"])

    decay, no_decay = [], []
    for name in model.names:
        (decay if decays(name, model.p(name).shape) else no_decay).append(model.p(name))
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": float(a["weight_decay"])}, {"params": no_decay, "weight_decay": 0.0}],
        lr=float(lrs[0]), betas=(float(a["beta1"]), float(a["beta2"])), eps=float(a["eps"]))

    failures = []
    worst_loss = 0.0
    for s in range(steps):
        for g in opt.param_groups:
            g["lr"] = float(lrs[s])
        opt.zero_grad(set_to_none=True)
        loss = model(inputs[s], targets[s])
        loss.backward()
        if s == 0:
            worst_l2 = worst_max = 0.0
            for name in model.names:
                g_ref = model.p(name).grad.double()
                g_hp = torch.from_numpy(np.array(f["grads_step1/" + name], dtype=np.float64))
                if name == "wte":  # padding rows: hpctrain's gradient must be exactly zero there
                    if model.Vp > model.V and g_hp[model.V:].abs().max().item() != 0.0:
                        failures.append("wte padding rows have a non-zero gradient")
                    g_ref, g_hp = g_ref[: model.V], g_hp[: model.V]
                d = g_hp - g_ref
                rel_l2 = (d.norm() / g_ref.norm().clamp_min(1e-30)).item()
                rel_max = (d.abs().max() / g_ref.abs().max().clamp_min(1e-30)).item()
                worst_l2, worst_max = max(worst_l2, rel_l2), max(worst_max, rel_max)
                if rel_l2 > args.grad_rel_l2 or rel_max > args.grad_rel_max:
                    failures.append(f"gradient {name}: rel L2 {rel_l2:.3e}, rel max {rel_max:.3e}")
            print(f"step 1 gradients: {len(model.names)} tensors, worst rel L2 {worst_l2:.3e} "
                  f"(limit {args.grad_rel_l2:g}), worst rel max {worst_max:.3e} (limit {args.grad_rel_max:g})")
        clip = float(a["grad_clip"])
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        rel = abs(loss.item() - hp_loss[s]) / abs(loss.item())
        worst_loss = max(worst_loss, rel)
        print(f"step {s + 1:3d}: torch loss {loss.item():.9f}  hpctrain {hp_loss[s]:.9f}  rel diff {rel:.3e}")
        if rel > args.loss_rtol:
            failures.append(f"loss of step {s + 1}: rel diff {rel:.3e} > {args.loss_rtol:g}")

    print(f"worst loss rel diff over {steps} steps: {worst_loss:.3e} (limit {args.loss_rtol:g})")
    if failures:
        print("FAILED: " + "; ".join(failures))
        return 1
    print("VALID")
    return 0


if __name__ == "__main__":
    sys.exit(main())
