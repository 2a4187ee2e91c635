#!/usr/bin/python3
"""The PyTorch 2.x of the CPU benchmarks: a virtual environment with PyPI's current torch, created once and cached.

Debian's python3-torch is 1.13 (no torch.compile, no scaled_dot_product_attention). validation/bench_gpt.py and
validation/bench_resnet.py also compare against a current PyTorch 2.x, which lives in a venv this module creates:
`python3 -m venv DIR && DIR/bin/python -m pip install torch numpy` (PyPI only: the CPU wheel index is not reachable
here, so pip pulls the default wheel with its CUDA runtime packages, several GB, minutes the first time; pip's own
cache, ~/.cache/pip, is kept, so a re-creation is quick). It runs on the CPU, torch.compile included (needs g++).
DIR: $HPCT_TORCH_VENV, else ~/.cache/hpctrain/torch-venv. The venv is built over /usr/bin/python3 (Debian's 3.11,
whose ensurepip works) without the system site-packages, so its torch is PyPI's, not Debian's.

Library use: torch2_python(create=True) -> path of the venv's python, or None with the reason printed (offline, no
space, ...); torch_version(python) -> "2.x.y" or None.
CLI: torch_venv.py [--create] [--dir DIR]   prints the python path and torch version (creates with --create).
"""
import argparse
import os
import shutil
import subprocess
import sys

DEFAULT_DIR = os.path.join(os.path.expanduser("~"), ".cache", "hpctrain", "torch-venv")
BASE_PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
PACKAGES = ["torch", "numpy"]


def venv_dir():
    return os.environ.get("HPCT_TORCH_VENV") or DEFAULT_DIR


def torch_version(python):
    """torch.__version__ as seen by `python`, or None when it cannot import torch."""
    try:
        p = subprocess.run([python, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True,
                           timeout=300)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return p.stdout.strip().splitlines()[-1] if p.returncode == 0 and p.stdout.strip() else None


def torch2_python(create=True, directory=None, log=print):
    """The venv's python if it imports a torch >= 2 (creating the venv first when create), else None."""
    d = directory or venv_dir()
    py = os.path.join(d, "bin", "python")
    v = torch_version(py) if os.path.exists(py) else None
    if v and int(v.split(".")[0]) >= 2:
        return py
    if not create:
        log(f"torch 2.x venv: {d} has no torch 2.x (create it with: {BASE_PYTHON} {os.path.abspath(__file__)} "
            f"--create)")
        return None
    log(f"torch 2.x venv: creating {d} ({BASE_PYTHON} -m venv; pip install {' '.join(PACKAGES)} from PyPI: "
        f"several GB and minutes the first time, pip's cache is kept)")
    sys.stdout.flush()
    try:
        if not os.path.exists(py):
            shutil.rmtree(d, ignore_errors=True)
            os.makedirs(os.path.dirname(d), exist_ok=True)
            subprocess.run([BASE_PYTHON, "-m", "venv", d], check=True)
        subprocess.run([py, "-m", "pip", "install", "--upgrade", *PACKAGES], check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        log(f"torch 2.x venv: creation failed ({e}); the PyTorch 2.x rows are skipped")
        return None
    v = torch_version(py)
    if not v or int(v.split(".")[0]) < 2:
        log(f"torch 2.x venv: {py} still has no torch 2.x (got {v}); the PyTorch 2.x rows are skipped")
        return None
    return py


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--create", action="store_true", help="create the venv when it is missing")
    ap.add_argument("--dir", default=None, help=f"venv directory (default $HPCT_TORCH_VENV or {DEFAULT_DIR})")
    a = ap.parse_args()
    py = torch2_python(create=a.create, directory=a.dir)
    if not py:
        return 1
    print(f"{py} torch {torch_version(py)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
