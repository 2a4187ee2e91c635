#!/usr/bin/env python3
"""How much the CUDA host emulation catches: plants one defect at a time in a kernel header of lib/kernels/cuda
(a missing barrier, a wrong mask, a lost padding write, a tie broken the other way, an out-of-bounds write, a
launch an H100 refuses, ...),
rebuilds the emulated test of that group and requires it to fail; then restores the header. Every mutation must be
caught, and the unmutated tests must pass. A scratch CPU-only build (HPCT_ENABLE_CUDA=OFF: the emulation needs no
CUDA) in --build (default build-emu-mutations) is configured once; the source tree is restored even on Ctrl-C.

usage: /usr/bin/python3 validation/emu_mutations.py [--build DIR] [--report FILE.md]
"""
import argparse
import os
import pathlib
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
CUDA = ROOT / "lib/kernels/cuda"

# (name, header, text to replace, replacement, the emulated test that must fail, what the emulation should see)
MUTATIONS = [
    ("LayerNorm dweight: the barrier between the partial sums and their reduction removed",
     "cuda_core_kernels.cuh", "  part_b[ty][tx] = acc_b;\n  __syncthreads();", "  part_b[ty][tx] = acc_b;",
     "test_emu_core", "a race: different bits under the schedules, NaN poison read"),
    ("block_sum: the barrier that protects the shared slots from a previous call removed",
     "cuda_device_common.cuh", "  __syncthreads();  // shared may be reused by a previous call\n", "",
     "test_emu_resnet", "a race between two consecutive block sums (BatchNorm's gradient sums)"),
    ("LayerNorm forward: rows leave per lane, before the warp shuffles",
     "cuda_core_kernels.cuh", "  if (row >= N) return;  // uniform over the warp: the shuffles below see all 32 lanes",
     "  if (row >= N || lane >= C) return;",
     "test_emu_core", "a shuffle whose mask names lanes that returned"),
    ("encoder dwte: the row-ownership test dropped (two threads add into one element)",
     "cuda_core_kernels.cuh", "j < Vl && j % kWteGroups == g;", "j < Vl;",
     "test_emu_core", "dwte differs from the CPU's (each position added kWteGroups times)"),
    ("cross-entropy: the padded columns of dlogits no longer written",
     "cuda_gpt_kernels.cuh", "    for (int v0 = threadIdx.x * P; v0 < Vp; v0 += step) {",
     "    for (int v0 = threadIdx.x * P; v0 < V; v0 += step) {",
     "test_emu_gpt", "padding keeps the logits instead of 0"),
    ("flash forward: the causal mask lets a query see its next key",
     "cuda_flash_attention.cuh", "      const bool visible = j <= t && j < T;", "      const bool visible = j <= t + 1 && j < T;",
     "test_emu_flash_attention", "out differs from the CPU's causal attention"),
    ("max-pool: ties go to the last maximum instead of the first",
     "cuda_resnet_kernels.cuh", "          if (v > best || arg < 0) {", "          if (v >= best || arg < 0) {",
     "test_emu_resnet", "the argmax (and dinp) differ from the CPU's bit for bit"),
    ("scale: the grid-stride loop writes one element past the end (every value in range stays right)",
     "cuda_core_kernels.cuh", "HPCT_GRID_STRIDE_LOOP(i, n) x[i] *= s;", "HPCT_GRID_STRIDE_LOOP(i, n + 1) x[i] *= s;",
     "test_emu_core", "AddressSanitizer: a heap-buffer-overflow write in scale_kernel"),
    ("LayerNorm rows: a 1056-thread block (33 warps)",
     "cuda_core_kernels.cuh", "constexpr int kLnWarps = 8;", "constexpr int kLnWarps = 33;",
     "test_emu_core", "an H100 would refuse the launch (more than 1024 threads per block)"),
]


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, errors="replace", **kw)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=str(ROOT / "build-emu-mutations"))
    ap.add_argument("--report")
    args = ap.parse_args()
    build = pathlib.Path(args.build)
    t0 = time.time()
    if not (build / "build.ninja").exists():
        p = run(["cmake", "-S", str(ROOT), "-B", str(build), "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
                 "-DHPCT_ENABLE_CUDA=OFF", "-DHPCT_KERNELS_ONLY=ON"])
        if p.returncode != 0:
            sys.exit(f"configure failed:\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
    tests = sorted({m[4] for m in MUTATIONS})

    def build_and_run(test):
        p = run(["ninja", "-C", str(build), test])
        if p.returncode != 0:
            return "build failed", p.stdout[-1500:]
        exe = build / "tests/cuda_emu" / test
        p = run([str(exe), "--gtest_brief=1"], timeout=300, env=dict(os.environ, HPCT_EMU_WATCHDOG_S="60"))
        return ("passed" if p.returncode == 0 else "failed"), p.stdout + p.stderr

    rows, bad, baseline = [], 0, []
    for test in tests + ["test_cuda_emu"]:  # the baseline: unmutated, every test passes (timed without the build)
        build_and_run(test)
        t = time.time()
        status, out = build_and_run(test)
        baseline.append((test, time.time() - t, next((l for l in out.splitlines() if "[==========]" in l and "ran." in l), "")))
        print(f"baseline {test}: {status} in {baseline[-1][1]:.1f} s", flush=True)
        if status != "passed":
            sys.exit(f"the unmutated {test} does not pass:\n{out[-4000:]}")
    for name, header, old, new, test, expect in MUTATIONS:
        path = CUDA / header
        original = path.read_text()
        if original.count(old) != 1:
            sys.exit(f"mutation '{name}': the text to replace occurs {original.count(old)} times in {header}")
        try:
            path.write_text(original.replace(old, new))
            t = time.time()
            status, out = build_and_run(test)
        finally:
            path.write_text(original)
        caught = status == "failed"
        bad += not caught
        evidence = ""
        for pattern in ("(a race)", "cuda_emu: kernel", "AddressSanitizer:", "differ", ": got ", "Which is", "Failure"):
            evidence = next((line.strip() for line in out.splitlines() if pattern in line), "")
            if evidence:
                break
        rows.append((name, test, "caught" if caught else f"MISSED ({status})", expect, evidence[:160],
                     time.time() - t))
        print(f"{'caught' if caught else 'MISSED'}: {name} ({test}, {time.time() - t:.0f} s)\n    {evidence[:200]}",
              flush=True)
    # the headers are back: the last build must pass again
    for test in tests:
        status, _ = build_and_run(test)
        if status != "passed":
            bad += 1
            print(f"after restoring the headers {test} does not pass")
    verdict = "ALL CAUGHT" if bad == 0 else f"{bad} MISSED"
    print(f"{len(MUTATIONS)} mutations: {verdict} ({time.time() - t0:.0f} s)")
    if args.report:
        with open(args.report, "w") as f:
            f.write("# Mutations of the CUDA kernels caught by the host emulation\n\n")
            f.write(f"Command: `/usr/bin/python3 validation/emu_mutations.py --report {args.report}`  \n")
            cpu = run(["sh", "-c", "lscpu | sed -n 's/^Model name: *//p'"]).stdout.strip()
            kernel = run(["uname", "-srm"]).stdout.strip()
            f.write(f"Machine: {kernel}, {cpu}, {os.cpu_count()} cores; {time.strftime('%Y-%m-%d')}  \n")
            f.write(f"Verdict: **{verdict}** ({len(MUTATIONS)} mutations, {time.time() - t0:.0f} s)\n\n")
            f.write("| mutation | test | result | what the emulation should see | first evidence in the output |\n")
            f.write("|---|---|---|---|---|\n")
            for name, test, res, expect, ev, _ in rows:
                f.write(f"| {name} | {test} | {res} | {expect} | `{ev.replace('|', '/')}` |\n")
            f.write("\n## The unmutated emulated tests\n\nWall time of each executable on this machine (three "
                    "schedules per launch sequence; a CPU-only build with AddressSanitizer, HPCT_EMU_ASAN=ON):\n\n| executable | wall s | gtest |\n|---|---|---|\n")
            for test, secs, summary in baseline:
                f.write(f"| {test} | {secs:.1f} | {summary.strip()} |\n")
            cov = run([sys.executable, str(ROOT / "tests/cuda_emu/check_kernel_coverage.py"), "--list", str(ROOT)])
            f.write("\n## Kernel coverage\n\n`/usr/bin/python3 tests/cuda_emu/check_kernel_coverage.py --list`:\n\n")
            f.write("```\n" + cov.stdout + "```\n")
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
