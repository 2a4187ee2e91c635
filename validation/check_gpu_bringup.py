#!/usr/bin/python3
"""The GPU bring-up script (validation/gpu_bringup.sh) without a GPU: ctest validation_gpu_bringup_dry.

  dry run     --dry-run names every phase with its key command, runs and writes nothing; --dry-run --phase X shows
              that phase only; --dry-run --next --state DIR picks the phase the documented rule picks, for states
              seeded by hand (phases.tsv): nothing run, build FAIL, a later FAIL, a TIMEOUT, a TIMEOUT then PASS,
              everything done
  errors      --phase nosuch, --budget 3, no mode: exit 2 with a clear message; a GPU phase where nvidia-smi lists no
              GPU: exit 2 naming the cause and what to do, nothing recorded
  machinery   every phase, in order, through --next, against stubs on PATH (cmake, ctest, nvidia-smi,
              compute-sanitizer) and fake test executables, with a 10 s time guard: a build cut by the guard
              (TIMEOUT, exit 3) and continued (PASS) before any GPU is seen (its sections wait in the state); the report
              created by the first GPU phase (header from the stub nvidia-smi, the waiting sections and logs moved in);
              memcheck cut after its first part (TIMEOUT), resumed (the slow part, first now, times out for good), and
              finished (an error found: FAIL, exit 1); racecheck refused by the tool (UNSUPPORTED, exit 0); synccheck
              and initcheck PASS; cuda-run and the benchmarks SKIPPED (no apps: kernels-only); then "all phases done";
              a state of another GPU refused; --copy-to; --status; cuda-tests again: an NCCL test with more ranks
              than GPUs skips by design (PASS), any other skip with a GPU present is a FAIL
Prints VALID: gpu_bringup, or FAILED: <what> and exits 1.

usage: check_gpu_bringup.py WORKDIR
"""
import os
import shutil
import stat
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "validation", "gpu_bringup.sh")
PHASES = ["build", "cuda-tests", "memcheck", "racecheck", "synccheck", "initcheck", "cuda-run", "bench-gpt",
          "bench-resnet"]
failures = []


def check(ok, what):
    print(f"  {'ok  ' if ok else 'FAIL'} {what}", flush=True)
    if not ok:
        failures.append(what)
    return ok


def run(args, env_extra=None, timeout=120):
    env = dict(os.environ, HPCT_NVIDIA_SMI="/bin/false", HPCT_BRINGUP_RESULTS=RESULTS)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    env.update(env_extra or {})
    t = time.time()
    p = subprocess.run(["bash", SCRIPT] + args, capture_output=True, text=True, env=env, timeout=timeout)
    return p.returncode, p.stdout, p.stderr, time.time() - t


