#!/usr/bin/env bash
# GPU bring-up in phases: the first thing to run on any machine with a GPU. One phase per invocation, each within
# --budget seconds (default 510: 8.5 min, for 10-minute debug-queue jobs without network), resumable, every phase
# appending a section to one report, validation/results/gpu_<device>_<date>.md, and its raw log to the folder next to
# it, validation/results/gpu_<device>_<date>/<phase>.log (<device>: nvidia-smi's name, slugified).
#
#   bash validation/gpu_bringup.sh --next              the first phase not done yet (see "--next" below)
#   bash validation/gpu_bringup.sh --phase NAME        that phase (again)
#   bash validation/gpu_bringup.sh --dry-run [--next | --phase NAME]
#                                                      print the phases and their exact commands; runs nothing, needs
#                                                      no GPU, writes nothing (ctest validation_gpu_bringup_dry)
#   bash validation/gpu_bringup.sh --list | --status | --reset
#
# Phases, in order:
#   build         cmake -DCMAKE_CUDA_ARCHITECTURES=90 -DHPCT_ENABLE_CUDA=ON -DHPCT_AUTO_KERNELS_ONLY=ON, then
#                 cmake --build -j$(nproc) under the time guard. Without MPI / parallel HDF5 / zlib / CLI11 / json the
#                 build is the kernels-only subset (kernels + their tests; no apps). A build cut by the guard is
#                 TIMEOUT: run the phase again and the incremental build continues. Needs no GPU.
#   cuda-tests    ctest -L cuda (without the cuda_run_* app tests, which are the cuda-run phase): PASS needs every test
#                 to pass and none skipped (a skip with a GPU present means the CUDA runtime cannot use it), except an
#                 NCCL test <name>_np<N> with N above the visible GPUs (one GPU per rank: skipped by design)
#   memcheck racecheck synccheck initcheck
#                 compute-sanitizer --tool <name> over the kernel test executables (tests/unit/kernels/test_kernels_cuda,
#                 test_cuda_core, test_cuda_gpt, test_cuda_resnet; tests/unit/train/test_cuda_device when built).
#                 compute-sanitizer missing, or refusing this GPU/driver: UNSUPPORTED (recorded, not a failure)
#   cuda-run      tests/integration/check_cuda_run.py gpt, resnet, resnet_imagenet, precision (tf32, bf16 and fp16
#                 storage), layouts, restart, memory (the apps on the GPU vs the CPU); SKIPPED when the apps were
#                 not built (kernels-only) or the tiny decks' data is missing
#   bench-gpt     validation/bench_gpu.py --only gpt --record (GPT-2 124M vs PyTorch on the same GPU)
#   bench-resnet  validation/bench_gpu.py --only resnet --record (ResNet-50 vs PyTorch); both SKIPPED without the apps;
#                 without an importable torch the PyTorch rows fail in the table and the hpctrain rows still run
#
# Statuses: PASS, FAIL, UNSUPPORTED, SKIPPED (each a result: the phase is done), TIMEOUT (the time guard cut it: not
# done). `--next` runs the first phase, in the order above, that is not done: done = a recorded PASS, FAIL,
# UNSUPPORTED or SKIPPED, except `build`, which is done only on PASS (nothing after it can run on a failed build).
# A TIMEOUT is re-run by the next `--next`; phases made of parts (sanitizer: one executable each; cuda-run: one
# scenario each) resume at the first part not finished. A part the guard cuts when it was the first part of its
# invocation (it had the whole budget) counts as failed ("did not finish within the time limit"), so every
# invocation makes progress. `--phase NAME` runs that phase again: a TIMEOUT one resumes at its first unfinished
# part, any other starts from its first part (--reset forgets everything). With every phase done
# `--next` says so and exits 0: submitting more `--next` jobs than phases is harmless.
#
# Exit status: 0 PASS / UNSUPPORTED / SKIPPED (and --dry-run, --list, --status, nothing left); 1 FAIL; 3 TIMEOUT
# (run again); 2 usage errors and "cannot run here": an unknown phase, no GPU (every phase but build needs one),
# no build yet, another invocation holding the state's lock.
#
# Options:
#   --build-dir DIR   build directory (default: the one the state recorded, else <repository>/build-gpu)
#   --state DIR       state directory (default <build dir>/bringup-state); give the same --build-dir / --state to
#                     every invocation of one bring-up (the defaults need nothing)
#   --budget S        the time guard of one phase, seconds (default 510; $HPCT_BRINGUP_BUDGET)
#   --python PY       Python for check_cuda_run.py and bench_gpu.py (default $HPCT_PYTHON, else the first of python3,
#                     /usr/bin/python3 that imports torch, else /usr/bin/python3)
#   --cmake-arg ARG   extra configure argument (repeatable), e.g. -DCMAKE_PREFIX_PATH=/opt/deps/usr
#   --copy-to DIR     after the phase, copy the report and its log folder into DIR (e.g. $OUT of a machine whose
#                     only way back is a folder)
# Environment: HPCT_NVIDIA_SMI (the nvidia-smi to call; tests point it at a stub), HPCT_COMPUTE_SANITIZER (the
# compute-sanitizer to call), HPCT_BRINGUP_RESULTS (where reports go, default <repository>/validation/results; the
# test points it at a temporary folder), HPCT_DATA_DIR (the tiny decks' data, default <repository>/data),
# HPCT_BRINGUP_BENCH_ARGS (extra bench_gpu.py arguments, e.g. "--steps 25 --warmup 5 --hp-precisions bf16").
#
# State (small, plain text, in --state DIR): phases.tsv (one line per finished invocation: phase, status, exit code,
# wall seconds, UTC time, TAB-separated; the last line of a phase is its status), parts.tsv (phase, part, result, detail:
# the finished parts of a TIMEOUT phase), info (report=, logs=, device=, build_dir=), pending.md and logs/ (sections
# and logs of a build that ran before any GPU was seen; moved into the report when it is created), lock.
#
# In a 10-minute queue (one phase per job; afterany: a failed phase does not stop the chain; extra jobs are no-ops):
#   jid=$(sbatch --parsable -t 10 --gpus=1 --wrap 'bash validation/gpu_bringup.sh --next')
#   for i in $(seq 11); do
#     jid=$(sbatch --parsable -t 10 --gpus=1 -d afterany:$jid --wrap 'bash validation/gpu_bringup.sh --next'); done
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PHASES=(build cuda-tests memcheck racecheck synccheck initcheck cuda-run bench-gpt bench-resnet)
CUDA_RUN_SCENARIOS=(gpt resnet resnet_imagenet precision layouts restart memory)
KERNEL_TESTS=(tests/unit/kernels/test_kernels_cuda tests/unit/kernels/test_cuda_core tests/unit/kernels/test_cuda_gpt
              tests/unit/kernels/test_cuda_resnet)
