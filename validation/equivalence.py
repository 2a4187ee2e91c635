#!/usr/bin/python3
"""Equivalence campaign (scaling validation): every parallel layout a world size allows computes what
the serial run computes (docs/invariants.md, invariant 1, "layout independence"), proven through the apps' contracts only
(command line, --set, metrics.jsonl, checkpoints, ckpt_tool, exit codes; docs/contracts.md), never their internals.

  1. train_gpt on inputs/gpt_tiny.toml: for each world size W every (DP, TP, PP) with DP*TP*PP = W, TP | n_head,
     TP | padded vocabulary, PP <= n_layer, global_batch % (DP*micro_batch) == 0 (micro_batch lowered until it
     divides, and the table says so), ZeRO 0, 1, 2 and (without pipelining) 3 where DP > 1 (and each in hybrid
     sharding groups of DP / 2, parallel.zero_group, where DP >= 4), schedules gpipe and 1f1b where PP > 1; and per
     shape the activation levers: sequence parallelism (parallel.sp) where TP > 1, train.recompute = selective
     (without pipelining) or full (with it), each with the shape's deepest ZeRO stage; and the interleaved 1F1B
     (parallel.virtual_stages = 2) where PP > 1, n_layer % (2 PP) == 0 and the micro-batches per step are a multiple
     of PP, with ZeRO-1 where DP > 1 (ZeRO-2 refuses virtual stages).
  2. train_resnet on inputs/resnet_tiny.toml: DP = W with SyncBN at a constant global micro-batch DP x micro_batch
     (--resnet-gmb, default 8: serial MB 8, W=4 MB 2, W=8 MB 1; the rule of docs/apps.md "train_resnet"), ZeRO 0, 1, 2, 3
     (2 and 3 also in hybrid sharding groups of W / 2), ZeRO 3 with train.recompute = full, and ZeRO 1 with
     model.memory_format = nchw (the serial run takes the default: channels-last where the CPU's oneDNN runs it, which
     needs channel counts that are multiples of 16: --resnet-set model.base_width=16; at the deck's width 4 both
     run NCHW).
  3. restart across layouts: k = N/2 steps at layout A (optim.decay_steps = N, checkpoint at the end), `ckpt_tool
     verify` of that checkpoint, resume at layout B (another layout of W, or the serial one) to N steps in the same
     run directory (checkpoint.resume=<dir>/checkpoints/step_%08d), the N losses compared with the serial run; its
     anchored window K+1..K+2 is compared with layout A's uninterrupted run (the checkpoint lost nothing).
The verdict of a layout (docs/invariants.md, "How the campaign judges"), with RTOL = 1e-5 (fp32, up to 50 steps; 1e-4
beyond, as invariant 1 says), deviations relative (|x - ref| / |ref|), for the loss and the global gradient norm
(metrics.jsonl grad_norm; --loss-only: the loss alone) of every step:
  anchored windows (every deck): the steps that start from a state the reference shares: steps 1..2 from the common
     initialisation against the serial run, and steps K+1..K+2 against a serial run resumed from the layout's own
     checkpoint at step K = N/2 (the "anchor"). Each window is within max(RTOL, 10 x its own rounding envelope): the
     worst deviation of the serial run at 2, 3 and 4 OpenMP threads from the one at 1, over the same steps from the
     same state (the initial window's from the rounding controls below; the anchored window's from the serial run
     resumed from the same checkpoint at those thread counts, run only where the window exceeds RTOL, since below it
     the envelope cannot change the verdict). Two steps from one state mostly leave reduction-order differences no room
     to grow (~1e-8 loss, <= ~1e-6 gradient norm), so the limit is RTOL; where a state amplifies rounding within two
     steps (resnet_tiny from step 10 on an AVX2 CPU: 1.4e-4 in the gradient norm of the second step) its own control
     shows it, and any difference in the mathematics of a step (forward, backward, gradient sync, optimizer state)
     shows at its full size.
  trajectory (the whole N-step curve against the serial run): within max(RTOL, 10 x the deck's rounding envelope), the
     envelope being the worst deviation of the serial run repeated at 2, 3 and 4 OpenMP threads (only the kernels'
     reduction order changes). A deck whose envelope stays below RTOL / 10 (gpt_tiny: ~3e-8) is thus held to RTOL over
     its whole curve; a deck that amplifies rounding (resnet_tiny at lr 0.05: the serial run at 2 threads drifts to
     ~1e-3 in 20 steps) is judged by its anchored windows, its trajectory only bounded by its own measured noise.
A run that exits non-zero, or whose metrics.jsonl lacks steps, FAILS too.
Sensitivity (docs/invariants.md): --plant FAULT[:rank=R] sets HPCT_TEST_FAULT (lib/core/test_fault.hpp) for every
non-serial run, so the verdict must be FAILED and names the layouts that detect the defect; --sensitivity runs each
planted defect on a reduced world-2 matrix and ends `VALID: sensitivity: ...` when each is DETECTED and the same
layouts unplanted are VALID (the ctest validation_sensitivity); --sensitivity --planted-matrix plants each on every
layout of the quick matrix (world 4) and writes the defect x layout table (validation/results/equivalence_planted_cpu.md).
--precision bf16 runs the whole campaign, serial references included, with train.precision=bf16 (docs/precision.md):
each layout is then compared with the bf16 serial run within 0.5% (5e-3 relative), the bound docs/precision.md states
for bf16 layouts: bf16 rounds every stored activation to 8 significant bits, and a layout's different reduction order
moves a value across a rounding boundary far more often than in fp32.

usage: validation/equivalence.py [--world 4 8] [--steps N] [--quick] [--precision fp32|bf16] [--out DIR]
                                 [--report FILE.md] [--train-gpt EXE] [--train-resnet EXE] [--ckpt-tool EXE]
                                 [--plant FAULT[:rank=R] | --sensitivity [--planted-matrix]]
                                 [--resnet-set KEY=VALUE] [--loss-only]
  --quick   world 4 (unless --world is given), 10 steps, one variant per (DP, TP, PP) shape (ZeRO-3, 2 and 1 taking
            turns over the shapes with DP > 1), one ZeRO-2 and one ZeRO-3 hybrid-sharding layout, one sequence-parallel
            layout with pipelining, one with full recompute and one interleaved (virtual stages), ResNet with
            ZeRO-3, with and without full recompute, one restart pair (from a ZeRO-3 layout with TP): the ctest
            `validation_equivalence_quick` (about a minute here)
Writes DIR/<layout>/ run directories, equivalence.json (every result with its per-step losses) and equivalence.png
(loss curves of all layouts overlaid and the per-step deviations, one column per app) next to the report (or in
DIR without --report), the report; prints the tables, and last `VALID` (exit 0) or
`FAILED: <n> of <m> layouts (worst: ...)` (exit 1). Runs one job at a time (mpirun --oversubscribe --bind-to none,
OMP_NUM_THREADS=1 per rank, the conventions of tests/integration/check_dp_ckpt.py)."""
import argparse
import json
import math
import os
import shlex
import subprocess
import sys
import time
import tomllib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from campaign import REPO, machine_info, output_dirs  # noqa: E402
from layout_rules import ANCHOR_STEPS, CONTROL_THREADS, ENVELOPE_FACTOR, Envelope, read_run  # noqa: E402
from layout_rules import deviation as rules_deviation  # noqa: E402

