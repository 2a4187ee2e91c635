#!/usr/bin/python3
"""The GPU layout matrix's runner (validation/gpu_layouts.py) without a GPU: ctest validation_gpu_layouts_dry.

  cases     --check-cases on the committed case list: every case well-formed, every run's layout accepted by
            `APP DECK --plan WORLD`; and case files with a planted mistake refused, naming it: a repeated id, a layout
            that sets a key the runner owns (train.device), a restart without its other run, an unknown kind (exit 1
            before anything runs), and a layout --plan refuses (ZeRO-2 with virtual stages: --check-cases exit 1)
  dry run   --dry-run on one case of each kind of parallelism (DP 2 with overlap, ZeRO-3 with prefetch, TP 2 with
            sequence parallelism, PP 2 interleaved, ResNet DP 2 SyncBN, a restart from world 4 to the serial CPU run):
            exit 0, `VALID: gpu_layouts dry run`; the record holds one line per case with exactly the documented keys
            (device_slug cpu_dry_run, backend mpi, nccl_version null, verdict VALID, the log file present), and the
            markdown report a row per case; run with --restart-control always, the restart case's log shows its
            anchored window and that window's controls, the state difference at the checkpoint and the restart control
  detects   the judging fails when it should: a planted defect (HPCT_TEST_FAULT=dp_bucket_twice on the DP 2 case and
            the ResNet, tp_grad_scale on the TP 2 SP case: a 1e-3 scale of one shard's gradient) turns every verdict
            FAILED; a checkpoint that comes back wrong (--plant-resume-noise 1e-3: every parameter of the restart
            case's resumed run off by up to 1e-3) FAILED by the anchored window; and a case list whose case carries a
            wrong --set (train.seed=7) makes a plain run record FAILED, list it in the report, and exit 1
Prints VALID: gpu_layouts_dry, or FAILED: <what> and exits 1.

usage: check_gpu_layouts.py BUILD_DIR WORKDIR"""
import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "gpu_layouts.py")
CASES = os.path.join(HERE, "gpu_layout_cases.json")
KEYS = ["device", "device_slug", "commit", "nccl_version", "backend", "app", "world", "layout", "precision", "verdict",
        "worst_loss_dev", "worst_gnorm_dev", "message", "log"]
DRY = ["gpt_dp2_overlap_fp32", "gpt_dp2_zero3_prefetch_fp32", "gpt_tp2_sp_fp32", "gpt_pp2_interleaved_fp32",
       "resnet_dp2_syncbn_fp32", "gpt_restart_gpu_w4_to_cpu_w1_fp32"]
build, work = sys.argv[1:3]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
failures = []
t_start = time.time()


def check(ok, what):
    print(f"  {'ok  ' if ok else 'FAIL'} {what}", flush=True)
    if not ok:
        failures.append(what)
    return ok


def runner(*a, timeout=600):
    """gpu_layouts.py with these arguments (its runs under WORK/runs); its output indented, (exit code, output)."""
    cmd = [sys.executable, SCRIPT, "--build", build, "--work", os.path.join(work, "runs")] + list(a)
    t = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=timeout)
    out = p.stdout + p.stderr
    print(f"  $ gpu_layouts.py {' '.join(a)}  -> exit {p.returncode} in {time.time() - t:.0f} s", flush=True)
    for line in out.splitlines():
        print("    | " + line)
    return p.returncode, out


