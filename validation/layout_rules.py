"""How two runs that must compute the same numbers are judged: the rule of docs/invariants.md ("How the campaign judges"),
in one place for the campaign (validation/equivalence.py) and for every test that compares two layouts, two thread
counts, two kernels or two libraries' runs of one deck (tests/integration/check_*.py).

Deviations are relative, |x - ref| / |ref|, for every step's loss and global gradient norm (metrics.jsonl `loss`,
`grad_norm`). A comparison never uses a constant tuned on one CPU; its limit is

    max(RTOL, ENVELOPE_FACTOR x envelope)

where RTOL is invariant 1's bound (1e-5 in fp32 up to 50 steps) and the envelope is measured on this machine, in this
run: the worst deviation of the reference run repeated at CONTROL_THREADS OpenMP threads (the same layout, only the
kernels' reduction order changes), over the same steps and from the same state as the comparison:
  - a *window* (steps that start from a state both runs share: steps 1..ANCHOR_STEPS from the common initialisation,
    or K+1..K+ANCHOR_STEPS from a checkpoint at step K, the anchor) is held to the envelope of the controls over that
    window from that state;
  - a *trajectory* (the whole curve) is held to the controls' envelope over the whole curve.
A deck whose envelope stays below RTOL / ENVELOPE_FACTOR (gpt_tiny: ~3e-8 on every CPU seen) is thereby held to RTOL,
exactly invariant 1; a deck that amplifies rounding (resnet_tiny at lr 0.05: ~1e-8 of reduction order becomes 1e-4 in
one optimizer step from its step-10 state with AVX2 kernels, ~1e-7 with AVX-512 ones) gets the bound its own measured noise
allows on this CPU. The factor: layouts change the reduction order of the same sums the thread count does (the batch
split, the partial sums of TP and ZeRO), and recorded layouts sit at 0.5x-2.2x one control over two CPUs; 10x the worst
of three controls keeps a correct layout inside. A defect changes the mathematics of a step, which a window shows at
its full size (the planted defects of lib/core/test_fault.hpp move a window by 1e-5 to 0.5 of its loss or gradient
norm: validation/results/equivalence_planted_cpu.md), and a state whose rounding alone moves a window that far shows
it in the window's own control.

Python 3.11 (/usr/bin/python3), no dependencies."""
import json
import math
import os

RTOL = 1e-5  # invariant 1: fp32 layouts within 1e-5 relative of the serial run (up to 50 steps; 1e-4 beyond)
ANCHOR_STEPS = 2  # steps compared from a shared state
ENVELOPE_FACTOR = 10  # a limit in units of the measured rounding envelope
CONTROL_THREADS = (2, 3, 4)  # the rounding controls: the reference at these OpenMP thread counts


class Run(dict):
    """step -> loss, and .gnorm: step -> the global gradient norm of that step; .val: the last val_loss (or None)."""

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.gnorm = {}
        self.val = None


def read_run(out):
    """The per-step losses and gradient norms of the run directory `out` (its metrics.jsonl); an empty Run where the
    file is missing or unreadable (a failed run: every comparison with it is then inf)."""
    R = Run()
    try:
        with open(os.path.join(out, "metrics.jsonl")) as f:
            for r in map(json.loads, f):
                if r.get("loss") is not None:
                    R[int(r["step"])] = float(r["loss"])
                    if r.get("grad_norm") is not None:
                        R.gnorm[int(r["step"])] = float(r["grad_norm"])
                if r.get("val_loss") is not None:
                    R.val = float(r["val_loss"])
    except (OSError, ValueError):
        return Run()
    return R


def rel(x, ref):
    """|x - ref| / |ref|; NaN counts as inf; a zero reference compares absolutely."""
    d = abs(x - ref) / abs(ref) if ref != 0 else abs(x - ref)
    return d if d == d else math.inf


def deviation(got, ref, steps=None, gnorm=True):
    """(worst loss deviation, worst gradient-norm deviation, step of the worst, None where every step agrees) over
    `steps` (default: every step of ref). A step missing from either run is inf. Gradient norms count where both runs
    log one."""
    steps = list(ref) if steps is None else list(steps)
    if not steps:
        return math.inf, math.inf, None
    wl = wg = 0.0
    at = None
    for s in steps:
        if s not in got or s not in ref:
            return math.inf, math.inf, s
        dl = rel(got[s], ref[s])
        dg = rel(got.gnorm[s], ref.gnorm[s]) if gnorm and s in got.gnorm and s in ref.gnorm else 0.0
        if max(dl, dg) > max(wl, wg):
            at = s
        wl, wg = max(wl, dl), max(wg, dg)
    return wl, wg, at


