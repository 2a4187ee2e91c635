#!/usr/bin/python3
"""`ckpt_tool export --format torchvision` against the real torchvision (label interop).

  resnet18  an ImageNet-style ResNet-18 (3 x 64 x 64 synthetic images, 5 classes, data.mean/std per channel) trained 3
            SGD steps at np 2 (2 micro-batches per rank and step, SyncBN) so that every BN running statistic has moved,
            checkpointed, exported: the safetensors keys, dtypes and shapes are exactly torchvision.models.resnet18(
            num_classes=5).state_dict()'s, load_state_dict(strict=True) takes it, num_batches_tracked = 3 x 2 = 6, and
            in eval mode torchvision's logits on 64 images equal hpctrain's own eval forward (resnet_eval_logits: the
            checkpoint's model, ResNet::forward(train=false) on data::fill_images' normalised images, the same floats
            fed to torchvision) within 1e-4 x max |logit|; torchvision's mean cross-entropy and accuracy on the
            trainer's evaluation set equal the val_loss / val_acc the trainer logged at that step (its own evaluation,
            not the helper's); with the running statistics reset to their initial values the logits must miss by far
            (the comparison sees the BN buffers).
  resnet50  the same for a Bottleneck ResNet-50 (1 step at np 1, 16 images compared).
  cifar     a CIFAR-style ResNet-8 (one step): exported under the same names (the Net of
            tests/reference/resnet_models.py loads it strict and gives hpctrain's logits), config.json says it is not
            loadable into torchvision's classes, and torchvision's resnet18 indeed refuses it.
  errors    a GPT checkpoint with --format torchvision, a ResNet with --format hf, --optimizer with torchvision and an
            unknown format: exit 2, one line naming the right format.

Tolerance of the logits: both sides compute in fp32 with different convolution algorithms (oneDNN / im2col + GEMM here,
torch's own kernels there), so every conv's sums are rounded in another order (~1e-7 relative per output); through
18-50 layers and BN's rescaling this grows to ~1e-6-1e-5 of the logits' scale: 1e-4 x max |logit| leaves a margin
while a wrong tensor, a missing BN buffer or a wrong stride misses by orders of magnitude (the reset check shows it).

usage: check_torchvision_export.py --train-resnet B --train-gpt B --ckpt-tool B --eval-logits B --prepare-images B
                                   --work DIR [--cases resnet18,resnet50,cifar,errors]
Prints one VALID line per case and "VALID: ..." at the end, or FAILED: <what> (exit 1). Exit 77 (SKIPPED) without the
interop packages (tests/interop/interop_venv.py).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import interop_venv  # noqa: E402

interop_venv.reexec_in_venv()

import h5py  # noqa: E402
import numpy as np  # noqa: E402
import safetensors.torch  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import torchvision  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))
from resnet_models import Net  # noqa: E402

ENV = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1")
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
TOL = 1e-4
failures = []


def fail(msg):
    print(f"FAILED: {msg}")
    failures.append(msg)


def run(cmd, expect=0, **kw):
    p = subprocess.run(cmd, env=ENV, capture_output=True, text=True, **kw)
    if expect is not None and p.returncode != expect:
        print(p.stdout[-3000:], p.stderr[-3000:])
        raise SystemExit(f"FAILED: {' '.join(map(str, cmd))} exited {p.returncode}, should be {expect}")
    return p


def deck(path, style, depth, train, test, steps, gb, mb, eval_images):
    with open(path, "w") as f:
        f.write(f"""[model]
style = "{style}"
depth = {depth}
sync_bn = true

[data]
train = "{train}"
test = "{test}"
mean = [{", ".join(map(str, MEAN))}]
std = [{", ".join(map(str, STD))}]
eval_images = {eval_images}

[train]
steps = {steps}
seed = 7
global_batch = {gb}
micro_batch = {mb}
device = "cpu"
eval_every = {steps}

[optim]
lr = 0.01
momentum = 0.9
warmup_steps = 0

[checkpoint]
at_end = true