OPTIONAL_TESTS=(tests/unit/train/test_cuda_device)  # built only with the apps' libraries
DATA_FILES=(kjv_train.bin kjv_val.bin fmnist_train_10k.h5 fmnist_test.h5)  # inputs/gpt_tiny.toml, resnet_tiny.toml
SAN_ERROR_EXIT=86   # compute-sanitizer --error-exitcode: tells "the tool found errors" from a failing test

NVSMI="${HPCT_NVIDIA_SMI:-nvidia-smi}"
RESULTS="${HPCT_BRINGUP_RESULTS:-$ROOT/validation/results}"
DATA_DIR="${HPCT_DATA_DIR:-$ROOT/data}"

say() { echo "[gpu_bringup] $*"; }
die() {  # usage errors and "cannot run here": exit 2, nothing recorded
  echo "gpu_bringup: error: $*" >&2
  exit 2
}
usage() { sed -n '2,/^set -uo pipefail/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }

# ---- command line ------------------------------------------------------------------------------------------------
MODE="" PHASE="" DRY=0 BUILD_OPT="" STATE_OPT="" PY_OPT="" COPY_TO=""
BUDGET="${HPCT_BRINGUP_BUDGET:-510}"
CMAKE_ARGS=()
set_mode() {
  [ -z "$MODE" ] || [ "$MODE" = "$1" ] || die "choose one of --phase, --next, --list, --status, --reset"
  MODE="$1"
}
need_arg() { [ "$#" -ge 2 ] && [ -n "$2" ] || die "$1 needs a value (see --help)"; }
while [ "$#" -gt 0 ]; do
  case "$1" in
    --phase) need_arg "$@"; set_mode phase; PHASE="$2"; shift 2 ;;
    --phase=*) set_mode phase; PHASE="${1#*=}"; shift ;;
    --next) set_mode next; shift ;;
    --list) set_mode list; shift ;;
    --status) set_mode status; shift ;;
    --reset) set_mode reset; shift ;;
    --dry-run) DRY=1; shift ;;
    --build-dir) need_arg "$@"; BUILD_OPT="$2"; shift 2 ;;
    --state) need_arg "$@"; STATE_OPT="$2"; shift 2 ;;
    --budget) need_arg "$@"; BUDGET="$2"; shift 2 ;;
    --python) need_arg "$@"; PY_OPT="$2"; shift 2 ;;
    --cmake-arg) need_arg "$@"; CMAKE_ARGS+=("$2"); shift 2 ;;
    --copy-to) need_arg "$@"; COPY_TO="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
[[ "$BUDGET" =~ ^[0-9]+$ ]] && [ "$BUDGET" -ge 10 ] || die "--budget must be a whole number of seconds >= 10, is '$BUDGET'"
MIN_PART_S=$((BUDGET / 5 < 30 ? BUDGET / 5 : 30))  # a part is not started with less than this left of the budget
if [ -z "$MODE" ]; then
  [ "$DRY" = 1 ] && MODE=all || die "say what to run: --next, --phase NAME, --dry-run, --list or --status (see --help)"
fi
if [ "$MODE" = phase ]; then
  known=0
  for p in "${PHASES[@]}"; do [ "$p" = "$PHASE" ] && known=1; done
  [ "$known" = 1 ] || die "unknown phase '$PHASE'; the phases are: ${PHASES[*]}"
fi
if [ "$MODE" = list ]; then
  printf '%s\n' "${PHASES[@]}"
  exit 0
fi

abspath() { case "$1" in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
[ -n "$STATE_OPT" ] && STATE="$(abspath "$STATE_OPT")"
RESULTS="$(abspath "$RESULTS")"
info_get() {  # key -> value from STATE/info ("" when absent)
  [ -f "$STATE/info" ] && sed -n "s/^$1=//p" "$STATE/info" | tail -n 1
  return 0
}
if [ -n "$BUILD_OPT" ]; then
  BUILD="$(abspath "$BUILD_OPT")"
elif [ -n "$STATE_OPT" ] && [ -n "$(info_get build_dir)" ]; then
  BUILD="$(info_get build_dir)"
else
  BUILD="$ROOT/build-gpu"
fi
[ -n "$STATE_OPT" ] || STATE="$BUILD/bringup-state"
WORK="$BUILD/bringup-work"

# ---- state -------------------------------------------------------------------------------------------------------
last_status() {  # phase -> its last recorded status ("" when never run)
  [ -f "$STATE/phases.tsv" ] || return 0
  awk -F'\t' -v p="$1" '$1 == p { s = $2 } END { if (s != "") print s }' "$STATE/phases.tsv"
}
is_done() {
  local s
  s="$(last_status "$1")"
  case "$s" in
    PASS) return 0 ;;
    FAIL|UNSUPPORTED|SKIPPED) [ "$1" != build ] ;;
    *) return 1 ;;  # never run, or TIMEOUT
  esac
}
next_phase() {
  local p
  for p in "${PHASES[@]}"; do
    is_done "$p" || { echo "$p"; return 0; }
  done
}
info_set() {
  mkdir -p "$STATE"
  { [ -f "$STATE/info" ] && grep -v "^$1=" "$STATE/info"; echo "$1=$2"; } > "$STATE/info.tmp"
  mv "$STATE/info.tmp" "$STATE/info"
}
part_result() {  # phase part -> its recorded result in the current attempt ("" when not finished)
  [ -f "$STATE/parts.tsv" ] || return 0
  awk -F'\t' -v p="$1" -v u="$2" '$1 == p && $2 == u { r = $3 } END { if (r != "") print r }' "$STATE/parts.tsv"
}
part_record() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >> "$STATE/parts.tsv"; }
parts_clear() {  # forget a phase's finished parts (a fresh attempt)
  [ -f "$STATE/parts.tsv" ] || return 0
  awk -F'\t' -v p="$1" '$1 != p' "$STATE/parts.tsv" > "$STATE/parts.tmp"
  mv "$STATE/parts.tmp" "$STATE/parts.tsv"
}

