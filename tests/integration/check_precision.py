#!/usr/bin/python3
"""train.precision = bf16 end to end on the CPU (docs/precision.md), for train_gpt and train_resnet.

Scenarios:
  accuracy  fp32 and bf16 runs of STEPS steps from the same deck: the bf16 loss stays within 0.5% (relative) of the fp32
            loss at every step; the run logs its precision line; --plan --json counts the activations at their stored
            size (bf16 at most 0.55x fp32: everything the model keeps is halved except per-row statistics, losses and
            the index of a max-pool); a second bf16 run reproduces the first bit for bit (invariant 1); a bf16 run on a
            CPU without bf16 instructions (DNNL_MAX_CPU_ISA=AVX512_CORE) says so in its precision line and stays within
            0.5% of fp32 too.
  layouts   bf16 runs on other layouts against the bf16 serial run, every step's loss within
            max(0.5%, 10 x the serial run's rounding envelope at 2, 3 and 4 threads) (validation/layout_rules.py;
            docs/invariants.md:
            bf16 layouts reproduce the bf16 serial run to bf16 rounding; the reduction order of the bf16 collectives
            and the split GEMMs differ): train_gpt DP 2, TP 2, PP 2 (np 2) and DP 2 x TP 2 (np 4), and DP 2 with
            parallel.grad_dtype = bf16, alone and with ZeRO-2; train_resnet DP 2 (SyncBN, at the serial run's
            DP x micro_batch = 8) and DP 2 with parallel.grad_dtype = bf16, alone and with ZeRO-2.
  resume    checkpoints hold the fp32 masters and optimizer state whatever the precision: a bf16 run restarted from
            its own checkpoint reproduces the uninterrupted bf16 run bit for bit; a fp32 run resumed from the bf16
            checkpoint, and a bf16 run resumed from a fp32 checkpoint, continue within 0.5% of the uninterrupted run of
            their own precision.
usage: check_precision.py SCENARIO APP_EXE DECK WORKDIR
Prints VALID: <scenario>, or FAILED: <what> and exits 1."""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                "validation"))
from layout_rules import read_run, reference_with_controls  # noqa: E402

scenario, exe, deck, work = sys.argv[1:5]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
app = os.path.basename(exe)
gpt = app == "train_gpt"
failures = []
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1")
# bf16 vs fp32 and bf16 layouts vs the bf16 serial run: 0.5% relative at every step (docs/precision.md)
TOL = 5e-3
STEPS = 30 if scenario == "accuracy" else 10
BASE = [f"train.steps={STEPS}", "train.eval_every=0", "checkpoint.at_end=false"]
if gpt:
    BASE += ["sample.tokens=0"]
elif scenario == "accuracy":
    # resnet_tiny at its lr 0.05 is chaotic over 30 steps: two fp32 implementations (oneDNN vs HPCT_CONV=im2col, same
    # math, other rounding) part by 0.41% (measured), as far as bf16 from fp32 (0.34%). At lr 0.01 fp32 rounding noise
    # stays small and bf16 vs fp32 measured 0.038%, so the 0.5% bound tests bf16, not the chaos.
    BASE += ["optim.lr=0.01"]
BF16 = ["train.precision=bf16"]


def fail(msg):
    failures.append(msg)
    print("  FAIL:", msg, flush=True)


def train(out, sets, np=1, threads=None, env_extra=None):
    env = dict(ENV, OMP_NUM_THREADS=str(threads or (2 if np == 1 else 1)), **(env_extra or {}))
    c = ["mpirun", "-np", str(np), "--oversubscribe", "--bind-to", "none"] if np > 1 else []
    c += [exe, deck, "--out", out]
    for s in BASE + sets:
        c += ["--set", s]
    p = subprocess.run(c, capture_output=True, text=True, errors="replace", timeout=600, env=env)
    print(f"  np {np} {' '.join(sets)} -> rc {p.returncode}", flush=True)
    if p.returncode != 0:
        print(p.stdout[-3000:], p.stderr[-3000:])
        print(f"FAILED: {app} exited with {p.returncode} ({' '.join(sets)})")
        sys.exit(1)
    return p


