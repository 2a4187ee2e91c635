#!/usr/bin/python3
"""The host-staged device groups (comm.backend = mpi on CUDA) emulated on the CPU: with HPCT_STAGE_DEVICE_GROUPS=1 the
apps route every device group (tp, dp, the embedding group, ZeRO's shard and replica groups, the pipeline) through
HostStagedCommunicator, whose copies are memcpy on the CPU. The staging must change nothing: per-step losses and
gradient norms equal the plain MPI run's bit for bit at every layout below (also with staging slots of 4 KiB, so that
every collective runs in chunks), the log names the staged groups, and the memory record's comm kind holds the
staging blocks exactly as `--plan WORLD --json` plans them (under the same environment).
Layouts: GPT DP 2 with ZeRO-2 and bf16 reduction, ZeRO-3 with prefetch, hybrid sharding (ZeRO-1, zero_group 2) at 4,
TP 2 with sequence parallelism, PP 2 interleaved (2 virtual stages), DP 2 x TP 2 x PP 2 at 8 (GPipe); ResNet DP 2 with
SyncBN, and ZeRO-3.

usage: check_staged_backend.py TRAIN_GPT GPT_DECK TRAIN_RESNET RESNET_DECK WORKDIR
Prints VALID: staged, or FAILED: <what> and exits 1."""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                "validation"))
from layout_rules import read_run  # noqa: E402

gpt, gpt_deck, resnet, resnet_deck, work = sys.argv[1:6]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
ENV = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1")
ENV.pop("HPCT_STAGE_DEVICE_GROUPS", None)
GPT_QUIET = ["sample.tokens=0", "train.eval_every=0", "log.every=1", "train.steps=4", "checkpoint.every=0",
             "checkpoint.at_end=false"]
RESNET_QUIET = ["train.eval_every=0", "log.every=1", "train.steps=3", "checkpoint.every=0", "checkpoint.at_end=false"]
CASES = [
    ("gpt dp2 zero2 bf16", gpt, gpt_deck, 2, GPT_QUIET + ["parallel.zero=2", "parallel.grad_dtype=bf16"]),
    ("gpt dp2 zero3 prefetch", gpt, gpt_deck, 2, GPT_QUIET + ["parallel.zero=3", "parallel.prefetch=true"]),
    ("gpt dp4 hybrid zero1", gpt, gpt_deck, 4, GPT_QUIET + ["parallel.zero=1", "parallel.zero_group=2"]),
    ("gpt tp2 sp", gpt, gpt_deck, 2, GPT_QUIET + ["parallel.tp=2", "parallel.sp=true"]),
    ("gpt pp2 interleaved", gpt, gpt_deck, 2, GPT_QUIET + ["parallel.pp=2", "parallel.virtual_stages=2"]),
    ("gpt dp2 tp2 pp2 gpipe", gpt, gpt_deck, 8,
     GPT_QUIET + ["parallel.tp=2", "parallel.pp=2", "parallel.schedule=gpipe"]),
    ("resnet dp2 syncbn", resnet, resnet_deck, 2, RESNET_QUIET),
    ("resnet dp2 zero3", resnet, resnet_deck, 2, RESNET_QUIET + ["parallel.zero=3"]),
]
failures = []


CHUNKED = {"HPCT_STAGING_CHUNK_BYTES": "4096"}


def run(name, exe, deck, np_, sets, staged, extra=None, tag=""):
    out = os.path.join(work, name.replace(" ", "_") + ("_staged" if staged else "_mpi") + tag)
    env = dict(ENV, HPCT_STAGE_DEVICE_GROUPS="1", **(extra or {})) if staged else ENV
    cmd = ["mpirun", "-np", str(np_), "--oversubscribe", "--bind-to", "none", exe, deck, "--out", out]
    for s in sets:
        cmd += ["--set", s]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        failures.append(f"{name} ({'staged' if staged else 'mpi'}) exited {p.returncode}: "
                        + (p.stderr.strip().splitlines() or ["(no stderr)"])[-1])
    return out, p.stdout + p.stderr


def memory_record(out):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        for r in map(json.loads, f):
            if "memory" in r:
                return r["memory"]
    return {}


def planned_memory(exe, deck, np_, sets, extra):
    cmd = [exe, deck, "--plan", str(np_), "--json"]
    for s in sets:
        cmd += ["--set", s]
    p = subprocess.run(cmd, env=dict(ENV, HPCT_STAGE_DEVICE_GROUPS="1", **extra), capture_output=True, text=True,
                       timeout=120)
    lines = [line for line in p.stdout.splitlines() if line.startswith('{"plan":')]
    return json.loads(lines[0])["plan"]["memory"] if lines else {}


def compare(name, ref_out, got_out, label):
    ref, got = read_run(ref_out), read_run(got_out)
    if not ref or sorted(ref) != sorted(got):
        failures.append(f"{name} ({label}): steps differ (mpi {sorted(ref)}, staged {sorted(got)})")
        return
    diff = [s for s in ref if ref[s] != got[s] or ref.gnorm.get(s) != got.gnorm.get(s)]
    print(f"  {name:26s} {label:14s}: {len(ref)} steps, loss {ref[max(ref)]:.6f}, "
          f"{'bitwise equal' if not diff else 'DIFFERS at steps ' + str(diff)}", flush=True)
    if diff:
        s = diff[0]
        failures.append(f"{name} ({label}): step {s} loss {got[s]!r} gnorm {got.gnorm.get(s)!r} staged vs {ref[s]!r} "
                        f"{ref.gnorm.get(s)!r} plain MPI (should be bitwise equal)")


for name, exe, deck, np_, sets in CASES:
    ref_out, _ = run(name, exe, deck, np_, sets, False)
    got_out, log = run(name, exe, deck, np_, sets, True)
    chunk_out, _ = run(name, exe, deck, np_, sets, True, CHUNKED, "_chunked")
    if "MPI over pinned host staging" not in log:
        failures.append(f"{name}: the staged run's log does not name the host-staged device groups")
    compare(name, ref_out, got_out, f"np {np_} staged")
    compare(name, ref_out, chunk_out, f"np {np_} chunks")
    plain, staged = memory_record(ref_out).get("comm"), memory_record(got_out).get("comm")
    planned = planned_memory(exe, deck, np_, sets, {}).get("comm")
    if plain is None or staged is None or planned is None:
        failures.append(f"{name}: no memory record or plan (plain {plain}, staged {staged}, planned {planned})")
    elif staged != planned or staged <= plain:
        failures.append(f"{name}: the staged run's comm memory is {staged} bytes, planned {planned}, plain MPI "
                        f"{plain}: the record must hold the staging blocks exactly as planned")
    else:
        print(f"  {name:26s} comm memory: {plain} plain, {staged} staged = planned (+{staged - plain} staging)")

if failures:
    for f in failures:
        print("FAILED:", f)
    sys.exit(1)
print("VALID: staged")