if [ "$MODE" = status ]; then
  echo "state: $STATE"
  echo "build dir: $BUILD"
  echo "report: $(info_get report)"
  for p in "${PHASES[@]}"; do
    line=""
    [ -f "$STATE/phases.tsv" ] && line="$(awk -F'\t' -v p="$p" '$1 == p { l = $0 } END { print l }' "$STATE/phases.tsv")"
    if [ -n "$line" ]; then
      IFS=$'\t' read -r _ st rc wall when <<< "$line"
      printf '  %-13s %-11s exit %-3s %5s s  %s\n' "$p" "$st" "$rc" "$wall" "$when"
    else
      printf '  %-13s %s\n' "$p" "not run"
    fi
  done
  n="$(next_phase)"
  echo "next: ${n:-none (all phases done)}"
  exit 0
fi
if [ "$MODE" = reset ]; then
  [ "$DRY" = 0 ] || die "--reset with --dry-run: nothing to show"
  rm -rf "$STATE/phases.tsv" "$STATE/parts.tsv" "$STATE/info" "$STATE/pending.md" "$STATE/logs"
  say "state $STATE cleared (the report and its logs stay)"
  exit 0
fi

# ---- tools -------------------------------------------------------------------------------------------------------
quote() {  # the arguments as one shell-ready line
  local a out=""
  for a in "$@"; do
    if [[ "$a" =~ ^[A-Za-z0-9_./=:,+@%-]+$ ]] || [ "$a" = '$PY' ]; then out+="$a "; else out+="'${a//\'/\'\\\'\'}' "; fi
  done
  echo "${out% }"
}
find_sanitizer() {
  local c
  for c in "${HPCT_COMPUTE_SANITIZER:-}" "$(command -v compute-sanitizer 2>/dev/null)" \
           /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer; do
    [ -n "$c" ] && [ -x "$c" ] && { echo "$c"; return 0; }
  done
  return 1
}
find_nvcc() {
  command -v nvcc 2>/dev/null || { [ -x /usr/local/cuda/bin/nvcc ] && echo /usr/local/cuda/bin/nvcc; } || true
}
pick_python() {  # -> PY, PY_HOW
  if [ -n "$PY_OPT" ]; then PY="$PY_OPT" PY_HOW="--python"; return; fi
  if [ -n "${HPCT_PYTHON:-}" ]; then PY="$HPCT_PYTHON" PY_HOW="HPCT_PYTHON"; return; fi
  local c
  for c in python3 /usr/bin/python3; do
    if command -v "$c" >/dev/null 2>&1 && timeout 120 "$c" -c 'import torch' >/dev/null 2>&1; then
      PY="$c" PY_HOW="the first that imports torch"
      return
    fi
  done
  if [ -x /usr/bin/python3 ]; then PY=/usr/bin/python3; else PY=python3; fi
  PY_HOW="no Python here imports torch"
}
slugify() { echo "$1" | tr 'A-Z' 'a-z' | sed -E 's/[^a-z0-9]+/_/g; s/^_+//; s/_+$//'; }

GPU_NAME="" GPU_DRIVER="" GPU_MEM="" GPU_COUNT=0 GPU_CUDA="" GPU_WHY=""
gpu_query() {  # fills GPU_*; returns 1 (GPU_WHY set) when nvidia-smi lists no usable GPU
  local vis="${CUDA_VISIBLE_DEVICES-__unset__}" sel=() out rc
  case "$vis" in
    ""|-1|none|NoDevFiles) GPU_WHY="CUDA_VISIBLE_DEVICES='$vis' hides every GPU"; return 1 ;;
    __unset__) ;;
    *) sel=(-i "${vis%%,*}") ;;
  esac
  if ! command -v "$NVSMI" >/dev/null 2>&1; then GPU_WHY="$NVSMI: command not found"; return 1; fi
  out="$(timeout 60 "$NVSMI" ${sel[@]+"${sel[@]}"} --query-gpu=name,driver_version,memory.total \
         --format=csv,noheader 2>&1)"
  rc=$?
  if [ "$rc" != 0 ] || [ -z "$out" ]; then
    GPU_WHY="$NVSMI --query-gpu failed (exit $rc)$(echo "$out" | head -n 2 | tr '\n' ' ' | sed 's/ *$//; s/^./: &/')"
    return 1
  fi
  GPU_COUNT="$(echo "$out" | grep -c .)"
  [ "$vis" = __unset__ ] || GPU_COUNT="$(echo "$vis" | tr ',' '\n' | grep -c .)"  # the devices the tests see
  IFS=, read -r GPU_NAME GPU_DRIVER GPU_MEM <<< "$(echo "$out" | head -n 1)"
  GPU_NAME="$(echo "$GPU_NAME" | sed 's/^ *//; s/ *$//')"
  GPU_DRIVER="$(echo "$GPU_DRIVER" | tr -d ' ')"
  GPU_MEM="$(echo "$GPU_MEM" | sed 's/^ *//')"
  GPU_CUDA="$(timeout 60 "$NVSMI" 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9.]*\).*/\1/p' | head -n 1)"
  [ -n "$GPU_NAME" ] || { GPU_WHY="$NVSMI printed no GPU name"; return 1; }
}
require_gpu() {
  gpu_query && return 0
  die "no GPU found ($GPU_WHY): phase '$1' needs one. Run it on a GPU node (e.g. in a job with --gpus=1 or" \
      "--gres=gpu:1); only --phase build and --dry-run work without a GPU."
}
require_build() {
  [ -f "$BUILD/CMakeCache.txt" ] || die "no build in $BUILD: run the build phase first (--phase build, or --next)"
  [ "$(last_status build)" = PASS ] ||
    say "note: the build phase is not recorded as PASS in $STATE (its last status: $(last_status build))"
}
apps_built() { [ -x "$BUILD/apps/train_gpt" ] && [ -x "$BUILD/apps/train_resnet" ]; }
apps_missing_reason() {
  local m
  m="$(sed -n 's/^HPCT_KERNELS_ONLY_MISSING:INTERNAL=//p' "$BUILD/CMakeCache.txt" 2>/dev/null)"
  if [ -n "$m" ]; then
    echo "the apps were not built: kernels-only build (HPCT_AUTO_KERNELS_ONLY; not found: $m)"
  elif grep -q '^HPCT_KERNELS_ONLY:BOOL=ON' "$BUILD/CMakeCache.txt" 2>/dev/null; then
    echo "the apps were not built: HPCT_KERNELS_ONLY=ON"
  else
    echo "the apps were not built ($BUILD/apps/train_gpt, train_resnet missing): re-run the build phase"
  fi
}

