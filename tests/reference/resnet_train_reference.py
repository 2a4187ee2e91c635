#!/usr/bin/python3
"""PyTorch replay of a `train_resnet --dump` run (the PyTorch cross-check): the same initial weights and BN buffers, the
same (augmented, normalised) batches in the same micro-batches, the same label smoothing, torch.optim.SGD with the same momentum / Nesterov /
dampening, weight decay on conv and fc weights only, the dumped per-step learning rate and global-norm clipping; BN in
training mode, micro-batch statistics. Replayed twice, in float32 and in float64.

Tolerances. A ResNet with BatchNorm trained on real images is ill-conditioned in fp32: torch's own fp32 gradients of
ResNet-20 on 16 Fashion-MNIST images differ from its fp64 ones by 1.2e-3 (relative L2, BN biases: sums of dout that
cancel), and over 5 SGD steps at the deck's lr 0.1 torch fp32 and fp64 losses part by 2.8e-3 (measured; 3.3e-5 at
lr 1e-3). So no fp32 implementation can meet a fixed 1e-5 against another after the first update; the check is:
  - step 1 (same weights, same batch: no dynamics yet): |ours - fp64| <= 1e-6 relative;
  - every step: ours within max(1e-5, 2 x torch fp32's distance) of fp64 (worst over the steps);
  - the parameter update (final - initial, all tensors together) and the BN running statistics' update: relative L2
    to fp64 within max(1e-4, 4 x torch fp32's) (per tensor, BN-bias updates are cancelling sums: noise in fp32; torch's
    own fp32 distance moves between 1.5e-4 and 1.5e-2 with the settings).
Sensitivity, measured by replaying this test's dump with one setting changed: Nesterov off -> losses 1.9e-3 and the
update 0.26 away; momentum 0.5 -> 3.7e-3 and 0.97; no label smoothing -> 4.7e-3 and 0.12 (all fail). Weight decay
(5e-4 at lr 1e-3) moves nothing measurably in 5 steps: tests/unit/optim checks it against the reference update.
bf16 (--autocast bf16, the default for a dump whose deck has train.precision = bf16; ctest resnet_reference_bf16):
the dump of a `--set train.precision=bf16` run is replayed in fp32, in an emulation of hpctrain's scheme
(emulated_forward, bf16_scheme.py: every stored activation and activation gradient rounded to bf16, convolutions and
fc on bf16 inputs and the bf16 compute copy of the parameters with fp32 accumulation, BN statistics and arithmetic in
fp32; exact round-to-nearest-even on every ISA) and, for information only, under torch.autocast('cpu',
dtype=torch.bfloat16) (convolutions, BN, ReLU and residual sums in bf16, fp32 parameters and SGD), which moves with
the CPU (gpt_reference.py's header: without AVX-512 torch 1.13 has no oneDNN bf16 and accumulates in bf16).
Limits (the model: bf16_scheme.py's docstring; u = 2^-8, lam = 1, limit sqrt(D) u, over N samples sqrt(D) u / sqrt(N)).
D = the bf16 roundings on the longest path of emulated_forward, for the CIFAR-style net of depth 6n + 2 (ResNet-20:
n = 3, 9 BasicBlocks): images 1, stem 4 (conv weight copy and output, BN gain copy and output; ReLU of a bf16 value is
bf16, no rounding), per block 9 (conv1 2, bn1 2, conv2 2, bn2 2, the residual sum 1; the downsample shortcut's 4 is
the shorter branch), pooled features 1, fc (weight copy and output) 2: D_fwd = 8 + 27 n = 89 (50 stored activations,
39 compute copies); the loss is fp32.
  - every step's loss within sqrt(89) u = 3.69e-2 (relative) of PyTorch fp32's;
  - every step's loss within sqrt(89) u / sqrt(32) = 6.51e-3 of the emulation's (32 images a step; BatchNorm couples
    the 16 images of a micro-batch only through its fp32 statistics);
  - step 1's loss at least 4 sqrt(89) 2^-24 = 2.25e-6 from fp32's (bf16 in effect; step 1 only: over the steps fp32
    runs part by up to 1.7e-5 here, the dynamics amplifying rounding);
  - the dump's deck says train.precision = bf16.
  Not judged: the step-1 gradients. Their D would be 89 + 78 (backward: logits, fc copy, pooled 3, per block 8, stem
  3) = 167, 90 without the copies: limits sqrt(167) u = 5.05e-2 and sqrt(90) u = 3.71e-2; but BatchNorm's backward
  subtracts the means of dy and dy x-hat over 16 x H x W values and cancels: every bf16 scheme sits 0.25..0.29 (median
  over the tensors) from fp32 and up to 0.66 (BN biases), the emulation 0.13..0.18 from hpctrain (hpctrain fp32 vs
  PyTorch fp32: median 1.6e-6, worst 4.4e-3): the condition number is far above 1 and no rounding-depth bound holds.
  They are printed, as is the parameter update after 5 steps (bf16 schemes 0.14..0.19 from fp32).
Measured, torch 1.13, this test's dump (train5's settings, seed 1337, 5 steps), same machine and settings as
gpt_reference.py's header (2-core AMD EPYC with avx512_bf16; unset = avx2 here). Worst loss difference over the steps:
                                   unset     avx512    avx2      default   avx2, no oneDNN   limit
  hpctrain vs fp32                 6.56e-4   6.56e-4   6.56e-4   6.54e-4   6.56e-4           3.69e-2
  hpctrain vs emulation            8.09e-4   6.00e-4   8.09e-4   6.52e-4   4.31e-4           6.51e-3
  emulation vs fp32                8.42e-4   4.68e-4   8.42e-4   8.75e-4   5.73e-4           (3.69e-2)
  autocast vs fp32                 4.61e-4   4.46e-4   4.61e-4   3.50e-4   1.94e-3           information
  hpctrain vs autocast             4.57e-4   2.57e-4   4.57e-4   6.33e-4   1.75e-3           information
  step 1: hpctrain vs fp32         1.82e-4   1.82e-4   1.82e-4   1.82e-4   1.83e-4           >= 2.25e-6
  step-1 gradients, median / worst tensor (information):
        hpctrain vs fp32           .27/.45   .27/.45   .27/.45   .27/.45   .27/.45
        hpctrain vs emulation      .13/.17   .13/.17   .13/.17   .14/.20   .16/.31
        autocast vs fp32           .27/.57   .28/.54   .27/.57   .26/.42   .47/1.2
  verdict                          VALID     VALID     VALID     VALID     VALID
  ("no oneDNN" also moves PyTorch's fp32 convolutions off oneDNN, hence the emulation's other figures.) hpctrain too
  as on an AVX2-only CPU (ONEDNN_MAX_CPU_ISA=AVX2, OPENBLAS_CORETYPE=Haswell, PyTorch as in the last column): vs fp32
  7.48e-4, vs emulation 6.87e-4, step 1 8.8e-5 from fp32, VALID. Seeds 1 / 2 / 3 (unset): hpctrain vs fp32 7.2e-4 /
  2.8e-4 / 2.2e-4, vs emulation 9.9e-4 / 9.5e-4 / 5.9e-4, emulation vs fp32 1.7e-3 / 6.8e-4 / 7.9e-4; step 1
  hpctrain vs fp32 8.1e-5 / 1.1e-5 / 9.5e-5. hpctrain fp32 vs PyTorch fp32 (bf16_selftest's fp32 dump): step 1
  <= 1.5e-7, step 5 1.7e-5. Margins: 51x (fp32, seed 1), 6.5x (emulation, seed 1), bf16 in effect 4.7x
  (seed 2) above and 15x below. Over 10 steps (seed 1337, earlier measurement) autocast vs fp32 reaches 1.8e-3, hence 5.
  bf16_selftest.py resnet, every setting: the emulated run VALID; a loss moved by 1.3e-2 FAILED (the emulation check);
  the fp32 losses, step 1 4.9e-8..1.5e-7 from PyTorch fp32, FAILED (bf16 in effect); the fp32 deck FAILED.
usage: resnet_train_reference.py DUMP.h5 [--autocast auto|none|bf16] [--measure] [--replay-cache F]
Prints VALID or FAILED: <what> and exits 1."""
import argparse
import os
import sys

