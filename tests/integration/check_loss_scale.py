#!/usr/bin/python3
"""Loss scaling and train.precision through the training apps (mixed precision), on the CPU in fp32, where
scaling must change nothing but the scale itself. One scenario per invocation, each a ctest:

  exact     train.loss_scale = 1024 (a fixed power of two) == none, bit for bit: every step's loss and gradient norm,
            and every tensor of the final checkpoint (parameters, optimizer state, BN buffers)
  dynamic   dynamic scaling (init 65536, window 3) with overflows injected at steps 2, 3 and 7
            (HPCT_TEST_INF_DLOSS_STEPS: an infinite loss gradient on the ranks of DP rank 0, fp32's stand-in for an
            fp16 overflow): those steps are skipped (metrics skipped = 1, grad_norm null, one log line each), the scale
            follows GradScaler's rule step by step (65536, skip -> 32768, skip -> 16384, x2 after 3 finite steps, ...),
            a skipped step changes no parameter and no optimizer state (checkpoints of every step compared), and the
            optimizer's step count does not advance on it
  resume    the dynamic run of `dynamic` resumed from its step-5 checkpoint (scale 16384, 2 finite steps since its last
            change) reproduces steps 6..10 bit for bit, loss scale included (a scaler restarted at init would not)
  layouts   the dynamic run with the same injection at np 2 (DP; the other DP rank sees the overflow only through the
            gradient allreduce; train_resnet: SyncBN groups of 8 images at np 1 and np 2) and, for train_gpt, np 4 = DP 2 x TP 2 and np 4 = DP 2 x PP 2: the same skipped steps and
            scales, losses and gradient norms within max(1e-5, 10 x the np 1 run's rounding envelope at 2, 3 and 4
            threads) of np 1 (docs/invariants.md, invariant 1; validation/layout_rules.py)
  errors    train.precision = tf32 with train.device = cpu and a bad train.loss_scale exit 2 with one message naming the
            key and the fix; train.device = auto + train.precision = tf32 without a GPU runs fp32 on the CPU, says so in
            one line, and equals the cpu run bit for bit
usage: check_loss_scale.py SCENARIO APP_EXE DECK WORKDIR
Prints VALID: <scenario>, or FAILED: <what> and exits 1."""
import json
import os
import shutil
import subprocess
import sys

from ckpt_read import read_checkpoint

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                "validation"))
from layout_rules import read_run, reference_with_controls  # noqa: E402

scenario, exe, deck, work = sys.argv[1:5]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
app = os.path.basename(exe)
failures = []
ENV = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1")
ENV.pop("HPCT_TEST_INF_DLOSS_STEPS", None)
STEPS = 10
INJECT = "2,3,7"
DYNAMIC = ["train.loss_scale=dynamic", "train.loss_scale_init=65536", "train.loss_scale_window=3"]
BASE = [f"train.steps={STEPS}", "train.eval_every=0", "sample.tokens=0"] if app == "train_gpt" else \
       [f"train.steps={STEPS}", "train.eval_every=0"]


def fail(msg):
    failures.append(msg)
    print("  FAIL:", msg, flush=True)


def train(out, sets, np=1, inject=None, expect=0, threads=1):
    env = dict(ENV, OMP_NUM_THREADS=str(threads))
    if inject:
        env["HPCT_TEST_INF_DLOSS_STEPS"] = inject
    c = ["mpirun", "-np", str(np), "--oversubscribe", "--bind-to", "none"] if np > 1 else []
    c += [exe, deck, "--out", out]
    for s in BASE + sets:
        c += ["--set", s]
    p = subprocess.run(c, capture_output=True, text=True, errors="replace", timeout=600, env=env)
    print(f"  np {np} {' '.join(sets)}{' inject ' + inject if inject else ''} -> rc {p.returncode}", flush=True)
    if p.returncode != expect:
        print(p.stdout[-3000:], p.stderr[-3000:])
        print(f"FAILED: {app} {sets} exited with {p.returncode}, should be {expect}")
        sys.exit(1)
    return p


def metrics(out):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def ckpt(step_dir):
    return read_checkpoint(step_dir, ("model/", "optim/"))


def step_dir(out, s):
    return os.path.join(out, "checkpoints", f"step_{s:08d}")


def same_tensors(name, a, b, skip=()):
    import numpy as np
    if sorted(a) != sorted(b):
        fail(f"{name}: tensor sets differ")
        return
    diff = [k for k in a if not any(x in k for x in skip) and not np.array_equal(a[k], b[k])]
    if diff:
        fail(f"{name}: {len(diff)} of {len(a)} tensors differ, e.g. {diff[:3]}")
    else:
        print(f"  {name}: {len(a)} tensors bitwise equal" + (f" (not compared: {', '.join(skip)})" if skip else ""))


