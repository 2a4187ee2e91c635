#!/usr/bin/python3
"""PyTorch cross-check of hpctrain's ResNet (CIFAR-style, BasicBlocks with 1x1-conv + BN projection shortcuts, or
ImageNet-style: torchvision's resnet18/34/50/101/152 itself):
one training-mode forward/backward from hpctrain's initial weights on hpctrain's batch (resnet_dump). Compares the
per-sample losses (1e-5 relative), every parameter gradient (relative L2 1e-4: fp32 convolutions summed in
different orders; BatchNorm's backward amplifies rounding by 1/std) against torch in float64 (looser where torch's own
fp32 result is further from fp64, see below) and the BN running statistics (1e-5, scaled likewise).
usage: resnet_reference.py DUMP.h5    Prints VALID or FAILED: <what> and exits 1."""
import os
import sys

import h5py
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(2)
f = h5py.File(sys.argv[1], "r")
depth, w, H, K, B = (int(f.attrs[k]) for k in ("depth", "base_width", "height", "num_classes", "batch"))
n = (depth - 2) // 6
imagenet = int(f.attrs.get("imagenet_style", 0)) == 1
Cin = int(f.attrs.get("channels", 1))


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from resnet_models import build_resnet  # noqa: E402

net = build_resnet(imagenet, depth, w, Cin, K)
params = dict(net.named_parameters())
init = f["init"]
names = []
init.visit(lambda k: names.append(k) if isinstance(init[k], h5py.Dataset) else None)
failures = []
if sorted(names) != sorted(params):
    failures.append(f"parameter names differ: {sorted(set(names) ^ set(params))[:5]}")
with torch.no_grad():
    for k in names:
        params[k].copy_(torch.from_numpy(init[k][()]))
net.train()
x = torch.from_numpy(f["batch/images"][()])
y = torch.from_numpy(f["batch/labels"][()]).long()
# The same step in float64 anchors the tolerances: a deep net with BatchNorm over few elements per channel amplifies
# rounding (torch's own fp32 gradients of a width-2 ResNet-50 differ from its fp64 ones by up to 9%), so each
# quantity of ours must be as close to fp64 as torch's fp32 is, within 4x, or within the fixed tolerance (losses 1e-5,
# gradients relative L2 1e-4), whichever is looser. On the well-conditioned nets the fixed tolerance decides.
import copy
net64 = copy.deepcopy(net).double().train()
logits = net(x)
losses = F.cross_entropy(logits, y, reduction="none")
losses.mean().backward()
losses64 = F.cross_entropy(net64(x.double()), y, reduction="none")
losses64.mean().backward()
mine = torch.from_numpy(f["losses"][()]).double()
ref = losses64.detach()
rel = ((mine - ref).abs() / ref.abs()).max().item()
rel32 = ((losses.detach().double() - ref).abs() / ref.abs()).max().item()
print(f"losses: worst relative difference to fp64 {rel:.3g} (torch fp32: {rel32:.3g}) over {B} samples")
if rel > max(1e-5, 4 * rel32):
    failures.append(f"losses differ from fp64 by {rel:.3g} (should be <= max(1e-5, 4 x torch fp32's {rel32:.3g}))")
worst = (0.0, "")
params64 = dict(net64.named_parameters())
for k in names:
    g = params64[k].grad
    m = torch.from_numpy(f["grads/" + k][()]).double()
    r = ((g - m).norm() / g.norm().clamp_min(1e-30)).item()
    r32 = ((g - params[k].grad.double()).norm() / g.norm().clamp_min(1e-30)).item()
    worst = max(worst, (r, k))
    if r > max(1e-4, 4 * r32):
        failures.append(f"gradient {k}: relative L2 to fp64 {r:.3g} (should be <= max(1e-4, 4 x torch fp32's {r32:.3g}))")
print(f"gradients: worst relative L2 to fp64 {worst[0]:.3g} ({worst[1]}) over {len(names)} tensors")
buffers = dict(net64.named_buffers())
buffers32 = dict(net.named_buffers())
wb = 0.0
for k in buffers:
    if k.endswith("num_batches_tracked"):
        continue
    m = torch.from_numpy(f["buffers/" + k][()]).double()
    d = ((buffers[k] - m).abs() / buffers[k].abs().clamp_min(1.0)).max().item()
    d32 = ((buffers[k] - buffers32[k].double()).abs() / buffers[k].abs().clamp_min(1.0)).max().item()
    wb = max(wb, d)
    if d > max(1e-5, 4 * d32):
        failures.append(f"running statistic {k} differs by {d:.3g}")
print(f"BN running statistics: worst difference {wb:.3g}")
if failures:
    print("FAILED: " + failures[0])
    sys.exit(1)
print("VALID")
