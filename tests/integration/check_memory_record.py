#!/usr/bin/python3
"""The memory record of metrics.jsonl (docs/contracts.md) for one app, through its contract only:

  - the first record of a run carries "memory" with params, grads, optimizer, comm, activations, workspace,
    ckpt_staging, peak and rss (bytes); the records between carry none; the last repeats exactly peak (the same value)
    and rss; the log has the record's line once
  - at one rank peak is the sum of the kinds; params, grads, activations and rss are positive; on the CPU rss (the
    peak resident set) holds at least the parameters and gradients, and ckpt_staging the background save's snapshot
  - np 2 with ZeRO-1 and parallel.grad_dtype = bf16 against np 1: the optimizer state is halved (each rank owns half),
    grads grows by the reduced shard (half the gradient slab's elements), comm holds the bf16 reduction buffer (half the
    gradient slab's bytes), params and workspace are unchanged and activations no larger (the same model; the step's
    batch buffers hold this rank's micro-batches only), up to SLACK
  - a resumed run's first record carries the whole record again
  - the plan (`APP DECK --plan NP --json` with the run's settings) holds every kind of every run's record within
    PLAN_TOLERANCE (the plan is built from formulas and unallocated slabs; it should match byte for byte), for the GPT
    also at np 2 with TP 2, at np 4 with DP 2 x PP 2 under ZeRO-1, at np 2 with PP 2 x 2 virtual stages (interleaved,
    full recompute) and at np 4 with ZeRO-2 in hybrid sharding groups of 2 (one step each)
  - ZeRO-3 at np 2, one micro-batch per step: the plan holds its record, its params are well below the whole
    parameters, comm_bytes' reduce-scatter is the parameter bytes and its allgather between one and two times them
    (GPT also with TP 2 and bf16, and in hybrid groups of 2, at np 4)
  - ZeRO-2 at np 2 (small buckets): the plan holds its record too, and (GPT) its grads (the ring of buckets, the
    tensors kept whole and the shard) are well below ZeRO-1's (the full slab and the shard); its comm_bytes: every
    micro-batch's reduce-scatter (m - 1 < reduce-scatter / allgather <= m for m micro-batches per step)
  - sequence parallelism (np 2, TP 2): fewer activation bytes than TP 2 alone, and the plan holds its record
  - train.recompute: selective and full (the ResNet: full) keep fewer activation bytes than none, one after the other,
    and the plan holds their records (GPT also at np 2 with PP 2, none and full)
  - train.memory_limit_gb below the plan stops the run before it allocates, naming the largest kind and what to change

usage: check_memory_record.py gpt|resnet APP DECK WORKDIR"""
import json
import os
import shutil
import subprocess
import sys

app, exe, deck, work = sys.argv[1:5]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
ENV = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
KINDS = ["params", "grads", "optimizer", "comm", "activations", "workspace", "ckpt_staging"]
QUIET = ["sample.tokens=0"] if app == "gpt" else []
# Shares and slabs round: a ZeRO share takes one element more on the first ranks of an uneven bucket, every slab
# tensor is aligned, and SyncBN's gathered statistics grow with the DP size: "half" and "unchanged" hold within 1%
# plus this many bytes (the tiny ResNet has 5,142 parameters, where they show).
SLACK = 4096
PLAN_TOLERANCE = 0.05  # the bound docs/contracts.md gives per kind; the plan is exact today
failures = []


def fail(msg):
    failures.append(msg)
    print("  FAIL:", msg, flush=True)


def run(name, np, sets):
    out = os.path.join(work, name)
    cmd = (["mpirun", "-np", str(np), "--oversubscribe", "--bind-to", "none"] if np > 1 else []) + [exe, deck]
    cmd += ["--out", out]
    for s in QUIET + sets:
        cmd += ["--set", s]
    p = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=600, env=ENV)
    if p.returncode != 0:
        print(p.stdout[-3000:], p.stderr[-3000:])
        print(f"FAILED: {' '.join(cmd)} exited with {p.returncode}")
        sys.exit(1)
    with open(os.path.join(out, "metrics.jsonl")) as f:
        recs = [json.loads(line) for line in f]
    lines = [l for l in p.stdout.splitlines() if "memory record (max over" in l]
    if len(lines) != 1:
        fail(f"{name}: {len(lines)} 'memory record' log lines, should be 1")
    return recs


