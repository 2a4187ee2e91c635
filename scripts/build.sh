#!/usr/bin/env bash
# Configures and builds hpctrain into ${HPCT_BUILD_DIR:-build} (Release). Extra arguments go to cmake's
# configure step, e.g. scripts/build.sh -DHPCT_ENABLE_CUDA=OFF.
#
#   scripts/build.sh [cmake args]          everything: the apps, the tools, every test, the CUDA host emulation and,
#                                          where nvcc is found, the CUDA backend (what scripts/test.sh runs)
#   scripts/build.sh --apps [cmake args]   only what the demo and the data preparation run: train_gpt,
#                                          train_resnet, ckpt_tool, prepare_text, prepare_images; no tests, and the
#                                          CUDA backend only where a GPU is visible (nvidia-smi lists one)
#
# Each mode states its options explicitly, so one build directory serves both in turn: a full build after --apps
# turns the tests and the CUDA backend (AUTO) back on, and later -D arguments override the mode's.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${HPCT_BUILD_DIR:-$here/build}"
apps_only=0
if [ "${1:-}" = "--apps" ]; then
  apps_only=1
  shift
fi
gen=()
if command -v ninja >/dev/null 2>&1 && [ ! -f "$build/Makefile" ]; then gen=(-G Ninja); fi
if [ "$apps_only" = 1 ]; then
  cuda=OFF
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then cuda=AUTO; fi
  echo "[build] the apps only (no tests; CUDA backend: $cuda)"
  cmake -S "$here" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DHPCT_ENABLE_TESTING=OFF \
    -DHPCT_ENABLE_CUDA="$cuda" "$@"
  cmake --build "$build" -j "$(nproc)" --target train_gpt train_resnet ckpt_tool prepare_text prepare_images
else
  cmake -S "$here" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DHPCT_ENABLE_TESTING=ON \
    -DHPCT_ENABLE_CUDA=AUTO "$@"
  cmake --build "$build" -j "$(nproc)"
fi
