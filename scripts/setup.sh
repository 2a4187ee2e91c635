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
echo "[setup] done"