def plan(np, sets):
    """The memory object of `APP DECK --plan NP --json` with the run's settings."""
    cmd = [exe, deck, "--plan", str(np), "--json"]
    for s in QUIET + sets:
        cmd += ["--set", s]
    p = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=120, env=ENV)
    lines = [l for l in p.stdout.splitlines() if l.startswith('{"plan":')]
    if p.returncode != 0 or len(lines) != 1:
        print(p.stdout[-3000:], p.stderr[-3000:])
        fail(f"{' '.join(cmd)} exited with {p.returncode} and {len(lines)} JSON lines")
        return None
    return json.loads(lines[0])["plan"]["memory"]


def against_plan(name, rec, np, sets):
    """Every kind and the peak of a run's record against the plan of the same settings."""
    planned = plan(np, sets)
    if rec is None or planned is None:
        return
    worst = 0.0
    for k in KINDS + ["peak"]:
        a, b = rec[k], planned.get(k)
        if b is None:
            fail(f"{name}: the plan has no {k}")
            continue
        rel = abs(a - b) / max(a, 1)
        worst = max(worst, rel)
        if rel > PLAN_TOLERANCE:
            fail(f"{name}: {k} recorded {a:.0f}, planned {b:.0f} ({100 * rel:.2f}% apart, bound "
                 f"{100 * PLAN_TOLERANCE:.0f}%)")
    print(f"  {name}: plan vs record, largest difference over the kinds {100 * worst:.3f}%")


def record(name, recs):
    """The first record's memory object after checking the run's records carry it as the contract says."""
    first = recs[0].get("memory")
    if first is None or sorted(first) != sorted(KINDS + ["peak", "rss"]):
        fail(f"{name}: the first record's memory is {first} (should have {KINDS + ['peak', 'rss']})")
        return None
    for r in recs[1:-1]:
        if "memory" in r:
            fail(f"{name}: step {r['step']} carries a memory record (only the first and the last do)")
    if len(recs) > 1:
        last = recs[-1].get("memory")
        if last is None or sorted(last) != ["peak", "rss"] or last["peak"] != first["peak"] or not last["rss"] > 0:
            fail(f"{name}: the last record's memory is {last} (should be peak {first['peak']} and rss > 0)")
    print(f"  {name}: " + ", ".join(f"{k} {v:.0f}" for k, v in first.items()))
    return first


steps = ["train.steps=3", "checkpoint.at_end=true"]
one = record("np 1", run("np1", 1, steps))
against_plan("np 1", one, 1, steps)
if one:
    if one["peak"] != sum(one[k] for k in KINDS):
        fail(f"np 1: peak {one['peak']} is not the sum of the kinds {sum(one[k] for k in KINDS)}")
    for k in ("params", "grads", "activations", "rss"):
        if not one[k] > 0:
            fail(f"np 1: {k} is {one[k]} (should be > 0)")
    if one["rss"] < one["params"] + one["grads"]:
        fail(f"np 1: rss {one['rss']} is below params + grads {one['params'] + one['grads']}")
    if one["comm"] != 0:
        fail(f"np 1 on the CPU: comm {one['comm']} should be 0")
    # background checkpoints (checkpoint.async, the default) snapshot the fp32 parameters and the optimizer state (AdamW:
    # two moments, the ResNet's SGD: the momentum)
    if not one["ckpt_staging"] > one["params"] > 0:
        fail(f"np 1 on the CPU: ckpt_staging {one['ckpt_staging']} should hold the background save's snapshot of the "
             f"parameters and the optimizer state (> params {one['params']})")

two_sets = steps + ["parallel.zero=1", "parallel.grad_dtype=bf16"]
two = record("np 2 zero 1 bf16", run("np2", 2, two_sets))
against_plan("np 2 zero 1 bf16", two, 2, two_sets)
# ZeRO-2: the gradients live in the buckets (a ring and the tensors kept whole) beside the shard, no full-size slab
z2_sets = ["train.steps=2", "parallel.zero=2", "parallel.bucket_mb=" + ("0.05" if app == "gpt" else "0.005")]
z2_recs = run("np2_zero2", 2, z2_sets)
z2 = record("np 2 zero 2", z2_recs)
# comm_bytes (docs/contracts.md): ZeRO-2 reduce-scatters every micro-batch (the deck: 4 per step at np 2) all but the
# tensors it keeps whole, and allgathers the parameters once: m - 1 < reduce-scatter / allgather <= m
m = 16 // (2 * 2) if app == "gpt" else None
vol = z2_recs[-1].get("comm_bytes")
if vol is None or sorted(vol) != ["allgather", "allreduce", "broadcast", "p2p", "reduce_scatter"]:
    fail(f"np 2 zero 2: comm_bytes is {vol}")