ENV = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1")
GPT_QUIET = ["sample.tokens=0", "train.eval_every=0", "log.every=10"]
RESNET_QUIET = ["train.eval_every=0", "log.every=10"]

ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--world", type=int, nargs="+", help="world sizes (default 4 8; --quick: 4)")
ap.add_argument("--steps", type=int, help="optimizer steps per run (default 20; --quick: 10)")
ap.add_argument("--quick", action="store_true", help="fewer layouts and steps, one restart pair (the ctest)")
ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                help="train.precision of every run (default fp32; bf16: limit 5e-3, docs/precision.md)")
ap.add_argument("--out", default=os.path.join(REPO, "runs", "equivalence"), help="work directory (wiped first)")
ap.add_argument("--report", help="write the markdown report here (the JSON and PNG go next to it)")
ap.add_argument("--train-gpt", default=os.path.join(REPO, "build", "apps", "train_gpt"))
ap.add_argument("--train-resnet", default=os.path.join(REPO, "build", "apps", "train_resnet"))
ap.add_argument("--ckpt-tool", default=os.path.join(REPO, "build", "apps", "ckpt_tool"))
ap.add_argument("--gpt-deck", default=os.path.join(REPO, "inputs", "gpt_tiny.toml"))
ap.add_argument("--resnet-deck", default=os.path.join(REPO, "inputs", "resnet_tiny.toml"))
ap.add_argument("--resnet-gmb", type=int, default=8, help="SyncBN global micro-batch DP x micro_batch (default 8)")
ap.add_argument("--rtol", type=float, help="relative limit (default fp32: 1e-5 up to 50 steps, else 1e-4; bf16: 5e-3)")
ap.add_argument("--timeout", type=float, default=300, help="seconds per job before it counts as failed")
ap.add_argument("--plant", metavar="FAULT[:rank=R]",
                help="plant a defect (HPCT_TEST_FAULT, lib/core/test_fault.hpp) in every non-serial run: the verdict "
                     "must then be FAILED, naming the layouts that detect it")
ap.add_argument("--sensitivity", action="store_true",
                help="the sensitivity check: every planted defect on a reduced world-2 matrix (one layout per defect "
                     "that exercises it) must be DETECTED, and the same layouts unplanted VALID (the ctest "
                     "validation_sensitivity)")
ap.add_argument("--planted-matrix", action="store_true",
                help="with --sensitivity: every planted defect on every layout of the quick matrix (world 4 unless "
                     "--world), the full defect x layout table; each defect must be DETECTED by at least one layout")
ap.add_argument("--resnet-set", action="append", default=[], metavar="KEY=VALUE",
                help="an extra --set for every train_resnet run, serial included")
ap.add_argument("--loss-only", action="store_true",
                help="compare the loss only (default: every step's loss and gradient norm)")
args = ap.parse_args()
# The judging rule (module docstring; docs/invariants.md, "How the campaign judges"): validation/layout_rules.py.
# the names lib/core/test_fault.hpp knows: a misspelt one would make every run exit non-zero, which reads as detected
FAULT_NAMES = ("dp_bucket_twice", "dp_bucket_dropped", "tp_grad_scale", "syncbn_naive", "pp_loss_twice",
               "zero_shard_offset")
if args.plant and args.plant.split(":")[0] not in FAULT_NAMES:
    ap.error(f"--plant {args.plant}: unknown fault (one of {', '.join(FAULT_NAMES)}, optionally with :rank=R)")
if args.sensitivity and args.plant:
    ap.error("--sensitivity plants every defect itself; --plant is for the full campaign")
if args.planted_matrix and not args.sensitivity:
    ap.error("--planted-matrix is a form of --sensitivity: pass both")
if args.planted_matrix:
    args.quick = True  # the quick matrix's layouts and steps