import h5py
import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bf16_scheme import RoundAct, RoundForward, cpu_capability, fp32_bound, rms_bound  # noqa: E402
from resnet_models import build_resnet  # noqa: E402


# --autocast bf16: bf16 roundings on the longest path of hpctrain's scheme (emulated_forward; the header's "Limits"
# counts them) for the CIFAR-style net of depth 6n + 2 (ResNet-20: n = 3)
def bf16_depths(depth):
    """(D forward, D step-1 gradients, of which stored activations and activation gradients)."""
    n = (depth - 2) // 6
    d_fwd = 1 + 4 + 9 * 3 * n + 3      # images, stem 4, per block 9, pooled features and fc 3: 89 for ResNet-20
    d_bwd = 3 + 8 * 3 * n + 3          # logits, fc, pool 3, per block 8, stem 3: 78
    d_grad_act = (5 + 15 * n) + (4 + 12 * n)  # without the compute copies: 50 forward + 40 backward = 90
    return d_fwd, d_fwd + d_bwd, d_grad_act


def bf16_limits(depth, images):
    """The bf16 checks' limits (bf16_scheme.py's model, lam = 1, u = 2^-8); ResNet-20 at 32 images a step:
    loss_fp32 sqrt(89) u = 3.69e-2, loss_emu sqrt(89) u / sqrt(32) = 6.51e-3, min_dev (step 1) 4 sqrt(89) 2^-24 =
    2.25e-6. Step-1 gradients: not judged (header)."""
    d_fwd, _, _ = bf16_depths(depth)
    return dict(loss_fp32=rms_bound(d_fwd), loss_emu=rms_bound(d_fwd, images), min_dev=fp32_bound(d_fwd))


ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ap.add_argument("dump", help="HDF5 file written by train_resnet --dump")
ap.add_argument("--autocast", choices=("auto", "none", "bf16"), default="auto",
                help="bf16: compare a train.precision=bf16 dump with PyTorch's bf16 autocast (header); auto (default): "
                     "bf16 when the dump's deck says train.precision = bf16")