def write_exe(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def seed(state, lines):
    shutil.rmtree(state, ignore_errors=True)
    os.makedirs(state)
    with open(os.path.join(state, "phases.tsv"), "w") as f:
        for phase, status in lines:
            f.write(f"{phase}\t{status}\t0\t1\t2025-01-01T00:00:00Z\n")


def last_statuses(state):
    out = {}
    with open(os.path.join(state, "phases.tsv")) as f:
        for line in f:
            phase, status = line.split("\t")[:2]
            out[phase] = status
    return out


work = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else "/tmp/check_gpu_bringup"
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
RESULTS = os.path.join(work, "results")
build_dry = os.path.join(work, "build-dry")
state_dry = os.path.join(work, "state-dry")

# ---------------------------------------------------------------- dry run ----
print("== dry run")
rc, out, err, _ = run(["--dry-run", "--build-dir", build_dry, "--state", state_dry])
check(rc == 0, f"--dry-run exits 0 (exit {rc}{': ' + err.strip() if err.strip() else ''})")
for p in PHASES:
    check(f"\nphase {p} [" in out, f"--dry-run shows phase {p}")
key = {
    "build": ["cmake -S ", "-DCMAKE_CUDA_ARCHITECTURES=90", "-DHPCT_ENABLE_CUDA=ON", "-DHPCT_AUTO_KERNELS_ONLY=ON",
              f"cmake --build {build_dry} -j "],
    "cuda-tests": [f"ctest --test-dir {build_dry} -L cuda -E '^cuda_run_' --output-on-failure"],
    "cuda-run": [f"tests/integration/check_cuda_run.py {s} {build_dry}/apps/train_gpt"
                 for s in ("gpt", "resnet", "precision", "layouts", "restart", "memory")],
    "bench-gpt": [f"validation/bench_gpu.py --only gpt --build {build_dry} --record"],
    "bench-resnet": [f"validation/bench_gpu.py --only resnet --build {build_dry} --record"],
}
for tool in ("memcheck", "racecheck", "synccheck", "initcheck"):
    key[tool] = [f"--tool {tool} --error-exitcode 86"] + [
        f"{build_dry}/tests/unit/kernels/{t} --gtest_color=no"
        for t in ("test_kernels_cuda", "test_cuda_core", "test_cuda_gpt", "test_cuda_resnet")]
sections = {}
for block in out.split("\nphase ")[1:]:
    sections[block.split(" ", 1)[0]] = block
for p, needles in key.items():
    for n in needles:
        check(n in sections.get(p, ""), f"{p}: `{n}`")
check(not os.path.exists(build_dry) and not os.path.exists(state_dry) and not os.path.exists(RESULTS),
      "--dry-run created no build, state or results folder")
check("no GPU here" in out, "--dry-run says there is no GPU here")

rc, out, _, _ = run(["--dry-run", "--phase", "racecheck", "--build-dir", build_dry, "--state", state_dry])
check(rc == 0 and "\nphase racecheck [" in out and "\nphase memcheck" not in out and "\nphase build" not in out,
      "--dry-run --phase racecheck shows that phase only")

print("== --next picks the first phase not done (--dry-run --next --state DIR)")
cases = [
    ("nothing recorded", [], "build"),
    ("build FAIL: re-run it", [("build", "FAIL")], "build"),
    ("build TIMEOUT: re-run it", [("build", "TIMEOUT")], "build"),
    ("a FAIL is done: move on", [("build", "PASS"), ("cuda-tests", "FAIL")], "memcheck"),
    ("a TIMEOUT is not done", [("build", "PASS"), ("cuda-tests", "PASS"), ("memcheck", "TIMEOUT")], "memcheck"),
    ("the last line of a phase counts", [("build", "PASS"), ("cuda-tests", "PASS"), ("memcheck", "TIMEOUT"),
                                         ("memcheck", "PASS")], "racecheck"),
    ("UNSUPPORTED and SKIPPED are done", [("build", "PASS"), ("cuda-tests", "PASS"), ("memcheck", "UNSUPPORTED"),
                                          ("racecheck", "UNSUPPORTED"), ("synccheck", "PASS"), ("initcheck", "FAIL"),
                                          ("cuda-run", "SKIPPED")], "bench-gpt"),
    ("a gap: the first not done", [("build", "PASS"), ("memcheck", "PASS")], "cuda-tests"),
    ("everything done", [(p, "PASS") for p in PHASES], None),
]
for what, lines, want in cases:
    seed(state_dry, lines)
    rc, out, err, _ = run(["--dry-run", "--next", "--state", state_dry, "--build-dir", build_dry])
    shown = [b.split(" ", 1)[0] for b in out.split("\nphase ")[1:]]
    if want is None:
        check(rc == 0 and "next phase : none (all phases done)" in out and not shown, f"{what}: none")
    else:
        check(rc == 0 and f"next phase : {want}\n" in out and shown == [want], f"{what}: {want} (shown: {shown})")
check(not os.path.exists(build_dry), "the dry runs with a state created no build folder")

# ---------------------------------------------------------------- errors ----
print("== errors")
rc, _, err, _ = run(["--phase", "nosuch"])
check(rc == 2 and "unknown phase 'nosuch'" in err and "build cuda-tests memcheck" in err,
      f"--phase nosuch: exit 2 naming the phases ({err.strip()})")
rc, _, err, _ = run(["--next", "--budget", "3"])
check(rc == 2 and "--budget" in err, f"--budget 3: exit 2 ({err.strip()})")
rc, _, err, _ = run([])
check(rc == 2 and "--next" in err, f"no mode: exit 2 ({err.strip()})")
state_nogpu = os.path.join(work, "state-nogpu")
seed(state_nogpu, [("build", "PASS")])
rc, out, err, _ = run(["--phase", "cuda-tests", "--state", state_nogpu, "--build-dir", build_dry])
check(rc == 2 and "no GPU found" in err and "/bin/false" in err and "--phase build and --dry-run" in err,
      f"a GPU phase without a GPU: exit 2, the cause and what to do ({err.strip()})")
check(last_statuses(state_nogpu) == {"build": "PASS"}, "... and nothing recorded")

# ---------------------------------------------------------------- machinery, against stubs ----
print("== every phase through --next, against stubs (10 s time guard)")
bin_dir = os.path.join(work, "bin")
build = os.path.join(work, "build")
state = os.path.join(work, "state")
flags = os.path.join(work, "flags")
os.makedirs(flags)
fake_test = """#!/bin/bash
echo "[==========] Running 3 tests from 1 test suite."
echo "[       OK ] Fake.One (1 ms)"
echo "[==========] 3 tests from 1 test suite ran. (3 ms total)"
echo "[  PASSED  ] 3 tests."
"""
write_exe(os.path.join(bin_dir, "cmake"), f"""#!/bin/bash
# stub: configure writes a cache (kernels-only: no apps); the first build outlives the guard, the next one finishes
if [ "$1" = --build ]; then
  echo "[1/2] Building CXX object lib/core/x.o"
  if [ ! -e {flags}/built_once ]; then touch {flags}/built_once; sleep 60; fi
  for t in test_kernels_cuda test_cuda_core test_cuda_gpt test_cuda_resnet; do
    mkdir -p "$2/tests/unit/kernels"; cp {bin_dir}/fake_test "$2/tests/unit/kernels/$t"
  done
  echo "[2/2] Linking CXX executable tests/unit/kernels/test_cuda_resnet"
  exit 0
fi
while [ $# -gt 0 ]; do [ "$1" = -B ] && b="$2"; shift; done
mkdir -p "$b"
printf 'HPCT_KERNELS_ONLY:BOOL=OFF\\nHPCT_KERNELS_ONLY_MISSING:INTERNAL=MPI (libopenmpi-dev)\\n' > "$b/CMakeCache.txt"
echo "-- HPCT_AUTO_KERNELS_ONLY: not found: MPI (libopenmpi-dev). Building the kernels-only subset"
echo "-- hpctrain 0.1.0 configuration"
echo "--   kernels only         : ON"
echo "-- "
""")
write_exe(os.path.join(bin_dir, "fake_test"), fake_test)
write_exe(os.path.join(bin_dir, "ctest"), """#!/bin/bash
# stub: FAKE_SKIPS lists tests to report as skipped
echo "1/3 Test #1: Fake.One .....   Passed    0.01 sec"
echo ""
echo "100% tests passed, 0 tests failed out of 3"
echo "Total Test time (real) =   0.05 sec"
if [ -n "${FAKE_SKIPS:-}" ]; then
  echo "The following tests did not run:"
  for t in $FAKE_SKIPS; do printf '\\t  7 - %s (Skipped)\\n' "$t"; done
fi
""")
write_exe(os.path.join(bin_dir, "nvidia-smi"), """#!/bin/bash
case "$*" in
  *--query-gpu*) echo "${FAKE_GPU:-NVIDIA FAKE GPU 80GB}, 999.01, 81559 MiB" ;;
  *) echo "| NVIDIA-SMI 999.01     Driver Version: 999.01     CUDA Version: 13.0 |" ;;
esac
""")
write_exe(os.path.join(bin_dir, "compute-sanitizer"), """#!/bin/bash
# stub: memcheck takes 30 s on test_cuda_core and finds an error in test_cuda_gpt; racecheck refuses the device
[ "$1" = --version ] && { echo "Version 2099.1.0 (stub)"; exit 0; }
while [ $# -gt 0 ]; do
  case "$1" in --tool) tool="$2"; shift 2 ;; --*) shift 2 ;; *) exe="$1"; shift; break ;; esac
done
if [ "$tool" = racecheck ]; then echo "========= Error: Device not supported (stub)"; exit 1; fi
name=$(basename "$exe")
[ "$tool" = memcheck ] && [ "$name" = test_cuda_core ] && sleep 30
"$exe" "$@"
if [ "$tool" = memcheck ] && [ "$name" = test_cuda_gpt ]; then
  echo "========= Invalid __global__ read of size 4 bytes"
  echo "=========     at fake_kernel(float *)+0x70"
  echo "========= ERROR SUMMARY: 1 error"
  exit 86
fi
echo "========= ERROR SUMMARY: 0 errors"
""")
env_nogpu = {"PATH": bin_dir + os.pathsep + os.environ["PATH"], "HPCT_COMPUTE_SANITIZER": os.path.join(bin_dir,
             "compute-sanitizer")}
env_gpu = dict(env_nogpu, HPCT_NVIDIA_SMI=os.path.join(bin_dir, "nvidia-smi"))
common = ["--build-dir", build, "--state", state, "--budget", "10"]


def step(args, env, want_rc, want_status, what):
    rc, out, err, secs = run(args + common, env)
    st = last_statuses(state).get(want_status[0]) if os.path.exists(os.path.join(state, "phases.tsv")) else None
    ok = check(rc == want_rc and st == want_status[1],
               f"{what}: exit {rc} (want {want_rc}), {want_status[0]} {st} (want {want_status[1]}), {secs:.0f} s")
    if not ok:
        print(out[-3000:], err[-2000:], sep="\n")
    return out, err


step(["--phase", "build"], env_nogpu, 3, ("build", "TIMEOUT"), "build cut by the guard, no GPU")
pending = os.path.join(state, "pending.md")
check(os.path.exists(pending) and "## build: TIMEOUT" in open(pending).read() and
      "continue the incremental build" in open(pending).read(), "its section waits in the state (pending.md)")
step(["--next"], env_nogpu, 0, ("build", "PASS"), "--next continues the build")
check(not os.path.exists(RESULTS), "no report without a GPU")
step(["--next"], env_gpu, 0, ("cuda-tests", "PASS"), "--next: cuda-tests (the stub GPU appears)")
reports = sorted(f for f in os.listdir(RESULTS) if f.endswith(".md")) if os.path.exists(RESULTS) else []
check(len(reports) == 1 and reports[0].startswith("gpu_nvidia_fake_gpu_80gb_20"), f"one report: {reports}")
report = os.path.join(RESULTS, reports[0]) if reports else os.devnull
logs = report[:-3]
text = open(report).read()
check("# GPU bring-up: NVIDIA FAKE GPU 80GB" in text and "| driver | 999.01 |" in text and
      "| CUDA (driver) | 13.0 |" in text, "report header: the device verbatim, driver, CUDA")
check(text.find("## build: TIMEOUT") < text.find("## build: PASS") < text.find("## cuda-tests: PASS") and
      text.find("## build: TIMEOUT") > 0, "the waiting build sections moved into the report, in order")
check(os.path.exists(os.path.join(logs, "build.log")) and os.path.exists(os.path.join(logs, "cuda-tests.log")) and
      not os.path.exists(pending), "logs next to the report (the build's moved there)")
step(["--next"], env_gpu, 3, ("memcheck", "TIMEOUT"), "memcheck: cut after its first part")
out, _ = step(["--next"], env_gpu, 3, ("memcheck", "TIMEOUT"),
              "memcheck resumed: the slow part, first now, times out for good")
check("test_kernels_cuda: clean (an earlier run)" in open(report).read(), "the finished part is not run again")
copy = os.path.join(work, "copy")
step(["--next", "--copy-to", copy], env_gpu, 1, ("memcheck", "FAIL"), "memcheck finished: an error found")
text = open(report).read()
mem = text[text.rfind("## memcheck:"):]
check("test_cuda_core: timeout" in mem and "test_cuda_gpt: errors (1 error(s))" in mem and
      "Invalid __global__ read" in mem and "test_cuda_resnet: clean" in mem, "memcheck's last section: every part")
check(os.path.exists(os.path.join(copy, reports[0] if reports else "x")) and
      os.path.exists(os.path.join(copy, os.path.basename(logs), "memcheck.log")), "--copy-to copied report and logs")
step(["--next"], env_gpu, 0, ("racecheck", "UNSUPPORTED"), "racecheck refused by the tool: UNSUPPORTED")
check("Device not supported" in open(report).read(), "the tool's reason in the report")
rc, _, err, _ = run(["--next"] + common, dict(env_gpu, FAKE_GPU="NVIDIA OTHER GPU"))
check(rc == 2 and "belongs to a bring-up on 'NVIDIA FAKE GPU 80GB'" in err, f"another GPU's state refused ({err.strip()})")
step(["--next"], env_gpu, 0, ("synccheck", "PASS"), "synccheck PASS")
step(["--next"], env_gpu, 0, ("initcheck", "PASS"), "initcheck PASS")
step(["--next"], env_gpu, 0, ("cuda-run", "SKIPPED"), "cuda-run SKIPPED (no apps)")
step(["--next"], env_gpu, 0, ("bench-gpt", "SKIPPED"), "bench-gpt SKIPPED")
step(["--next"], env_gpu, 0, ("bench-resnet", "SKIPPED"), "bench-resnet SKIPPED")
rc, out, _, _ = run(["--next"] + common, env_gpu)
check(rc == 0 and "all phases done" in out, "then --next: all phases done, exit 0")
text = open(report).read()
check("kernels-only build (HPCT_AUTO_KERNELS_ONLY; not found: MPI (libopenmpi-dev))" in text,
      "the skip names what the build lacked")
check([line[3:line.index(":")] for line in text.splitlines() if line.startswith("## ")] ==
      ["build", "build", "cuda-tests", "memcheck", "memcheck", "memcheck", "racecheck", "synccheck", "initcheck",
       "cuda-run", "bench-gpt", "bench-resnet"], "one section per invocation, in order")
rc, out, _, _ = run(["--status"] + common, env_gpu)
check(rc == 0 and "memcheck      FAIL" in out and "next: none" in out, "--status: the table and the next phase")
print("== cuda-tests: skips with a GPU present")
step(["--phase", "cuda-tests"], dict(env_gpu, FAKE_SKIPS="comm_nccl_np2 pipeline_nccl_np4"), 0, ("cuda-tests", "PASS"),
     "an NCCL test with more ranks than GPUs skips by design: PASS")
step(["--phase", "cuda-tests"], dict(env_gpu, FAKE_SKIPS="comm_nccl_np2 CudaCore.Foo comm_nccl_np1"), 1,
     ("cuda-tests", "FAIL"), "any other skip with a GPU present: FAIL")
text = open(report).read()
last = text[text.rfind("## cuda-tests:"):]
check("skipped by design (more NCCL ranks than the 1 visible GPU(s)): comm_nccl_np2" in last and
      "  CudaCore.Foo" in last and "  comm_nccl_np1" in last and "2 test(s) skipped although" in last,
      "the report tells the by-design skips from the others")

if failures:
    print(f"FAILED: gpu_bringup: {len(failures)} check(s): " + "; ".join(failures))
    sys.exit(1)
print("VALID: gpu_bringup")