worlds = args.world or ([4] if args.planted_matrix else [2] if args.sensitivity else [4] if args.quick else [4, 8])
N = args.steps or (10 if args.quick or args.sensitivity else 20)
BF16_RTOL = 5e-3  # docs/precision.md: every bf16 layout within 0.5% of the bf16 serial run
RTOL = args.rtol if args.rtol is not None else (BF16_RTOL if args.precision == "bf16" else (1e-5 if N <= 50 else 1e-4))
PRECISION_SETS = [f"train.precision={args.precision}"]
K = max(1, N // 2)  # restart and anchor: steps before the checkpoint
if N < K + ANCHOR_STEPS or K < ANCHOR_STEPS:
    ap.error(f"--steps {N}: the anchored windows need N >= {2 * ANCHOR_STEPS} (steps 1..{ANCHOR_STEPS} and "
             f"N/2+1..N/2+{ANCHOR_STEPS})")
for exe in (args.train_gpt, args.train_resnet, args.ckpt_tool):
    if not os.access(exe, os.X_OK):
        print(f"FAILED: {exe} is not an executable (build the apps, or pass --train-gpt/--train-resnet/--ckpt-tool)")
        sys.exit(1)
out_root, art_dir, stem = output_dirs(args.out, args.report, "equivalence")
json_path = os.path.join(art_dir, stem + ".json")
png_path = os.path.join(art_dir, stem + ".png")

with open(args.gpt_deck, "rb") as f:
    gdeck = tomllib.load(f)
with open(args.resnet_deck, "rb") as f:
    rdeck = tomllib.load(f)
G_LAYER, G_HEAD, G_SEQ = gdeck["model"]["n_layer"], gdeck["model"]["n_head"], gdeck["model"]["seq_len"]
G_VOCAB_PAD = -(-gdeck["model"]["vocab_size"] // 128) * 128  # docs/parallelism.md: padded to a multiple of 128
G_GB, G_MB = gdeck["train"]["global_batch"], gdeck["train"]["micro_batch"]
R_GB, R_GMB = rdeck["train"]["global_batch"], args.resnet_gmb
if R_GB % R_GMB:
    ap.error(f"--resnet-gmb {R_GMB} does not divide the ResNet deck's global_batch {R_GB}")
notes = []  # skipped layouts and adjustments, for the report


# ---------------------------------------------------------------------------------------------------- layouts
def gpt_name(L):
    s = f"gpt dp{L['dp']} tp{L['tp']} pp{L['pp']} z{L['zero']}" + (f"g{L['group']}" if L.get("group") else "")
    if L["pp"] > 1:
        s += " " + L["schedule"]
    if L["mb"] != G_MB:
        s += f" mb{L['mb']}"
    if L.get("sp"):
        s += " sp"
    if L.get("recompute"):
        s += f" rc-{L['recompute']}"
    if L.get("vs", 1) > 1:
        s += f" v{L['vs']}"
    return s


def resnet_name(L):
    return f"resnet dp{L['dp']} z{L['zero']}" + (f"g{L['group']}" if L.get("group") else "") + f" mb{L['mb']}" + \
        (f" rc-{L['recompute']}" if L.get("recompute") else "") + \
        (f" {L['memory_format']}" if L.get("memory_format") else "")


def gpt_sets(L):
    s = [f"parallel.tp={L['tp']}", f"parallel.pp={L['pp']}", f"parallel.zero={L['zero']}",
         f"parallel.zero_group={L.get('group', 0)}",
         f"train.micro_batch={L['mb']}"]
    if L["pp"] > 1:
        s.append(f"parallel.schedule={L['schedule']}")
    if L.get("sp"):
        s.append("parallel.sp=true")
    if L.get("recompute"):
        s.append(f"train.recompute={L['recompute']}")
    if L.get("vs", 1) > 1:
        s.append(f"parallel.virtual_stages={L['vs']}")
    return s


def resnet_sets(L):
    return [f"parallel.zero={L['zero']}", f"parallel.zero_group={L.get('group', 0)}", f"train.micro_batch={L['mb']}",
            "model.sync_bn=true"] + ([f"train.recompute={L['recompute']}"] if L.get("recompute") else []) + \
        ([f"model.memory_format={L['memory_format']}"] if L.get("memory_format") else []) + args.resnet_set


def gpt_layouts(W):
    out = []
    for tp in range(1, W + 1):
        if W % tp or G_HEAD % tp or G_VOCAB_PAD % tp:
            continue
        for pp in range(1, W // tp + 1):
            if (W // tp) % pp or pp > G_LAYER:
                continue
            dp = W // (tp * pp)
            mb = G_MB
            while mb > 1 and G_GB % (dp * mb):
                mb -= 1
            if G_GB % (dp * mb):
                notes.append(f"W={W}: gpt (dp {dp}, tp {tp}, pp {pp}) skipped: global_batch {G_GB} % DP {dp} != 0")
                continue
            if mb != G_MB:
                notes.append(f"W={W}: gpt (dp {dp}, tp {tp}, pp {pp}) runs micro_batch {mb} (deck {G_MB}): "
                             f"global_batch {G_GB} % (DP x {G_MB}) != 0")
            for zero in ([0, 1, 2] + ([3] if pp == 1 else []) if dp > 1 else [0]):  # ZeRO-3: no pipelining
                for sched in (["gpipe", "1f1b"] if pp > 1 else [None]):
                    out.append(dict(app="gpt", world=W, dp=dp, tp=tp, pp=pp, zero=zero, schedule=sched, mb=mb))
                    if zero and dp >= 4 and dp % 2 == 0:  # hybrid sharding: two groups of DP / 2, replicated
                        out.append(dict(app="gpt", world=W, dp=dp, tp=tp, pp=pp, zero=zero, schedule=sched, mb=mb,
                                        group=dp // 2))
            # the activation levers (docs/parallelism.md): sequence parallelism where TP > 1 (with the shape's
            # deepest ZeRO stage), and recompute, selective without pipelining and full with it
            sched = "1f1b" if pp > 1 else None
            zmax = (3 if pp == 1 else 2) if dp > 1 else 0
            if tp > 1 and G_SEQ % tp == 0:
                out.append(dict(app="gpt", world=W, dp=dp, tp=tp, pp=pp, zero=zmax, schedule=sched, mb=mb, sp=True))
            out.append(dict(app="gpt", world=W, dp=dp, tp=tp, pp=pp, zero=zmax, schedule=sched, mb=mb,
                            recompute="full" if pp > 1 else "selective"))
            # interleaved 1F1B: two virtual stages per rank where the blocks and the micro-batches split evenly
            if pp > 1 and G_LAYER % (2 * pp) == 0 and (G_GB // (dp * mb)) % pp == 0:
                out.append(dict(app="gpt", world=W, dp=dp, tp=tp, pp=pp, zero=1 if dp > 1 else 0, schedule="1f1b",
                                mb=mb, vs=2))
    return out


def quick_subset(layouts):
    """One variant per (DP, TP, PP) shape: ZeRO-3, 2 and 1 taking turns over the shapes with DP > 1 (a pipeline shape,
    where ZeRO-3 is refused, takes the next), schedules alternating over the pipeline shapes."""
    seen, out, alt, alt_zero = set(), [], 0, 0
    for L in layouts:
        shape = (L["dp"], L["tp"], L["pp"])
        if shape in seen or L.get("sp") or L.get("recompute") or L.get("vs"):
            continue
        want_sched = ["1f1b", "gpipe"][alt % 2] if L["pp"] > 1 else None
        turn = [3, 2, 1][alt_zero % 3:] + [3, 2, 1][:alt_zero % 3] if L["dp"] > 1 else [0]
        for want_zero in turn:
            cand = [M for M in layouts if (M["dp"], M["tp"], M["pp"]) == shape and M["zero"] == want_zero
                    and M["schedule"] == want_sched and not M.get("group")]
            if cand:
                out.append(cand[0])
                seen.add(shape)
                alt += L["pp"] > 1
                alt_zero += L["dp"] > 1
                break
    for z in (2, 3):  # and one layout with hybrid sharding per sharded stage
        hybrid = next((M for M in layouts if M.get("group") and M["zero"] == z), None)
        if hybrid:
            out.append(hybrid)
    # and one of each activation lever: sequence parallelism with pipelining, full recompute under ZeRO-3 or a pipeline;
    # and one interleaved layout
    for pick in (lambda M: M.get("sp") and M["pp"] > 1, lambda M: M.get("recompute") == "full", lambda M: M.get("vs")):
        lever = next((M for M in layouts if pick(M)), None)
        if lever:
            out.append(lever)
    return out


def resnet_layouts(W):
    if R_GMB % W or R_GB % (W * (R_GMB // W)):
        notes.append(f"W={W}: resnet skipped: the SyncBN global micro-batch {R_GMB} is not a multiple of DP {W}")
        return []
    out = [dict(app="resnet", world=W, dp=W, tp=1, pp=1, zero=z, schedule=None, mb=R_GMB // W)
           for z in ([3] if args.quick else [0, 1, 2, 3])]
    if not args.quick and W >= 4 and W % 2 == 0:  # hybrid sharding: two groups of W / 2
        for z in (2, 3):
            out.append(dict(app="resnet", world=W, dp=W, tp=1, pp=1, zero=z, schedule=None, mb=R_GMB // W,
                            group=W // 2))
    # the activation lever: full recompute of the residual blocks, with the deepest ZeRO stage
    out.append(dict(app="resnet", world=W, dp=W, tp=1, pp=1, zero=3, schedule=None, mb=R_GMB // W, recompute="full"))
    # the activation layout: NCHW against the serial run's default (channels-last where the CPU's oneDNN runs it)
    out.append(dict(app="resnet", world=W, dp=W, tp=1, pp=1, zero=1, schedule=None, mb=R_GMB // W,
                    memory_format="nchw"))
    return out


def restart_pairs(W, gl, rl):
    """(A, B) pairs: a TP layout with ZeRO-3 (else ZeRO-2, ZeRO-1) -> the deepest pipeline layout of W; a DP x PP
    layout with ZeRO-1 -> serial; ResNet DP = W ZeRO-3 -> serial (checkpoints are stage-free). --quick: the first one
    only."""
    serial_g = dict(app="gpt", world=1, dp=1, tp=1, pp=1, zero=0, schedule=None, mb=G_MB)
    serial_r = dict(app="resnet", world=1, dp=1, tp=1, pp=1, zero=0, schedule=None, mb=R_GMB)
    pairs = []
    a = next((L for L in gl if L["tp"] > 1 and L["dp"] > 1 and L["zero"] == 3), None) or \
        next((L for L in gl if L["tp"] > 1 and L["dp"] > 1 and L["zero"] == 2), None) or \
        next((L for L in gl if L["tp"] > 1 and L["dp"] > 1 and L["zero"] == 1), None) or \
        next((L for L in gl if L["tp"] > 1), None)
    maxpp = max(L["pp"] for L in gl) if gl else 1
    b = next((L for L in reversed(gl) if L["pp"] == maxpp and L is not a), None)
    if a and b:
        pairs.append((a, b))
    if not args.quick:
        a2 = next((L for L in gl if L["pp"] > 1 and L["dp"] > 1 and L["zero"] == 1 and L["schedule"] == "gpipe"),
                  None) or next((L for L in gl if L["pp"] > 1), None)
        if a2:
            pairs.append((a2, serial_g))
        ra = next((L for L in rl if L["zero"] == 3), None)
        if ra:
            pairs.append((ra, serial_r))
    return pairs


# ---------------------------------------------------------------------------------------------------- running
def run_job(L, out, sets, env=None):
    exe, deck, quiet = ((args.train_gpt, args.gpt_deck, GPT_QUIET) if L["app"] == "gpt" else
                        (args.train_resnet, args.resnet_deck, RESNET_QUIET))
    c = ["mpirun", "-np", str(L["world"]), "--oversubscribe", "--bind-to", "none", exe, deck, "--out", out]
    for s in quiet + PRECISION_SETS + (gpt_sets(L) if L["app"] == "gpt" else resnet_sets(L)) + sets:
        c += ["--set", s]
    t0 = time.time()
    try:
        p = subprocess.run(c, capture_output=True, text=True, errors="replace", timeout=args.timeout, env=env or ENV)
        rc, tail = p.returncode, (p.stdout + p.stderr)[-1500:]
    except subprocess.TimeoutExpired:
        rc, tail = 124, f"timed out after {args.timeout:g} s"
    dt = time.time() - t0
    os.makedirs(out, exist_ok=True)  # an app that failed before creating its run directory still leaves its command
    with open(os.path.join(out, "command.txt"), "a") as f:
        f.write(shlex.join(c) + f"\n# rc {rc} in {dt:.2f} s\n")
    return rc, dt, tail


def losses(out):
    """The run's per-step losses with .gnorm (the gradient norms): layout_rules.read_run."""
    return read_run(out)


def deviation(got, ref):
    """(worst loss deviation over every step, its step, a note where the runs hold other steps)."""
    if sorted(got) != sorted(ref):
        return math.inf, None, f"steps {min(got, default=0)}..{max(got, default=0)} ({len(got)}), not 1..{len(ref)}"
    worst, _, at = rules_deviation(got, ref, gnorm=False)
    return worst, at, ""


def gnorm_deviation(got, ref):
    """The worst relative deviation of every step's global gradient norm (0 with --loss-only, or where a run logs
    none): the norm sees a gradient defect at its first step, where AdamW's per-element scale invariance hides a small
    one from the loss (a shard's gradient scaled by 1 + 1e-3 moves the loss by ~1e-7 in 10 steps)."""
    steps = [s for s in ref.gnorm if s in got.gnorm and ref.gnorm[s] != 0]
    return 0.0 if args.loss_only or not steps else rules_deviation(got, ref, steps)[1]


results = []
controls = {}  # app -> the rounding envelope: worst loss deviation of the serial run at CONTROL_THREADS from the one at 1
gcontrols = {}  # app -> the same for the gradient norm
window_envelopes = {}  # app -> Envelope of the controls over steps 1..ANCHOR_STEPS (the initial window's)


def amplifies(app):
    """Whether the deck amplifies rounding past what RTOL can judge over its whole curve: its envelope, times the
    safety factor, exceeds RTOL (resnet_tiny at 20 steps; gpt_tiny's ~3e-8 does not)."""
    return ENVELOPE_FACTOR * max(controls.get(app, 0.0), gcontrols.get(app, 0.0)) > RTOL


def limit(app):
    """The trajectory limit: RTOL, or ENVELOPE_FACTOR x the deck's rounding envelope, whichever is larger. The controls
    and the layouts draw their deviations from the same amplification of reduction-order noise (recorded layouts sat
    at 0.5x-2.2x the control over two CPUs); 10x one envelope of three controls keeps a correct layout inside on any
    CPU, and the anchored windows, not this bound, carry the check's sensitivity on such a deck."""
    return max(RTOL, ENVELOPE_FACTOR * controls.get(app, 0.0))


def glimit(app):
    return max(RTOL, ENVELOPE_FACTOR * gcontrols.get(app, 0.0))


def anchored(R, init_got, ref, win_got, win_ref, win_note, win_control=None):
    """Fills R's anchored-window figures: steps 1..ANCHOR_STEPS of init_got against the serial ref, and steps
    K+1..K+ANCHOR_STEPS of win_got against win_ref (the anchor: a serial run from the layout's step-K checkpoint, or
    for a restart the uninterrupted layout A). Each window is held to max(RTOL, ENVELOPE_FACTOR x its own rounding
    envelope, measured from the same state): the initial window's from the rounding controls' first steps; the anchor
    window's, where its deviation exceeds RTOL (below it the envelope cannot change the verdict), from
    win_control(): the serial run resumed from the same checkpoint at CONTROL_THREADS threads (an Envelope)."""
    init_steps, win_steps = range(1, ANCHOR_STEPS + 1), range(K + 1, K + ANCHOR_STEPS + 1)
    il, ig, iat = rules_deviation(init_got, ref, init_steps, not args.loss_only)
    wl, wg, wat = rules_deviation(win_got, win_ref, win_steps, not args.loss_only) if win_ref is not None \
        else (math.inf, math.inf, None)
    ienv = window_envelopes[R["app"]]
    wenv = Envelope()
    init_fails = il > ienv.loss_limit(RTOL) or ig > ienv.gnorm_limit(RTOL)
    if max(wl, wg) > RTOL and not math.isinf(max(wl, wg)) and win_control is not None and not init_fails:
        wenv = win_control()  # (where the initial window already fails, the verdict cannot change: not measured)
    R["anchor_loss"], R["anchor_gnorm"] = max(il, wl), max(ig, wg)
    R["anchor_worst"] = max(il, ig, wl, wg)
    R["anchor_step"] = iat if max(il, ig) >= max(wl, wg) else wat
    R["anchor_ref"] = win_note
    R["window_init"] = dict(loss=il, gnorm=ig, step=iat, envelope_loss=ienv.loss, envelope_gnorm=ienv.gnorm,
                            loss_limit=ienv.loss_limit(RTOL), gnorm_limit=ienv.gnorm_limit(RTOL))
    R["window_anchor"] = dict(loss=wl, gnorm=wg, step=wat, envelope_loss=wenv.loss, envelope_gnorm=wenv.gnorm,
                              loss_limit=wenv.loss_limit(RTOL), gnorm_limit=wenv.gnorm_limit(RTOL),
                              controls=wenv.controls)
    R["anchor_limit"] = max(ienv.loss_limit(RTOL), ienv.gnorm_limit(RTOL), wenv.loss_limit(RTOL),
                            wenv.gnorm_limit(RTOL))


def window_failures(R):
    """The anchored windows' verdict lines for R (empty: both windows within their limits)."""
    bad = []
    for what, W in (("initial window", R["window_init"]), (f"anchored window (from step {K})", R["window_anchor"])):
        if W["loss"] > W["loss_limit"] or W["gnorm"] > W["gnorm_limit"]:
            env = (f"; its rounding envelope from the same state {fmt(W['envelope_loss'])} / "
                   f"{fmt(W['envelope_gnorm'])}" if max(W["envelope_loss"], W["envelope_gnorm"]) > 0 else "")
            bad.append(f"{what} deviates at step {W['step']}: loss {fmt(W['loss'])} (limit {fmt(W['loss_limit'])}), "
                       f"gradient norm {fmt(W['gnorm'])} (limit {fmt(W['gnorm_limit'])}){env}")
    return bad


def record(R):
    R["limit"] = limit(R["app"])  # controls are measured before any layout runs
    R["gnorm_limit"] = glimit(R["app"])
    bad = []
    bad += window_failures(R)
    if R["worst"] > R["limit"]:
        bad.append(f"trajectory deviates {fmt(R['worst'])} > {fmt(R['limit'])}")
    if R.get("gnorm_worst", 0.0) > R["gnorm_limit"]:
        bad.append(f"gradient norm deviates {fmt(R['gnorm_worst'])} > {fmt(R['gnorm_limit'])}")
    if bad and R["rc"] == 0:
        R["note"] = "; ".join(([R["note"]] if R["note"] else []) + bad)
    R["verdict"] = "VALID" if (R["rc"] == 0 and not bad) else "FAILED"
    if R["kind"] == "planted":  # the sensitivity check: a planted defect must fail the check
        # the reduced plan runs each defect only where it must show; the matrix also where it cannot
        R["verdict"] = "DETECTED" if R["verdict"] == "FAILED" else "not detected" if args.planted_matrix else "MISSED"
        R["note"] = f"planted {R['fault']}" + ("; " + R["note"] if R["note"] else "")
    results.append(R)
    w = "inf" if math.isinf(R["worst"]) else f"{R['worst']:.3g}"
    print(f"  {R['name']:<44} {R['steps']:>3} steps  worst {w:>9}  anchored {fmt(R['anchor_worst']):>8}  "
          f"{R['time_s']:6.2f} s  {R['verdict']}" + (f"  ({R['note']})" if R["note"] else ""), flush=True)


def serial_layout(app):
    return dict(app=app, world=1, dp=1, tp=1, pp=1, zero=0, schedule=None, mb=G_MB if app == "gpt" else R_GMB)


def reference(app):
    L = serial_layout(app)
    out = os.path.join(out_root, f"{app}_serial")
    rc, dt, tail = run_job(L, out, [f"train.steps={N}", f"optim.decay_steps={N}", "checkpoint.at_end=false"])
    ref = losses(out)
    name = f"{app} serial (reference)" + ("" if app == "gpt" else f" mb{R_GMB}")
    if rc != 0 or sorted(ref) != list(range(1, N + 1)):
        print(tail)
        print(f"FAILED: the serial {app} reference run exited with {rc} / holds steps {sorted(ref)}")
        sys.exit(1)
    results.append(dict(kind="reference", app=app, world=1, name=name, layout=L, steps=N, worst=0.0, worst_step=None,
                        time_s=dt, rc=0, verdict="REFERENCE", note="", losses=ref))
    print(f"  {name:<44} {N:>3} steps  {'-':>15}  {dt:6.2f} s", flush=True)
    return ref


def rounding_controls(app, ref):
    """The serial run again at each of CONTROL_THREADS OpenMP threads: the same layout, only the kernels' reduction
    order changes. The worst of their deviations is the deck's rounding envelope over N steps (loss and gradient norm
    apart); it sets the trajectory limit and says whether the deck amplifies rounding."""
    controls[app] = gcontrols[app] = 0.0
    runs = {}
    for t in CONTROL_THREADS:
        L = serial_layout(app)
        out = os.path.join(out_root, f"{app}_serial_omp{t}")
        rc, dt, tail = run_job(L, out, [f"train.steps={N}", f"optim.decay_steps={N}", "checkpoint.at_end=false"],
                               env=dict(ENV, OMP_NUM_THREADS=str(t)))
        got = losses(out)
        worst, at, note = deviation(got, ref)
        gw = gnorm_deviation(got, ref)
        if rc != 0 or math.isinf(worst):
            print(tail)
            print(f"FAILED: the {app} rounding control at {t} threads exited with {rc} / holds steps {sorted(got)}")
            sys.exit(1)
        controls[app], gcontrols[app] = max(controls[app], worst), max(gcontrols[app], gw)
        runs[t] = got
        name = f"{app} serial, OMP_NUM_THREADS={t} (rounding control)"
        results.append(dict(kind="control", app=app, world=1, name=name, layout=L, steps=N, worst=worst,
                            worst_step=at, time_s=dt, rc=rc, verdict="CONTROL", note=note, losses=got, gnorm_worst=gw))
        print(f"  {name:<44} {N:>3} steps  worst {fmt(worst):>9}  {dt:6.2f} s  (not a verdict; gradient norm "
              f"{fmt(gw)})", flush=True)
    window_envelopes[app] = Envelope.measure(runs, ref, range(1, ANCHOR_STEPS + 1), not args.loss_only)
    print(f"  {app} initial window (steps 1..{ANCHOR_STEPS}): {window_envelopes[app].describe()} -> limits "
          f"{fmt(window_envelopes[app].loss_limit(RTOL))} / {fmt(window_envelopes[app].gnorm_limit(RTOL))}", flush=True)
    print(f"  {app} rounding envelope: loss {fmt(controls[app])}, gradient norm {fmt(gcontrols[app])} -> "
          + (f"amplifies: anchored windows within {RTOL:g}, trajectory within {fmt(limit(app))} (loss) / "
             f"{fmt(glimit(app))} (gradient norm)" if amplifies(app) else
             f"strict: the whole curve within {RTOL:g}"), flush=True)


def fmt(x):
    return "inf" if math.isinf(x) else f"{x:.2e}"


def planted_env(fault):
    return dict(ENV, HPCT_TEST_FAULT=fault) if fault else None


def anchor_run(app, run_dir, out):
    """The anchor: the serial run resumed from run_dir's step-K checkpoint for ANCHOR_STEPS steps (unplanted, like
    every reference). Returns (rc, seconds, losses, note)."""
    step_dir = os.path.join(run_dir, "checkpoints", f"step_{K:08d}")
    rc, dt, tail = run_job(serial_layout(app), out, [f"train.steps={K + ANCHOR_STEPS}", f"optim.decay_steps={N}",
                                                     "checkpoint.at_end=false", f"checkpoint.resume={step_dir}"])
    note = "" if rc == 0 else f"anchor (serial from {os.path.basename(step_dir)}) exit code {rc}: " + \
        (tail.strip().splitlines() or [""])[-1][:200]
    return rc, dt, losses(out), note


def window_control(app, step_dir, out, ref1=None):
    """The anchored window's rounding envelope from the state of step_dir: the serial run resumed from it for
    ANCHOR_STEPS steps at each of CONTROL_THREADS OpenMP threads, against the same at 1 thread (ref1, the anchor run,
    when the caller has it). Unplanted, like every reference. Returns an Envelope (its controls empty where a control
    run failed: the window is then held to RTOL)."""
    sets = [f"train.steps={K + ANCHOR_STEPS}", f"optim.decay_steps={N}", "checkpoint.at_end=false",
            f"checkpoint.resume={step_dir}"]
    runs = {}
    for t in ((1,) if ref1 is None else ()) + CONTROL_THREADS:
        rc, _, _ = run_job(serial_layout(app), f"{out}_omp{t}", sets, env=dict(ENV, OMP_NUM_THREADS=str(t)))
        if rc != 0:
            print(f"  (window control at {t} threads from {os.path.basename(step_dir)} exited with {rc}: not counted)")
            return Envelope()
        runs[t] = losses(f"{out}_omp{t}")
    ref1 = runs.pop(1) if ref1 is None else ref1
    try:
        return Envelope.measure(runs, ref1, range(K + 1, K + ANCHOR_STEPS + 1), not args.loss_only)
    except RuntimeError as e:
        print(f"  (window control from {os.path.basename(step_dir)}: {e}: not counted)")
        return Envelope()


def layout_run(L, ref, fault=None):
    name = gpt_name(L) if L["app"] == "gpt" else resnet_name(L)
    out = os.path.join(out_root, f"W{L['world']}", name.replace(" ", "_") +
                       (f"_planted_{fault.replace(':', '_').replace('=', '')}" if fault else ""))
    rc, dt, tail = run_job(L, out, [f"train.steps={N}", f"optim.decay_steps={N}", f"checkpoint.every={K}",
                                    "checkpoint.keep=0", "checkpoint.at_end=false"], env=planted_env(fault))
    got = losses(out)
    worst, at, note = deviation(got, ref)
    if rc != 0:
        note = f"exit code {rc}: " + tail.strip().splitlines()[-1][:200] if tail.strip() else f"exit code {rc}"
    anc = None
    if rc == 0:
        arc, adt, anc, anote = anchor_run(L["app"], out, out + "_anchor")
        dt += adt
        if arc != 0:
            rc, note, anc = arc, anote, None
    R = dict(kind="planted" if fault and args.sensitivity else "layout", app=L["app"], world=L["world"], name=name,
             layout=L, steps=N, worst=worst, worst_step=at, time_s=dt, rc=rc, note=note, losses=got, fault=fault,
             gnorm_worst=gnorm_deviation(got, ref))
    step_dir = os.path.join(out, "checkpoints", f"step_{K:08d}")
    anchored(R, got, ref, got, anc, f"serial from this layout's step-{K} checkpoint",
             lambda: window_control(L["app"], step_dir, out + "_window", anc))
    record(R)


def restart_run(A, B, ref, W):
    na = gpt_name(A) if A["app"] == "gpt" else resnet_name(A)
    nb = gpt_name(B) if B["app"] == "gpt" else resnet_name(B)
    if B["world"] == 1:
        nb = nb.split(" ", 1)[0] + " serial" + (f" mb{B['mb']}" if B["app"] == "resnet" else "")
    name = f"{na} @{K} -> {nb.split(' ', 1)[1]}"
    out = os.path.join(out_root, f"W{W}", "restart_" + name.replace(" -> ", "_to_").replace(" @", "_at").replace(" ", "_"))
    rc, dt, tail = run_job(A, out, [f"train.steps={K}", f"optim.decay_steps={N}", "checkpoint.at_end=true"],
                           env=planted_env(args.plant))
    step_dir = os.path.join(out, "checkpoints", f"step_{K:08d}")
    note = ""
    if rc == 0:
        t0 = time.time()
        v = subprocess.run([args.ckpt_tool, "verify", step_dir], capture_output=True, text=True, errors="replace",
                           env=ENV, timeout=120)
        dt += time.time() - t0
        if v.returncode != 0 or "VALID" not in v.stdout:
            rc, note = v.returncode or 1, f"ckpt_tool verify {os.path.basename(step_dir)}: " + \
                (v.stdout + v.stderr).strip()[-200:]
    else:
        note = f"leg A exit code {rc}"
    if rc == 0:
        rc, dt2, tail = run_job(B, out, [f"train.steps={N}", f"optim.decay_steps={N}", "checkpoint.at_end=false",
                                         f"checkpoint.resume={step_dir}"], env=planted_env(args.plant))
        dt += dt2
        if rc != 0:
            note = f"leg B exit code {rc}: " + (tail.strip().splitlines() or [""])[-1][:200]
    got = losses(out)
    worst, at, n2 = deviation(got, ref)
    # the restart's anchored window: leg B after the resume against layout A uninterrupted (its layout run, or a run of
    # K + ANCHOR_STEPS steps at A where the matrix did not run A): what the checkpoint dropped shows there
    unbroken = next((R["losses"] for R in results if R["kind"] in ("layout", "planted") and R["layout"] == A
                     and R.get("fault") == args.plant and R["rc"] == 0), None)
    if unbroken is None and rc == 0:
        urc, udt, _ = run_job(A, out + "_uninterrupted", [f"train.steps={K + ANCHOR_STEPS}", f"optim.decay_steps={N}",
                                                          "checkpoint.at_end=false"], env=planted_env(args.plant))
        dt += udt
        unbroken = losses(out + "_uninterrupted") if urc == 0 else None
    R = dict(kind="restart", app=A["app"], world=W, name=name, layout=A, layout_b=B, restart_step=K, steps=N,
             worst=worst, worst_step=at, time_s=dt, rc=rc, note=note or n2, losses=got,
             gnorm_worst=gnorm_deviation(got, ref))
    anchored(R, got, ref, got, unbroken, f"layout A ({na}) uninterrupted",
             lambda: window_control(A["app"], step_dir, out + "_window"))
    record(R)


# ---------------------------------------------------------------------------------------------------- campaign
t_start = time.time()
command = "validation/equivalence.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
print(f"equivalence campaign: {args.precision}, worlds {worlds}, {N} steps, limit {RTOL:g} relative "
      "(docs/invariants.md, invariant 1)", flush=True)
print("serial references (world 1):", flush=True)
refs = {"gpt": reference("gpt"), "resnet": reference("resnet")}
for app in refs:
    rounding_controls(app, refs[app])


def planted_matrix_plan(W):
    """Every defect of sensitivity_plan on every layout of the quick matrix at world W."""
    layouts = quick_subset(gpt_layouts(W)) + resnet_layouts(W)
    return [(fault, layouts) for fault, _ in sensitivity_plan(W)]


def sensitivity_plan(W):
    """(fault, layouts that exercise it): the reduced matrix of the sensitivity check, world W (2 by default: the
    smallest world that has every kind of parallelism, so the check fits the CI budget). The DP and TP faults sit on
    rank 0 only (one rank's bug), the others on every rank."""
    mb = G_MB
    while mb > 1 and G_GB % (W * mb):
        mb -= 1
    g = dict(app="gpt", world=W, tp=1, pp=1, zero=0, schedule=None, mb=G_MB)
    dp = dict(g, dp=W, mb=mb)
    return [("dp_bucket_twice:rank=0", [dp]),
            ("dp_bucket_dropped:rank=0", [dp]),
            ("tp_grad_scale:rank=0", [dict(g, dp=1, tp=W)]),
            ("pp_loss_twice", [dict(g, dp=1, pp=W, schedule="1f1b")]),
            ("zero_shard_offset", [dict(dp, zero=1), dict(dp, zero=3)]),
            ("syncbn_naive", [dict(app="resnet", world=W, dp=W, tp=1, pp=1, zero=0, schedule=None, mb=R_GMB // W)])]


plan = {}
sens = []  # (fault, [planted results])
if args.sensitivity:
    W = worlds[0]
    splan = planted_matrix_plan(W) if args.planted_matrix else sensitivity_plan(W)
    unplanted = []
    for _, ls in splan:
        unplanted += [L for L in ls if L not in unplanted]
    print(f"world {W}: {len(unplanted)} layouts unplanted, then {len(splan)} planted defects", flush=True)
    for L in unplanted:
        layout_run(L, refs[L["app"]])
    for fault, ls in splan:
        n0 = len(results)
        for L in ls:
            layout_run(L, refs[L["app"]], fault=fault)
        sens.append((fault, results[n0:]))
else:
    for W in worlds:
        gl = gpt_layouts(W)
        rl = resnet_layouts(W)
        plan[W] = (quick_subset(gl) if args.quick else gl, rl, restart_pairs(W, gl, rl))
for W in plan:
    gl, rl, pairs = plan[W]
    print(f"world {W}: {len(gl)} gpt + {len(rl)} resnet layouts, {len(pairs)} restarts"
          + (f", every non-serial run with HPCT_TEST_FAULT={args.plant}" if args.plant else ""), flush=True)
    for L in gl + rl:
        layout_run(L, refs[L["app"]], fault=args.plant)
    for A, B in pairs:
        restart_run(A, B, refs[A["app"]], W)
total_s = time.time() - t_start

checked = [R for R in results if R["kind"] in ("layout", "restart")]
failed = [R for R in checked if R["verdict"] != "VALID"]
worst_all = max(checked, key=lambda R: R["worst"]) if checked else None


if failed:
    wf = max(failed, key=lambda R: R["worst"])
    final = f"FAILED: {len(failed)} of {len(checked)} layouts (worst: {wf['name']}, {fmt(wf['worst'])}" + \
        (f"; {wf['note']}" if wf["note"] else "") + ")" + \
        (f"; planted {args.plant}, detected by: " + ", ".join(R["name"] for R in failed) if args.plant else "")
else:
    final = "VALID" + (f" (planted {args.plant}, detected by no layout)" if args.plant else "")
sens_lines = []
if args.sensitivity:
    missed = []
    for fault, rs in sens:
        det = [R for R in rs if R["verdict"] == "DETECTED"]
        if not det:
            missed.append(fault)

        def figs(R):
            return (f"anchored {fmt(R['anchor_worst'])} (limit {fmt(R['anchor_limit'])}; loss {fmt(R['anchor_loss'])}, gradient norm "
                    f"{fmt(R['anchor_gnorm'])}), trajectory loss {fmt(R['worst'])} (limit {fmt(R['limit'])}), "
                    f"gradient norm {fmt(R['gnorm_worst'])} (limit {fmt(R['gnorm_limit'])})"
                    + (f", exit {R['rc']}" if R["rc"] else ""))
        what = ("detected by " if det else "MISSED: ") + "; ".join(f"{R['name']}: {figs(R)}" for R in (det or rs))
        sens_lines.append(f"  {fault:<26} {what}")
    if failed or missed:
        final = "FAILED: sensitivity: " + "; ".join(
            ([f"unplanted layouts FAILED: {', '.join(R['name'] for R in failed)}"] if failed else []) +
            ([f"planted defects MISSED: {', '.join(missed)}"] if missed else []))
    else:
        final = (f"VALID: sensitivity: {len(sens)} of {len(sens)} planted defects detected, {len(checked)} unplanted "
                 "layouts VALID")

# ---------------------------------------------------------------------------------------------------- outputs
machine = machine_info()


def jclean(R):
    R = dict(R)
    R["worst"] = None if math.isinf(R["worst"]) else R["worst"]
    R["losses"] = {str(k): v for k, v in sorted(R["losses"].items())}
    return R


with open(json_path, "w") as f:
    json.dump(dict(command=command, precision=args.precision, worlds=worlds, steps=N, rtol=RTOL, restart_step=K,
                   anchor_steps=ANCHOR_STEPS, envelope_factor=ENVELOPE_FACTOR, control_threads=CONTROL_THREADS,
                   envelope={app: dict(loss=controls[app], grad_norm=gcontrols[app], amplifies=amplifies(app),
                                       limit=limit(app), grad_norm_limit=glimit(app),
                                       initial_window=dict(loss=window_envelopes[app].loss,
                                                           grad_norm=window_envelopes[app].gnorm))
                             for app in controls},
                   resnet_global_micro_batch=R_GMB, machine=machine, total_s=total_s, notes=notes, verdict=final,
                   results=[jclean(R) for R in results]), f, indent=1)

plot_note = ""
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    apps = ["gpt", "resnet"]
    fig, ax = plt.subplots(2, 2, figsize=(13, 8), sharex="col", gridspec_kw=dict(height_ratios=[3, 2]))
    for j, app in enumerate(apps):
        rs = [R for R in results if R["app"] == app]
        for R in rs:
            st = sorted(R["losses"])
            ref = R["losses"] if R["kind"] == "reference" else refs[app]
            style = dict(lw=3, color="black", zorder=1) if R["kind"] == "reference" else \
                dict(lw=0.8, alpha=0.7, ls="--" if R["kind"] == "restart" else "-")
            if R["kind"] != "control":
                ax[0, j].plot(st, [R["losses"][s] for s in st], label=R["name"] if len(rs) <= 14 else None, **style)
            if R["kind"] != "reference":
                dev = [max(abs(R["losses"][s] - ref[s]) / abs(ref[s]), 1e-10) for s in st if s in ref]
                ax[1, j].semilogy([s for s in st if s in ref], dev, **(
                    dict(lw=2.5, color="gray", ls=":", zorder=5,
                         label="serial at 2-4 threads (rounding controls)" if R["name"].find("=2 ") > 0 else None)
                    if R["kind"] == "control" else dict(lw=0.8, alpha=0.7, ls="--" if R["kind"] == "restart" else "-")))
        ax[0, j].set_title(f"train_{app}: {sum(R['kind'] in ('layout', 'restart') for R in rs)} layouts + serial "
                           f"(black), worlds {worlds}")
        ax[0, j].set_ylabel("training loss")
        if len(rs) <= 14:
            ax[0, j].legend(fontsize=6, ncol=2)
        ax[1, j].axhline(RTOL, color="red", lw=1, label=f"limit {RTOL:g}")
        ax[1, j].legend(fontsize=7, loc="upper left")
        ax[1, j].set_ylabel("|loss - serial| / serial (1e-10 floor)")
        ax[1, j].set_xlabel("optimizer step (dashed: restart across layouts)")
    fig.suptitle(f"Layout equivalence, {args.precision}, {N} steps: " + (final if final == "VALID" else
                 f"FAILED: {len(failed)} of {len(checked)}"))
    fig.tight_layout()
    fig.savefig(png_path, dpi=110)
except ImportError:
    plot_note = "no plot: matplotlib is not installed for /usr/bin/python3 (apt-get install python3-matplotlib)"
    png_path = None
    print(plot_note)


def table(W):
    rows = [R for R in results if R["world"] == W]
    lines = ["| layout | app | world | steps | anchored windows: worst (step) [/ limit where above RTOL] | trajectory: loss (step) / limit | "
             "gradient norm / limit | time (s) | verdict |", "|---|---|---:|---:|---|---|---|---:|---|"]
    for R in rows:
        dev = "—" if R["kind"] == "reference" else fmt(R["worst"]) + (f" ({R['worst_step']})" if R["worst_step"] else "")
        v = R["verdict"] + (f": {R['note']}" if R["note"] else "")
        lim = f" / {fmt(R['limit'])}" if "limit" in R else ""
        anc = fmt(R["anchor_worst"]) + (f" ({R['anchor_step']})" if R.get("anchor_step") else "") + \
            (f" / {fmt(R['anchor_limit'])}" if R["anchor_limit"] > RTOL else "") if "anchor_worst" in R else "—"
        gn = (fmt(R["gnorm_worst"]) if "gnorm_worst" in R else "—") + \
            (f" / {fmt(R['gnorm_limit'])}" if "gnorm_limit" in R else "")
        lines.append(f"| {R['name']} | train_{R['app']} | {R['world']} | {R['steps']} | {anc} | {dev}{lim} | {gn} | "
                     f"{R['time_s']:.2f} | {v} |")
    return "\n".join(lines)


print()
for W in [1] + worlds:
    print(f"world {W}:" if W > 1 else "serial references:")
    print(table(W))
if args.report:
    rule = (f"to floating-point reduction order, {RTOL:g} relative (fp32, up to 50 steps)" if args.precision == "fp32"
            else f"within {RTOL:g} relative, the bound docs/precision.md states for bf16 layouts against the bf16 "
            "serial run (every run here, serial references included, with `train.precision=bf16`)")
    md = [f"# Layout equivalence on CPU ({args.precision}): every (DP, TP, PP) layout vs the serial run", "",
          "docs/invariants.md, invariant 1 (layout independence): for one deck every layout reproduces the serial loss curve "
          f"{rule}. How a layout is judged (loss and global gradient norm of every step, relative deviations; "
          "docs/invariants.md, \"How the campaign judges\"):", "",
          f"- **anchored windows** (every deck): the steps that start from a state the reference shares: steps "
          f"1..{ANCHOR_STEPS} from the common initialisation against the serial run, and steps "
          f"{K + 1}..{K + ANCHOR_STEPS} against a serial run resumed from the layout's own step-{K} checkpoint (the "
          "anchor; for a restart, against layout A uninterrupted). Each within max("
          f"{RTOL:g}, {ENVELOPE_FACTOR} x the window's own rounding envelope): the serial run at "
          f"{', '.join(map(str, CONTROL_THREADS))} threads against 1 thread over the same steps from the same state "
          f"(measured for an anchored window only where it exceeds {RTOL:g}). Two steps from one state mostly leave "
          "reduction-order differences no room to grow, and a different mathematics of a step shows there at its full "
          "size; where a state amplifies rounding within two steps on this CPU, its control shows it.",
          f"- **trajectory**: the whole curve against the serial run within max({RTOL:g}, {ENVELOPE_FACTOR} x the "
          f"deck's rounding envelope), the envelope being the worst deviation of the serial run repeated at "
          f"{', '.join(map(str, CONTROL_THREADS))} OpenMP threads (only the kernels' reduction order changes). A deck "
          f"whose envelope stays below {RTOL:g} / {ENVELOPE_FACTOR} is held to {RTOL:g} over its whole curve "
          "(**strict**); a deck that amplifies rounding is judged by its anchored windows, its trajectory bounded by "
          "its own measured noise (**amplifying**); the table below says which each deck is here.", "",
          "`validation/equivalence.py` drives `train_gpt` "
          "(`inputs/gpt_tiny.toml`), `train_resnet` (`inputs/resnet_tiny.toml`, SyncBN) and `ckpt_tool` through their "
          "contracts only (command line, `--set`, `metrics.jsonl`, checkpoints, exit codes) and compares every step's "
          "loss with the serial (world 1) run of the same deck.", "",
          "## Machine", ""]
    md += [f"- {k}: {v}" for k, v in machine.items()]
    md += [f"- every job: `mpirun -np W --oversubscribe --bind-to none`, OMP_NUM_THREADS=1 per rank, one job at a "
           f"time; W ranks share {machine.get('CPU(s)', '?')} cores (oversubscribed), so the times are not scaling "
           "figures", "",
           "## Command", "", "```sh", command, "```", "",
           f"{len(checked)} layouts and restarts checked in {total_s:.0f} s ({N} steps each; "
           f"`--set sample.tokens=0 --set train.eval_every=0`). ResNet: SyncBN at a constant global micro-batch "
           f"DP x micro_batch = {R_GMB} (serial micro_batch {R_GMB}). Restarts: {K} steps at layout A "
           f"(`optim.decay_steps={N}`, checkpoint at the end), `ckpt_tool verify`, resume at layout B in the same "
           f"directory (`checkpoint.resume=<dir>/checkpoints/step_{K:08d}`) to step {N}; all {N} losses vs serial.", ""]
    if notes:
        md += ["Adjustments and skipped layouts:", ""] + [f"- {n}" for n in notes] + [""]
    md += ["## Serial references, rounding controls and the criterion per deck", "",
           f"The controls repeat each serial run at OMP_NUM_THREADS = {', '.join(map(str, CONTROL_THREADS))}: the same "
           "layout, only the kernels' reduction order changes. Their worst deviation is the deck's rounding envelope "
           "over these steps (not a verdict).", "", table(1), "",
           "| deck | envelope: loss | envelope: gradient norm | initial window envelope: loss / gradient norm | "
           "criterion | trajectory limit: loss / gradient norm | why |", "|---|---:|---:|---|---|---|---|"]
    for app in controls:
        amp = amplifies(app)
        why = (f"reduction-order noise grows past {RTOL:g} / {ENVELOPE_FACTOR} within {N} steps with no change of "
               "layout: no fixed bound on the whole curve separates layouts from rounding on every CPU, so the "
               "anchored windows judge the mathematics and the curve is held to its own noise" if amp else
               "the serial run is bitwise the same at every thread count: invariant 1's bound applies as stated"
               if max(controls[app], gcontrols[app]) == 0 else
               f"rounding stays {RTOL / max(controls[app], gcontrols[app]):.0f}x below {RTOL:g} over the whole "
               "curve: invariant 1's bound applies as stated")
        md.append(f"| {app} | {fmt(controls[app])} | {fmt(gcontrols[app])} | "
                  f"{fmt(window_envelopes[app].loss)} / {fmt(window_envelopes[app].gnorm)} | "
                  f"{'amplifying: anchored windows within max(' + format(RTOL, 'g') + ', 10 x their own envelope)' if amp else 'strict'} | "
                  f"{fmt(limit(app))} / {fmt(glimit(app))} | {why} |")
    md.append("")
    for W in worlds:
        nw = [R for R in checked if R["world"] == W]
        wr = max(nw, key=lambda R: R["worst"]) if nw else None
        md += [f"## World {W}", "", f"{len(nw)} checks, {sum(R['verdict'] == 'VALID' for R in nw)} VALID"
               + (f"; worst {fmt(wr['worst'])} ({wr['name']})" if wr else "") + ".", "", table(W), ""]
    for app in controls:
        ra = [R for R in checked if R["app"] == app]
        if amplifies(app) and ra:
            wa = max(ra, key=lambda R: R["anchor_worst"])
            wt = max(ra, key=lambda R: R["worst"])
            md += [f"**{app}: amplifying deck.** The serial run at other thread counts deviates up to "
                   f"{fmt(controls[app])} (loss) and {fmt(gcontrols[app])} (gradient norm) from the one at 1 thread "
                   f"over {N} steps with no change of layout. Its {len(ra)} checks' anchored windows reach at worst "
                   f"{fmt(wa['anchor_worst'])} ({wa['name']}; limit {fmt(wa['anchor_limit'])}); the trajectories reach "
                   f"{fmt(wt['worst'])} ({wt['name']}), {wt['worst'] / max(controls[app], 1e-30):.2f}x the envelope "
                   f"(limit {ENVELOPE_FACTOR}x).", ""]
    if sens_lines:
        md += ["## Sensitivity: planted defects", "",
               "Each defect planted through `HPCT_TEST_FAULT` (lib/core/test_fault.hpp) in the non-serial run of the "
               "layouts that exercise it; the serial references are unplanted. A defect is detected when that run "
               "fails the check above (deviation over the limit, or a failed exit).", "", "```"] + sens_lines + \
            ["```", ""]
        if args.planted_matrix:  # the defect x layout table: which layouts see which defect
            names = list(dict.fromkeys(R["name"] for _, rs in sens for R in rs))
            md += ["Every defect on every layout (DETECTED: that layout's verdict is FAILED with the defect planted; "
                   "the figure is its worst anchored-window deviation, limit " + f"{RTOL:g} unless the window's "
                   "own rounding envelope allows more; a defect a layout does "
                   "not exercise leaves it VALID):", "",
                   "| layout | " + " | ".join(f.split(":")[0] for f, _ in sens) + " |",
                   "|---|" + "---|" * len(sens)]
            for n in names:
                cells = []
                for _, rs in sens:
                    R = next((R for R in rs if R["name"] == n), None)
                    cells.append("—" if R is None else ("**DETECTED** " if R["verdict"] == "DETECTED" else "VALID ")
                                 + fmt(R["anchor_worst"]))
                md.append(f"| {n} | " + " | ".join(cells) + " |")
            md.append("")
    md += ["## Loss curves", ""]
    md += [f"![loss curves]({os.path.basename(png_path)})", "",
           "Top: every layout's loss curve (thin) drawn over the serial one (thick black). Bottom: per-step relative "
           "deviation from serial (floored at 1e-10 for the log scale; exact zeros sit on the floor; metrics.jsonl prints "
           "%.9g, so ~1e-8 is one unit of its last digit at these loss values), red line = "
           "the limit, dotted gray = the rounding controls (serial at 2, 3, 4 threads)."] if png_path else [plot_note]
    md += ["", f"All results with their per-step losses: `{os.path.basename(json_path)}`.", "",
           f"Worst over all checks: {fmt(worst_all['worst'])} ({worst_all['name']})." if worst_all else "", "", final]
    with open(args.report, "w") as f:
        f.write("\n".join(md) + "\n")
    print(f"report: {args.report}")
print(f"json: {json_path}" + (f", plot: {png_path}" if png_path else ""))
if sens_lines:
    print(f"sensitivity (planted defects, world {worlds[0]}, {N} steps):")
    print("\n".join(sens_lines))
print(f"{len(checked)} checks in {total_s:.0f} s; worst {fmt(worst_all['worst']) if worst_all else '-'}"
      + (f" ({worst_all['name']})" if worst_all else ""))
print(final)
sys.exit(0 if final.startswith("VALID") else 1)  # "VALID" or, for --sensitivity, "VALID: sensitivity: ..."
