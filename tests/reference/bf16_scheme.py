"""hpctrain's bf16 storage scheme in PyTorch (docs/precision.md), shared by the bf16 replays of gpt_reference.py and
resnet_train_reference.py: every value hpctrain stores in bf16 is rounded here, in fp32 tensors (.to(torch.bfloat16)
rounds to nearest even on every ISA: the emulation does not move with the CPU, PyTorch's bf16 autocast does).

The rounding-error model behind both scripts' bf16 limits (their headers count the depths D and give the numbers):
  Higham & Mary, "A new approach to probabilistic rounding error analysis" (SIAM J. Sci. Comput. 41, 2019): each
  rounding is x(1 + d) with the d independent, mean zero, |d| <= u. After a chain of D roundings the relative error
  is sum(d_i) + O(u^2): its mean square is <= D u^2, and |sum d_i| <= lam sqrt(D) u with probability
  >= 1 - 2 exp(-lam^2 / 2).
  The limits take lam = 1, the root-mean-square bound, not a tail bound: a per-tensor relative L2 is itself a root
  mean square over the tensor's elements, and every other premise is a worst case (each rounding error at the largest
  variance, u^2, where a uniformly distributed one has <= u^2 / 3; every error carried to the result with condition
  number 1, which the loss, a mean of cross-entropies, beats by far). The first-order worst case D u is 9x looser at
  D = 74 and would not catch a 5% gradient error; nor would lam = 4.
  - bf16 vs fp32: u = U_BF16 and D = every bf16 rounding on the longest path (stored activations, activation
    gradients and the compute copies of the parameters read on it): limit sqrt(D) u.
  - bf16 vs the emulation (the same scheme: the same values rounded at the same points; only the fp32 arithmetic
    between the roundings differs, so a rounding either gives both the same bf16 or, where their fp32 values straddle
    a rounding boundary, neighbours one ulp apart, with either sign): a rounding whose inputs differ by d gives outputs
    whose difference has mean d and mean square d^2 + p(1 - p) ulp^2 <= d^2 + ulp^2 / 4 <= d^2 + u^2 (p = the
    fractional part of d / ulp; a bf16 ulp is at most 2u relative). So each rounding adds at most u^2 to the mean
    square of the difference, as it does to bf16's distance from fp32: sqrt(D) u with D = the roundings that can differ.
    (The first flips need an fp32 difference to straddle a boundary, ~ sqrt(n) 2^-24 / u = 2e-4 of the values; each
    flip perturbs its consumers by ~ u / sqrt(n) and makes their flips likelier, so deep in the model the two runs
    differ by about as much per rounding as bf16 differs from fp32: the bound is not much smaller, only the terms are.)
    Step-1 gradients: the compute copies are the same bits in both (the same masters), D = the stored activations and
    activation gradients only. Losses: the difference is a sum of such flips, each private to one sample of the step
    (a token, an image: its own activations) or to one element of a compute copy (from step 2 on, where the masters
    have moved apart), with random signs, and the loss is the mean over the step's N samples: sqrt(D) u / sqrt(N).
    Against fp32 no such averaging holds: a compute copy's rounding error is shared by every sample, and systematic
    over the steps (an update smaller than half a bf16 spacing leaves the copy where it was).
  - bf16 in effect: an fp32 computation of the same steps stays within lam sqrt(D) U_FP32 of PyTorch fp32; with
    lam = MIN_DEV_LAMBDA = 4 (probability >= 1 - 2 exp(-8) = 0.9993 of staying inside) a run outside it did not
    compute in fp32 (lam = 10 would sit within 2x of a bf16 ResNet-20 step 1 on seed 2, 1.1e-5)."""
import math
import os

import torch

U_BF16 = 2.0 ** -8    # bf16's unit roundoff: 8 significant bits (7 stored), round to nearest even
U_FP32 = 2.0 ** -24   # fp32's
MIN_DEV_LAMBDA = 4.0


def rms_bound(depth, samples=1):
    """sqrt(depth) u / sqrt(samples): the model's root-mean-square relative error (see above)."""
    return math.sqrt(depth) * U_BF16 / math.sqrt(samples)


def fp32_bound(depth):
    """The most an fp32 computation of depth `depth` moves from another (lam = MIN_DEV_LAMBDA, fp32's u)."""
    return MIN_DEV_LAMBDA * math.sqrt(depth) * U_FP32


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


def cpu_capability():
    """The vector ISA PyTorch's own kernels run (ATEN_CPU_CAPABILITY caps it) and whether its bf16 GEMMs go through
    oneDNN (torch 1.13: only where the CPU has AVX-512)."""
    cap = os.environ.get("ATEN_CPU_CAPABILITY", "unset")
    try:
        flags = open("/proc/cpuinfo").read().split("flags", 1)[1].split("\n", 1)[0].split()
    except (OSError, IndexError):
        flags = []
    onednn = torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled and "avx512bw" in flags
    return f"ATEN_CPU_CAPABILITY={cap}, oneDNN bf16 {'on' if onednn else 'off'}"
