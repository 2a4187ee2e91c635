#!/usr/bin/python3
"""Self-test of the bf16 cross-checks (gpt_reference.py and resnet_train_reference.py with --autocast bf16), runnable
before and independently of hpctrain's bf16 code: from an fp32 dump (`train_gpt|train_resnet ... --dump`) it writes
dumps that look like bf16 runs and checks each verdict, and for a FAILED one that the check meant to fire did:
  - the dump's losses (and step-1 gradients) replaced by those of the emulation of hpctrain's bf16 scheme (a
    legitimate bf16 implementation: it is the scheme), the deck marked train.precision = "bf16"   -> VALID
    (shows the derived limits admit the scheme itself on this CPU: 0 from the emulation, its own distance from fp32,
    e.g. 4.6e-4 (GPT) / 8.4e-4 (ResNet), inside sqrt(D) u, and far from fp32 enough for "bf16 in effect");
  - the same with one step's loss moved by twice the loss-vs-emulation limit                     -> FAILED,
    by the emulation check (shows it fires at 2x its limit, 2.1e-3 (GPT) / 1.3e-2 (ResNet), where the looser
    fp32 check, 3.4e-2 / 3.7e-2, would not);
  - the fp32 losses under a bf16 deck (bf16 not in effect)                                         -> FAILED,
    by "bf16 in effect" (hpctrain fp32 sits 0.5e-7..1.6e-7 from PyTorch fp32, under 4 sqrt(D) 2^-24 = 2.1e-6 /
    2.2e-6); alone: they pass the emulation check, the emulation's own distance from fp32 being inside its limit;
  - the emulated losses under an fp32 deck (a dump of the wrong run)                               -> FAILED,
    by the deck check;
  - (GPT) one step-1 gradient tensor (h.0.mlp.fc.weight) scaled by 1.05                           -> FAILED,
    by the gradient checks (relative L2 5e-2 from the emulation > sqrt(85) u = 3.6e-2, and ~5e-2 from fp32 >
    sqrt(138) u = 4.6e-2: the emulation's margin is the one to rely on). The ResNet's step-1 gradients are not
    judged (BatchNorm's cancelling sums put bf16 0.25..0.66 from fp32 per tensor: resnet_train_reference.py).
  The measured figures of each case, per PyTorch ISA setting: the headers of the two scripts.
usage: bf16_selftest.py gpt|resnet FP32_DUMP.h5 WORKDIR     Prints VALID or FAILED: <what>; exits 1 on FAILED."""
import os
import re
import shutil
import subprocess
import sys

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def set_precision(f, prec):
    deck = f.attrs["deck"]
    deck = deck.decode() if isinstance(deck, bytes) else str(deck)
    lines, section, done = [], None, False
    for line in deck.splitlines():
        s = line.strip()
        if s.startswith("["):
            if section == "train" and not done:
                lines.append(f'precision = "{prec}"')
                done = True
            section = s.strip("[]")
        elif section == "train" and s.split("=")[0].strip() == "precision":
            line, done = f'precision = "{prec}"', True
        lines.append(line)
    if not done:
        lines += ["[train]" if section != "train" else "", f'precision = "{prec}"']
    f.attrs["deck"] = np.bytes_("\n".join(lines) + "\n")


def make(src, dst, prec, losses=None, grads=None):
    shutil.copyfile(src, dst)
    with h5py.File(dst, "r+") as f:
        set_precision(f, prec)
        if losses is not None:
            f["steps/loss"][...] = np.asarray(losses, dtype=f["steps/loss"].dtype)
        for name, g in (grads or {}).items():
            d = f["grads_step1/" + name]
            full = np.array(d)
            full[: g.shape[0]] = g.astype(full.dtype)
            d[...] = full


def verdict(kind, dump, cache):
    script = "gpt_reference.py" if kind == "gpt" else "resnet_train_reference.py"
    p = subprocess.run([sys.executable, os.path.join(HERE, script), dump, "--autocast", "bf16", "--replay-cache", cache],
                       capture_output=True, text=True)
    lines = p.stdout.strip().splitlines()
    last = lines[-1] if lines else p.stderr.strip()[-300:]
    return ("VALID" if p.returncode == 0 and last == "VALID" else "FAILED"), last


def main():
    kind, src, work = sys.argv[1], sys.argv[2], sys.argv[3]
    os.makedirs(work, exist_ok=True)
    # the replays (fp32, autocast, emulation) once, into the cache every verdict below reuses
    cache = os.path.join(work, "replays.pt")
    if os.path.exists(cache):
        os.remove(cache)
    script = "gpt_reference.py" if kind == "gpt" else "resnet_train_reference.py"
    p = subprocess.run([sys.executable, os.path.join(HERE, script), src, "--autocast", "bf16", "--measure",
                        "--replay-cache", cache], check=True, capture_output=True, text=True)
    m = re.search(r"loss vs emulation ([0-9.e+-]+)", p.stdout)
    if not m:
        print(p.stdout + "\nFAILED: no loss-vs-emulation limit in the script's output")
        return 1
    tol = float(m.group(1))  # the limit the script derived for this dump
    import torch
    with h5py.File(src, "r") as f:
        l32 = [float(v) for v in f["steps/loss"][()]]
    run = torch.load(cache)[2]  # the emulation: (losses, step-1 gradients) for the GPT, (losses, state, gradients)
    lem = run[0]
    grads = {n: g.numpy() for n, g in run[1].items()} if kind == "gpt" else None
    k = len(lem) // 2
    moved = list(lem)
    moved[k] *= 1 + 2 * tol
    # (what, expected verdict, the failure text expected from the check meant to fire, the dump)
    cases = [("emulated bf16 run", "VALID", None, dict(prec="bf16", losses=lem, grads=grads)),
             (f"step {k + 1}'s loss moved by {2 * tol:.3g} (2x the loss-vs-emulation limit)", "FAILED",
              "vs the emulation of its scheme: worst loss", dict(prec="bf16", losses=moved, grads=grads)),
             ("fp32 losses under a bf16 deck", "FAILED", "did not compute in bf16",
              dict(prec="bf16", losses=l32, grads=grads)),
             ("emulated losses under an fp32 deck", "FAILED", "train.precision=fp32 run",
              dict(prec="fp32", losses=lem, grads=grads))]
    if grads:
        name = "h.0.mlp.fc.weight" if "h.0.mlp.fc.weight" in grads else sorted(grads)[0]
        bad = dict(grads)
        bad[name] = grads[name] * 1.05
        cases.append((f"step-1 gradient {name} scaled by 1.05", "FAILED", f"step-1 gradient {name} vs the emulation",
                      dict(prec="bf16", losses=lem, grads=bad)))
    failures = []
    for i, (what, want, why, kw) in enumerate(cases):
        dst = os.path.join(work, f"case{i}.h5")
        make(src, dst, **kw)
        got, last = verdict(kind, dst, cache)
        ok = got == want and (why is None or why in last)
        print(f"{'ok  ' if ok else 'BAD '} {what}: expected {want}{f' ({why})' if why else ''}, got {got} "
              f"({last[:600]})", flush=True)
        if not ok:
            failures.append(what)
    if failures:
        print("FAILED: " + "; ".join(failures))
        return 1
    print("VALID")
    return 0


if __name__ == "__main__":
    sys.exit(main())
