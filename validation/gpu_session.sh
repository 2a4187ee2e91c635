#!/usr/bin/env bash
# The GPU checks of validation/gpu_bringup.sh from a prebuilt bundle (validation/gpu_bundle.sh), inside one command's
# time limit on a machine that builds nothing: for a remote GPU lent for a few minutes, whose only way back is a
# folder. Run in the repository root with the bundle at .gpu/bundle.tar.xz:
#
#   bash validation/gpu_session.sh OUTDIR [--budget S] [--bench LIST] [--sanitize LIST] [--profile] [--profile-resnet]
#                                         [--extra NAME=COMMAND ...] [--skip LIST] [--layouts ARGS]
#                                         [--layouts-budget S]
#
# Phase A (in parallel, until 45% of the budget): the CUDA test executables (ctest label cuda, run directly: ctest's
# files hold this machine's absolute paths), tests/integration/check_cuda_run.py gpt resnet resnet_imagenet precision
# layouts restart memory (world 1), and compute-sanitizer (memcheck on every kernel test executable, racecheck on the GPT
# kernels; tools in --sanitize, default memcheck,racecheck). Phase B, alone on the GPU (timings): validation/bench_gpu.py --only B
# --record with 20 steps (5 warm-up), bf16, for each B of --bench (gpt, resnet or none; default gpt; comma-separated;
# gpt also with the rows --gpt-variant own_gelu=train.gelu_epilogue=false and
# own_attention=train.attention=own, resnet with --resnet-variant
# nchw=model.memory_format=nchw and heuristic_algorithms=train.conv_algorithms=heuristic beside its channels-last bf16
# row),
# while the budget lasts (its JSON Lines records and row logs under validation/results/gpu/ and its tables
# validation/results/gpu_<device>_<B>.md come back in OUTDIR/results.tar.gz); before the GPT's,
# validation/bench_attention_cuda (the own attention against cuDNN's; its table
# validation/results/gpu/attention_<device_slug>_<date>.md); before them with --profile, Nsight
# Compute's time (and DRAM bytes where readable) per kernel of one GPT-2 124M bf16 step (micro-batch 64, the second
# step: train.profile_step) and its table (validation/results/gpu/kernels_gpt_<device_slug>_<date>.md, by
# validation/kernel_table.py); with --profile-resnet, of one ResNet-50 bf16
# step (micro-batch 64) channels-last and NCHW (logs profile_resnet_nhwc.log, profile_resnet_nchw.log). --extra runs a further shell command in phase A (log NAME.log; what it writes under $LOGS comes
# back too). --skip drops parts of phase A's parallel work (unit, cuda_run, sanitize, or all; --extra still runs).
# --layouts ARGS (one string, split at blanks): after the parallel work, before phase B, alone on the GPU, the layout
# matrix `python3 validation/gpu_layouts.py ARGS` (several ranks on one GPU; validation/gpu_layouts.py), for at most
# --layouts-budget seconds (default: all the budget left; with it phase B gets what remains). It writes its default
# record validation/results/gpu/<device>_<date>_layouts.jsonl, the report beside it and the per-case logs in the
# folder of that name (paths in the record are relative to the repository).
# Every file the session writes under validation/results/ comes back in OUTDIR/results.tar.gz at its repository path
# (unpack it in the repository root: `tar -xzf OUTDIR/results.tar.gz`), packed again after each part, so that a cut
# session still returns what was done. OUTDIR holds three files only (summary.txt, logs.tar.gz, results.tar.gz): the
# device tool brings back a few files per call and leaves the rest out.
# The environment record (env.txt) names the NCCL the apps load (ncclGetVersion of the library ldd resolves; an NCCL
# carried by validation/nccl_carry.sh is put first by the unpack), and summary.txt repeats it.
# Every log goes into OUTDIR/logs.tar.gz (one file: the folder may bring back only a few), the verdicts
# into OUTDIR/summary.txt as they come. Used for the first H100 run: validation/results/gpu_nvidia_h100_80gb_hbm3_*.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
USAGE="usage: gpu_session.sh OUTDIR [--budget S] [--bench LIST] [--sanitize LIST] [--profile] [--profile-resnet]"
USAGE+=" [--extra N=CMD]"
USAGE+=" [--skip unit,cuda_run,sanitize|all] [--layouts ARGS] [--layouts-budget S]"
OUTDIR="${1:?$USAGE}"
shift
BUDGET=480 BENCH=gpt SANITIZE=memcheck,racecheck PROFILE=0 PROFILE_RESNET=0 SKIP="" LAYOUTS="" LAYOUTS_BUDGET=""
EXTRA=()
while [ "$#" -gt 0 ]; do
  case "$1" in
    --budget) BUDGET="$2"; shift 2 ;;
    --bench) BENCH="$2"; shift 2 ;;
    --sanitize) SANITIZE="$2"; shift 2 ;;
    --profile) PROFILE=1; shift ;;
    --profile-resnet) PROFILE_RESNET=1; shift ;;
    --extra) EXTRA+=("$2"); shift 2 ;;
    --skip) SKIP="$2"; shift 2 ;;
    --layouts) LAYOUTS="$2"; shift 2 ;;
    --layouts-budget) LAYOUTS_BUDGET="$2"; shift 2 ;;
    *) echo "gpu_session: unknown argument '$1'" >&2; echo "$USAGE" >&2; exit 2 ;;
  esac
