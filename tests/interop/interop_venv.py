#!/usr/bin/python3
"""The Python of the interop tests: Debian's torch 1.13 and torchvision plus pinned Hugging Face packages from PyPI.

The `interop` tests prove hpctrain's exports and imports against the real libraries: transformers'
GPT2LMHeadModel, torchvision's ResNets, the safetensors package. Debian ships torch 1.13 and torchvision but not
transformers or safetensors, so this module keeps a virtual environment made with `--system-site-packages` over
/usr/bin/python3 (it sees Debian's torch, torchvision, numpy and h5py, so no PyTorch wheel is downloaded) and
installs the pinned PACKAGES below into it from PyPI (~20 s the first time, pip's cache is kept; then instant).
transformers 4.46 is the last 4.x line that runs on torch 1.13.
DIR: $HPCT_INTEROP_VENV, else ~/.cache/hpctrain/interop-venv.

Library use (from a test running under /usr/bin/python3):
    python = interop_python()        # the venv's python, created when missing; None (reason printed) when it
                                     # cannot be had (offline, no space): the caller skips with exit code 77
    reexec_in_venv()                 # re-runs the calling script under that python (or exits 77 with SKIPPED)
CLI: interop_venv.py [--create]      prints the python path and the package versions.
"""
import argparse
import os
import shutil
import subprocess
import sys

DEFAULT_DIR = os.path.join(os.path.expanduser("~"), ".cache", "hpctrain", "interop-venv")
BASE_PYTHON = "/usr/bin/python3"
PACKAGES = ["transformers==4.46.3", "safetensors==0.4.5", "tokenizers==0.20.3", "huggingface_hub==0.26.5"]
PROBE = ("import torch, torchvision, transformers, safetensors, numpy; "
         "print(transformers.__version__, safetensors.__version__, torch.__version__, torchvision.__version__)")


def venv_dir():
    return os.environ.get("HPCT_INTEROP_VENV") or DEFAULT_DIR


def versions(python):
    """'transformers safetensors torch torchvision' versions as seen by python, or None when an import fails."""
    try:
        p = subprocess.run([python, "-c", PROBE], capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return p.stdout.strip().splitlines()[-1] if p.returncode == 0 and p.stdout.strip() else None


def pinned_ok(v):
    want = {p.split("==")[0]: p.split("==")[1] for p in PACKAGES}
    return v is not None and v.split()[0] == want["transformers"] and v.split()[1] == want["safetensors"]


def interop_python(create=True, log=print):
    d = venv_dir()
    py = os.path.join(d, "bin", "python")
    if os.path.exists(py) and pinned_ok(versions(py)):
        return py
    if not create:
        log(f"interop venv: {d} is missing or incomplete (create it with {BASE_PYTHON} {os.path.abspath(__file__)} "
            f"--create)")
        return None
    log(f"interop venv: creating {d} ({BASE_PYTHON} -m venv --system-site-packages; pip install "
        f"{' '.join(PACKAGES)})")
    sys.stdout.flush()
    try:
        if not os.path.exists(py):
            shutil.rmtree(d, ignore_errors=True)
            os.makedirs(os.path.dirname(d), exist_ok=True)
            subprocess.run([BASE_PYTHON, "-m", "venv", "--system-site-packages", d], check=True)
        subprocess.run([py, "-m", "pip", "install", "--quiet", *PACKAGES], check=True, timeout=900)
    except (OSError, subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
        log(f"interop venv: creation failed ({e})")
        return None
    v = versions(py)
    if not pinned_ok(v):
        log(f"interop venv: {py} cannot import the pinned packages with Debian's torch and torchvision (got {v}); "
            f"install python3-torch python3-torchvision (scripts/install_deps.sh)")
        return None
    return py


def reexec_in_venv():
    """Re-runs the calling script under the venv's python (no-op when already there); exit 77 when impossible."""
    if os.environ.get("HPCT_INTEROP_IN_VENV") == "1":
        return
    py = interop_python()
    if py is None:
        print("SKIPPED: the interop packages (transformers, safetensors) cannot be had here (see above); "
              "these tests need PyPI once to create the venv")
        sys.exit(77)
    sys.stdout.flush()
    env = dict(os.environ, HPCT_INTEROP_IN_VENV="1")
    os.execve(py, [py, *sys.argv], env)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--create", action="store_true", help="create the venv when it is missing")
    a = ap.parse_args()
    py = interop_python(create=a.create)
    if not py:
        return 1
    print(f"{py} (transformers safetensors torch torchvision: {versions(py)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