def records(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def case_file(name, cases, **top):
    with open(CASES) as f:
        doc = json.load(f)
    doc.update(top)
    doc["cases"] = cases
    path = os.path.join(work, name)
    with open(path, "w") as f:
        json.dump(doc, f)
    return path


with open(CASES) as f:
    committed = json.load(f)["cases"]
by_id = {c["id"]: c for c in committed}

print("== cases", flush=True)
rc, out = runner("--check-cases")
check(rc == 0 and "VALID: --check-cases" in out, "the committed case list: every case well-formed, every layout plans")
base = dict(by_id["gpt_dp2_zero1_fp32"])
bad_cases = [
    ("a repeated id", [base, dict(base)], "id repeated"),
    ("a layout setting train.device", [dict(base, layout=["train.device=cuda"])], "set by the runner"),
    ("a restart without its other run", [dict(base, kind="restart", checkpoint_step=5)], "exactly one of"),
    ("an unknown kind", [dict(base, kind="sideways")], "kind 'sideways'"),
]
for what, cases, needle in bad_cases:
    rc, out = runner("--cases", case_file("bad.json", cases), "--dry-run", "--record", os.path.join(work, "bad.jsonl"))
    check(rc == 1 and needle in out and not os.path.exists(os.path.join(work, "bad.jsonl")),
          f"a case list with {what}: refused before any run, naming it ('{needle}')")
rc, out = runner("--cases", case_file("noplan.json", [dict(base, id="zero2_virtual", layout=[
    "parallel.pp=2", "parallel.virtual_stages=2", "parallel.zero=2"])]), "--check-cases")
check(rc == 1 and "zero2_virtual" in out and "--plan refused" in out,
      "a layout --plan refuses (ZeRO-2 with virtual stages): --check-cases exit 1, naming the case")

print("== dry run", flush=True)
rec = os.path.join(work, "dry", "cpu_dry_run_layouts.jsonl")
rc, out = runner("--dry-run", "--only", ",".join(DRY), "--record", rec, "--fresh", "--restart-control", "always")
check(rc == 0 and f"VALID: gpu_layouts dry run: {len(DRY)} case runs VALID" in out, f"{len(DRY)} cases VALID, exit 0")
restart_log = os.path.join(os.path.splitext(rec)[0], "gpt_restart_gpu_w4_to_cpu_w1_fp32.mpi.log")
text = open(restart_log).read() if os.path.exists(restart_log) else ""
check(all(n in text for n in ("anchored window (from step 5), steps 6..7:", "from the checkpoint's state",
                              "state at step 5: the checkpoint's model differs from the CPU serial run's by",
                              "restart control (the CPU serial run resumed from its step-5 checkpoint",
                              "with the restart control:")),
      "the restart case's log (--restart-control always): the anchored window with its controls, the state "
      "difference at the checkpoint, the restart control")
rs = records(rec) if os.path.exists(rec) else []
check(len(rs) == len(DRY), f"the record holds {len(rs)} lines, one per case ({len(DRY)})")
for r, cid in zip(rs, DRY):
    c = by_id[cid]
    ok = list(r) == KEYS and r["device_slug"] == "cpu_dry_run" and r["backend"] == "mpi" and \
        r["nccl_version"] is None and r["verdict"] == "VALID" and r["app"] == c["app"] and \
        r["world"] == c["world"] and \
        r["layout"] == c["layout"] and r["precision"] == c["precision"] and \
        isinstance(r["worst_loss_dev"], float) and isinstance(r["worst_gnorm_dev"], float) and \
        os.path.isfile(r["log"] if os.path.isabs(r["log"]) else os.path.join(os.path.dirname(HERE), r["log"])) and \
        os.path.basename(r["log"]) == f"{cid}.mpi.log"
    check(ok, f"record of {cid}: exactly the documented keys, VALID, its log present" + ("" if ok else f": {r}"))
report = os.path.splitext(rec)[0] + ".md"
text = open(report).read() if os.path.exists(report) else ""
check(all(f"| `{cid}` |" in text for cid in DRY) and "## Not VALID" not in text,
      "the report has a row per case, nothing listed as not VALID")

print("== detects", flush=True)
for fault, ids in (("dp_bucket_twice", ["gpt_dp2_overlap_fp32", "resnet_dp2_syncbn_fp32"]),
                   ("tp_grad_scale", ["gpt_tp2_sp_fp32"])):
    prec = os.path.join(work, f"planted_{fault}.jsonl")
    rc, out = runner("--dry-run", "--only", ",".join(ids), "--plant", fault, "--record", prec, "--fresh")
    verdicts = [r["verdict"] for r in records(prec)] if os.path.exists(prec) else []
    check(rc == 0 and f"VALID: planted {fault}: detected by all {len(ids)}" in out and
          verdicts == ["FAILED"] * len(ids), f"planted {fault}: every verdict of {', '.join(ids)} turns FAILED")
# a checkpoint that comes back wrong (every resumed parameter off by up to 1e-3): the anchored window fails it, even
# where the restart control widens the trajectory's bound
prec = os.path.join(work, "planted_resume_noise.jsonl")
rc, out = runner("--dry-run", "--only", "gpt_restart_gpu_w4_to_cpu_w1_fp32", "--plant-resume-noise", "1e-3",
                 "--restart-control", "always", "--record", prec, "--fresh")
rs = records(prec) if os.path.exists(prec) else []
check(rc == 0 and "VALID: planted resume noise 0.001: detected by all 1" in out and len(rs) == 1 and
      rs[0]["verdict"] == "FAILED" and "anchored window" in rs[0]["message"],
      "planted resume noise 1e-3 on the restart GPU w4 -> CPU w1: FAILED by its anchored window")
seed = os.path.join(work, "seed.jsonl")
wrong = dict(by_id["gpt_dp2_zero1_fp32"], id="gpt_dp2_zero1_wrong_seed",
             layout=by_id["gpt_dp2_zero1_fp32"]["layout"] + ["train.seed=7"])
rc, out = runner("--cases", case_file("seed.json", [wrong]), "--dry-run", "--record", seed, "--fresh")
rs = records(seed) if os.path.exists(seed) else []
text = open(os.path.splitext(seed)[0] + ".md").read() if os.path.exists(os.path.splitext(seed)[0] + ".md") else ""
check(rc == 1 and len(rs) == 1 and rs[0]["verdict"] == "FAILED" and "gpt_dp2_zero1_wrong_seed" in text.split(
    "## Not VALID")[-1], "a case with a wrong --set (train.seed=7): recorded FAILED, listed in the report, exit 1")

if failures:
    print(f"FAILED: gpu_layouts_dry: {len(failures)} check(s): " + "; ".join(failures))
    sys.exit(1)
print(f"VALID: gpu_layouts_dry ({time.time() - t_start:.0f} s)")