done
skipped() { case ",$SKIP," in *,all,* | *",$1,"*) return 0 ;; esac; return 1; }
T0=$(date +%s)
elapsed() { echo $(($(date +%s) - T0)); }
mkdir -p "$OUTDIR"
OUTDIR="$(cd "$OUTDIR" && pwd)"
LOGS="$(mktemp -d)"
SUMMARY="$OUTDIR/summary.txt"
note() { echo "[$(elapsed) s] $*" | tee -a "$SUMMARY"; }
touch "$LOGS/.start"
# the session's records and reports under validation/results/, and its logs: packed again after each part
pack_logs() {
  tar -C "$LOGS" -czf "$OUTDIR/logs.tar.gz" . 2>/dev/null
  local files
  mapfile -t files < <(find validation/results -type f -newer "$LOGS/.start" 2>/dev/null)
  [ "${#files[@]}" -eq 0 ] || tar -C "$ROOT" -czf "$OUTDIR/results.tar.gz" "${files[@]}"
}
cd "$ROOT" || exit 2

{
  echo "== date"; date -u
  echo "== nvidia-smi"; nvidia-smi 2>&1
  echo "== nvidia-smi -q (product, clocks)"
  nvidia-smi -q 2>&1 | grep -iE 'Product Name|Driver Version|CUDA Version|Max Clocks|Graphics|SM  |Memory  ' | head -20
  echo "== nvcc"; nvcc --version 2>&1 | tail -2
  echo "== os"; head -4 /etc/os-release; uname -r; nproc; ldd --version 2>&1 | head -1
  echo "== tools"; command -v compute-sanitizer mpirun python3 cmake
  echo "== python"
  python3 -c 'import torch, h5py, numpy as np; print(torch.__version__, torch.version.cuda, h5py.__version__, np.__version__)' \
    2>&1
} > "$LOGS/env.txt" 2>&1
note "device: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1)"
# the device as the driver names it, and its slug for the records' file names (NVIDIA H200 -> nvidia_h200)
DEVICE="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
SLUG="$(echo "${DEVICE:-unknown GPU}" | tr '[:upper:] ' '[:lower:]_')"

# shellcheck source=validation/gpu_bundle.sh
source "$ROOT/validation/gpu_bundle.sh" unpack .gpu/bundle.tar.xz >> "$LOGS/env.txt" 2>&1 ||
  { note "unpack FAILED"; pack_logs; exit 1; }
export HPCT_DATA_DIR="$ROOT/data" OMP_NUM_THREADS=4 PYTHONUNBUFFERED=1
for e in build/apps/train_gpt build/tests/unit/kernels/test_cuda_gpt; do
  { echo "== ldd $e"; ldd "$e" | grep -E 'not found|cublas|cudnn|nccl|cudart|dnnl|mpi'; } >> "$LOGS/env.txt" 2>&1
done
note "unpacked ($(grep -c '=> not found' "$LOGS/env.txt") unresolved libraries)"
# The NCCL the apps will load: the library ldd resolves for train_gpt, asked for its version (ncclGetVersion).
NCCL_LIB="$(ldd build/apps/train_gpt 2>/dev/null | awk '$1 ~ /^libnccl\.so/ { print $3 }')"
NCCL_LINE="$(bash validation/nccl_carry.sh version "${NCCL_LIB:-libnccl.so.2}" 2>&1)"
{
  echo "== NCCL the apps load (version code path)"; echo "$NCCL_LINE"; echo "HPCT_NCCL_CARRIED=${HPCT_NCCL_CARRIED:-}"
  echo "== ldconfig -p | grep -E 'nccl|cudnn|libmpi'"; ldconfig -p | grep -E 'nccl|cudnn|libmpi'
  echo "== pip show nvidia-nccl-cu13"
  python3 -m pip show nvidia-nccl-cu13 2>&1 | grep -E '^(Name|Version|Location):' || echo "(not installed)"
} >> "$LOGS/env.txt" 2>&1
note "NCCL the apps load: $NCCL_LINE${HPCT_NCCL_CARRIED:+ (carried: HPCT_NCCL_CARRIED=$HPCT_NCCL_CARRIED)}"