def losses(out):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [json.loads(line)["loss"] for line in f]


def compare(name, got, ref, tol=TOL):
    if len(got) != len(ref):
        fail(f"{name}: {len(got)} steps, reference {len(ref)}")
        return
    worst = max(abs(g - r) / abs(r) for g, r in zip(got, ref))
    print(f"  {name}: worst relative loss difference {worst:.3g} over {len(got)} steps (limit {tol:g})", flush=True)
    if worst > tol:
        fail(f"{name}: losses differ by {worst:.3g} relative (limit {tol:g})")


def plan_json(sets):
    c = [exe, deck, "--plan", "1", "--json"]
    for s in sets:
        c += ["--set", s]
    p = subprocess.run(c, capture_output=True, text=True, errors="replace", timeout=120, env=ENV)
    if p.returncode != 0:
        fail(f"--plan {' '.join(sets)} exited with {p.returncode}: {p.stderr[-500:]}")
        return {}
    lines = [l for l in p.stdout.splitlines() if l.startswith('{"plan"')]
    return json.loads(lines[-1])["plan"] if lines else {}


if scenario == "accuracy":
    fp32 = train(os.path.join(work, "fp32"), [])
    bf16 = train(os.path.join(work, "bf16"), BF16)
    compare("bf16 vs fp32", losses(os.path.join(work, "bf16")), losses(os.path.join(work, "fp32")))
    lines = [l for l in bf16.stdout.splitlines() if "precision: bf16" in l]
    if len(lines) != 1:
        fail(f"the bf16 run logs {len(lines)} 'precision: bf16' lines, should be 1")
    else:
        print("  " + lines[0].split("] ")[-1])
    if any("precision: bf16" in l for l in fp32.stdout.splitlines()):
        fail("the fp32 run logs a bf16 precision line")
    train(os.path.join(work, "bf16_again"), BF16)
    if losses(os.path.join(work, "bf16_again")) != losses(os.path.join(work, "bf16")):
        fail("a second bf16 run does not reproduce the first bit for bit")
    else:
        print("  a second bf16 run reproduces every loss bit for bit")
    # a CPU without bf16 instructions, as oneDNN sees it (DNNL_MAX_CPU_ISA caps the ISA it dispatches): the run still
    # stores bf16, widens the products to fp32 (exact for bf16 x bf16), says so in its precision line, and lands within
    # 0.5% of fp32 like the native run
    nobf16 = train(os.path.join(work, "bf16_no_isa"), BF16, env_extra={"DNNL_MAX_CPU_ISA": "AVX512_CORE"})
    lines = [l for l in nobf16.stdout.splitlines() if "precision: bf16" in l]
    if len(lines) != 1 or "on bf16 storage" not in lines[0] or "no bf16 instructions" not in lines[0]:
        fail(f"without bf16 instructions the precision line should say so once: {lines}")
    else:
        print("  without bf16 instructions: " + lines[0].split("| CPU: ")[-1])
    compare("bf16 without bf16 instructions vs fp32", losses(os.path.join(work, "bf16_no_isa")),
            losses(os.path.join(work, "fp32")))
    key = "activation_bytes_max_rank" if gpt else "activation_bytes"
    a32, a16 = plan_json([]), plan_json(BF16)
    if a32.get("activation_dtype") != "f32" or a16.get("activation_dtype") != "bf16":
        fail(f"--plan --json activation_dtype: fp32 run {a32.get('activation_dtype')}, bf16 run "
             f"{a16.get('activation_dtype')} (should be f32 and bf16)")
    elif a16[key] > 0.55 * a32[key]:
        fail(f"--plan: bf16 activations {a16[key]} bytes, fp32 {a32[key]}: not halved")
    else:
        print(f"  --plan activations: fp32 {a32[key]} bytes, bf16 {a16[key]} bytes ({a16[key] / a32[key]:.3f}x)")