class Envelope:
    """The rounding envelope over some steps from some state: the worst loss and gradient-norm deviation of the
    controls (the reference at other thread counts) from the reference, and the limits it gives."""

    def __init__(self, loss=0.0, gnorm=0.0, controls=()):
        self.loss, self.gnorm = loss, gnorm
        self.controls = list(controls)  # (threads, loss deviation, gradient-norm deviation) per control

    @classmethod
    def measure(cls, controls, ref, steps=None, gnorm=True):
        """controls: {threads: Run}. A control that lacks a step is an error of the caller's run, not rounding: it
        raises, naming the thread count."""
        env = cls()
        for t, got in sorted(controls.items()):
            dl, dg, at = deviation(got, ref, steps, gnorm)
            if math.isinf(dl) or math.isinf(dg):
                raise RuntimeError(f"the rounding control at {t} threads lacks step {at} (or computed NaN): a failed "
                                   "run, not rounding")
            env.controls.append((t, dl, dg))
            env.loss, env.gnorm = max(env.loss, dl), max(env.gnorm, dg)
        return env

    def loss_limit(self, rtol=RTOL):
        return max(rtol, ENVELOPE_FACTOR * self.loss)

    def gnorm_limit(self, rtol=RTOL):
        return max(rtol, ENVELOPE_FACTOR * self.gnorm)

    def describe(self):
        return (f"envelope loss {fmt(self.loss)}, gradient norm {fmt(self.gnorm)} (controls at "
                f"{', '.join(str(t) for t, _, _ in self.controls) or '-'} threads)")


def judge(name, got, ref, env, steps=None, rtol=RTOL, gnorm=True):
    """Compares got with ref over `steps` against env's limits. Returns (failure messages, one summary line)."""
    steps = sorted(ref) if steps is None else list(steps)
    dl, dg, at = deviation(got, ref, steps, gnorm)
    ll, gl = env.loss_limit(rtol), env.gnorm_limit(rtol)
    why = f"max({rtol:g}, {ENVELOPE_FACTOR} x {env.describe()})"
    bad = []
    if dl > ll:
        bad.append(f"{name}: loss deviates {fmt(dl)} relative at step {at} (should be <= {fmt(ll)}: {why})")
    if gnorm and dg > gl:
        bad.append(f"{name}: gradient norm deviates {fmt(dg)} relative (should be <= {fmt(gl)}: {why})")
    line = f"{name}, steps {steps[0]}..{steps[-1]}: worst loss {fmt(dl)} (limit {fmt(ll)})" + \
        (f", gradient norm {fmt(dg)} (limit {fmt(gl)})" if gnorm else "")
    return bad, line


class Reference:
    """A reference run and its rounding envelopes measured on this machine from its controls ({threads: Run}, the
    reference repeated at CONTROL_THREADS): over the initial window (its first ANCHOR_STEPS steps, from the state both
    runs share), over the whole trajectory, and for the final test loss. check() judges another run against it."""

    def __init__(self, name, ref, controls, steps=None, rtol=RTOL, gnorm=True, test_loss=True):
        """test_loss=False: the final test loss is not compared (where it is not layout-independent by design)."""
        self.name, self.ref, self.rtol, self.gnorm = name, ref, rtol, gnorm
        self.steps = sorted(ref) if steps is None else list(steps)
        self.window_steps = self.steps[:ANCHOR_STEPS]
        self.window = Envelope.measure(controls, ref, self.window_steps, gnorm)
        self.trajectory = Envelope.measure(controls, ref, self.steps, gnorm)
        self.val = None
        if ref.val is not None and test_loss:
            self.val = max((rel(r.val, ref.val) if r.val is not None else math.inf for r in controls.values()),
                           default=0.0)

    def describe(self):
        return (f"{self.name}: initial window {self.window.describe()}; trajectory {self.trajectory.describe()}"
                + (f"; test loss {fmt(self.val)}" if self.val is not None else ""))

    def check(self, name, got):
        """(failure messages, summary lines, the trajectory's worst loss deviation) of got against the reference."""
        bad, lines = [], []
        for steps, env in ((self.window_steps, self.window), (self.steps, self.trajectory)):
            b, line = judge(name, got, self.ref, env, steps, self.rtol, self.gnorm)
            bad += b
            lines.append(line)
        if self.val is not None:
            dv = rel(got.val, self.ref.val) if got.val is not None else math.inf
            lim = max(self.rtol, ENVELOPE_FACTOR * self.val)
            lines.append(f"{name}: test loss deviates {fmt(dv)} (limit {fmt(lim)})")
            if dv > lim:
                bad.append(f"{name}: test loss {got.val} vs {self.ref.val} of {self.name} (deviates {fmt(dv)}, "
                           f"should be <= {fmt(lim)})")
        return bad, lines, deviation(got, self.ref, self.steps, False)[0]

    def verdict(self, name, got, fail, log=print):
        """check() for a test script: logs the figures (indented), calls fail(message) for each failure."""
        bad, lines, _ = self.check(name, got)
        for line in lines:
            log("  " + line, flush=True)
        for b in bad:
            fail(b)


def reference_of_run(name, train, np_, out, sets, env, steps=None, **kw):
    """reference_with_controls for the test scripts' convention: train(np, out, sets, env=ENV) runs the app into the
    run directory out; the reference is the run already in `out`, its controls the same command into out_omp<t>."""
    def run_at(t):
        train(np_, f"{out}_omp{t}", sets, env=dict(env, OMP_NUM_THREADS=str(t)))
        return read_run(f"{out}_omp{t}")
    return reference_with_controls(name, read_run(out), run_at, steps, **kw)


def reference_with_controls(name, ref, run_at, steps=None, log=print, **kw):
    """A Reference of ref (a Run) whose controls are run_at(t) for t in CONTROL_THREADS: run_at runs the reference's
    command at t OpenMP threads per rank and returns its Run. Logs the envelopes."""
    R = Reference(name, ref, {t: run_at(t) for t in CONTROL_THREADS}, steps, **kw)
    log("  " + R.describe(), flush=True)
    return R


def fmt(x):
    return "inf" if math.isinf(x) else f"{x:.2e}"