elif m and not (m - 1) * vol["allgather"] < vol["reduce_scatter"] <= m * vol["allgather"]:
    fail(f"np 2 zero 2: reduce-scatter {vol['reduce_scatter']} bytes for {m} micro-batches and an allgather of "
         f"{vol['allgather']}: should be between {m - 1} and {m} times it")
else:
    print(f"  np 2 zero 2: comm_bytes {vol}")
against_plan("np 2 zero 2", z2, 2, z2_sets)
if app == "gpt" and one and two and z2 and not z2["grads"] < two["grads"] - one["grads"] / 4:
    fail(f"np 2 zero 2: grads {z2['grads']} should be well below ZeRO-1's {two['grads']} (slab {one['grads']} + shard)")
# ZeRO-3: the parameters sharded too (the masters and the gather slots instead of the whole slab); one micro-batch per
# step: the reduce-scatter moves the gradients' bytes G once (the buckets' ranges: the whole gradient slab but the
# alignment padding after a bucket's last tensor), the gathers more than G (the forward gathers everything) and less
# than 2 G (the backward gathers again all but what it still holds or does not read); the plan holds the record
z3_sets = ["train.steps=2", "parallel.zero=3", "train.global_batch=" + ("4" if app == "gpt" else "8"),
           "train.micro_batch=" + ("2" if app == "gpt" else "4")]
z3_recs = run("np2_zero3", 2, z3_sets)
z3 = record("np 2 zero 3", z3_recs)
vol = z3_recs[-1].get("comm_bytes") or {}
slab = one["grads"] if one else 0
G = vol.get("reduce_scatter", 0)
if not (0.95 * slab <= G <= slab and G < vol.get("allgather", 0) < 2 * G):
    fail(f"np 2 zero 3, one micro-batch: comm_bytes {vol}: the reduce-scatter should be about the gradient slab's "
         f"{slab} bytes (at most) and the allgather between 1 and 2 times the reduce-scatter")
else:
    print(f"  np 2 zero 3: comm_bytes {vol} (gradient slab {slab} bytes; allgather / reduce-scatter "
          f"{vol['allgather'] / G:.3f})")
against_plan("np 2 zero 3", z3, 2, z3_sets)
if one and z2 and z3 and not z3["params"] < 0.75 * one["params"]:
    fail(f"np 2 zero 3: params {z3['params']} should be well below the whole parameters' {one['params']}")
recorded = {}
if app == "gpt":
    for name, np, sets in [("np 2 tp 2", 2, ["train.steps=1", "parallel.tp=2"]),
                           ("np 2 tp 2 sp", 2, ["train.steps=1", "parallel.tp=2", "parallel.sp=true"]),
                           ("np 4 dp 2 x pp 2 zero 1", 4, ["train.steps=1", "parallel.pp=2", "parallel.zero=1"]),
                           ("np 2 pp 2 virtual 2 full", 2, ["train.steps=1", "parallel.pp=2",
                                                            "parallel.virtual_stages=2", "train.recompute=full"]),
                           ("np 4 zero 2 hybrid 2", 4, ["train.steps=1", "parallel.zero=2", "parallel.zero_group=2",
                                                        "parallel.bucket_mb=0.05"]),
                           ("np 2 zero 2 bf16 reduction", 2, ["train.steps=1", "parallel.zero=2",
                                                              "parallel.grad_dtype=bf16", "parallel.bucket_mb=0.05"]),
                           ("np 4 zero 3 tp 2 bf16", 4, ["train.steps=1", "parallel.zero=3", "parallel.tp=2",
                                                         "train.precision=bf16"]),
                           ("np 4 zero 3 hybrid 2", 4, ["train.steps=1", "parallel.zero=3", "parallel.zero_group=2"])]:
        recorded[name] = record(name, run(name.replace(" ", "_"), np, sets))
        against_plan(name, recorded[name], np, sets)
    # sequence parallelism keeps the residual stream and LayerNorm activations of its rows only
    plain, sp = recorded.get("np 2 tp 2"), recorded.get("np 2 tp 2 sp")
    if plain and sp and not sp["activations"] < plain["activations"]:
        fail(f"np 2 tp 2 sp: activations {sp['activations']} should be below tp 2's {plain['activations']}")
    elif plain and sp:
        print(f"  sequence parallelism: activations {sp['activations']:.0f} bytes, "
              f"{sp['activations'] / plain['activations']:.3f} of tp 2's")