# ---- the commands of each phase ------------------------------------------------------------------------------------
# cmds_<phase> fills CMDS (one shell-ready line per command, for the dry run and the report); the runners below run
# the same argument vectors.
configure_cmd() {
  CONF=(cmake -S "$ROOT" -B "$BUILD")
  if [ ! -f "$BUILD/CMakeCache.txt" ] && command -v ninja >/dev/null 2>&1; then CONF+=(-G Ninja); fi
  CONF+=(-DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DHPCT_ENABLE_CUDA=ON -DHPCT_AUTO_KERNELS_ONLY=ON)
  CONF+=(${CMAKE_ARGS[@]+"${CMAKE_ARGS[@]}"})
  JOBS="$(nproc 2>/dev/null || echo 4)"
  BLD=(cmake --build "$BUILD" -j "$JOBS")
}
ctest_cmd() {
  CT=(ctest --test-dir "$BUILD" -L cuda -E '^cuda_run_' --output-on-failure --no-tests=error --timeout 300)
}
sanitizer_cmd() {  # tool exe -> SAN
  SAN=("${CS:-compute-sanitizer}" --tool "$1" --error-exitcode "$SAN_ERROR_EXIT" --print-limit 50)
  [ "$1" = racecheck ] && SAN+=(--racecheck-report analysis)
  SAN+=("$2" --gtest_color=no)
}
sanitizer_targets() {  # -> TARGETS (absolute paths): the kernel tests, and the optional ones that were built
  TARGETS=()
  local t
  for t in "${KERNEL_TESTS[@]}"; do TARGETS+=("$BUILD/$t"); done
  for t in "${OPTIONAL_TESTS[@]}"; do [ -x "$BUILD/$t" ] && TARGETS+=("$BUILD/$t"); done
}
cuda_run_cmd() {  # scenario -> CR
  CR=("${PY:-python3}" "$ROOT/tests/integration/check_cuda_run.py" "$1" "$BUILD/apps/train_gpt"
      "$BUILD/apps/train_resnet" "$WORK/cuda_run_$1")
}
bench_cmd() {  # gpt|resnet -> BN
  BN=("${PY:-python3}" "$ROOT/validation/bench_gpu.py" --only "$1" --build "$BUILD" --record
      --work "$WORK/bench_$1" --timeout 240)
  local extra=()
  [ -n "${HPCT_BRINGUP_BENCH_ARGS:-}" ] && read -r -a extra <<< "$HPCT_BRINGUP_BENCH_ARGS"
  BN+=(${extra[@]+"${extra[@]}"})
}
phase_cmds() {  # phase -> CMDS
  CMDS=()
  local t
  case "$1" in
    build) configure_cmd; CMDS=("$(quote "${CONF[@]}")" "timeout <budget left> $(quote "${BLD[@]}")") ;;
    cuda-tests) ctest_cmd; CMDS=("$(quote "${CT[@]}")") ;;
    memcheck|racecheck|synccheck|initcheck)
      sanitizer_targets
      for t in "${TARGETS[@]}"; do sanitizer_cmd "$1" "$t"; CMDS+=("$(quote "${SAN[@]}")"); done ;;
    cuda-run)
      for t in "${CUDA_RUN_SCENARIOS[@]}"; do cuda_run_cmd "$t"; CMDS+=("$(quote "${CR[@]}")"); done ;;
    bench-gpt) bench_cmd gpt; CMDS=("$(quote "${BN[@]}")") ;;
    bench-resnet) bench_cmd resnet; CMDS=("$(quote "${BN[@]}")") ;;
  esac
}

# ---- dry run -----------------------------------------------------------------------------------------------------
if [ "$DRY" = 1 ]; then
  CS="$(find_sanitizer || true)"
  cs_note="${CS:-not found here: the sanitizer phases would be UNSUPPORTED}"
  CS="${CS:-compute-sanitizer}"
  if [ -n "$PY_OPT" ] || [ -n "${HPCT_PYTHON:-}" ]; then pick_python; else PY='$PY'; fi
  echo "gpu_bringup.sh --dry-run: the phases and their exact commands; nothing is run"
  echo "repository : $ROOT"
  echo "build dir  : $BUILD"
  if [ -f "$STATE/phases.tsv" ]; then
    echo "state dir  : $STATE ($(grep -c . "$STATE/phases.tsv") phase runs recorded)"
  else
    echo "state dir  : $STATE (no phase recorded)"
  fi
  rep="$(info_get report)"
  if [ -z "$rep" ]; then
    if gpu_query; then
      rep="$RESULTS/gpu_$(slugify "$GPU_NAME")_$(date -u +%F).md (device: $GPU_NAME)"
    else
      rep="$RESULTS/gpu_<device>_<date>.md (no GPU here: $GPU_WHY)"
    fi
  fi
  echo "report     : $rep"
  echo "time guard : $BUDGET s per phase"
  echo "sanitizer  : $cs_note"
  if [ "$PY" = '$PY' ]; then
    echo 'PY         : --python, else $HPCT_PYTHON, else the first of python3, /usr/bin/python3 that imports torch'
  else
    echo "PY         : $PY ($PY_HOW)"
  fi
  show=("${PHASES[@]}")
  if [ "$MODE" = phase ]; then
    show=("$PHASE")
  elif [ "$MODE" = next ]; then
    n="$(next_phase)"
    if [ -z "$n" ]; then
      echo "next phase : none (all phases done)"
      exit 0
    fi
    echo "next phase : $n"
    show=("$n")
  fi
  for p in "${show[@]}"; do
    s="$(last_status "$p")"
    if is_done "$p"; then d="done: $s"; elif [ -n "$s" ]; then d="not done: last $s"; else d="not run"; fi
    echo ""
    echo "phase $p [$d]"
    phase_cmds "$p"
    for c in "${CMDS[@]}"; do echo "  $c"; done
  done
  exit 0