CS="$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)"
PHASE_A_END=$((BUDGET * 45 / 100))
pids=()
run_bg() {  # name timeout cmd... : in the background, verdict into the summary
  local name="$1" limit="$2"
  shift 2
  (
    s=$(date +%s)
    timeout -k 5 "$limit" "$@" > "$LOGS/$name.log" 2>&1
    rc=$?
    verdicts='^===== .* exit [0-9]+|^\[  (PASSED|FAILED)  \]|tests? ran|VALID|FAILED:|ERROR SUMMARY|RACECHECK SUMMARY|SKIPPED'
    verdicts+='|^kernel_table: '
    tail_line="$(grep -E "$verdicts" \
                 "$LOGS/$name.log" | tail -n 9 | tr '\n' ' ')"
    note "$name: exit $rc in $(($(date +%s) - s)) s: $tail_line"
  ) &
  pids+=($!)
}

# Unit tests, one after the other (each is short; the sanitizers and the app runs share the GPU meanwhile).
# test_comm_staged is bundled only when the build had it.
skipped unit || run_bg unit $((PHASE_A_END - 10)) bash -c '
  for t in tests/unit/kernels/test_kernels_cuda tests/unit/kernels/test_cuda_core tests/unit/kernels/test_cuda_gpt \
           tests/unit/kernels/test_cuda_resnet tests/unit/train/test_cuda_device tests/mpi/comm/test_comm_nccl \
           tests/mpi/pipeline/test_pipeline_nccl tests/mpi/comm/test_comm_staged; do
    [ -x build/$t ] || [ $t != tests/mpi/comm/test_comm_staged ] || { echo "===== $t not bundled"; continue; }
    echo "===== $t"; timeout -k 5 120 build/$t --gtest_color=no; echo "===== $t exit $?"
  done'
skipped cuda_run || for sc in gpt resnet resnet_imagenet precision layouts restart memory; do
  run_bg "cuda_run_$sc" $((PHASE_A_END - 10)) python3 tests/integration/check_cuda_run.py "$sc" build/apps/train_gpt \
    build/apps/train_resnet "/tmp/cuda_run_$sc"
done
if skipped sanitize; then
  :
elif [ -n "$CS" ]; then
  IFS=, read -r -a tools <<< "$SANITIZE"
  for tool in "${tools[@]}"; do
    case "$tool" in
      racecheck) exes=(test_cuda_gpt) ;;
      *) exes=(test_kernels_cuda test_cuda_core test_cuda_gpt test_cuda_resnet) ;;
    esac
    for x in "${exes[@]}"; do
      extra=()
      [ "$tool" = racecheck ] && extra=(--racecheck-report analysis)
      run_bg "san_${tool}_$x" $((PHASE_A_END - 10)) "$CS" --tool "$tool" --error-exitcode 86 --print-limit 50 \
        "${extra[@]}" "build/tests/unit/kernels/$x" --gtest_color=no
    done
  done
else
  note "compute-sanitizer not found"
fi
for x in "${EXTRA[@]}"; do
  run_bg "${x%%=*}" $((PHASE_A_END - 10)) env LOGS="$LOGS" bash -c "${x#*=}"
done
[ "${#pids[@]}" -gt 0 ] && wait "${pids[@]}"
pids=()
# The ResNet runs' --dump files (initial parameters, batches, step-1 gradients of the device and of the CPU): where
# the two runs part, layer by layer.
cp /tmp/cuda_run_resnet/resnet_*.h5 "$LOGS/" 2>/dev/null
pack_logs
note "phase A done"

