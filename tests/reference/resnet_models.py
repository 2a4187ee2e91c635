"""The ResNets of hpctrain's PyTorch cross-checks: the CIFAR style (3x3 stem, three stages of BasicBlocks with 1x1-conv
+ BN projection shortcuts, torchvision-style names) and the ImageNet style (torchvision's resnet18/34/50/101/152, at
any base width). Used by resnet_reference.py, resnet_train_reference.py and validation/bench_resnet.py."""
import torch.nn as nn
import torch.nn.functional as F


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
    def __init__(self, depth, w, Cin, K):
        super().__init__()
        n = (depth - 2) // 6
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


def build_resnet(imagenet, depth, w, Cin, K):
    """hpctrain's ResNet as a torch module with the same parameter names (random init: load hpctrain's)."""
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
        net = Net(depth, w, Cin, K)
    return net
