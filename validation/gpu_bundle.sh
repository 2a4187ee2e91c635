#!/usr/bin/env bash
# A prebuilt hpctrain for a GPU machine that cannot build the apps: no MPI, no parallel HDF5 and no package registry
# there (docs/platform.md, "The GPU machine"), a few minutes of device time, and a limit on what can be copied over.
# Builds nothing on the GPU machine: everything is compiled here (the CUDA build for sm_90 compiles without a GPU).
#
#   bash validation/gpu_bundle.sh pack [--build DIR] [--out FILE] [--fast]
#       here: one xz archive (default .gpu/bundle.tar.xz) holding the apps and the CUDA test executables of DIR
#       (default build, configured with the CUDA backend), the kernel screen's JSON of a GPT-2 124M step at
#       micro-batch 64 (gpu_session.sh --profile's table), the tiny decks' data, and the Debian runtime libraries they
#       load apart from glibc, libstdc++ and the CUDA libraries (oneDNN, OpenBLAS, Open MPI with its components and
#       help files, PMIx, parallel HDF5, ...), laid out under usr/ as installed so Open MPI relocates with
#       OPAL_PREFIX; --fast: xz -0 (the ctest validation_gpu_bundle; about three times the size)
#   source validation/gpu_bundle.sh unpack [FILE]
#       there, in the repository root: unpacks into build/, data/ and .gpu/root/, drops every bundled library the
#       machine has itself (ldconfig), finds the CUDA libraries (the toolkit, or the nvidia-* wheels of its Python),
#       and exports LD_LIBRARY_PATH and, when the bundled Open MPI is the one kept, its relocation variables;
#       world-1 runs are MPI singletons (ess_singleton_isolated: no mpirun and no daemon needed); runs of several
#       ranks use the bundled mpirun (Open MPI's orterun, first in PATH with the relocated prefix). An NCCL carried by
#       validation/nccl_carry.sh (.gpu/nccl-lib/libnccl.so.2, verified against its manifest) goes first in
#       LD_LIBRARY_PATH, ahead of the machine's own
#
# validation/gpu_session.sh runs the GPU checks from such a bundle within one command's time limit.
set -uo pipefail

