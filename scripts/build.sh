#!/usr/bin/env bash
# Configures and builds hpctrain into ${HPCT_BUILD_DIR:-build} (Release). Extra arguments go to cmake's
# configure step, e.g. scripts/build.sh -DHPCT_ENABLE_CUDA=OFF.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${HPCT_BUILD_DIR:-$here/build}"
gen=()
if command -v ninja >/dev/null 2>&1 && [ ! -f "$build/Makefile" ]; then gen=(-G Ninja); fi
cmake -S "$here" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build "$build" -j "$(nproc)"