fi

# ---- a real run: lock, GPU, report -------------------------------------------------------------------------------
if [ "$MODE" = next ]; then
  PHASE="$(next_phase)"
  if [ -z "$PHASE" ]; then
    say "all phases done (state $STATE; report $(info_get report)); --phase NAME runs one again, --reset starts over"
    exit 0
  fi
fi
mkdir -p "$STATE" || die "cannot create the state directory $STATE"
if command -v flock >/dev/null 2>&1; then
  exec 9> "$STATE/lock"
  flock -n 9 || die "another gpu_bringup.sh holds $STATE/lock: wait for it, or use another --state"
fi
HAVE_GPU=0
if [ "$PHASE" = build ]; then
  gpu_query && HAVE_GPU=1
else
  require_gpu "$PHASE"
  HAVE_GPU=1
fi
[ -n "$(info_get build_dir)" ] || info_set build_dir "$BUILD"

REPORT="$(info_get report)"
LOGDIR="$(info_get logs)"
create_report() {
  local slug day base n=1 nvcc cs commit
  slug="$(slugify "$GPU_NAME")"
  day="$(date -u +%F)"
  base="$RESULTS/gpu_${slug}_${day}"
  REPORT="$base.md"
  while [ -e "$REPORT" ]; do n=$((n + 1)); REPORT="${base}_$n.md"; done  # one report per bring-up
  LOGDIR="${REPORT%.md}"
  mkdir -p "$LOGDIR" || die "cannot create $LOGDIR"
  nvcc="$(find_nvcc)"
  nvcc="${nvcc:+$("$nvcc" --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\), V\([0-9.]*\).*/\2/p')}"
  cs="$(find_sanitizer || true)"
  cs="${cs:+$("$cs" --version 2>/dev/null | grep -v '^ *$' | tail -n 1)}"
  commit="$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  if [ -n "$(git -C "$ROOT" status --porcelain --untracked-files=no 2>/dev/null)" ]; then
    commit+=" (with uncommitted changes)"
  fi
  {
    echo "# GPU bring-up: $GPU_NAME"
    echo ""
    echo "Written by \`validation/gpu_bringup.sh\`, one section per phase as it ran (docs/validation.md \"GPU bring-up\")."
    echo "Raw logs: \`$(basename "$LOGDIR")/<phase>.log\`."
    echo ""
    echo "| | |"
    echo "|---|---|"
    echo "| device (nvidia-smi) | $GPU_NAME$([ "$GPU_COUNT" -gt 1 ] && echo " (x $GPU_COUNT visible)"), $GPU_MEM |"
    echo "| driver | $GPU_DRIVER |"
    echo "| CUDA (driver) | ${GPU_CUDA:-?} |"
    echo "| CUDA toolkit (nvcc) | ${nvcc:-not found} |"
    echo "| compute-sanitizer | ${cs:-not found} |"
    echo "| date (UTC) | $(date -u '+%F %H:%M') |"
    echo "| host | $(hostname 2>/dev/null || uname -n) |"
    echo "| CPU | $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2 | sed 's/^ *//'), $(nproc) cores |"
    echo "| commit | $commit |"
    echo "| build dir | \`$BUILD\` |"
    echo "| state dir | \`$STATE\` |"
    echo ""
    [ -f "$STATE/pending.md" ] && cat "$STATE/pending.md"
  } > "$REPORT"
  rm -f "$STATE/pending.md"
  if [ -d "$STATE/logs" ]; then
    mv "$STATE/logs"/* "$LOGDIR"/ 2>/dev/null
    rmdir "$STATE/logs" 2>/dev/null
  fi
  info_set report "$REPORT"
  info_set logs "$LOGDIR"
  info_set device "$GPU_NAME"
  say "report: $REPORT"
}
if [ "$HAVE_GPU" = 1 ]; then
  if [ -z "$REPORT" ]; then
    create_report
  elif [ "$(info_get device)" != "$GPU_NAME" ]; then
    die "the state $STATE belongs to a bring-up on '$(info_get device)' but this machine's GPU is '$GPU_NAME':" \
        "use another --state (or --build-dir), or --reset this one"
  fi
fi
if [ -z "$LOGDIR" ]; then  # a build before any GPU was seen: the section and log wait in the state directory
  LOGDIR="$STATE/logs"
  mkdir -p "$LOGDIR"
fi
mkdir -p "$LOGDIR" || die "cannot create the log folder $LOGDIR"
PHASE_LOG="$LOGDIR/$PHASE.log"
CMDS=()
RAN=()  # the commands this invocation ran, as run

# ---- running, logging, reporting ---------------------------------------------------------------------------------
T0=$SECONDS
left() { echo $((BUDGET - (SECONDS - T0))); }
{
  echo ""
  echo "######## $PHASE: $(date -u '+%F %H:%M:%S') UTC on $(hostname 2>/dev/null), budget $BUDGET s"
} >> "$PHASE_LOG"

OUT=""  # the full output of the last run_guarded
run_guarded() {  # seconds cmd... -> rc (124: cut by the guard); output to the terminal, $OUT, and (capped) the log
  local secs="$1"
  shift
  [ "$secs" -ge 1 ] || secs=1  # `timeout 0` would mean no limit at all
  OUT="$(mktemp "${TMPDIR:-/tmp}/gpu_bringup.XXXXXX")"
  RAN+=("$(quote "$@")")
  echo "\$ $(quote "$@")" | tee -a "$PHASE_LOG"
  timeout --signal=TERM --kill-after=20 "$secs" "$@" 2>&1 | tee "$OUT"
  local rc=${PIPESTATUS[0]}
  [ "$rc" = 137 ] && rc=124  # killed after the TERM grace period
  local n
  n="$(wc -l < "$OUT")"
  if [ "$n" -gt 2500 ]; then  # keep logs small: the head and the (more telling) tail
    { head -n 200 "$OUT"; echo "[... $((n - 2200)) lines cut by gpu_bringup.sh ...]"; tail -n 2000 "$OUT"; } >> "$PHASE_LOG"
  else
    cat "$OUT" >> "$PHASE_LOG"
  fi
  echo "[exit $rc after $((SECONDS - T0)) s of the phase]" >> "$PHASE_LOG"
  return "$rc"
}
KEY=""    # key lines for the report
NOTES=""  # bullet lines for the report
add_key() { [ -n "$1" ] && KEY+="$1"$'\n'; return 0; }
add_note() { NOTES+="- $*"$'\n'; }
finish() {  # status rc: record, append the section, copy, exit
  local status="$1" rc="$2" wall=$((SECONDS - T0)) dest
  printf '%s\t%s\t%s\t%s\t%s\n' "$PHASE" "$status" "$rc" "$wall" "$(date -u '+%FT%H:%M:%SZ')" >> "$STATE/phases.tsv"
  [ "$status" != TIMEOUT ] && parts_clear "$PHASE"
  dest="$REPORT"
  [ -n "$dest" ] || dest="$STATE/pending.md"
  local title="Commands (time guard: timeout --signal=TERM of what was left of $BUDGET s):"
  if [ "${#RAN[@]}" -gt 0 ]; then
    CMDS=("${RAN[@]}")
  else
    title="Commands (not run):"
    [ "${#CMDS[@]}" -gt 0 ] || phase_cmds "$PHASE"
  fi
  {
    echo "## $PHASE: $status"
    echo ""
    echo "- $(date -u '+%F %H:%M') UTC, wall $wall s (time guard $BUDGET s), exit status $rc; log \`$(basename "$PHASE_LOG")\`"
    [ -n "$NOTES" ] && printf '%s' "$NOTES"
    echo ""
    echo "$title"
    echo ""
    echo '```'
    printf '%s\n' "${CMDS[@]}"
    echo '```'
    if [ -n "$KEY" ]; then
      echo ""
      echo "Key lines:"
      echo ""
      echo '```'
      printf '%s' "$KEY" | head -n 80
      echo '```'
    fi
    echo ""
  } >> "$dest"
  if [ -n "$COPY_TO" ] && [ -n "$REPORT" ]; then
    mkdir -p "$COPY_TO" && cp -r "$REPORT" "$LOGDIR" "$COPY_TO"/ 2>/dev/null ||
      say "warning: could not copy the report to $COPY_TO"
  fi
  say "$PHASE: $status (exit $rc, $wall s); report ${REPORT:-$dest}"
  case "$status" in
    PASS|UNSUPPORTED|SKIPPED) exit 0 ;;
    TIMEOUT) say "the time guard cut $PHASE: run it again (--next does) to continue"; exit 3 ;;
    *) exit 1 ;;
  esac
}

# ---- build -------------------------------------------------------------------------------------------------------
phase_build() {
  phase_cmds build  # before the configure: the report shows the commands as they ran (-G Ninja only the first time)
  if [ "$HAVE_GPU" = 0 ]; then
    add_note "no GPU here ($GPU_WHY): this section waits in the state directory until a GPU phase creates the report"
  fi
  run_guarded "$(left)" "${CONF[@]}"
  local rc=$?
  add_key "$(grep -E 'HPCT_AUTO_KERNELS_ONLY|CUDA compiler identification' "$OUT")"
  add_key "$(sed -n '/hpctrain .* configuration/,/^-- *$/p' "$OUT" | grep -v '^-- *$')"
  if [ "$rc" = 124 ]; then
    add_note "configure was cut by the time guard"
    finish TIMEOUT "$rc"
  elif [ "$rc" != 0 ]; then
    add_key "$(grep -E -A4 'CMake Error' "$OUT" | head -n 40)"
    add_note "configure failed. Dependencies needed even for the kernels-only build: CMake >= 3.25, a C++20 compiler," \
             "OpenMP, OpenBLAS (OpenMP build), fmt, toml++, GoogleTest, CUDA toolkit with cuBLAS and cuDNN 9." \
             "Without network, unpack their packages into a prefix and pass --cmake-arg -DCMAKE_PREFIX_PATH=PREFIX" \
             "(docs/platform.md \"The GPU machine\")"
    finish FAIL "$rc"
  fi
  run_guarded "$(left)" "${BLD[@]}"
  rc=$?
  add_key "$(grep -E '^\[[0-9]+/[0-9]+\]' "$OUT" | tail -n 1)"
  if [ "$rc" = 124 ]; then
    add_note "the time guard stopped the build after $((SECONDS - T0)) s: run the phase again (--next does) to" \
             "continue the incremental build"
    finish TIMEOUT "$rc"
  elif [ "$rc" != 0 ]; then
    add_key "$(grep -E -m 30 'error|FAILED:' "$OUT")"
    finish FAIL "$rc"
  fi
  if apps_built; then
    add_note "full build: apps and kernel tests"
  else
    add_note "$(apps_missing_reason); the kernels and their tests are built"
  fi
  finish PASS 0
}

# ---- cuda-tests --------------------------------------------------------------------------------------------------
phase_cuda_tests() {
  require_build
  ctest_cmd
  run_guarded "$(left)" "${CT[@]}"
  local rc=$? name n expected=() unexpected=()
  add_key "$(grep -E 'tests passed|Total Test time' "$OUT")"
  add_key "$(sed -n '/The following tests FAILED/,/^$/p' "$OUT" | head -n 25)"
  # Skips: a multi-rank NCCL test (<name>_np<N>) with more ranks than visible GPUs skips by design (one GPU per
  # rank); any other skip, with a GPU present, means the tests could not use it.
  while IFS= read -r name; do
    [ -n "$name" ] || continue
    if [[ "$name" =~ _np([0-9]+)$ ]] && [ "${BASH_REMATCH[1]}" -gt "$GPU_COUNT" ]; then
      expected+=("$name")
    else
      unexpected+=("$name")
    fi
  done <<< "$(sed -n 's/^[[:space:]]*[0-9]* - \(.*\) (Skipped)$/\1/p' "$OUT")"
  [ "${#expected[@]}" -gt 0 ] &&
    add_note "skipped by design (more NCCL ranks than the $GPU_COUNT visible GPU(s)): ${expected[*]}"
  if [ "${#unexpected[@]}" -gt 0 ]; then
    n="${#unexpected[@]}"
    add_key "skipped although a GPU is present ($n):"
    add_key "$(printf '  %s\n' "${unexpected[@]}" | head -n 20)"
    add_key "$(grep -E -m 5 'no usable (CUDA device|GPU)' "$OUT")"
  fi
  if [ "$rc" = 124 ]; then
    add_note "did not finish within the time limit ($BUDGET s): run a subset by hand (ctest -L cuda -R ...)"
    finish FAIL "$rc"
  elif [ "$rc" != 0 ]; then
    finish FAIL "$rc"
  elif [ "${#unexpected[@]}" -gt 0 ]; then
    add_note "$n test(s) skipped although nvidia-smi lists '$GPU_NAME': the CUDA runtime cannot use it"
    finish FAIL 1
  fi
  finish PASS 0
}

# ---- parts (sanitizer executables, cuda-run scenarios) -------------------------------------------------------------
# run_parts phase part...: runs run_part_<kind> for each part not finished yet; PART_CUT=1 when the guard stopped it.
PART_CUT=0
run_parts() {
  local phase="$1" kind="$2" first=1 part r rc
  shift 2
  [ "$(last_status "$phase")" = TIMEOUT ] || parts_clear "$phase"
  for part in "$@"; do
    r="$(part_result "$phase" "$part")"
    if [ -n "$r" ]; then
      add_key "$(basename "$part"): $r (an earlier run)"
      continue
    fi
    if [ "$first" = 0 ] && [ "$(left)" -lt "$MIN_PART_S" ]; then
      PART_CUT=1
      add_note "time guard: $(basename "$part") and the parts after it wait for the next run"
      return
    fi
    "run_part_$kind" "$part" "$(left)"
    rc=$?
    if [ "$rc" = 124 ]; then
      if [ "$first" = 1 ]; then
        part_record "$phase" "$part" timeout "did not finish within the time limit ($BUDGET s)"
        add_key "$(basename "$part"): timeout (did not finish within $BUDGET s)"
      else
        PART_CUT=1
        add_note "time guard: $(basename "$part") was cut; it runs again, first, in the next run"
        return
      fi
    fi
    first=0
    [ "$(part_result "$phase" "$part")" = unsupported ] && return  # the tool refuses this GPU: the rest would too
  done
}
parts_summary() {  # phase -> counts of results over its parts: "clean=2 errors=1 ..."
  awk -F'\t' -v p="$1" '$1 == p { r[$2] = $3 } END { for (k in r) n[r[k]]++; for (x in n) printf "%s=%d ", x, n[x] }' \
    "$STATE/parts.tsv" 2>/dev/null | sed 's/ $//'
}

# ---- sanitizers --------------------------------------------------------------------------------------------------
SAN_TOOL=""
run_part_sanitizer() {  # exe seconds -> records clean | errors | testfail | crash | unsupported
  local exe="$1" secs="$2" rc errs race ran skipped result detail unsup name
  name="$(basename "$exe")"
  sanitizer_cmd "$SAN_TOOL" "$exe"
  if [ ! -x "$exe" ]; then
    part_record "$PHASE" "$exe" crash "not built"
    add_key "$name: not built ($exe): re-run the build phase"
    return 0
  fi
  run_guarded "$secs" "${SAN[@]}"
  rc=$?
  [ "$rc" = 124 ] && return 124
  errs="$(sed -n 's/.*ERROR SUMMARY: \([0-9]*\) error.*/\1/p' "$OUT" | awk '{ s += $1 } END { print s + 0 }')"
  race="$(sed -n 's/.*RACECHECK SUMMARY: .*(\([0-9]*\) error.*/\1/p' "$OUT" | awk '{ s += $1 } END { print s + 0 }')"
  errs=$((errs + race))
  ran="$(sed -n 's/^\[==========\] \([0-9]*\) tests\{0,1\} from .* ran.*/\1/p' "$OUT" | tail -n 1)"
  skipped="$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) tests\{0,1\}.*/\1/p' "$OUT" | tail -n 1)"
  unsup="$(grep -E '^=+ ' "$OUT" | grep -iE 'not supported|unable to|internal sanitizer error|failed to initiali|before first instrumented API call|no attachable|injection' | head -n 3)"
  if [ "$errs" -gt 0 ] || [ "$rc" = "$SAN_ERROR_EXIT" ]; then
    result=errors detail="$errs error(s)"
  elif [ -n "$unsup" ]; then
    result=unsupported detail="$(echo "$unsup" | head -n 1 | sed 's/^=* *//')"
  elif [ -z "$ran" ]; then
    result=crash detail="exit $rc before gtest's summary"
  elif [ -n "$skipped" ] && { [ "$skipped" = "$ran" ] || grep -q 'no usable CUDA device' "$OUT"; }; then
    result=unsupported  # the GPU that nvidia-smi lists is not usable under the tool: its tests skip
    detail="$skipped of $ran tests skipped under the tool ($(grep -m1 -o 'no usable CUDA device.*' "$OUT"))"
  elif [ "$rc" != 0 ]; then
    result=testfail detail="exit $rc: $(grep -c '^\[  FAILED  \] [A-Za-z]' "$OUT") test(s) failed under the tool"
  else
    result=clean detail="0 errors, $ran tests${skipped:+, $skipped skipped}"
  fi
  part_record "$PHASE" "$exe" "$result" "$detail"
  add_key "$name: $result ($detail), $((SECONDS - T0)) s into the phase"
  add_key "$(grep -E '(ERROR|RACECHECK) SUMMARY' "$OUT")"
  if [ "$result" != clean ]; then  # the first reports: the kind of error and where
    add_key "$(grep -E '^=+ (Invalid|Race|Barrier|Uninitialized|Program hit|Error|Warning|Internal|Host Frame|    at )' "$OUT" |
              head -n 15)"
    add_key "$(grep -E '^\[  FAILED  \] [A-Za-z]' "$OUT" | head -n 10)"
  fi
  return 0
}
phase_sanitizer() {
  SAN_TOOL="$PHASE"
  require_build
  CS="$(find_sanitizer)" || {
    add_note "compute-sanitizer not found (PATH, /usr/local/cuda/bin, /usr/local/cuda/compute-sanitizer;" \
             "HPCT_COMPUTE_SANITIZER): UNSUPPORTED"
    finish UNSUPPORTED 0
  }
  add_note "$CS: $("$CS" --version 2>/dev/null | tail -n 1)"
  sanitizer_targets
  run_parts "$PHASE" sanitizer "${TARGETS[@]}"
  local s
  s="$(parts_summary "$PHASE")"
  add_note "parts: ${s:-none finished}"
  if [[ "$s" == *unsupported=* ]]; then
    add_note "compute-sanitizer $PHASE cannot instrument this GPU/driver (see the key lines): recorded UNSUPPORTED"
    finish UNSUPPORTED 0
  elif [ "$PART_CUT" = 1 ]; then  # parts left: not finished, whatever the finished ones found
    finish TIMEOUT 124
  elif [[ "$s" =~ (errors|testfail|crash|timeout)= ]]; then
    finish FAIL 1
  fi
  finish PASS 0
}

