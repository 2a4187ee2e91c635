#!/usr/bin/python3
"""Self-test of the bf16 cross-checks (gpt_reference.py and resnet_train_reference.py with --autocast bf16), runnable
before and independently of hpctrain's bf16 code: from an fp32 dump (`train_gpt|train_resnet ... --dump`) it writes
dumps that look like bf16 runs and checks the verdicts:
  - the dump's losses (and, for the GPT, step-1 gradients) replaced by those of the emulation of hpctrain's bf16 scheme
    (a legitimate bf16 implementation), the deck marked train.precision = "bf16"  -> VALID;
  - the same with one step's loss moved by twice the loss limit                     -> FAILED;
  - the fp32 losses under a bf16 deck (bf16 not in effect)                           -> FAILED;
  - the emulated losses under an fp32 deck (a dump of the wrong run)                 -> FAILED;
  - (GPT) one step-1 gradient tensor scaled by 1.05                                  -> FAILED.
usage: bf16_selftest.py gpt|resnet FP32_DUMP.h5 WORKDIR     Prints VALID or FAILED: <what>; exits 1 on FAILED."""
import os
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


def loss_limit(script):
    """BF16_LOSS_RTOL as the script defines it."""
    import re
    return float(re.search(r"^BF16_LOSS_RTOL = ([0-9.e-]+)", open(os.path.join(HERE, script)).read(), re.M).group(1))


def main():
    kind, src, work = sys.argv[1], sys.argv[2], sys.argv[3]
    os.makedirs(work, exist_ok=True)
    # the replays (fp32, autocast, emulation) once, into the cache every verdict below reuses
    cache = os.path.join(work, "replays.pt")
    if os.path.exists(cache):
        os.remove(cache)
    script = "gpt_reference.py" if kind == "gpt" else "resnet_train_reference.py"
    subprocess.run([sys.executable, os.path.join(HERE, script), src, "--autocast", "bf16", "--measure",
                    "--replay-cache", cache], check=True, capture_output=True)
    import torch
    with h5py.File(src, "r") as f:
        l32 = [float(v) for v in f["steps/loss"][()]]
    lem, em = torch.load(cache)[2]
    grads = {n: g.numpy() for n, g in em.items()} if kind == "gpt" else None
    tol = loss_limit(script)
    k = len(lem) // 2
    moved = list(lem)
    moved[k] *= 1 + 2 * tol
    cases = [("emulated bf16 run", "VALID", dict(prec="bf16", losses=lem, grads=grads)),
             (f"step {k + 1}'s loss moved by {2 * tol:g}", "FAILED", dict(prec="bf16", losses=moved, grads=grads)),
             ("fp32 losses under a bf16 deck", "FAILED", dict(prec="bf16", losses=l32, grads=grads)),
             ("emulated losses under an fp32 deck", "FAILED", dict(prec="fp32", losses=lem, grads=grads))]
    if grads:
        name = "h.0.mlp.fc.weight" if "h.0.mlp.fc.weight" in grads else sorted(grads)[0]
        bad = dict(grads)
        bad[name] = grads[name] * 1.05
        cases.append((f"step-1 gradient {name} scaled by 1.05", "FAILED", dict(prec="bf16", losses=lem, grads=bad)))
    failures = []
    for i, (what, want, kw) in enumerate(cases):
        dst = os.path.join(work, f"case{i}.h5")
        make(src, dst, **kw)
        got, last = verdict(kind, dst, cache)
        ok = got == want
        print(f"{'ok  ' if ok else 'BAD '} {what}: expected {want}, got {got} ({last[:200]})", flush=True)
        if not ok:
            failures.append(what)
    if failures:
        print("FAILED: " + "; ".join(failures))
        return 1
    print("VALID")
    return 0


if __name__ == "__main__":
    sys.exit(main())