[log]
every = 1
""")


def train(a, name, style, depth, np_, steps, gb, mb, eval_images):
    out = os.path.join(a.work, name)
    shutil.rmtree(out, ignore_errors=True)
    d = os.path.join(a.work, name + ".toml")
    deck(d, style, depth, os.path.join(a.work, "tv_train.h5"), os.path.join(a.work, "tv_val.h5"), steps, gb, mb,
         eval_images)
    run(["mpirun", "-np", str(np_), "--oversubscribe", "--bind-to", "none", a.train_resnet, d, "--out", out])
    return out


def export(a, run_dir, name):
    out = os.path.join(a.work, name + "_tv")
    shutil.rmtree(out, ignore_errors=True)
    p = run([a.ckpt_tool, "export", "--format", "torchvision", run_dir, out])
    print("  " + p.stdout.strip().splitlines()[-1])
    return out


def hpctrain_logits(a, run_dir, n, name):
    out = os.path.join(a.work, name + "_logits.h5")
    run([a.eval_logits, run_dir, os.path.join(a.work, "tv_val.h5"), str(n), out])
    with h5py.File(out, "r") as f:
        return torch.from_numpy(f["images"][...]), torch.from_numpy(f["logits"][...]), torch.from_numpy(
            f["labels"][...].astype(np.int64))


def last_eval(run_dir):
    recs = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl")) if line.strip()]
    ev = [r for r in recs if r.get("val_loss") is not None]
    return ev[-1]


def compare(name, model, images, ref):
    with torch.no_grad():
        got = model(images)
    scale = ref.abs().max().item()
    diff = (got - ref).abs().max().item()
    ok = diff <= TOL * scale
    print(f"  {name}: max |torchvision - hpctrain| = {diff:.3e} (max |logit| {scale:.3f}; relative {diff / scale:.2e}, "
          f"limit {TOL:.0e})")
    if not ok:
        fail(f"{name}: logits differ by {diff:.3e}, should be <= {TOL * scale:.3e}")
    return diff, scale


def imagenet_case(a, depth, np_, steps, gb, mb, n_cmp):
    name = f"resnet{depth}"
    t0 = time.time()
    run_dir = train(a, name, "imagenet", depth, np_, steps, gb, mb, 64)
    out = export(a, run_dir, name)
    cfg = json.load(open(os.path.join(out, "config.json")))
    sd = safetensors.torch.load_file(os.path.join(out, "model.safetensors"))
    tv = getattr(torchvision.models, name)(num_classes=5)
    ref_sd = tv.state_dict()
    if list(sorted(sd)) != list(sorted(ref_sd)):
        fail(f"{name}: keys differ: extra {sorted(set(sd) - set(ref_sd))[:5]}, missing {sorted(set(ref_sd) - set(sd))[:5]}")
        return
    for k, v in ref_sd.items():
        if sd[k].dtype != v.dtype or tuple(sd[k].shape) != tuple(v.shape):
            fail(f"{name}: {k} is {sd[k].dtype} {tuple(sd[k].shape)}, torchvision's {v.dtype} {tuple(v.shape)}")
    res = tv.load_state_dict(sd, strict=True)
    if res.missing_keys or res.unexpected_keys:
        fail(f"{name}: load_state_dict(strict=True) reported {res}")
    tracked = {int(v) for k, v in sd.items() if k.endswith("num_batches_tracked")}
    want_tracked = steps * gb // (np_ * mb)
    if tracked != {want_tracked}:
        fail(f"{name}: num_batches_tracked {tracked}, should be {{{want_tracked}}} (steps x micro-batches per rank)")
    moved = max((sd[k] - (1.0 if k.endswith("running_var") else 0.0)).abs().max().item()
                for k in sd if k.endswith("running_var") or k.endswith("running_mean"))
    if moved < 1e-3:
        fail(f"{name}: the BN running statistics did not move from their initial values ({moved:.1e})")
    if not cfg.get("torchvision_loadable") or cfg.get("architecture") != name or cfg.get("num_classes") != 5 \
            or cfg.get("in_channels") != 3 or cfg["input"]["mean"] != MEAN or cfg["input"]["std"] != STD \
            or f"torchvision.models.{name}(num_classes=5)" not in cfg.get("load", ""):
        fail(f"{name}: config.json is not what it should be: {json.dumps(cfg)[:400]}")
    tv.eval()
    images, ref, labels = hpctrain_logits(a, run_dir, n_cmp, name)
    # the same floats hpctrain's forward saw are the deck's normalisation of the uint8 pixels
    with h5py.File(os.path.join(a.work, "tv_val.h5"), "r") as f:
        pix = f["images"][:n_cmp].astype(np.float32)
    norm = (pix / np.float32(255.0) - np.array(MEAN, np.float32)[:, None, None]) / np.array(STD, np.float32)[:, None,
                                                                                                             None]
    if np.abs(norm - images.numpy()).max() > 1e-6:
        fail(f"{name}: the helper's images are not (pixel/255 - mean)/std ({np.abs(norm - images.numpy()).max():.1e})")
    diff, scale = compare(name, tv, images, ref)
    # hpctrain's own evaluation at the checkpoint's step (the trainer's in-memory model, data.test's first 64 images)
    ev = last_eval(run_dir)
    with h5py.File(os.path.join(a.work, "tv_val.h5"), "r") as f:
        pix = f["images"][:64].astype(np.float32)
        lab = torch.from_numpy(f["labels"][:64].astype(np.int64))
    x = torch.from_numpy((pix / np.float32(255.0) - np.array(MEAN, np.float32)[:, None, None]) /
                         np.array(STD, np.float32)[:, None, None])
    with torch.no_grad():
        lg = tv(x).double()
    loss = F.cross_entropy(lg, lab).item()
    acc = (lg.argmax(1) == lab).double().mean().item()
    print(f"  {name}: trainer's val_loss {ev['val_loss']:.9g} at step {ev['step']}, torchvision {loss:.9g} "
          f"(diff {abs(loss - ev['val_loss']):.1e}); val_acc {ev['val_acc']:.4f}, torchvision {acc:.4f}")
    if abs(loss - ev["val_loss"]) > TOL * max(1.0, abs(ev["val_loss"])) or abs(acc - ev["val_acc"]) > 1.5 / 64:
        fail(f"{name}: torchvision's eval loss {loss:.9g} / acc {acc:.4f} vs the trainer's {ev['val_loss']:.9g} / "
             f"{ev['val_acc']:.4f}")
    # the check can fail: initial running statistics instead of the trained ones miss by orders of magnitude
    reset = {k: (torch.ones_like(v) if k.endswith("running_var") else torch.zeros_like(v))
             if k.endswith("running_var") or k.endswith("running_mean") else v for k, v in sd.items()}
    tv.load_state_dict(reset, strict=True)
    with torch.no_grad():
        miss = (tv(images) - ref).abs().max().item()
    if miss <= 100 * TOL * scale:
        fail(f"{name}: reset BN statistics still match ({miss:.2e}): the comparison does not see the buffers")
    if not failures:
        print(f"VALID: {name} export: strict load, {len(sd)} tensors, logits within {diff / scale:.1e} relative "
              f"(reset BN statistics: {miss / scale:.1e}) ({time.time() - t0:.1f} s)")


def cifar_case(a):
    t0 = time.time()
    run_dir = train(a, "cifar8", "cifar", 8, 1, 1, 8, 8, 16)
    out = export(a, run_dir, "cifar8")
    cfg = json.load(open(os.path.join(out, "config.json")))
    sd = safetensors.torch.load_file(os.path.join(out, "model.safetensors"))
    if cfg.get("torchvision_loadable") is not False or "not loadable into torchvision" not in \
            cfg.get("not_loadable_reason", "") or cfg.get("architecture") != "cifar_resnet8" or "load" in cfg:
        fail(f"cifar: config.json should say not loadable into torchvision's classes: {json.dumps(cfg)[:400]}")
    net = Net(8, 16, 3, 5)
    if sorted(sd) != sorted(net.state_dict()):
        fail(f"cifar: keys differ from the scheme: {sorted(set(sd) ^ set(net.state_dict()))[:6]}")
        return
    net.load_state_dict(sd, strict=True)
    try:
        torchvision.models.resnet18(num_classes=5).load_state_dict(sd, strict=True)
        fail("cifar: torchvision's resnet18 loaded a CIFAR-style state dict")
    except RuntimeError:
        pass
    net.eval()
    images, ref, _ = hpctrain_logits(a, run_dir, 16, "cifar8")
    diff, scale = compare("cifar_resnet8", net, images, ref)
    if not failures:
        print(f"VALID: cifar export: same naming scheme ({len(sd)} tensors), not loadable into torchvision (said and "
              f"true), logits within {diff / scale:.1e} relative ({time.time() - t0:.1f} s)")


def errors_case(a):
    t0 = time.time()
    # a tiny GPT checkpoint on a token shard written here (llm.c format: 256 int32 header, uint16 tokens)
    rng = np.random.default_rng(1)
    for split, n in (("train", 20000), ("val", 8000)):
        hdr = np.zeros(256, np.int32)
        hdr[:3] = (20240520, 1, n)
        with open(os.path.join(a.work, f"tok_{split}.bin"), "wb") as f:
            f.write(hdr.tobytes() + rng.integers(0, 256, n).astype(np.uint16).tobytes())
    gpt = os.path.join(a.work, "gpt")
    shutil.rmtree(gpt, ignore_errors=True)
    run([a.train_gpt, os.path.join(a.src, "inputs", "gpt_tiny.toml"), "--out", gpt, "--set", "train.steps=1",
         "--set", f"data.train={a.work}/tok_train.bin", "--set", f"data.val={a.work}/tok_val.bin",
         "--set", "model.n_layer=1", "--set", "sample.tokens=0", "--set", "train.eval_every=0",
         "--set", "checkpoint.at_end=true"])
    step = os.path.realpath(os.path.join(gpt, "checkpoints", open(os.path.join(gpt, "checkpoints", "latest")).read()
                                         .strip()))
    resnet = os.path.join(a.work, "resnet18")

    def expect_error(cmd, what, *needles):
        p = run([a.ckpt_tool, "export", *cmd], expect=None)
        err = (p.stderr + p.stdout).strip()
        if p.returncode != 2 or len(err.splitlines()) != 1 or not all(n in err for n in needles):
            fail(f"errors: {what}: exit {p.returncode} and {err!r}, should be exit 2 and one line with {needles}")
        else:
            print(f"  {what}: {err}")

    expect_error(["--format", "torchvision", gpt, os.path.join(a.work, "gpt_tv")], "GPT with --format torchvision",
                 f"ckpt_tool export --format torchvision: {step} is a GPT checkpoint (app train_gpt); torchvision holds "
                 "the ResNet; use --format hf (Hugging Face transformers' GPT-2) or --format hdf5")
    if os.path.isdir(resnet):
        expect_error(["--format", "hf", resnet, os.path.join(a.work, "r_hf")], "ResNet with --format hf",
                     "is not a GPT checkpoint (written by train_resnet", "--format torchvision")
        expect_error(["--format", "torchvision", "--optimizer", resnet, os.path.join(a.work, "r_tv2")],
                     "--optimizer with --format torchvision", "--optimizer applies to --format hdf5 only")
    expect_error(["--format", "onnx", gpt, os.path.join(a.work, "x")], "unknown format", "--format", "onnx")
    if os.path.exists(os.path.join(a.work, "gpt_tv", "model.safetensors")):
        fail("errors: the refused GPT export left a model.safetensors")
    if not failures:
        print(f"VALID: errors: one line, exit 2, naming the right format ({time.time() - t0:.1f} s)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for k in ("train-resnet", "train-gpt", "ckpt-tool", "eval-logits", "prepare-images", "work"):
        ap.add_argument("--" + k, required=True)
    ap.add_argument("--src", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    ap.add_argument("--cases", default="resnet18,resnet50,cifar,errors")
    a = ap.parse_args()
    torch.set_num_threads(2)
    os.makedirs(a.work, exist_ok=True)
    t0 = time.time()
    print(f"torch {torch.__version__}, torchvision {torchvision.__version__}, safetensors "
          f"{safetensors.__version__}")
    run([a.prepare_images, "synthetic", "--out-dir", a.work, "--name", "tv", "--train", "96", "--val", "64", "--shape",
         "3x64x64", "--classes", "5", "--seed", "3"])
    cases = a.cases.split(",")
    if "resnet18" in cases:
        imagenet_case(a, 18, 2, 3, 16, 4, 64)
    if "resnet50" in cases:
        imagenet_case(a, 50, 1, 1, 8, 4, 16)
    if "cifar" in cases:
        cifar_case(a)
    if "errors" in cases:
        errors_case(a)
    if failures:
        print(f"FAILED: {len(failures)} check(s): {failures[0]}")
        return 1
    print(f"VALID: torchvision export ({', '.join(cases)}) in {time.time() - t0:.1f} s")
    shutil.rmtree(a.work, ignore_errors=True)  # ~400 MB of checkpoints and exports (kept when a check fails)
    return 0


if __name__ == "__main__":
    sys.exit(main())
