"""Compact PyTorch models for validation/bench_gpu.py (the PyTorch side of the GPU benchmarks).

GPT: nanoGPT-style GPT-2 (learned positions, pre-LN, tanh-GELU MLP, tied embedding / head, biases), the architecture
of hpctrain's train_gpt; the vocabulary padded to a multiple of 128 as hpctrain pads it (GPT-2: 50257 -> 50304), the
padded logits left in the loss as nanoGPT / llm.c's PyTorch reference do (the FLOPs are the same). Attention through
F.scaled_dot_product_attention (flash) where torch has it (2.x), else masked softmax.
ResNet-50: torchvision's resnet50 when torchvision is importable, else the same network written out here (Bottleneck
v1.5: stride on the 3x3 conv; 25,557,032 parameters at 1000 classes, as torchvision and train_resnet --plan).
Works on torch 1.13 and 2.x, CPU or CUDA."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class _Block(nn.Module):
    def __init__(self, C, NH, T, bias):
        super().__init__()
        self.NH = NH
        self.ln_1 = nn.LayerNorm(C, elementwise_affine=True)
        self.c_attn = nn.Linear(C, 3 * C, bias=bias)
        self.attn_proj = nn.Linear(C, C, bias=bias)
        self.ln_2 = nn.LayerNorm(C, elementwise_affine=True)
        self.c_fc = nn.Linear(C, 4 * C, bias=bias)
        self.mlp_proj = nn.Linear(4 * C, C, bias=bias)
        self.flash = hasattr(F, "scaled_dot_product_attention")
        if not self.flash:
            self.register_buffer("mask", torch.tril(torch.ones(T, T, dtype=torch.bool)).view(1, 1, T, T),
                                 persistent=False)

    def attn(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.NH, C // self.NH).transpose(1, 2) for t in (q, k, v))
        if self.flash:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(~self.mask[:, :, :T, :T], float("-inf")).softmax(dim=-1)
            y = att @ v
        return self.attn_proj(y.transpose(1, 2).contiguous().view(B, T, C))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    """GPT-2 with n_layer, n_head, n_embd, seq_len, vocab_size (true; padded to 128), bias. forward(idx, targets) ->
    mean cross-entropy."""

    def __init__(self, n_layer, n_head, n_embd, seq_len, vocab_size, bias=True):
        super().__init__()
        self.padded_vocab = (vocab_size + 127) // 128 * 128
        self.wte = nn.Embedding(self.padded_vocab, n_embd)
        self.wpe = nn.Embedding(seq_len, n_embd)
        self.h = nn.ModuleList([_Block(n_embd, n_head, seq_len, bias) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, self.padded_vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied
        for name, p in self.named_parameters():
            if name.endswith("proj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * n_layer))
            elif p.dim() >= 2:
                nn.init.normal_(p, 0.0, 0.02)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        T = idx.size(1)
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.reshape(-1))


class _Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin, width, stride):
        super().__init__()
        cout = width * 4
        self.conv1, self.bn1 = nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width)
        self.conv2, self.bn2 = nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width)
        self.conv3, self.bn3 = nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return F.relu(out + (x if self.downsample is None else self.downsample(x)))


class ResNet50(nn.Module):
    """torchvision.models.resnet50's network (same parameter shapes and count)."""

    def __init__(self, num_classes=1000, width=64):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width)
        layers, cin = [], width
        for i, blocks in enumerate((3, 4, 6, 3)):
            w = width * 2 ** i
            stage = [_Bottleneck(cin, w, 1 if i == 0 else 2)] + [_Bottleneck(w * 4, w, 1) for _ in range(blocks - 1)]
            layers.append(nn.Sequential(*stage))
            cin = w * 4
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.fc = nn.Linear(cin, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 3, 2, 1)
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def resnet50(num_classes=1000, width=64):
    """(model, source): torchvision's resnet50 when importable (and width is 64), else ResNet50 above."""
    if width == 64:
        try:
            import torchvision
            return torchvision.models.resnet50(num_classes=num_classes), f"torchvision {torchvision.__version__}"
        except ImportError:
            pass
    return ResNet50(num_classes, width), "validation/torch_models.py (torchvision's network)"