# ---- cuda-run ----------------------------------------------------------------------------------------------------
run_part_cuda_run() {  # scenario seconds -> VALID | FAILED | SKIPPED
  local sc="$1" secs="$2" rc result
  cuda_run_cmd "$sc"
  run_guarded "$secs" "${CR[@]}"
  rc=$?
  [ "$rc" = 124 ] && return 124
  if [ "$rc" = 0 ] && grep -q '^VALID' "$OUT"; then result=VALID
  elif [ "$rc" = 77 ]; then result=SKIPPED
  else result=FAILED; fi
  part_record "$PHASE" "$sc" "$result" "exit $rc"
  add_key "$sc: $result (exit $rc), $((SECONDS - T0)) s into the phase"
  add_key "$(grep -E '^(VALID|FAILED|SKIPPED|device:)|NOTE:|error' "$OUT" | head -n 12)"
  return 0
}
phase_cuda_run() {
  require_build
  apps_built || { add_note "$(apps_missing_reason)"; finish SKIPPED 0; }
  pick_python
  add_note "PY = $PY ($PY_HOW)"
  local f missing=()
  for f in "${DATA_FILES[@]}"; do [ -f "$DATA_DIR/$f" ] || missing+=("$f"); done
  if [ "${#missing[@]}" -gt 0 ]; then
    say "data missing in $DATA_DIR (${missing[*]}): trying scripts/prepare_data.sh"
    run_guarded 120 env HPCT_BUILD_DIR="$BUILD" HPCT_DATA_DIR="$DATA_DIR" bash "$ROOT/scripts/prepare_data.sh"
    missing=()
    for f in "${DATA_FILES[@]}"; do [ -f "$DATA_DIR/$f" ] || missing+=("$f"); done
    if [ "${#missing[@]}" -gt 0 ]; then
      add_note "the tiny decks' data is missing in $DATA_DIR (${missing[*]}) and scripts/prepare_data.sh could not" \
               "make it (it needs the bible-kjv and dataset-fashion-mnist packages): copy those files from a machine" \
               "where it ran (~24 MB) into $DATA_DIR (or set HPCT_DATA_DIR), then --phase cuda-run"
      finish SKIPPED 0
    fi
  fi
  run_parts "$PHASE" cuda_run "${CUDA_RUN_SCENARIOS[@]}"
  local s
  s="$(parts_summary "$PHASE")"
  add_note "scenarios: ${s:-none finished}"
  if [ "$PART_CUT" = 1 ]; then
    finish TIMEOUT 124
  elif [[ "$s" =~ (FAILED|timeout)= ]]; then
    finish FAIL 1
  elif [[ "$s" != *VALID=* ]]; then
    finish SKIPPED 0
  fi
  finish PASS 0
}