# The layout matrix, alone on the GPU: several ranks share it, so nothing else runs meanwhile.
if [ -n "$LAYOUTS" ]; then
  left=$((BUDGET - $(elapsed) - 10))
  [ -n "$LAYOUTS_BUDGET" ] && [ "$LAYOUTS_BUDGET" -lt "$left" ] && left="$LAYOUTS_BUDGET"
  if [ "$left" -gt 60 ]; then
    read -r -a layout_args <<< "$LAYOUTS"
    mkdir -p validation/results/gpu
    touch "$LOGS/.layouts_start"
    run_bg layouts "$left" python3 validation/gpu_layouts.py "${layout_args[@]}"
    wait
    while read -r rec; do
      note "layouts: $(python3 -c 'import collections, json, sys
c = collections.Counter()
for line in open(sys.argv[1]):
    if line.strip():
        r = json.loads(line)
        c[(r.get("backend"), r.get("verdict"))] += 1
print(", ".join(f"{b} {v} {n}" for (b, v), n in sorted(c.items(), key=str)) or "no records")' "$rec" 2>&1) ($rec)"
    done < <(find validation/results/gpu -name '*_layouts.jsonl' -newer "$LOGS/.layouts_start" 2>/dev/null)
    pack_logs
  else
    note "layouts: not started (budget)"
  fi
fi

# Where a GPT-2 124M bf16 step spends its GPU time: every kernel of the second training step at micro-batch 64 (the
# benchmark's; train.profile_step brackets it with cudaProfilerStart/Stop, so neither the set-up, the first step's
# plans nor the evaluation are in it), timed by Nsight Compute (gpu__time_duration, clocks not locked) with the DRAM
# bytes each kernel read and wrote where the machine lets ncu read the counters (else times only), summed per kernel
# name (kept as validation/results/gpu/ncu_gpt_<device_slug>_<date>_mb64.log); validation/kernel_table.py turns that
# into the per-kernel table (validation/results/gpu/kernels_gpt_<device_slug>_<date>.md; both return in
# results.tar.gz) with the bundle's kernel screen at the same shape for the bytes the counters do not give.
NCU="$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)"
profile_limit() { local left=$((BUDGET - $(elapsed) - 10)); echo $((left < 240 ? left : 240)); }
if [ "$PROFILE" = 1 ] && [ -n "$NCU" ] && [ "$(profile_limit)" -le 60 ]; then
  note "profile_gpt: not started (budget)"
elif [ "$PROFILE" = 1 ] && [ -n "$NCU" ]; then
  python3 - <<'PY'
import numpy as np
for name, n in (("/tmp/prof_train.bin", 1 << 22), ("/tmp/prof_val.bin", 1 << 18)):
    header = np.zeros(256, dtype=np.int32)
    header[0], header[1], header[2] = 20240520, 1, n
    with open(name, "wb") as f:
        f.write(header.tobytes())
        f.write(np.random.default_rng(0).integers(0, 50257, n, dtype=np.uint16).tobytes())
PY
  prof=(--profile-from-start off --clock-control none --print-units base --print-summary per-kernel --csv
        build/apps/train_gpt inputs/gpt2_124m.toml --out /tmp/prof_run --set train.device=cuda
        --set train.precision=bf16 --set train.steps=2 --set train.profile_step=2 --set train.micro_batch=64
        --set train.global_batch=64 --set data.train=/tmp/prof_train.bin --set data.val=/tmp/prof_val.bin
        --set train.eval_every=0 --set sample.tokens=0 --set checkpoint.at_end=false --set checkpoint.every=0
        --set data.eval_sequences=64)
  run_bg profile_gpt "$(profile_limit)" "$NCU" --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
    "${prof[@]}"
  wait
  if grep -qE 'ERR_NVGPUCTRPERM|permission to access NVIDIA GPU Performance Counters' "$LOGS/profile_gpt.log"; then
    if [ "$(profile_limit)" -gt 60 ]; then
      note "profile_gpt: the machine hides the performance counters: times only"
      run_bg profile_gpt "$(profile_limit)" "$NCU" --metrics gpu__time_duration.sum "${prof[@]}"
      wait
    else
      note "profile_gpt: the machine hides the performance counters, and the budget leaves no time for a times-only run"
    fi
  fi
  # the bf16 dense peak from the apps' one table (lib/core/device_peaks.cpp), for the GEMMs' fraction of it
  peak="$(build/apps/train_gpt inputs/gpt2_124m.toml --plan 1 --json --device-name "$DEVICE" 2>/dev/null |
          python3 -c 'import json, sys