def expected_scales(steps, inject, init=65536.0, window=3):
    """GradScaler's rule (optim/loss_scaler.hpp): the scale each step uses and whether it is skipped."""
    scale, good, out = init, 0, []
    for s in range(1, steps + 1):
        skip = s in inject
        out.append((scale, skip))
        if skip:
            scale, good = max(scale * 0.5, 1.0), 0
        else:
            good += 1
            if good >= window:
                scale, good = min(scale * 2, 2.0 ** 24), 0
    return out


def check_dynamic_metrics(name, recs, inject):
    want = expected_scales(STEPS, inject)
    got = [(r.get("loss_scale"), r.get("skipped", 0) == 1) for r in recs]
    if got != want:
        fail(f"{name}: (scale, skipped) per step is {got}, should be {want}")
    else:
        print(f"  {name}: scales {[int(s) for s, _ in got]}, skipped steps {[i + 1 for i, (_, k) in enumerate(got) if k]}")
    for r in recs:
        skipped = r.get("skipped", 0) == 1
        if skipped != (r.get("grad_norm") is None):
            fail(f"{name}: step {r['step']}: grad_norm {r.get('grad_norm')} with skipped={skipped}")


inject_steps = [int(x) for x in INJECT.split(",")]
if scenario == "exact":
    ref = os.path.join(work, "none")
    fixed = os.path.join(work, "fixed")
    train(ref, ["train.loss_scale=none"])
    train(fixed, ["train.loss_scale=1024"])
    a, b = metrics(ref), metrics(fixed)
    for key in ("loss", "grad_norm"):
        if [r[key] for r in a] != [r[key] for r in b]:
            fail(f"{key} per step differs: none {[r[key] for r in a]} vs 1024 {[r[key] for r in b]}")
    if any("loss_scale" in r for r in a) or any(r.get("loss_scale") != 1024 for r in b):
        fail("metrics field loss_scale should be absent without scaling and 1024 with the fixed scale")
    print(f"  {len(a)} steps: losses and gradient norms bitwise equal (last loss {a[-1]['loss']})")
    ta, aa = ckpt(step_dir(ref, STEPS))
    tb, ab = ckpt(step_dir(fixed, STEPS))
    same_tensors("final checkpoint", ta, tb)
    if ab.get("loss_scale.mode") != "fixed" or ab.get("loss_scale.scale") != 1024 or aa.get("precision") != "fp32":
        fail(f"checkpoint attributes: mode {ab.get('loss_scale.mode')} scale {ab.get('loss_scale.scale')} "
             f"precision {aa.get('precision')}")
elif scenario in ("dynamic", "resume"):
    out = os.path.join(work, "dyn")
    p = train(out, DYNAMIC + ["checkpoint.every=1", "checkpoint.keep=0"], inject=INJECT)
    recs = metrics(out)
    check_dynamic_metrics("np 1", recs, inject_steps)
    if scenario == "dynamic":
        lines = [l for l in p.stdout.splitlines() if "optimizer step skipped" in l]
        if len(lines) != len(inject_steps):
            fail(f"{len(lines)} 'optimizer step skipped' lines, should be {len(inject_steps)}")
        else:
            print("  log:", lines[0].split("] ")[-1] if "] " in lines[0] else lines[0])
        if "loss scaling dynamic (init 65536" not in p.stdout:
            fail("no 'precision: ... loss scaling dynamic (init 65536 ...' line in the log")
        # a skipped step changes nothing the optimizer owns; BN running statistics do move (the forward ran, as in torch)
        for s in inject_steps:
            before, ab = ckpt(step_dir(out, s - 1))
            after, aa = ckpt(step_dir(out, s))
            same_tensors(f"step {s} (skipped) vs step {s - 1}", after, before, skip=("running_",))
            if aa["optim.step"] != ab["optim.step"]:
                fail(f"optim.step advanced on the skipped step {s}: {ab['optim.step']} -> {aa['optim.step']}")
        t1, a1 = ckpt(step_dir(out, 1))
        t4, a4 = ckpt(step_dir(out, 4))
        if a4["optim.step"] != 2:
            fail(f"optim.step at step 4 is {a4['optim.step']}, should be 2 (steps 2 and 3 skipped)")
        moved = [k for k in t1 if not (t1[k] == t4[k]).all()]
        if not moved:
            fail("no tensor changed between steps 1 and 4: the finite step 4 did not update")
        print(f"  optimizer steps at step 4: {a4['optim.step']}; step 4 changed {len(moved)} tensors")
    else:
        res = os.path.join(work, "resumed")
        train(res, DYNAMIC + [f"checkpoint.resume={step_dir(out, 5)}"], inject=INJECT)
        r2 = metrics(res)
        tail = [r for r in recs if r["step"] > 5]
        keys = ("step", "loss", "grad_norm", "loss_scale", "skipped")
        a = [[r.get(k) for k in keys] for r in tail]
        b = [[r.get(k) for k in keys] for r in r2]
        if a != b:
            fail(f"resumed steps 6..{STEPS} differ:\n    uninterrupted {a}\n    resumed       {b}")
        else:
            print(f"  resumed at step 5: steps 6..{STEPS} bitwise equal (scales {[r['loss_scale'] for r in r2]})")
        tf, _ = ckpt(step_dir(out, STEPS))
        tr, _ = ckpt(step_dir(res, STEPS))
        same_tensors("final checkpoint, resumed vs uninterrupted", tr, tf)