gpu_bundle_pack() {
  # One LZMA2 stream with a 256 MiB dictionary: every executable holds the same static libraries (host code and the
  # kernels' sm_90 images, ~12 MB each), which a dictionary larger than the whole stage finds again; xz's default
  # (8 MiB, and a block per thread) compressed each copy anew: 59 MiB against 37 MiB, and a device call carries 64 MiB
  # with the working tree. Compression needs ~2.7 GB of memory, decompression 256 MiB.
  local root build out xz_opt="--lzma2=preset=6,dict=256MiB -T1"
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  build="$root/build" out="$root/.gpu/bundle.tar.xz"
  while [ "$#" -gt 0 ]; do
    case "$1" in
      --build) build="$2"; shift 2 ;;
      --out) out="$2"; shift 2 ;;
      --fast) xz_opt="-0 -T0"; shift ;;
      *) echo "gpu_bundle: unknown argument '$1'" >&2; return 2 ;;
    esac
  done
  # prepare_images: check_cuda_run.py resnet_imagenet writes its small ImageNet-style data set with it
  local exes=(apps/train_gpt apps/train_resnet apps/ckpt_tool apps/prepare_images tests/unit/kernels/test_kernels_cuda
              tests/unit/kernels/test_cuda_core tests/unit/kernels/test_cuda_gpt tests/unit/kernels/test_cuda_resnet
              tests/unit/train/test_cuda_device tests/mpi/comm/test_comm_nccl tests/mpi/pipeline/test_pipeline_nccl)
  local optional=(tests/mpi/comm/test_comm_staged validation/bench_attention_cuda)  # bundled when the build has them
  local data=(kjv_train.bin kjv_val.bin fmnist_train_10k.h5 fmnist_test.h5)
  local e
  for e in "${exes[@]}"; do
    [ -x "$build/$e" ] || { echo "gpu_bundle: $build/$e is missing: build with the CUDA backend first" >&2; return 1; }
  done
  for e in "${optional[@]}"; do
    if [ -x "$build/$e" ]; then exes+=("$e"); else echo "gpu_bundle: $build/$e not built: not bundled" >&2; fi
  done
  for e in "${data[@]}"; do
    [ -f "$root/data/$e" ] || { echo "gpu_bundle: data/$e is missing: run scripts/prepare_data.sh" >&2; return 1; }
  done
  local stage
  stage="$(mktemp -d)"
  mkdir -p "$stage/build" "$stage/data" "$stage/.gpu/root/lib"
  for e in "${exes[@]}"; do
    mkdir -p "$stage/build/$(dirname "$e")"
    cp -p "$build/$e" "$stage/build/$e"
  done
  for e in "${data[@]}"; do cp -p "$root/data/$e" "$stage/data/"; done
  # The kernel screen's bytes per own kernel of a GPT-2 124M bf16 step at micro-batch 64, for the per-kernel table of
  # gpu_session.sh --profile (validation/kernel_table.py) where the GPU hides its DRAM counters.
  if [ -x "$build/tests/cuda_emu/kernel_screen" ]; then
    "$build/tests/cuda_emu/kernel_screen" --micro-batch 64 --json "$stage/build/kernel_screen_gpt2_bf16_mb64.json" \
      > /dev/null || { echo "gpu_bundle: kernel_screen failed" >&2; rm -rf "$stage"; return 1; }
  else
    echo "gpu_bundle: $build/tests/cuda_emu/kernel_screen not built: a profile's table will lack the bytes" >&2
  fi
  # Open MPI's and PMIx's plugin folders and help texts, at their installed paths under usr/.
  local multi=/usr/lib/x86_64-linux-gnu d
  for d in "$multi/openmpi/lib/openmpi3" "$multi/pmix2" /usr/share/openmpi /usr/share/pmix; do
    [ -d "$d" ] || continue
    mkdir -p "$stage/.gpu/root$(dirname "$d")"
    cp -a "$d" "$stage/.gpu/root$d"
  done
  # The launcher for runs of several ranks (mpirun is Open MPI's orterun; orted for completeness), at its installed
  # path, so that the relocated prefix's bin/ holds it.
  mkdir -p "$stage/.gpu/root/usr/bin"
  for e in orterun orted; do
    [ -x "/usr/bin/$e" ] && cp -p "/usr/bin/$e" "$stage/.gpu/root/usr/bin/$e"
  done
  [ -x "$stage/.gpu/root/usr/bin/orterun" ] && ln -s orterun "$stage/.gpu/root/usr/bin/mpirun"
  # Every shared library the executables and the plugins load, except glibc's, the C++ runtime's and CUDA's.
  local skip='^(linux-vdso|ld-linux|libc|libm|libdl|libpthread|librt|libresolv|libutil|libstdc\+\+|libgcc_s'
  skip+='|libcuda|libcudart|libcublas|libcublasLt|libcudnn.*|libnccl|libnvrtc|libnvJitLink)\.so'
  {
    for e in "${exes[@]}"; do ldd "$build/$e"; done
    find "$stage/.gpu/root" \( -name '*.so' -o -path '*/usr/bin/*' \) -type f -exec ldd {} \; 2>/dev/null
  } | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' | sort -u | while read -r name path; do
    [[ "$name" =~ $skip ]] && continue
    cp -L "$path" "$stage/.gpu/root/lib/$name"
  done
  mkdir -p "$(dirname "$out")"
  XZ_OPT="$xz_opt" tar -C "$stage" -cJf "$out" build data .gpu
  rm -rf "$stage"
  echo "gpu_bundle: $out ($(du -h "$out" | cut -f1)); $(tar -tJf "$out" | grep -c '\.so') libraries"
}

