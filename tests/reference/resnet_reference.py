#!/usr/bin/python3
"""PyTorch cross-check of hpctrain's ResNet (CIFAR-style, BasicBlocks with 1x1-conv + BN projection shortcuts, or
ImageNet-style: torchvision's resnet18/34/50/101/152 itself):
one training-mode forward/backward from hpctrain's initial weights on hpctrain's batch (resnet_dump). Compares the
per-sample losses (1e-5 relative), every parameter gradient (relative L2 1e-4: fp32 convolutions summed in
different orders; BatchNorm's backward amplifies rounding by 1/std) against torch in float64 (looser where torch's own
fp32 result is further from fp64, see below) and the BN running statistics (1e-5, scaled likewise).
usage: resnet_reference.py DUMP.h5    Prints VALID or FAILED: <what> and exits 1."""
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


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, 0, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (self.downsample(x) if self.downsample is not None else x))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(Cin, w, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(w)
        cin = w
        for s in range(3):
            blocks = []
            for b in range(n):
                blocks.append(Block(cin, w << s, 2 if (b == 0 and s > 0) else 1))
                cin = w << s
            setattr(self, f"layer{s + 1}", nn.Sequential(*blocks))
        self.fc = nn.Linear(cin, K)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


if imagenet:
    import torchvision
    net = getattr(torchvision.models, f"resnet{depth}")(num_classes=K, width_per_group=64)
    # base width w instead of 64: rebuild with the same structure at width w (torchvision hard-codes 64 in the stem)
    if w != 64:
        import torchvision.models.resnet as tvr
        block = tvr.Bottleneck if depth >= 50 else tvr.BasicBlock
        layers = {18: [2, 2, 2, 2], 34: [3, 4, 6, 3], 50: [3, 4, 6, 3], 101: [3, 4, 23, 3], 152: [3, 8, 36, 3]}[depth]
        class Narrow(tvr.ResNet):
            def __init__(self):
                nn.Module.__init__(self)
                self._norm_layer = nn.BatchNorm2d
                self.inplanes, self.dilation, self.groups, self.base_width = w, 1, 1, 64
                self.conv1 = nn.Conv2d(Cin, w, 7, 2, 3, bias=False)
                self.bn1 = nn.BatchNorm2d(w)
                self.relu = nn.ReLU(inplace=True)
                self.maxpool = nn.MaxPool2d(3, 2, 1)
                self.layer1 = self._make_layer(block, w, layers[0])
                self.layer2 = self._make_layer(block, 2 * w, layers[1], stride=2)
                self.layer3 = self._make_layer(block, 4 * w, layers[2], stride=2)
                self.layer4 = self._make_layer(block, 8 * w, layers[3], stride=2)
                self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
                self.fc = nn.Linear(8 * w * block.expansion, K)
        net = Narrow()
    elif Cin != 3:
        net.conv1 = nn.Conv2d(Cin, 64, 7, 2, 3, bias=False)
else:
    net = Net()
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
