#!/usr/bin/env bash
# ctest validation_gpu_bundle: validation/gpu_bundle.sh end to end without a GPU. Packs the build (--fast), unpacks it
# into an empty folder as a GPU machine would, checks that the apps, the CUDA test executables, the data and Open MPI's
# plugins arrived, and trains the tiny GPT for 2 steps on the CPU from the unpacked tree and its environment.
#   check_gpu_bundle.sh BUILD_DIR WORK_DIR
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$1" work="$2"
fail() { echo "FAILED: $*"; exit 1; }
rm -rf "$work"
mkdir -p "$work/there"
bash "$root/validation/gpu_bundle.sh" pack --build "$build" --out "$work/bundle.tar.xz" --fast || fail "pack"
cd "$work/there"
# shellcheck source=validation/gpu_bundle.sh
source "$root/validation/gpu_bundle.sh" unpack "$work/bundle.tar.xz" || fail "unpack"
for f in build/apps/train_gpt build/apps/train_resnet build/apps/ckpt_tool build/tests/unit/kernels/test_cuda_gpt \
         build/tests/mpi/comm/test_comm_nccl data/kjv_train.bin data/fmnist_test.h5 \
         .gpu/root/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3/mca_pml_ob1.so; do
  [ -e "$f" ] || fail "$f is not in the bundle"
done
case ":$LD_LIBRARY_PATH:" in *":$PWD/.gpu/root/lib:"*) ;; *) fail "LD_LIBRARY_PATH lacks .gpu/root/lib" ;; esac
HPCT_DATA_DIR="$PWD/data" OMP_NUM_THREADS=1 build/apps/train_gpt "$root/inputs/gpt_tiny.toml" --out "$work/run" \
  --set train.steps=2 --set sample.tokens=0 > "$work/run.log" 2>&1 || { tail -5 "$work/run.log"; fail "train_gpt"; }
grep -q "^PERFORMANCE" "$work/run.log" || fail "train_gpt printed no PERFORMANCE line"
echo "VALID: gpu_bundle ($(du -h "$work/bundle.tar.xz" | cut -f1))"
