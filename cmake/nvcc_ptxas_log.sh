#!/usr/bin/env bash
# CUDA compiler launcher of hpct_kernels_cuda: runs the nvcc command line it is given (which carries -Xptxas=-v),
# shows its output in the build log as usual, and keeps ptxas' per-kernel lines next to the object file
# (<object>.ptxas.log) for cmake/ptxas_resources.py.
set -o pipefail
obj=""
prev=""
for a in "$@"; do
  if [[ "$prev" == "-o" ]]; then obj="$a"; fi
  prev="$a"
done
if [[ -z "$obj" ]]; then exec "$@"; fi
mkdir -p "$(dirname "$obj")"
"$@" 2> >(tee "$obj.ptxas.log" >&2)
rc=$?
wait
exit $rc
