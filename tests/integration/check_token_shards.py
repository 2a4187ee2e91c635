#!/usr/bin/python3
"""Multi-shard token datasets end to end through train_gpt (docs/contracts.md "Data"). One scenario per invocation:

  fixture   writes the test shards into WORKDIR (a ctest fixture; the bad-data tests read them): four training shards
            cut from kjv_train.bin, 700 + 450 + 333 + 10 tokens (the last too short for a window of gpt_tiny's
            seq_len 64: at stride 64 the epoch has 10 + 7 + 5 + 0 = 22 windows, so a global batch of 16 crosses an
            epoch boundary at step 2), two validation shards of 2500 tokens from kjv_val.bin, and bad ones:
            truncated, wrong magic, wrong version, a token beyond the vocabulary (300 at token 100)
  resume    for data.order = random and epoch: 6 steps (decay_steps 6) uninterrupted, and 3 steps + resume to 6 ==
            bitwise (every loss, every tensor of the final checkpoint); the checkpoint records the shard lists
  layouts   epoch order at np 4 (DP 2 x TP 2) and random order at np 4 (DP 2 x PP 2) against the serial run, 5
            steps, every loss and gradient norm within max(1e-5, 10 x the serial run's rounding envelope at 2, 3 and 4
            threads) (docs/invariants.md, invariant 1; validation/layout_rules.py); at np 2, a token beyond the vocabulary
            that DP rank 1 alone reads is reported by rank 1 (exit 2, one line)
  changed   resuming with another shard list (or order) fails with one line naming the first differing shard and
            --set data.allow_changed=true; with it, the run continues and warns
  deck      inputs/gpt_shards.toml (a glob of kjv_shards/, epoch order) runs 2 steps (skipped, 77, when
            scripts/prepare_data.sh has not written kjv_shards/)
usage: check_token_shards.py SCENARIO TRAIN_GPT DECK WORKDIR [SHARDS_DIR]
Prints VALID: <scenario>, or FAILED: <what> and exits 1."""
import json
import os
import shutil
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                "validation"))
from layout_rules import read_run, reference_of_run  # noqa: E402

scenario, exe, deck, work = sys.argv[1:5]
shards = sys.argv[5] if len(sys.argv) > 5 else None
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.environ.get("HPCT_DATA_DIR") or os.path.join(REPO, "data")
ENV = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1")
QUIET = ["--set", "sample.tokens=0", "--set", "train.eval_every=0", "--set", "log.every=10"]
failures = []


def fail(msg):
    failures.append(msg)
    print("  FAIL:", msg, flush=True)


def finish():
    if failures:
        print(f"FAILED: {scenario}: {'; '.join(failures)}")
        sys.exit(1)
    print(f"VALID: {scenario}")
    sys.exit(0)


def read_tokens(path):
    with open(path, "rb") as f:
        header = struct.unpack("<256i", f.read(1024))
        return list(struct.unpack(f"<{header[2]}H", f.read(2 * header[2])))


def write_shard(path, tokens, magic=20240520, version=1, count=None, keep=None):
    """An llm.c shard; count overrides the header's token count, keep cuts the body to that many tokens."""
    header = [0] * 256
    header[0], header[1], header[2] = magic, version, len(tokens) if count is None else count
    body = tokens if keep is None else tokens[:keep]
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack(f"<{len(body)}H", *body))


def train(np, out, sets, expect=0, env=None):
    c = (["mpirun", "-np", str(np), "--oversubscribe", "--bind-to", "none"] if np > 1 else []) + [exe, deck, "--out",
                                                                                                   out] + QUIET
    for s in sets:
        c += ["--set", s]
    t0 = time.time()
    p = subprocess.run(c, capture_output=True, text=True, errors="replace", timeout=300, env=env or ENV)
    print(f"  np {np} {' '.join(sets)} -> rc {p.returncode} in {time.time() - t0:.1f} s", flush=True)
    if expect is not None and p.returncode != expect:
        print(p.stdout[-3000:], p.stderr[-3000:])
        print(f"FAILED: train_gpt np {np} {sets} exited with {p.returncode}, should be {expect}")
        sys.exit(1)
    return p