lines = [l for l in sys.stdin if l.startswith("{\"plan\":")]
p = json.loads(lines[0])["plan"]["device_peaks"] if lines else None
print(p["bf16"] if p else "")')"
  # the profile itself comes back too, beside the table that reads it
  prof_log="validation/results/gpu/ncu_gpt_${SLUG}_$(date -u +%F)_mb64.log"
  cp "$LOGS/profile_gpt.log" "$prof_log"
  if [ -f build/kernel_screen_gpt2_bf16_mb64.json ]; then
    run_bg kernel_table 60 python3 validation/kernel_table.py --ncu "$prof_log" \
      --screen build/kernel_screen_gpt2_bf16_mb64.json --device "${DEVICE:-unknown GPU}" \
      ${peak:+--peak-tflops "$peak"} \
      --title "Where one GPT-2 124M bf16 training step (micro-batch 64) spends its GPU time, $(date -u +%F)" \
      --out "validation/results/gpu/kernels_gpt_${SLUG}_$(date -u +%F).md"
    wait
  else
    note "kernel_table: the bundle has no kernel screen (build/kernel_screen_gpt2_bf16_mb64.json): table not made"
  fi
fi

# Where a ResNet-50 bf16 step spends its GPU time, in both activation layouts (the channels-last default and NCHW):
# every kernel of one training step at micro-batch 64 (and the evaluation of 64 images), as the profile above.
if [ "$PROFILE_RESNET" = 1 ] && [ -n "$NCU" ]; then
  build/apps/prepare_images synthetic --out-dir /tmp/prof_images --name r50 --train 128 --val 64 --shape 3x224x224 \
    --classes 1000 --seed 1 > "$LOGS/prof_images.log" 2>&1
  for fmt in nhwc nchw; do
    run_bg "profile_resnet_$fmt" 150 "$NCU" --clock-control none --metrics gpu__time_duration.sum \
      --print-summary per-kernel --csv build/apps/train_resnet inputs/resnet50.toml --out "/tmp/prof_resnet_$fmt" \
      --set train.device=cuda --set train.precision=bf16 --set model.memory_format=$fmt --set train.epochs=0 \
      --set train.steps=1 --set train.micro_batch=64 --set train.global_batch=64 \
      --set data.train=/tmp/prof_images/r50_train.h5 --set data.test=/tmp/prof_images/r50_val.h5 \
      --set data.eval_images=64 --set data.crop_pad=0 --set data.flip=false --set train.eval_every=0 \
      --set checkpoint.at_end=false --set checkpoint.every=0 --set checkpoint.every_minutes=0
    wait
  done
fi

# The GPT's two attentions side by side, alone on the GPU, when the GPT is benchmarked: the own flash kernels against
# cuDNN's fused attention at GPT-2 124M's shape (validation/bench_attention_cuda.cpp); its table comes back in
# results.tar.gz as validation/results/gpu/attention_<device_slug>_<date>.md.
if [[ ",$BENCH," == *,gpt,* ]] && [ -x build/validation/bench_attention_cuda ] && [ $((BUDGET - $(elapsed))) -gt 150 ]
then
  mkdir -p validation/results/gpu
  run_bg bench_attention 90 build/validation/bench_attention_cuda \
    --md "validation/results/gpu/attention_${SLUG}_$(date -u +%F).md"
  wait
  pack_logs
fi

IFS=, read -r -a benches <<< "$BENCH"
for b in "${benches[@]}"; do
  [ "$b" = none ] && continue
  [ $((BUDGET - $(elapsed))) -gt 90 ] || { note "bench $b: not started (budget)"; continue; }
  left=$((BUDGET - $(elapsed) - 10))
  variants=()  # the GPT's kernel choices behind deck keys, each one more row at the same micro-batch
  [ "$b" = gpt ] && variants=(--gpt-variant own_gelu=train.gelu_epilogue=false
    --gpt-variant own_attention=train.attention=own)
  # the ResNet's bf16 row runs channels-last (model.memory_format = auto on CUDA); the NCHW row beside it
  # and cuDNN's heuristic order of convolution algorithms beside the timed choice (train.conv_algorithms)
  [ "$b" = resnet ] && variants=(--resnet-variant nchw=model.memory_format=nchw
    --resnet-variant heuristic_algorithms=train.conv_algorithms=heuristic)
  run_bg "bench_$b" "$left" python3 validation/bench_gpu.py --only "$b" --record --steps 20 --warmup 5 \
    --hp-precisions bf16 --timeout $((left - 20)) --work "/tmp/bench_work_$b" "${variants[@]}"
  wait
  pack_logs  # the benchmark's tables, JSON Lines records and row logs, to be committed as they are
done
pack_logs
note "done"
