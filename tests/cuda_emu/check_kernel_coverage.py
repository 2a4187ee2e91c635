#!/usr/bin/env python3
"""Every __global__ kernel of lib/kernels/cuda/ runs under the CUDA host emulation: its name is the first argument
of an EMU_LAUNCH in a tests/cuda_emu/test_emu_*.cpp, or it is listed, with a reason, in
tests/cuda_emu/kernels_not_emulated.hpp. Fails naming the kernels that are neither, and the names that the tests or
the list mention but no kernel has (stale entries).

usage: check_kernel_coverage.py [--list] [SOURCE_ROOT]   |   check_kernel_coverage.py --self-test
  --list  also print each kernel with its header and the emulated test that launches it (or the reason)
"""
import pathlib
import re
import sys
import tempfile

KERNEL = re.compile(r"__global__\s+void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?(\w+)\s*\(")
LAUNCH = re.compile(r"EMU_LAUNCH\(\s*\(?\s*([\w:]+)")  # a kernel template with several arguments is parenthesized
LISTED = re.compile(r'\{\s*"(\w+)",\s*"')


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def check(root):
    root = pathlib.Path(root)
    kernels = {}
    for path in sorted((root / "lib/kernels/cuda").glob("*.cu*")):
        for name in KERNEL.findall(strip_comments(path.read_text())):
            kernels.setdefault(name, path.name)
    launched = {}
    for path in sorted((root / "tests/cuda_emu").glob("test_emu_*.cpp")):
        for expr in LAUNCH.findall(strip_comments(path.read_text())):
            launched.setdefault(expr.split("::")[-1], path.name)
    listed = set(LISTED.findall(strip_comments((root / "tests/cuda_emu/kernels_not_emulated.hpp").read_text())))
    problems = []
    for name, where in sorted(kernels.items()):
        if name not in launched and name not in listed:
            problems.append(f"kernel {name} ({where}) has no emulated test: launch it with EMU_LAUNCH in a "
                            f"tests/cuda_emu/test_emu_*.cpp against the CPU backend, or list it with the reason in "
                            f"tests/cuda_emu/kernels_not_emulated.hpp")
    for name in sorted(set(launched) - set(kernels)):
        problems.append(f"{launched[name]} launches {name}, which is no __global__ kernel of lib/kernels/cuda")
    for name in sorted(listed - set(kernels)):
        problems.append(f"kernels_not_emulated.hpp lists {name}, which is no __global__ kernel of lib/kernels/cuda")
    for name in sorted(listed & set(launched)):
        problems.append(f"{name} is both launched by an emulated test and listed as not emulated")
    return kernels, launched, listed, problems


def self_test():
    with tempfile.TemporaryDirectory() as d:
        root = pathlib.Path(d)
        (root / "lib/kernels/cuda").mkdir(parents=True)
        (root / "tests/cuda_emu").mkdir(parents=True)
        (root / "lib/kernels/cuda/a.cuh").write_text(
            "__global__ void __launch_bounds__(256)\n    covered_kernel(float* x) {}\n"
            "template <int N>\n__global__ void uncovered_kernel(int n) {}\n"
            "template <bool B, typename S>\n__global__ void paren_kernel(S* x) {}\n"
            "// __global__ void commented_kernel(int n) {}\n__global__ void probe_kernel() {}\n")
        (root / "tests/cuda_emu/test_emu_a.cpp").write_text(
            "EMU_LAUNCH(ns::covered_kernel, s, x);\n// EMU_LAUNCH(uncovered_kernel, s, 1);\n"
            "EMU_LAUNCH((ns::paren_kernel<true, float>), s, x);\n")
        (root / "tests/cuda_emu/kernels_not_emulated.hpp").write_text('{"probe_kernel", "a reason"},\n')
        kernels, _, _, problems = check(root)
        assert set(kernels) == {"covered_kernel", "uncovered_kernel", "paren_kernel", "probe_kernel"}, kernels
        assert len(problems) == 1 and "uncovered_kernel" in problems[0], problems
    print("self-test passed")


def main():
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        return 0
    args = sys.argv[1:]
    listing = "--list" in args
    args = [a for a in args if a != "--list"]
    root = args[0] if args else pathlib.Path(__file__).resolve().parents[2]
    kernels, launched, listed, problems = check(root)
    if listing:
        for name, where in sorted(kernels.items(), key=lambda kv: (kv[1], kv[0])):
            print(f"  {where:28s} {name:34s} {launched.get(name, 'not emulated (kernels_not_emulated.hpp)')}")
    covered = sum(1 for k in kernels if k in launched)
    print(f"{len(kernels)} __global__ kernels in lib/kernels/cuda: {covered} launched by emulated tests, "
          f"{sum(1 for k in kernels if k in listed)} listed as not emulated")
    for p in problems:
        print("FAIL:", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
