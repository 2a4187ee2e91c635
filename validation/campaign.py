"""What the validation campaigns and benchmarks share (validation/equivalence.py, validation/scaling.py,
validation/bench_memory.py, validation/bench_zero.py): the repository root, the output directories (run directories
under --out, report artefacts next to --report), the machine description for the reports, and the apps' `--plan
--json` object. Python 3.11 (/usr/bin/python3)."""
import json
import os
import platform
import shutil
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def output_dirs(out, report, default_stem):
    """Clears and creates the run directory `out`; returns (out_root, artefact dir, artefact stem): the report's
    directory and file stem when a report is asked for, else out_root and default_stem."""
    out_root = os.path.abspath(out)
    shutil.rmtree(out_root, ignore_errors=True)
    os.makedirs(out_root)
    if report:
        art_dir = os.path.dirname(os.path.abspath(report))
        stem = os.path.splitext(os.path.basename(report))[0]
    else:
        art_dir, stem = out_root, default_stem
    os.makedirs(art_dir, exist_ok=True)
    return out_root, art_dir, stem


def machine_info(extra_lscpu=()):
    """lscpu's model and core lines, the CPU's bf16 instructions, memory, the MPI launcher's version, the OS and the git revision (informative
    only: a failure is recorded, not raised)."""
    machine = {}
    keys = ("Model name", "CPU(s)", "Thread(s) per core", "Hypervisor vendor") + tuple(extra_lscpu)
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for line in lscpu.splitlines():
            k, _, v = line.partition(":")
            if k.strip() in keys:
                machine[k.strip()] = v.strip()
        with open("/proc/cpuinfo") as f:  # what train.precision=bf16 multiplies with on this CPU (docs/precision.md)
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
        bf16 = [x for x in ("avx512_bf16", "amx_bf16") if x in flags]
        machine["bf16 instructions"] = " ".join(bf16) if bf16 else "none (bf16 storage runs with fp32 arithmetic)"
        with open("/proc/meminfo") as f:
            machine["memory"] = f"{int(f.readline().split()[1]) / 2**20:.1f} GiB"
        machine["mpirun"] = subprocess.run(["mpirun", "--version"], capture_output=True,
                                           text=True).stdout.splitlines()[0]
        machine["os"] = platform.platform()
        machine["git"] = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True,
                                        text=True).stdout.strip()
    except Exception as e:  # noqa: BLE001 - the description is informative only
        machine["error"] = str(e)
    # the libraries' kernel choice, where it was pinned (e.g. ONEDNN_MAX_CPU_ISA=AVX2 OPENBLAS_CORETYPE=Haswell run the
    # kernels an AVX2-only CPU runs, with their reduction orders)
    for k in ("ONEDNN_MAX_CPU_ISA", "OPENBLAS_CORETYPE"):
        if os.environ.get(k):
            machine[k] = os.environ[k]
    return machine


def run_plan(cmd, cmds=None, timeout=120, env=None):
    """Runs `train_gpt DECK --plan 1 --json ...` (cmd) and returns its "plan" object (parameters, flops_per_token, the
    device peak, memory: the one definition of those figures, docs/performance.md); records the command in cmds (when
    given), repository paths relative. A run that fails or prints no plan line prints its output and ends the tool
    FAILED."""
    if cmds is not None:
        cmds.append(" ".join(os.path.relpath(c, REPO) if os.path.isabs(c) and c.startswith(REPO) else
                             (f'"{c}"' if " " in c else c) for c in cmd))
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        out, err, rc = r.stdout, r.stderr, r.returncode
    except (OSError, subprocess.TimeoutExpired) as e:
        out, err, rc = "", str(e), None
    lines = [line for line in out.splitlines() if line.startswith('{"plan":')]
    if rc != 0 or len(lines) != 1:
        print(out[-2000:], err[-2000:])
        print(f"FAILED: {' '.join(cmd)} (exit {rc}): no --plan JSON line; build train_gpt or pass --train-gpt")
        sys.exit(1)
    return json.loads(lines[0])["plan"]


def set_args(sets):
    """["--set", s] for each of sets."""
    out = []
    for s in sets:
        out += ["--set", s]
    return out


def plan_json(exe, deck, world, sets, env):
    """The "plan" object of `APP DECK --plan WORLD --json --set ...`; exits FAILED naming the command otherwise."""
    return run_plan([exe, deck, "--plan", str(world), "--json"] + set_args(sets), env=env)