# activation recompute (train.recompute): each mode keeps fewer activation bytes than the one before on the same run,
# and the plan holds its record (GPT also under a pipeline, whose first stage keeps its micro-batches in flight)
previous = one
for mode in (["selective", "full"] if app == "gpt" else ["full"]):
    sets = ["train.steps=1", f"train.recompute={mode}"]
    rec = record(f"np 1 recompute {mode}", run(f"np1_recompute_{mode}", 1, sets))
    against_plan(f"np 1 recompute {mode}", rec, 1, sets)
    if rec and previous and not rec["activations"] < previous["activations"]:
        fail(f"np 1 recompute {mode}: activations {rec['activations']} should be below {previous['activations']}")
    elif rec and one:
        print(f"  recompute {mode}: activations {rec['activations']:.0f} bytes, {rec['activations'] / one['activations']:.3f}"
              f" of none's")
    previous = rec
if app == "gpt":
    for mode in ("none", "full"):
        sets = ["train.steps=1", "parallel.pp=2", f"train.recompute={mode}"]
        against_plan(f"np 2 pp 2 recompute {mode}", record(f"np 2 pp 2 recompute {mode}",
                                                           run(f"np2_pp2_{mode}", 2, sets)), 2, sets)

# train.memory_limit_gb under the plan: a one-line error before anything allocates, naming the kind and the advice
limited = subprocess.run([exe, deck, "--out", os.path.join(work, "limited"), "--set", "train.memory_limit_gb=0.000001"]
                         + [x for s in QUIET for x in ("--set", s)],
                         capture_output=True, text=True, errors="replace", timeout=120, env=ENV)
text = limited.stdout + limited.stderr
if limited.returncode == 0 or "train.memory_limit_gb = 1e-06" not in text or "the largest kind is" not in text:
    fail(f"train.memory_limit_gb=0.000001: exit {limited.returncode}, output {text[-800:]!r} (should fail naming the "
         f"limit and the largest kind)")
elif os.path.exists(os.path.join(work, "limited", "metrics.jsonl")):
    fail("train.memory_limit_gb=0.000001: the run got as far as metrics.jsonl (should stop before allocating)")
else:
    print("  memory limit: " + next(l for l in text.splitlines() if "train.memory_limit_gb" in l).strip()[:300])
if one and two:
    slab = one["grads"]  # the gradient slab (fp32), unsharded at np 1
    for k in ("params", "workspace"):
        if two[k] != one[k]:
            fail(f"np 2: {k} {two[k]} differs from np 1's {one[k]} (the model is the same)")
    # the same model: a step's batch buffers hold this rank's micro-batches only; SyncBN gathers per-rank statistics
    if not 0 < two["activations"] <= one["activations"] + SLACK:
        fail(f"np 2: activations {two['activations']} should be within (0, np 1's {one['activations']} + {SLACK}]")
    if abs(two["optimizer"] - one["optimizer"] / 2) > 0.01 * one["optimizer"] + SLACK:
        fail(f"np 2 zero 1: optimizer {two['optimizer']} should be half of np 1's {one['optimizer']}")
    if abs(two["grads"] - 1.5 * slab) > 0.01 * slab + SLACK:
        fail(f"np 2 zero 1: grads {two['grads']} should be the slab {slab} plus half of it for the shard")
    if abs(two["comm"] - slab / 2) > 0.01 * slab + SLACK:
        fail(f"np 2 bf16: comm {two['comm']} should be the bf16 buffer, half the slab's {slab} bytes")

resumed = run("np1", 1, ["train.steps=5", "checkpoint.resume=latest"])
if [r["step"] for r in resumed] != [1, 2, 3, 4, 5]:
    fail(f"resumed: steps {[r['step'] for r in resumed]} (should be 1..5)")
elif "memory" not in resumed[3] or sorted(resumed[3]["memory"]) != sorted(KINDS + ["peak", "rss"]):
    fail(f"resumed: step 4, the resumed run's first record, carries {resumed[3].get('memory')} (the whole record)")
elif sorted(resumed[4].get("memory", {})) != ["peak", "rss"]:
    fail(f"resumed: step 5, its last record, carries {resumed[4].get('memory')} (peak and rss)")

if failures:
    print(f"FAILED: memory record {app}: " + "; ".join(failures))
    sys.exit(1)
print(f"VALID: memory record {app}")
