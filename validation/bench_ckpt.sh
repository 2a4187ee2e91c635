#!/usr/bin/env bash
# Checkpoint write bandwidth at np 1 and np 2 (validation/bench_ckpt.cpp) against the disk's plain sequential
# write speed: dd of the same size with conv=fsync, in the same directory.
#
#   validation/bench_ckpt.sh [BUILD_DIR] [DIR] [SIZE_MIB]    defaults: build, BUILD_DIR/bench_ckpt_tmp, 512
#
# Ends with one greppable line:
#   SUMMARY bench_ckpt size_mib=512 np1_MiB_per_s=... np2_MiB_per_s=... dd_MiB_per_s=... ratio_np1_dd=... ratio_np2_dd=...
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$here/build}"
dir="${2:-$build/bench_ckpt_tmp}"
size="${3:-512}"
reps="${BENCH_CKPT_REPS:-5}"
exe="$build/validation/bench_ckpt"
[ -x "$exe" ] || { echo "bench_ckpt.sh: $exe not found: build it (cmake --build $build --target bench_ckpt)" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
mkdir -p "$dir"

echo "# machine: $(getconf _NPROCESSORS_ONLN) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(free -g | awk '/Mem:/{print $2}') GiB RAM"
echo "# disk: $(df -hT "$dir" | awk 'NR==2{print $1" ("$2", "$3")"}') for $dir"
declare -A rate
for np in 1 2; do
  out="$(mpirun -np "$np" --oversubscribe --bind-to none "$exe" --dir "$dir/ckpt" --size-mib "$size" --reps "$reps")"
  echo "$out"
  rate[$np]="$(echo "$out" | sed -n 's/^BENCH_CKPT .* MiB_per_s=\([0-9.]*\) .*/\1/p')"
done

# dd: the same number of bytes, sequential, fsynced at the end (median of 3).
count=$(( size / 4 ))
dd_rates=()
for i in 1 2 3; do
  secs="$(dd if=/dev/zero of="$dir/dd.bin" bs=4M count="$count" conv=fsync 2>&1 | sed -n 's/.* copied, \([0-9.]*\) s.*/\1/p')"
  rm -f "$dir/dd.bin"
  r="$(awk -v s="$size" -v t="$secs" 'BEGIN{printf "%.1f", s/t}')"
  echo "dd bs=4M count=$count conv=fsync: ${secs} s, ${r} MiB/s"
  dd_rates+=("$r")
done
dd_rate="$(printf '%s\n' "${dd_rates[@]}" | sort -g | sed -n 2p)"
rmdir "$dir" 2>/dev/null || true
awk -v s="$size" -v a="${rate[1]}" -v b="${rate[2]}" -v d="$dd_rate" 'BEGIN{
  printf "SUMMARY bench_ckpt size_mib=%d np1_MiB_per_s=%.1f np2_MiB_per_s=%.1f dd_MiB_per_s=%.1f ratio_np1_dd=%.2f ratio_np2_dd=%.2f\n",
         s, a, b, d, a/d, b/d }'