elif scenario == "layouts":
    # SyncBN normalises over the DP group's micro-batch: the ResNet's layouts agree at a constant DP x micro_batch
    serial = [] if gpt else ["train.micro_batch=8"]
    # the bf16 serial run at 1 thread, and its rounding controls at 2, 3 and 4 (validation/layout_rules.py): each layout's
    # losses within max(0.5%, 10 x their envelope), the campaign's rule with its bf16 bound. Losses only, as the bf16
    # contract states it: a layout rounds other values to bf16 than the serial run (row-parallel partial sums, the bf16
    # gradient reduction), which no thread count reproduces (the controls' gradient norms agree to 2e-6), and
    # resnet_tiny's trajectory amplifies that in the gradient norm (3.5e-2 by step 10 at DP 2 with bf16 reduction,
    # measured on an AVX-512 EPYC, while its loss stays within 6e-4)
    serial_out = os.path.join(work, "serial")
    train(serial_out, BF16 + serial, threads=1)

    def control(t):
        train(f"{serial_out}_omp{t}", BF16 + serial, threads=t)
        return read_run(f"{serial_out}_omp{t}")
    ref = reference_with_controls("bf16 serial", read_run(serial_out), control, rtol=TOL, gnorm=False)
    if gpt:
        cases = [(2, ["parallel.tp=1"], "DP 2"), (2, ["parallel.tp=2"], "TP 2"), (2, ["parallel.pp=2"], "PP 2"),
                 (4, ["parallel.tp=2"], "DP 2 x TP 2"), (2, ["parallel.grad_dtype=bf16"], "DP 2, bf16 reduction"),
                 (2, ["parallel.zero=2", "parallel.grad_dtype=bf16", "parallel.bucket_mb=0.05"],
                  "DP 2, ZeRO-2, bf16 reduction")]
    else:
        cases = [(2, ["train.micro_batch=4"], "DP 2 (SyncBN)"),
                 (2, ["train.micro_batch=4", "parallel.grad_dtype=bf16"], "DP 2, bf16 reduction"),
                 (2, ["train.micro_batch=4", "parallel.zero=2", "parallel.grad_dtype=bf16", "parallel.bucket_mb=0.005"],
                  "DP 2, ZeRO-2, bf16 reduction")]
    for np_, sets, name in cases:
        out = os.path.join(work, name.replace(" ", "_").replace(",", ""))
        train(out, BF16 + sets, np=np_)
        ref.verdict(f"bf16 {name} vs bf16 serial", read_run(out), fail)
elif scenario == "resume":
    half = STEPS // 2
    ck = ["checkpoint.every=%d" % half, "checkpoint.keep=2"]
    for prec, other in (("bf16", "fp32"), ("fp32", "bf16")):
        full = os.path.join(work, f"{prec}_full")
        if not os.path.exists(full):  # made by the first round as the other precision's reference
            train(full, [f"train.precision={prec}"] + ck)
        ref = losses(full)
        # the same precision, restarted from the mid-run checkpoint (a copy of the output directory without the
        # metrics of the second half): bit for bit
        again = os.path.join(work, f"{prec}_restart")
        train(again, [f"train.precision={prec}", f"checkpoint.resume={full}/checkpoints/step_{half:08d}"] + ck)
        got = losses(again)
        if got != ref[half:]:
            fail(f"{prec} restarted at step {half}: losses differ from the uninterrupted run "
                 f"({got[:3]} vs {ref[half:half + 3]})")
        else:
            print(f"  {prec} restarted at step {half} reproduces the uninterrupted run bit for bit")
        # the other precision resumed from this checkpoint: within bf16 rounding of the other precision's own run
        cross = os.path.join(work, f"{other}_from_{prec}")
        train(cross, [f"train.precision={other}", f"checkpoint.resume={full}/checkpoints/step_{half:08d}"] + ck)
        ref_other_dir = os.path.join(work, f"{other}_full")
        if not os.path.exists(ref_other_dir):
            train(ref_other_dir, [f"train.precision={other}"] + ck)
        compare(f"{other} resumed from a {prec} checkpoint vs the {other} run", losses(cross),
                losses(ref_other_dir)[half:])
else:
    print(f"FAILED: unknown scenario {scenario}")
    sys.exit(1)

if failures:
    print(f"FAILED: {scenario}: {len(failures)} check(s) failed")
    sys.exit(1)
print(f"VALID: {scenario}")