def losses(out):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return {r["step"]: r["loss"] for r in map(json.loads, f)}


SHARD_SETS = [f"data.train={shards}/tiny_train_*.bin", f"data.val={shards}/tiny_val_000000.bin,{shards}/tiny_val_000001.bin"]

if scenario == "fixture":
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    train_tokens = read_tokens(os.path.join(DATA, "kjv_train.bin"))
    val_tokens = read_tokens(os.path.join(DATA, "kjv_val.bin"))
    at = 0
    for k, n in enumerate([700, 450, 333, 10]):
        write_shard(f"{work}/tiny_train_{k:06d}.bin", train_tokens[at:at + n])
        at += n
    for k in range(2):
        write_shard(f"{work}/tiny_val_{k:06d}.bin", val_tokens[2500 * k:2500 * (k + 1)])
    body = train_tokens[:700]
    write_shard(f"{work}/truncated.bin", body, keep=500)  # header: 700 tokens, file: 500
    write_shard(f"{work}/magic.bin", body, magic=12345)
    write_shard(f"{work}/version.bin", body, version=2)
    big = train_tokens[:200]
    big[100] = 300
    write_shard(f"{work}/big_token.bin", big)
    one = train_tokens[:65]  # one window of seq_len 64 + 1
    one[30] = 300
    write_shard(f"{work}/one_window_bad.bin", one)
    print(f"  shards written to {work}")
    finish()

shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)

if scenario == "resume":
    from ckpt_read import latest_step_dir, read_checkpoint
    for order in ("random", "epoch"):
        base = SHARD_SETS + [f"data.order={order}", "optim.decay_steps=6", "optim.warmup_steps=1"]
        full, half = f"{work}/{order}_full", f"{work}/{order}_half"
        train(1, full, base + ["train.steps=6"])
        train(1, half, base + ["train.steps=3"])
        train(1, half, base + ["train.steps=6", "checkpoint.resume=latest"])
        a, b = losses(full), losses(half)
        if a != b or sorted(a) != list(range(1, 7)):
            fail(f"{order}: resumed losses {b} are not bitwise the uninterrupted run's {a}")
        else:
            print(f"  {order}: 6 losses bitwise equal after a restart at step 3")
        ta, attrs = read_checkpoint(latest_step_dir(full), ("model/", "optim/"))
        tb, _ = read_checkpoint(latest_step_dir(half), ("model/", "optim/"))
        bad = [k for k in ta if k not in tb or ta[k].tobytes() != tb[k].tobytes()]
        if bad or len(ta) != len(tb):
            fail(f"{order}: final checkpoint tensors differ bitwise: {bad[:5]}")
        else:
            print(f"  {order}: all {len(ta)} tensors of the step-6 checkpoints bitwise equal")
        listed = json.loads(attrs["data.train.shards"])
        got = [(s["file"], s["tokens"]) for s in listed]
        want = [(f"tiny_train_{k:06d}.bin", n) for k, n in enumerate([700, 450, 333, 10])]
        if got != want or attrs["data.order"] != order:
            fail(f"{order}: checkpoint records {got}, order {attrs['data.order']} (should be {want}, {order})")
    # the two orders sample differently
    if losses(f"{work}/random_full") == losses(f"{work}/epoch_full"):
        fail("data.order = random and epoch gave the same losses")
    finish()

