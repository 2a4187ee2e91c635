#!/usr/bin/env bash
# Installs every system dependency of hpctrain from Debian 12's packages (idempotent).
# Run as root (or with sudo available). CUDA is expected preinstalled at /usr/local/cuda (optional).
set -euo pipefail

PKGS=(
  build-essential cmake ninja-build pkg-config git
  openmpi-bin libopenmpi-dev                      # MPI (Open MPI 4.1)
  libhdf5-openmpi-dev hdf5-tools                  # parallel HDF5 (never also libhdf5-dev)
  zlib1g-dev                                      # gzip reading (apps/prepare_images)
  libtomlplusplus-dev libcli11-dev nlohmann-json3-dev libfmt-dev
  libgtest-dev libgmock-dev
  clang-format                                    # C++ style check (scripts/check_format.sh, ctest -L format)
  libopenblas-openmp-dev libopenblas-dev          # BLAS, OpenMP build selected below
  libdnnl-dev ocl-icd-opencl-dev                  # oneDNN (measured against OpenBLAS by validation/bench_gemm)
  python3-h5py python3-numpy python3-torch python3-torchvision  # PyTorch cross-checks (call /usr/bin/python3)
  python3-matplotlib                              # validation report plots
  python3-pip                                     # fetches the cuDNN frontend's headers (below)
  bible-kjv bible-kjv-text                        # the embedded default corpus
  dataset-fashion-mnist                           # Fashion-MNIST IDX files (image decks)
  slurm-wlm slurmctld slurmd slurm-client munge libpmix-dev  # Slurm 22.05 for the template tests (tests/slurm)
)

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "[setup] installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "[setup] all Debian packages present"
fi

# Select the OpenMP build of OpenBLAS system-wide: the pthread build fights OpenMP threads.
ARCHLIB=/usr/lib/x86_64-linux-gnu
for alt in libopenblas.so.0-x86_64-linux-gnu libopenblas.so-x86_64-linux-gnu \
           libblas.so.3-x86_64-linux-gnu liblapack.so.3-x86_64-linux-gnu; do
  name=${alt%-x86_64-linux-gnu}
  target="$ARCHLIB/openblas-openmp/$name"
  if [ -e "$target" ] && update-alternatives --query "$alt" >/dev/null 2>&1; then
    $SUDO update-alternatives --set "$alt" "$target" >/dev/null
  fi
done
# The cuDNN frontend (header-only C++ over cuDNN's graph API: the fused attention of train.attention = cudnn) is
# not packaged by Debian nor shipped with the CUDA toolkit: its headers come from PyPI's wheel, pinned by version and
# checksum, unpacked to $FE_DIR (where CMake looks for them). Only where the CUDA toolkit is. It is optional: when it
# cannot be fetched (no route to PyPI, a checksum that differs) setup says so and goes on, and the build compiles the
# CUDA backend without that attention (a run asking for it is refused, naming this script).
FE_VERSION=1.32.0
FE_WHEEL=nvidia_cudnn_frontend-$FE_VERSION-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl
FE_SHA256=c6006556017a4d1c914c52a556c71b1267f2d6a0500f742e7b4edef539878df0
FE_DIR=/opt/cudnn-frontend/$FE_VERSION
install_cudnn_frontend() {  # into a temporary folder first, so that a failure leaves no half-made $FE_DIR
  local tmp
  tmp="$(mktemp -d)" || return 1
  /usr/bin/python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 \
    --platform manylinux_2_28_x86_64 "nvidia-cudnn-frontend==$FE_VERSION" -d "$tmp" &&
    echo "$FE_SHA256  $tmp/$FE_WHEEL" | sha256sum -c --quiet - &&
    /usr/bin/python3 -c 'import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
z.extractall(sys.argv[2], [n for n in z.namelist() if n.startswith("include/")])' "$tmp/$FE_WHEEL" "$tmp/fe" &&
    $SUDO mkdir -p "$(dirname "$FE_DIR")" && $SUDO rm -rf "$FE_DIR" && $SUDO mv "$tmp/fe" "$FE_DIR"
  local rc=$?
  rm -rf "$tmp"
  return $rc
}
if [ -d /usr/local/cuda ] && [ ! -f "$FE_DIR/include/cudnn_frontend.h" ]; then
  echo "[setup] cuDNN frontend $FE_VERSION headers -> $FE_DIR"
  install_cudnn_frontend || echo "[setup] warning: the cuDNN frontend $FE_VERSION was not installed (above): the CUDA" \
    "build will refuse train.attention = cudnn; run this script again where PyPI is reachable" >&2
fi
echo "[setup] done"