ap.add_argument("--measure", action="store_true", help="with --autocast bf16: print the deviations, no verdict")
for k in ("loss_fp32", "loss_emu", "min_dev"):
    ap.add_argument("--bf16-" + k.replace("_", "-"), type=float, help="override the derived limit (header)")
ap.add_argument("--replay-cache", help="bf16: keep / reuse the three replays in this file (for bf16_selftest.py: dumps "
                                       "that differ only in hpctrain's results)")
ap.add_argument("--threads", type=int, help="torch threads (default 2; 1 with bf16: three replays, robust when the cores "
                                            "are shared)")
args = ap.parse_args()
f = h5py.File(args.dump, "r")
a = f.attrs
style = a["style"].decode() if isinstance(a["style"], bytes) else str(a["style"])
depth, w, Cin, K = int(a["depth"]), int(a["base_width"]), int(a["channels"]), int(a["num_classes"])
steps, GB, MB = int(a["steps"]), int(a["global_batch"]), int(a["micro_batch"])
smoothing = float(a["label_smoothing"]) if "label_smoothing" in a else 0.0
images = torch.from_numpy(f["batches/images"][()])
labels = torch.from_numpy(f["batches/labels"][()]).long()
mine_loss, mine_lr = f["steps/loss"][()], f["steps/lr"][()]


EMULATE_BN_PARAMS = True  # the emulation reads BN scale and shift from the bf16 compute copy too


def emulated_forward(net, x):
    """hpctrain's bf16 scheme on the CIFAR-style net of resnet_models.Net: every stored activation (input, convolution,
    BN, ReLU, residual sum, pooled features, logits) and activation gradient rounded to bf16; convolutions and the fc
    on bf16 inputs and bf16 weights with fp32 accumulation; BN statistics and arithmetic in fp32 (running statistics
    fp32); the loss in fp32 from the bf16 logits."""
    ra, rw = RoundAct.apply, RoundForward.apply

    def conv(m, t):
        return ra(F.conv2d(t, rw(m.weight), None, m.stride, m.padding))

    def bn(m, t):
        g, b = (rw(m.weight), rw(m.bias)) if EMULATE_BN_PARAMS else (m.weight, m.bias)
        return ra(F.batch_norm(t, m.running_mean, m.running_var, g, b, True, m.momentum, m.eps))

    x = ra(x)
    x = ra(F.relu(bn(net.bn1, conv(net.conv1, x))))
    for layer in (net.layer1, net.layer2, net.layer3):
        for blk in layer:
            y = ra(F.relu(bn(blk.bn1, conv(blk.conv1, x))))
            y = bn(blk.bn2, conv(blk.conv2, y))
            sc = x if blk.downsample is None else bn(blk.downsample[1], conv(blk.downsample[0], x))
            x = ra(F.relu(ra(y + sc)))
    x = ra(F.adaptive_avg_pool2d(x, 1).flatten(1))
    return ra(F.linear(x, rw(net.fc.weight), rw(net.fc.bias)))


