#!/usr/bin/env bash
# README command 2: install the dependencies, build, prepare the data and run the whole test suite.
# Extra arguments go to ctest (e.g. -L unit, -R config).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
bash scripts/setup.sh
bash scripts/build.sh
bash scripts/prepare_data.sh
build="${HPCT_BUILD_DIR:-$here/build}"
ctest --test-dir "$build" --output-on-failure -j 2 "$@"