elif scenario == "layouts":
    # SyncBN (resnet_tiny) normalises the global micro-batch j: np 2 runs half the micro-batch per rank so that the
    # groups are those of np 1 (8 images: smaller groups are badly conditioned in fp32)
    ref_sets, dp_sets = (["train.micro_batch=8"], ["train.micro_batch=4"]) if app == "train_resnet" else ([], [])
    ref_out = os.path.join(work, "np1")
    train(ref_out, DYNAMIC + ref_sets, inject=INJECT)

    def control(t):
        train(f"{ref_out}_omp{t}", DYNAMIC + ref_sets, inject=INJECT, threads=t)
        return read_run(f"{ref_out}_omp{t}")
    judge = reference_with_controls("np 1", read_run(ref_out), control)
    layouts = [(2, dp_sets)]
    if app == "train_gpt":
        layouts += [(4, ["parallel.tp=2"]), (4, ["parallel.pp=2"])]
    for np_, sets in layouts:
        out = os.path.join(work, f"np{np_}_{'_'.join(sets) or 'dp'}")
        train(out, DYNAMIC + sets, np=np_, inject=INJECT)
        got = metrics(out)
        name = f"np {np_} {' '.join(sets) or 'DP'}"
        check_dynamic_metrics(name, got, inject_steps)
        judge.verdict(f"{name} vs np 1", read_run(out), fail)
elif scenario == "errors":
    cases = [
        (["train.device=cpu", "train.precision=tf32"], ["train.precision = tf32 needs train.device = cuda",
                                                        "--set train.precision=fp32 or bf16"]),
        (["train.loss_scale=-8"], ['train.loss_scale = "-8"', "dynamic"]),
        (["train.loss_scale=dynamic", "train.loss_scale_init=4", "train.loss_scale_min=8"],
         ["train.loss_scale_min = 8"]),
    ]
    for sets, needles in cases:
        p = train(os.path.join(work, "bad"), sets, np=2, expect=2)
        text = p.stdout + p.stderr
        for n in needles:
            if n not in text:
                fail(f"{sets}: the error does not say '{n}':\n{text[-1500:]}")
        errs = [l for l in text.splitlines() if "error" in l.lower() and "train." in l]
        if len(errs) != 1:
            fail(f"{sets}: {len(errs)} error lines (should be one, from rank 0): {errs}")
        else:
            print(f"  {' '.join(sets)} -> exit 2: {errs[0][:160]}")
    # auto + tf32 (CUDA only) without a usable GPU: fp32 on the CPU with one line, bitwise the cpu run
    probe = subprocess.run([exe, deck, "--out", os.path.join(work, "probe"), "--set", "train.steps=0", "--set",
                            "train.device=cuda"], capture_output=True, text=True, errors="replace", env=ENV, timeout=300)
    if probe.returncode == 0:
        print("SKIPPED: a usable GPU is present (the auto fallback is not reachable)")
    else:
        cpu = os.path.join(work, "cpu")
        auto = os.path.join(work, "auto")
        train(cpu, ["train.device=cpu", "train.precision=fp32"])
        p = train(auto, ["train.device=auto", "train.precision=tf32"])
        notes = [l for l in p.stdout.splitlines() if "train.precision = tf32 applies to CUDA only: fp32 on the CPU" in l]
        if len(notes) != 1:
            fail(f"auto + tf32: {len(notes)} fallback lines naming the precision, should be 1")
        else:
            print("  auto + tf32:", notes[0].split("] ")[-1] if "] " in notes[0] else notes[0])
        if [r["loss"] for r in metrics(cpu)] != [r["loss"] for r in metrics(auto)]:
            fail("auto + tf32 on the CPU differs from the cpu fp32 run")
else:
    print(f"FAILED: unknown scenario {scenario}")
    sys.exit(1)

if failures:
    print(f"FAILED: {scenario}: {len(failures)} check(s) failed")
    sys.exit(1)
print(f"VALID: {scenario}")
