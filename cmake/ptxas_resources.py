#!/usr/bin/env python3
"""Collects ptxas' per-kernel resource lines (nvcc -Xptxas=-v, kept by cmake/nvcc_ptxas_log.sh) into the table the
CUDA host emulation checks launches against (tests/cuda_emu): one line per kernel and architecture,
    <kernel base name> <registers> <static shared bytes>
the base name being the demangled name without namespaces, template arguments or parameters. Only entry functions
(__global__ kernels) of the newest architecture compiled are kept.

usage: ptxas_resources.py OUT LOG...
"""
import re
import subprocess
import sys

ENTRY = re.compile(r"Compiling entry function '(\S+)' for '(sm_\d+)'")
USED = re.compile(r"Used (\d+) registers(?:.*?(\d+) bytes smem)?")


def base_name(demangled):
    s = demangled
    depth, cut = 0, len(s)
    for i, ch in enumerate(s):  # the parameter list: the first '(' outside template brackets
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0 and not s.startswith("(anonymous", i):
            cut = i
            break
    s = s[:cut]
    out, depth = "", 0
    for ch in s:  # drop template arguments
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif depth == 0:
            out += ch
    out = out.split(" ")[-1]  # a template's return type comes first
    return out.split("::")[-1]


def main():
    out_path, logs = sys.argv[1], sys.argv[2:]
    entries = []  # (mangled, arch, registers, smem)
    for path in logs:
        try:
            lines = open(path, errors="replace").read().splitlines()
        except FileNotFoundError:
            continue
        current = None
        for line in lines:
            m = ENTRY.search(line)
            if m:
                current = (m.group(1), m.group(2))
                continue
            m = USED.search(line)
            if m and current:
                entries.append((current[0], current[1], int(m.group(1)), int(m.group(2) or 0)))
                current = None
    if entries:
        newest = max(int(e[1][3:]) for e in entries)
        entries = [e for e in entries if int(e[1][3:]) == newest]
        names = subprocess.run(["c++filt"], input="\n".join(e[0] for e in entries), capture_output=True,
                               text=True, check=True).stdout.splitlines()
    else:
        names = []
    with open(out_path, "w") as f:
        for (_, _, regs, smem), name in zip(entries, names):
            f.write(f"{base_name(name)} {regs} {smem}\n")
    print(f"ptxas_resources: {len(entries)} kernels -> {out_path}")


if __name__ == "__main__":
    main()