gpu_bundle_unpack() {
  local file="${1:-.gpu/bundle.tar.xz}"
  [ -f "$file" ] ||
    { echo "gpu_bundle: $file is missing: run 'bash validation/gpu_bundle.sh pack' on the build machine" >&2; return 1; }
  tar -xJf "$file" || return 1
  local lib="$PWD/.gpu/root/lib" f so
  # The machine's own copy of a library wins (Python and torch load theirs): keep only what it lacks.
  for f in "$lib"/*.so*; do
    so="$(basename "$f")"
    if ldconfig -p | grep -q "^[[:space:]]*$so "; then rm -f "$f"; fi
  done
  local cuda_dirs="" n wheels
  wheels="$(python3 -c 'import os, nvidia; print(os.path.dirname(nvidia.__path__[0]))' 2>/dev/null || echo /nonexistent)"
  for n in libcublasLt.so.13 libcudnn.so.9 libnccl.so.2 libcudart.so.13 libcudnn_engines_precompiled.so.9; do
    f="$(find /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets /usr/lib/x86_64-linux-gnu \
          "$wheels" \
          -name "$n" 2>/dev/null | head -n 1)"
    if [ -n "$f" ]; then
      case ":$cuda_dirs:" in *":$(dirname "$f"):"*) ;; *) cuda_dirs="${cuda_dirs:+$cuda_dirs:}$(dirname "$f")" ;; esac
    else
      echo "gpu_bundle: warning: $n not found on this machine" >&2
    fi
  done
  # The machine's own library path, for the programs that must not see the bundle's (validation/bench_gpu.py runs
  # PyTorch with it: torch loads its own wheels' cuDNN and NCCL); kept from the first unpack when sourced again.
  [ -n "${HPCT_HOST_LD_LIBRARY_PATH+set}" ] || export HPCT_HOST_LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}"
  export LD_LIBRARY_PATH="$lib:$cuda_dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  if [ -f "$lib/libmpi.so.40" ]; then  # the bundled Open MPI, relocated; a machine's own keeps its own plugins
    export OPAL_PREFIX="$PWD/.gpu/root/usr"
    export OMPI_MCA_mca_base_component_path="$OPAL_PREFIX/lib/x86_64-linux-gnu/openmpi/lib/openmpi3"
    export PMIX_MCA_mca_base_component_path="$OPAL_PREFIX/lib/x86_64-linux-gnu/pmix2/lib/pmix"
    export PMIX_INSTALL_PREFIX="$OPAL_PREFIX/lib/x86_64-linux-gnu/pmix2"
    export PATH="$OPAL_PREFIX/bin:$PATH"  # its mpirun, for runs of several ranks
  fi
  export OMPI_MCA_ess_singleton_isolated=1 OMPI_MCA_mca_base_component_show_load_errors=0
  export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  echo "gpu_bundle: unpacked; CUDA libraries from ${cuda_dirs:-nowhere}; $(ls "$lib" | wc -l) bundled libraries kept"
  # An NCCL carried over (validation/nccl_carry.sh assemble, or probe --adopt) is newer than the machine's on purpose:
  # the rule above does not apply to it. When it verifies against its manifest it goes first in LD_LIBRARY_PATH.
  if [ -e "$PWD/.gpu/nccl-lib/libnccl.so.2" ]; then
    # shellcheck source=validation/nccl_carry.sh
    source "$(dirname "${BASH_SOURCE[0]}")/nccl_carry.sh" env "$PWD" ||
      echo "gpu_bundle: warning: .gpu/nccl-lib/libnccl.so.2 does not verify: the NCCL found above is used" >&2
  fi
}

case "${1:-}" in
  pack) shift; gpu_bundle_pack "$@" || exit 1 ;;
  unpack) shift; gpu_bundle_unpack "$@" ;;
  *) echo "usage: bash validation/gpu_bundle.sh pack [--build DIR] [--out FILE] [--fast]" \
          "| source validation/gpu_bundle.sh unpack [FILE]" >&2
     false ;;
esac
