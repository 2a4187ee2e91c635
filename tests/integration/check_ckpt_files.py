#!/usr/bin/python3
"""checkpoint.files = per_rank | per_node | single through train_gpt: every mode restores onto every layout.

  write    gpt_tiny, 6 steps at np 4 (DP 2 x TP 2, ZeRO-1) with a checkpoint at step 3 (and 6), once per mode; per_node
           with HPCT_CKPT_RANKS_PER_NODE=2 (two emulated nodes): the step directory holds exactly the mode's files
           (4 shard_*.h5 | node_00000.h5 and node_00001.h5 | shards.h5, and index.h5), `ckpt_tool verify` passes, and
           the three checkpoints hold bitwise-equal tensors (model/ and optim/, read through index.h5 by h5py)
  restore  each mode's step-3 checkpoint resumed at np 1 (serial), np 2 (TP 2) and np 4 (DP 4, ZeRO-1), each written on
           with another mode: the losses and gradient norms of steps 4..6 equal those of the writing run within
           max(1e-5, 10 x the envelope of the writing layout resumed from the same checkpoint at 2, 3 and 4 threads)
           (another layout sums in another order; validation/layout_rules.py), and the resumed run's own step-6
           checkpoint verifies
usage: check_ckpt_files.py TRAIN_GPT CKPT_TOOL DECK WORKDIR
Prints VALID, or FAILED: <what> (is X, should be Y) and exits 1."""
import os
import shutil
import subprocess
import sys
import time

from ckpt_read import latest_step_dir, read_checkpoint

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                "validation"))
from layout_rules import read_run, reference_with_controls  # noqa: E402

exe, tool, deck, work = sys.argv[1:5]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
failures = []
ENV = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1", HPCT_CKPT_RANKS_PER_NODE="2")
QUIET = ["--set", "sample.tokens=0", "--set", "train.eval_every=0", "--set", "log.every=5",
         "--set", "train.steps=6", "--set", "optim.decay_steps=6", "--set", "checkpoint.every=3"]
MODES = ["per_rank", "per_node", "single"]
FILES = {"per_rank": ["shard_00000.h5", "shard_00001.h5", "shard_00002.h5", "shard_00003.h5"],
         "per_node": ["node_00000.h5", "node_00001.h5"], "single": ["shards.h5"]}
# (np, sets) of the restoring layouts
LAYOUTS = [(1, []), (2, ["parallel.tp=2"]), (4, ["parallel.zero=1"])]


def fail(msg):
    failures.append(msg)
    print("  FAIL:", msg, flush=True)


def train(np, out, sets, env=None):
    c = ["mpirun", "-np", str(np), "--oversubscribe", "--bind-to", "none", exe, deck, "--out", out] + QUIET
    for s in sets:
        c += ["--set", s]
    t0 = time.time()
    p = subprocess.run(c, capture_output=True, text=True, errors="replace", timeout=300, env=env or ENV)
    print(f"  np {np} {' '.join(sets)} -> rc {p.returncode} in {time.time() - t0:.1f} s", flush=True)
    if p.returncode != 0:
        print(p.stdout[-3000:], p.stderr[-3000:])
        print(f"FAILED: train_gpt np {np} {sets} exited with {p.returncode}, should be 0")
        sys.exit(1)
    return p


def verify(step_dir, what):
    p = subprocess.run([tool, "verify", step_dir], capture_output=True, text=True, errors="replace", timeout=120,
                       env=ENV)
    if p.returncode != 0:
        fail(f"{what}: ckpt_tool verify {step_dir} exited {p.returncode}: {(p.stdout + p.stderr)[-500:]}")


written = {}
for mode in MODES:
    out = f"{work}/write_{mode}"
    train(4, out, ["parallel.tp=2", "parallel.zero=1", f"checkpoint.files={mode}", "checkpoint.keep=0"])
    step3 = os.path.join(out, "checkpoints", "step_00000003")
    got = sorted(f for f in os.listdir(step3) if f.endswith(".h5"))
    want = sorted(FILES[mode] + ["index.h5"])
    if got != want:
        fail(f"{mode}: step_00000003 holds {got}, should be {want}")
    verify(step3, mode)
    written[mode] = (out, read_checkpoint(step3, ("model/", "optim/"))[0])

ref_tensors = written["per_rank"][1]
for mode in MODES[1:]:
    tensors = written[mode][1]
    if sorted(tensors) != sorted(ref_tensors):
        fail(f"{mode}: the checkpoint holds {len(tensors)} tensors, per_rank {len(ref_tensors)}")
        continue
    differ = [n for n in ref_tensors if tensors[n].tobytes() != ref_tensors[n].tobytes()]
    if differ:
        fail(f"{mode}: {len(differ)} tensors differ from per_rank's bitwise (first: {differ[0]})")
    else:
        print(f"  {mode}: {len(tensors)} tensors bitwise equal to per_rank's")

def from_step3(src, out, np, sets, env=None):
    """Resumes a copy of src's step-3 checkpoint in out (np ranks, sets); returns its Run (steps 4..6)."""
    shutil.copytree(os.path.join(src, "checkpoints", "step_00000003"), os.path.join(out, "checkpoints", "step_00000003"))
    train(np, out, sets + ["checkpoint.resume=" + os.path.join(out, "checkpoints", "step_00000003")], env=env)
    return read_run(out)


# The restored runs against the writing run's steps 4..6 by the campaign's rule (validation/layout_rules.py): limits
# from the writing layout itself resumed from the same step-3 state at 2, 3 and 4 threads per rank (another layout sums
# in another order; how far that may move steps 4..6 is measured here, not assumed)
writer_sets = ["parallel.tp=2", "parallel.zero=1"]
ref = reference_with_controls(
    "the writing run (np 4, DP 2 x TP 2, ZeRO-1), steps 4..6", read_run(written["per_rank"][0]),
    lambda t: from_step3(written["per_rank"][0], f"{work}/control_omp{t}", 4, writer_sets,
                         dict(ENV, OMP_NUM_THREADS=str(t))), steps=[4, 5, 6])
for i, mode in enumerate(MODES):
    src = written[mode][0]
    for j, (np, sets) in enumerate(LAYOUTS):
        other = MODES[(i + j + 1) % len(MODES)]  # write on with another mode
        out = f"{work}/from_{mode}_np{np}"
        got = from_step3(src, out, np, sets + [f"checkpoint.files={other}"])
        if sorted(got) != [4, 5, 6]:
            fail(f"{mode} -> np {np} {sets}: metrics hold steps {sorted(got)}, should be 4..6")
            continue
        ref.verdict(f"{mode} -> np {np} {' '.join(sets)} (writing {other})", got, fail)
        verify(latest_step_dir(out), f"{mode} -> np {np} written as {other}")

if failures:
    print(f"FAILED: {len(failures)} checks: {failures[0]}")
    sys.exit(1)
print("VALID: checkpoint.files modes restore onto each other's layouts")
