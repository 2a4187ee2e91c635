"""hpctrain's bf16 storage scheme in PyTorch (docs/precision.md), shared by the bf16 replays of gpt_reference.py and
resnet_train_reference.py: every value hpctrain stores in bf16 is rounded here, in fp32 tensors."""
import torch


def bf16_round(t):
    """t rounded to the nearest bf16 (ties to even), kept in its dtype."""
    return t.to(torch.bfloat16).to(t.dtype)


class RoundAct(torch.autograd.Function):
    """A stored activation: the value rounded to bf16, and its gradient (an activation gradient, also stored in bf16)
    rounded to bf16 on the way back."""

    @staticmethod
    def forward(ctx, t):
        return bf16_round(t)

    @staticmethod
    def backward(ctx, g):
        return bf16_round(g)


class RoundForward(torch.autograd.Function):
    """The value rounded to bf16, its gradient passed through in fp32: the bf16 compute copy of an fp32 master (its
    gradient accumulates into the master's fp32 gradient), or an activation whose gradient a variant keeps in fp32."""

    @staticmethod
    def forward(ctx, t):
        return bf16_round(t)

    @staticmethod
    def backward(ctx, g):
        return g