def replay(dtype, scheme="plain"):
    """Per-step losses and the final state of the torch replay in dtype; scheme: plain (dtype end to end), autocast
    (torch.autocast bf16 over the forward, fp32 masters) or emulate (hpctrain's bf16 storage, emulated_forward)."""
    net = build_resnet(style == "imagenet", depth, w, Cin, K).to(dtype)
    if scheme == "emulate" and style == "imagenet":
        sys.exit("error: the bf16 emulation covers the CIFAR-style net only")
    state = net.state_dict()
    with torch.no_grad():
        for k in state:
            if not k.endswith("num_batches_tracked"):
                state[k].copy_(torch.from_numpy(f["init/" + k][()]))
    decay = [p for n, p in net.named_parameters() if p.dim() > 1]  # conv and fc weights
    no_decay = [p for n, p in net.named_parameters() if p.dim() <= 1]  # BatchNorm and biases
    opt = torch.optim.SGD([{"params": decay, "weight_decay": float(a["weight_decay"])},
                           {"params": no_decay, "weight_decay": 0.0}], lr=0.1, momentum=float(a["momentum"]),
                          dampening=float(a["dampening"]), nesterov=bool(int(a["nesterov"])))
    net.train()
    losses, grads = [], {}
    for s in range(steps):
        opt.zero_grad()
        total = 0.0
        for j in range(GB // MB):  # serial run: micro-batch j = global samples [j*MB, (j+1)*MB)
            x, y = images[s, j * MB:(j + 1) * MB].to(dtype), labels[s, j * MB:(j + 1) * MB]
            if scheme == "autocast":
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    logits = net(x)
            elif scheme == "emulate":
                logits = emulated_forward(net, x)
            else:
                logits = net(x)
            loss = F.cross_entropy(logits.to(dtype), y, reduction="sum", label_smoothing=smoothing) / GB
            loss.backward()
            total += loss.item()
        losses.append(total)
        if s == 0:  # step 1's gradients, before clipping and the optimizer (the dump's grads_step1)
            grads = {n: p.grad.double().clone() for n, p in net.named_parameters()}
        if float(a["grad_clip"]) > 0:
            torch.nn.utils.clip_grad_norm_(net.parameters(), float(a["grad_clip"]))
        for g in opt.param_groups:
            g["lr"] = float(mine_lr[s])
        opt.step()
    return (losses, {k: v.double() for k, v in net.state_dict().items() if not k.endswith("num_batches_tracked")},
            grads)


rel = lambda x, ref: abs(x - ref) / abs(ref)  # noqa: E731


def deck_precision():
    deck = a.get("deck", b"")
    deck = deck.decode() if isinstance(deck, bytes) else str(deck)
    section = None
    for line in deck.splitlines():
        line = line.strip()
        if line.startswith("["):
            section = line.strip("[]")
        elif section == "train" and line.split("=")[0].strip() == "precision":
            return line.split("=", 1)[1].strip().strip('"')
    return None


def update_rel(state, ref, init, keys):
    """Relative L2 distance of the update (final - init) of `state` to `ref`'s, all `keys` together."""
    num = sum(((state[k] - init[k]) - (ref[k] - init[k])).pow(2).sum() for k in keys)
    den = sum((ref[k] - init[k]).pow(2).sum() for k in keys)
    return (num / den).sqrt().item()


if args.autocast == "auto":
    args.autocast = "bf16" if deck_precision() == "bf16" else "none"
torch.set_num_threads(args.threads or (1 if args.autocast == "bf16" else 2))
if args.autocast == "bf16":
    prec = deck_precision()
    if style != "cifar":
        sys.exit("error: the bf16 replay (its emulation and depth count) covers the CIFAR-style net only")
    lim = bf16_limits(depth, GB)
    for k in lim:
        if getattr(args, "bf16_" + k) is not None:
            lim[k] = getattr(args, "bf16_" + k)
    if args.replay_cache and os.path.exists(args.replay_cache):
        (l32, s32, g32), (lac, sac, gac), (lem, sem, gem) = torch.load(args.replay_cache)
    else:
        (l32, s32, g32), (lac, sac, gac), (lem, sem, gem) = runs = [
            replay(torch.float32, sch) for sch in ("plain", "autocast", "emulate")]
        if args.replay_cache:
            torch.save(runs, args.replay_cache)
    init0 = {k: torch.from_numpy(f["init/" + k][()]).double() for k in s32}
    mine = {k: torch.from_numpy(f["final/" + k][()]).double() for k in s32}
    params = [k for k, _ in build_resnet(style == "imagenet", depth, w, Cin, K).named_parameters()]
    ghp = {n: torch.from_numpy(f["grads_step1/" + n][()]).double() for n in params}
    print(f"dump: {args.dump} ({steps} steps, {GB} images a step, written with train.precision={prec}); torch "
          f"{torch.__version__}, {cpu_capability()}")
    print(f"{'step':>4} {'torch fp32':>12} {'emulation':>12} {'em-fp32':>9} {'hpctrain':>12} {'hp-fp32':>9} "
          f"{'hp-em':>9} {'autocast':>12} {'ac-fp32':>9} {'hp-ac':>9}")
    for s in range(steps):
        print(f"{s + 1:4d} {l32[s]:12.7f} {lem[s]:12.7f} {rel(lem[s], l32[s]):9.2e} {mine_loss[s]:12.7f} "
              f"{rel(mine_loss[s], l32[s]):9.2e} {rel(mine_loss[s], lem[s]):9.2e} {lac[s]:12.7f} "
              f"{rel(lac[s], l32[s]):9.2e} {rel(mine_loss[s], lac[s]):9.2e}")
    worst = lambda x, ref: max(rel(x[s], ref[s]) for s in range(steps))  # noqa: E731
    print(f"worst loss rel diff over {steps} steps: hpctrain vs fp32 {worst(mine_loss, l32):.3e}, vs emulation "
          f"{worst(mine_loss, lem):.3e}; emulation vs fp32 {worst(lem, l32):.3e}; (information) autocast vs fp32 "
          f"{worst(lac, l32):.3e}, hpctrain vs autocast {worst(mine_loss, lac):.3e}")
    gl2 = lambda g, ref, n: ((g[n] - ref[n]).norm() / ref[n].norm().clamp_min(1e-30)).item()  # noqa: E731
    gw = lambda g, ref: max((gl2(g, ref, n), n) for n in params)  # noqa: E731
    gmed = lambda g, ref: float(np.median([gl2(g, ref, n) for n in params]))  # noqa: E731
    print("(information) step 1 gradients, per-tensor relative L2, worst / median: hpctrain vs fp32 %.3e (%s) / %.3e, "
          "vs emulation %.3e (%s) / %.3e; emulation vs fp32 %.3e (%s) / %.3e; autocast vs fp32 %.3e (%s) / %.3e"
          % (*gw(ghp, g32), gmed(ghp, g32), *gw(ghp, gem), gmed(ghp, gem), *gw(gem, g32), gmed(gem, g32),
             *gw(gac, g32), gmed(gac, g32)))
    u = {n: update_rel(st, sac, init0, params) for n, st in (("fp32", s32), ("emulation", sem), ("hpctrain", mine))}
    u32 = {n: update_rel(st, s32, init0, params) for n, st in (("autocast", sac), ("emulation", sem),
                                                               ("hpctrain", mine))}
    print(f"(information) parameter update ({len(params)} tensors), relative L2 to fp32's: hpctrain "
          f"{u32['hpctrain']:.3e}, emulation {u32['emulation']:.3e}, autocast {u32['autocast']:.3e}; to autocast's: "
          f"fp32 {u['fp32']:.3e}, emulation {u['emulation']:.3e}, hpctrain {u['hpctrain']:.3e}")
    print(f"limits (derived: header): loss vs fp32 {lim['loss_fp32']:.3e}, loss vs emulation {lim['loss_emu']:.3e}; "
          f"bf16 in effect: step 1's loss at least {lim['min_dev']:.3e} from fp32")
    if worst(lac, l32) > lim["loss_fp32"]:
        print("(information) PyTorch's bf16 autocast on this CPU is outside the bound of one rounding per stored value")
    if args.measure:
        sys.exit(0)
    failures = []
    if prec is not None and prec != "bf16":
        failures.append(f"the dump was written by a train.precision={prec} run (run train_resnet with "
                        "--set train.precision=bf16)")
    if worst(mine_loss, l32) > lim["loss_fp32"]:
        failures.append(f"hpctrain bf16 vs PyTorch fp32: worst loss rel diff {worst(mine_loss, l32):.3e} > "
                        f"{lim['loss_fp32']:.3e}")
    if worst(mine_loss, lem) > lim["loss_emu"]:
        failures.append(f"hpctrain bf16 vs the emulation of its scheme: worst loss rel diff "
                        f"{worst(mine_loss, lem):.3e} > {lim['loss_emu']:.3e}")
    if rel(mine_loss[0], l32[0]) < lim["min_dev"]:
        failures.append(f"hpctrain's step-1 loss is within {rel(mine_loss[0], l32[0]):.3e} of fp32's "
                        f"(< {lim['min_dev']:.3e}): the run did not compute in bf16")
    if failures:
        print("FAILED: " + "; ".join(failures))
        sys.exit(1)
    print("VALID")
    sys.exit(0)


l64, s64, _ = replay(torch.float64)
l32, s32, _ = replay(torch.float32)
failures = []
rel = lambda x, ref: abs(x - ref) / abs(ref)  # noqa: E731
for s in range(steps):
    print(f"step {s + 1}: loss fp64 {l64[s]:.9f} | torch fp32 {l32[s]:.9f} ({rel(l32[s], l64[s]):.2e}) | hpctrain "
          f"{mine_loss[s]:.9f} ({rel(mine_loss[s], l64[s]):.2e}; vs torch fp32 {rel(mine_loss[s], l32[s]):.2e})")
if rel(mine_loss[0], l64[0]) > 1e-6:
    failures.append(f"step 1 loss differs from fp64 by {rel(mine_loss[0], l64[0]):.3g} (should be <= 1e-6)")
ours = max(rel(mine_loss[s], l64[s]) for s in range(steps))
theirs = max(rel(l32[s], l64[s]) for s in range(steps))
print(f"losses over {steps} steps: hpctrain within {ours:.3g} of fp64, torch fp32 within {theirs:.3g}; hpctrain vs torch "
      f"fp32 {max(rel(mine_loss[s], l32[s]) for s in range(steps)):.3g}")
if ours > max(1e-5, 2 * theirs):
    failures.append(f"losses differ from fp64 by {ours:.3g} (should be <= max(1e-5, 2 x torch fp32's {theirs:.3g}))")


init = {k: torch.from_numpy(f["init/" + k][()]).double() for k in s64}
mine_state = {k: torch.from_numpy(f["final/" + k][()]).double() for k in s64}
params = [k for k, _ in build_resnet(style == "imagenet", depth, w, Cin, K).named_parameters()]
buffers = [k for k in s64 if k not in params]


def update_distance(state, keys):
    """Relative L2 distance to fp64 of the update (final - init) over the given tensors, all concatenated: per tensor
    the BN-bias updates are sums that cancel (noise-dominated in fp32); the whole update is what training did."""
    num = sum(((state[k] - init[k]) - (s64[k] - init[k])).pow(2).sum() for k in keys)
    den = sum((s64[k] - init[k]).pow(2).sum() for k in keys)
    return (num / den).sqrt().item()


def worst(state):
    return max((((state[k] - s64[k]).norm() / s64[k].norm().clamp_min(1e-30)).item(), k) for k in s64)


for what, keys, tol in (("parameter update", params, 1e-4), ("BN running statistics update", buffers, 1e-4)):
    ours_d, theirs_d = update_distance(mine_state, keys), update_distance(s32, keys)
    print(f"{what} ({len(keys)} tensors): relative L2 to fp64 hpctrain {ours_d:.3g}, torch fp32 {theirs_d:.3g}")
    if ours_d > max(tol, 4 * theirs_d):
        failures.append(f"{what} differs from fp64 by {ours_d:.3g} (should be <= max({tol:g}, 4 x torch fp32's "
                        f"{theirs_d:.3g}))")
wo, wt = worst(mine_state), worst(s32)
print(f"(per tensor, worst relative L2 of the final state: hpctrain {wo[0]:.3g} ({wo[1]}), torch fp32 {wt[0]:.3g} "
      f"({wt[1]}))")
if failures:
    print("FAILED: " + failures[0])
    sys.exit(1)
print("VALID")
