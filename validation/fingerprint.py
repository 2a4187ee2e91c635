#!/usr/bin/python3
"""Bitwise fingerprints of training runs, for refactors that must change no bit.

Runs train_gpt and train_resnet on a fixed set of decks and layouts (mpirun --oversubscribe, OMP_NUM_THREADS=1),
and records per run: every metrics.jsonl loss, grad_norm, lr and val_loss (val_acc) as the hex of the float64, and the
SHA-256 of every tensor of the last checkpoint (/model/..., /optim/..., read through index.h5 as whole tensors) and the
checkpoint's step. Two fingerprint files of the same machine compare equal exactly when nothing changed.

  validation/fingerprint.py run  BUILD_DIR OUT.json [--work DIR] [--only NAME...]
  validation/fingerprint.py diff BEFORE.json AFTER.json      (exit 1 and one line per difference; "IDENTICAL" else)

Needs the data of scripts/prepare_data.sh, /usr/bin/python3 with h5py and numpy (scripts/setup.sh installs them).
"""
import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
from ckpt_read import latest_step_dir, read_checkpoint  # noqa: E402

GPT_TINY = os.path.join(REPO, "inputs", "gpt_tiny.toml")
GPT_DEMO = os.path.join(REPO, "inputs", "gpt_demo.toml")
RESNET_TINY = os.path.join(REPO, "inputs", "resnet_tiny.toml")

# name: (app, np, deck, --set overrides)
RUNS = {
    "gpt_demo_dp2": ("train_gpt", 2, GPT_DEMO, ["train.steps=60", "train.eval_every=30", "checkpoint.every=60",
                                                 "sample.tokens=0"]),
    "gpt_tiny_serial": ("train_gpt", 1, GPT_TINY, []),
    "gpt_tiny_dp2": ("train_gpt", 2, GPT_TINY, []),
    "gpt_tiny_tp2pp2_zero1": ("train_gpt", 4, GPT_TINY, ["parallel.tp=2", "parallel.pp=2", "parallel.zero=1"]),
    "gpt_tiny_dp2tp2pp2_gpipe": ("train_gpt", 8, GPT_TINY, ["parallel.tp=2", "parallel.pp=2",
                                                             "parallel.schedule=gpipe", "train.micro_batch=1"]),
    "resnet_tiny_dp2": ("train_resnet", 2, RESNET_TINY, []),
    "resnet_tiny_dp2_zero1_bn": ("train_resnet", 2, RESNET_TINY, ["parallel.zero=1", "model.sync_bn=false"]),
    # the layouts added since the one-loop refactor: TP with SP under ZeRO-3, the interleaved pipeline, ZeRO-2 with
    # bf16 gradient reduction, hybrid sharding, bf16 with selective recompute, the ResNet under ZeRO-3
    "gpt_tiny_tp2_sp_zero3": ("train_gpt", 4, GPT_TINY, ["parallel.tp=2", "parallel.sp=true", "parallel.zero=3"]),
    "gpt_tiny_pp2_v2": ("train_gpt", 2, GPT_TINY, ["parallel.pp=2", "parallel.schedule=1f1b",
                                                    "parallel.virtual_stages=2"]),
    "gpt_tiny_dp4_zero2_bf16grad": ("train_gpt", 4, GPT_TINY, ["parallel.zero=2", "parallel.grad_dtype=bf16"]),
    "gpt_tiny_dp4_zero1_group2": ("train_gpt", 4, GPT_TINY, ["parallel.zero=1", "parallel.zero_group=2"]),
    "gpt_tiny_dp2_bf16_selective": ("train_gpt", 2, GPT_TINY, ["train.precision=bf16", "train.recompute=selective"]),
    "resnet_tiny_dp2_zero3": ("train_resnet", 2, RESNET_TINY, ["parallel.zero=3"]),
}


def f64hex(v):
    return None if v is None else float(v).hex()


def fingerprint_run(build, work, name):
    app, np_, deck, sets = RUNS[name]
    out = os.path.join(work, name)
    shutil.rmtree(out, ignore_errors=True)
    cmd = ["mpirun", "-np", str(np_), "--oversubscribe", "--bind-to", "none", os.path.join(build, "apps", app), deck,
           "--out", out]
    for s in sets:
        cmd += ["--set", s]
    env = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, errors="replace")
    if p.returncode != 0:
        raise SystemExit(f"FAILED: {name} exited {p.returncode}:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    records = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    keys = ("loss", "grad_norm", "lr", "val_loss", "acc", "val_acc")
    metrics = [{k: f64hex(r[k]) for k in keys if k in r} | {"step": r["step"]} for r in records]
    step_dir = latest_step_dir(out)
    tensors, attrs = read_checkpoint(step_dir, ("model/", "optim/"))
    hashes = {k: hashlib.sha256(v.tobytes()).hexdigest() for k, v in sorted(tensors.items())}
    return {"cmd": " ".join(cmd[1:]), "metrics": metrics, "checkpoint": os.path.basename(step_dir),
            "checkpoint_step": int(attrs["step"]), "tensors": hashes}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("build")
    r.add_argument("out")
    r.add_argument("--work", default="/tmp/hpct_fingerprint")
    r.add_argument("--only", nargs="*", default=None)
    d = sub.add_parser("diff")
    d.add_argument("before")
    d.add_argument("after")
    a = ap.parse_args()
    if a.cmd == "run":
        names = a.only or list(RUNS)
        result = {}
        for n in names:
            result[n] = fingerprint_run(os.path.abspath(a.build), a.work, n)
            print(f"{n}: {len(result[n]['metrics'])} steps, checkpoint {result[n]['checkpoint']}, "
                  f"{len(result[n]['tensors'])} tensors, final loss {float.fromhex(result[n]['metrics'][-1]['loss'])}",
                  flush=True)
        with open(a.out, "w") as f:
            json.dump(result, f, indent=1, sort_keys=True)
        return 0
    before, after = json.load(open(a.before)), json.load(open(a.after))
    diffs = []
    for n in sorted(set(before) | set(after)):
        if n not in before or n not in after:
            diffs.append(f"{n}: only in {'after' if n in after else 'before'}")
            continue
        for field in ("metrics", "checkpoint", "checkpoint_step", "tensors"):
            if before[n][field] != after[n][field]:
                diffs.append(f"{n}: {field} differs")
    for line in diffs:
        print("DIFFERENT: " + line)
    if not diffs:
        print(f"IDENTICAL: {len(before)} runs (metrics.jsonl losses, grad norms, lr; checkpoint tensors)")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
