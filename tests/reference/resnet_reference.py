#!/usr/bin/python3
"""PyTorch cross-check of hpctrain's ResNet (CIFAR-style, BasicBlocks with 1x1-conv + BN projection shortcuts):
one training-mode forward/backward from hpctrain's initial weights on hpctrain's batch (resnet_dump). Compares the
per-sample losses (1e-5 relative), every parameter gradient (relative L2 1e-4: fp32 convolutions summed in
different orders; BatchNorm's backward amplifies rounding by 1/std) and the BN running statistics (1e-5).
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
        self.conv1 = nn.Conv2d(1, w, 3, 1, 1, bias=False)
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
logits = net(x)
losses = F.cross_entropy(logits, y, reduction="none")
losses.mean().backward()
mine = torch.from_numpy(f["losses"][()])
rel = ((losses.detach() - mine).abs() / losses.detach().abs()).max().item()
print(f"losses: worst relative difference {rel:.3g} over {B} samples")
if rel > 1e-5:
    failures.append(f"losses differ by {rel:.3g} (should be <= 1e-5)")
worst = (0.0, "")
for k in names:
    g = params[k].grad
    m = torch.from_numpy(f["grads/" + k][()])
    r = ((g - m).norm() / g.norm().clamp_min(1e-30)).item()
    worst = max(worst, (r, k))
    if r > 1e-4:
        failures.append(f"gradient {k}: relative L2 {r:.3g} (should be <= 1e-4)")
print(f"gradients: worst relative L2 {worst[0]:.3g} ({worst[1]}) over {len(names)} tensors")
buffers = dict(net.named_buffers())
wb = 0.0
for k in buffers:
    if k.endswith("num_batches_tracked"):
        continue
    m = torch.from_numpy(f["buffers/" + k][()])
    d = ((buffers[k] - m).abs() / buffers[k].abs().clamp_min(1.0)).max().item()
    wb = max(wb, d)
    if d > 1e-5:
        failures.append(f"running statistic {k} differs by {d:.3g}")
print(f"BN running statistics: worst difference {wb:.3g}")
if failures:
    print("FAILED: " + failures[0])
    sys.exit(1)
print("VALID")