# ---- bench -------------------------------------------------------------------------------------------------------
phase_bench() {
  local which="${PHASE#bench-}" rc t
  require_build
  apps_built || { add_note "$(apps_missing_reason); bench_gpu.py compares the apps with PyTorch"; finish SKIPPED 0; }
  pick_python
  t="$(timeout 120 "$PY" -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda,
       "available" if torch.cuda.is_available() else "NOT available")' 2>&1 | tail -n 1)"
  if [ "$PY_HOW" = "no Python here imports torch" ] || [[ "$t" != torch* ]]; then
    add_note "PY = $PY: torch is not importable ($t): the PyTorch rows fail in the table, the hpctrain rows run"
  else
    add_note "PY = $PY ($PY_HOW): $t"
  fi
  bench_cmd "$which"
  run_guarded "$(left)" "${BN[@]}"
  rc=$?
  add_key "$(grep -E '^(device:|== )|^\||PASS|MISS|recorded in|^error|Traceback' "$OUT" | head -n 60)"
  if [ "$rc" = 124 ]; then
    add_note "did not finish within the time limit ($BUDGET s): fewer steps or one precision, e.g." \
             "HPCT_BRINGUP_BENCH_ARGS='--steps 25 --warmup 5 --hp-precisions bf16', then --phase $PHASE"
    finish FAIL "$rc"
  fi
  [ "$rc" = 0 ] && finish PASS 0
  finish FAIL "$rc"
}

say "phase $PHASE (state $STATE, build $BUILD, time guard $BUDGET s)"
case "$PHASE" in
  build) phase_build ;;
  cuda-tests) phase_cuda_tests ;;
  memcheck|racecheck|synccheck|initcheck) phase_sanitizer ;;
  cuda-run) phase_cuda_run ;;
  bench-gpt|bench-resnet) phase_bench ;;
esac