if scenario == "layouts":
    for order, np, layout in (("epoch", 4, ["parallel.tp=2"]), ("random", 4, ["parallel.pp=2"])):
        base = SHARD_SETS + [f"data.order={order}", "train.steps=5", "checkpoint.at_end=false"]
        ref_out, out = f"{work}/{order}_serial", f"{work}/{order}_np{np}"
        train(1, ref_out, base)
        ref = reference_of_run(f"{order} serial", train, 1, ref_out, base, ENV)
        train(np, out, base + layout)
        ref.verdict(f"{order} at np {np} {' '.join(layout)}", read_run(out), fail)
    # a token beyond the vocabulary that DP rank 1 alone reads: rank 1 prints the message (rank 0 never sees it) and the
    # job exits 2. Epoch order over [tiny_train_000000.bin (10 windows), one_window_bad.bin (1 window: index 10)] with
    # global batch 16: train.seed = 2 puts window 10 at epoch-0 position 8..10, i.e. on DP rank 1 (samples 8..15), and
    # its epoch-1 visit past step 1's samples (found with feistel_permute, data/token_sampler.hpp)
    p = train(2, f"{work}/bad_on_rank1", [f"data.train={shards}/tiny_train_000000.bin,{shards}/one_window_bad.bin",
                                          "data.order=epoch", "train.seed=2", "train.steps=2"], expect=None)
    message = (f"train_gpt: error: data file {shards}/one_window_bad.bin holds token 300 at token 30 (byte offset "
               f"1084) but model.vocab_size = 256; raise model.vocab_size or re-tokenise")
    said = [l for l in p.stderr.splitlines() if "error:" in l]
    if p.returncode != 2 or said != [message]:
        fail(f"np 2 with a token beyond the vocabulary on rank 1 only: rc {p.returncode}, error lines {said} (should "
             f"be 2 and exactly [{message}])")
    else:
        print(f"  np 2, token beyond the vocabulary read by rank 1 only: exit 2, one line: {message}")
    finish()

if scenario == "changed":
    out = f"{work}/run"
    base = ["optim.decay_steps=4", "data.order=epoch"]
    train(1, out, SHARD_SETS + base + ["train.steps=2"])
    step_dir = os.path.join(out, "checkpoints", "step_00000002")
    three = ",".join(f"{shards}/tiny_train_{k:06d}.bin" for k in range(3))
    cases = [
        ([f"data.train={three}", SHARD_SETS[1]],
         f"train_gpt: error: deck {deck}: data.train differs from checkpoint {step_dir} at shard 3: none (the list ends "
         f"after 3 shards) here, tiny_train_000003.bin (10 tokens) in the checkpoint (3 shards here, 4 there); restore "
         f"the deck's data, or accept the change (the batch sequence then differs from the interrupted run's) with "
         f"--set data.allow_changed=true"),
        (SHARD_SETS + ["data.order=random"],
         f"train_gpt: error: deck {deck}: data.order = random but checkpoint {step_dir} was written with data.order = "
         f"epoch; restore the deck's data, or accept the change (the batch sequence then differs from the interrupted "
         f"run's) with --set data.allow_changed=true"),
    ]
    for sets, message in cases:
        p = train(1, out, base + sets + ["train.steps=4", "checkpoint.resume=latest"], expect=None)
        lines = p.stderr.strip().splitlines()
        if p.returncode in (0,) or p.returncode >= 128 or lines != [message]:
            fail(f"resume with {sets}: rc {p.returncode}, stderr {lines} (should be non-zero and exactly [{message}])")
        else:
            print(f"  refused with the exact message: {message[:90]}...")
    p = train(1, out, base + [f"data.train={three}", SHARD_SETS[1], "train.steps=4", "checkpoint.resume=latest",
                              "data.allow_changed=true"])
    if "data.allow_changed = true: data.train differs" not in p.stderr or sorted(losses(out)) != [1, 2, 3, 4]:
        fail(f"data.allow_changed=true: no warning or no steps 3, 4 (stderr {p.stderr[-500:]})")
    else:
        print("  data.allow_changed=true: resumed with a warning")
    finish()

if scenario == "deck":
    if not os.path.exists(os.path.join(DATA, "kjv_shards", "kjv_val.bin")):
        print(f"SKIPPED: {DATA}/kjv_shards is missing: run scripts/prepare_data.sh")
        sys.exit(77)
    p = train(1, f"{work}/deck", ["train.steps=2", "checkpoint.at_end=false"])
    if "order epoch" not in p.stdout or "kjv_train_000000.bin" not in p.stdout or len(losses(f"{work}/deck")) != 2:
        fail(f"inputs/gpt_shards.toml: no epoch order over kjv_shards in the log: {p.stdout[-1500:]}")
    finish()

print(f"FAILED: unknown scenario {scenario}")
sys.exit(1)
