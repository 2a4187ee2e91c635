#!/usr/bin/env bash
# Second device call: the fixed cuDNN workspace budget (plan = record on CUDA), ResNet-50 bf16 speed and fallbacks.
set -uo pipefail
OUT="$1"; L=$(mktemp -d)
source validation/gpu_bundle.sh unpack .gpu/bundle.tar.xz > "$L/env.txt" 2>&1
export HPCT_DATA_DIR="$PWD/data" OMP_NUM_THREADS=4 PYTHONUNBUFFERED=1
CS="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
s() { echo "[$SECONDS s] $*" | tee -a "$OUT/summary.txt"; }
G=(build/apps/train_gpt build/apps/train_resnet)
(timeout 150 build/tests/unit/kernels/test_cuda_resnet --gtest_color=no > "$L/test_cuda_resnet.log" 2>&1
 s "test_cuda_resnet exit $? $(grep -E '^\[  (PASSED|FAILED)' "$L/test_cuda_resnet.log" | tr '\n' ' ')") &
(timeout 170 "$CS" --tool memcheck --error-exitcode 86 build/tests/unit/kernels/test_cuda_resnet --gtest_color=no > "$L/memcheck_resnet.log" 2>&1
 s "memcheck test_cuda_resnet exit $? $(grep -E 'ERROR SUMMARY|^\[  (PASSED|FAILED)' "$L/memcheck_resnet.log" | tr '\n' ' ')") &
for sc in memory resnet; do
  (timeout 170 python3 tests/integration/check_cuda_run.py $sc "${G[@]}" /tmp/cr_$sc > "$L/cuda_run_$sc.log" 2>&1
   s "cuda_run $sc exit $? $(grep -E '^(VALID|FAILED)' "$L/cuda_run_$sc.log")") &
done
wait
tar -C "$L" -czf "$OUT/logs.tar.gz" .
python3 - <<'PY'
import h5py, numpy as np
for path, n, seed in (("/tmp/r_train.h5", 256, 1), ("/tmp/r_test.h5", 64, 2)):
    rng = np.random.default_rng(seed)
    with h5py.File(path, "w") as f:
        f.create_dataset("images", data=rng.integers(0, 256, (n, 3, 224, 224), dtype=np.uint8))
        f.create_dataset("labels", data=rng.integers(0, 1000, n).astype("int32"))
        f.attrs["num_classes"] = 1000
PY
build/apps/train_resnet inputs/resnet50.toml --plan 1 --set train.device=cuda --set train.precision=bf16 --set train.micro_batch=256 --set train.global_batch=256 --set data.train=/tmp/r_train.h5 --set data.test=/tmp/r_test.h5 > "$L/r50_plan.txt" 2>&1
timeout 150 build/apps/train_resnet inputs/resnet50.toml --set train.device=cuda --set train.epochs=0 --set data.train=/tmp/r_train.h5 --set data.test=/tmp/r_test.h5 --set data.eval_images=64 --set data.crop_pad=0 --set data.flip=false --set checkpoint.at_end=false --set checkpoint.every=0 --set checkpoint.every_minutes=0 --set log.every=1 --set log.peak_tflops=989.5 --out /tmp/r50 --set train.steps=20 --set train.micro_batch=256 --set train.global_batch=256 --set train.eval_every=20 --set train.precision=bf16 > "$L/r50.txt" 2>&1
s "resnet50 bf16 mb256 exit $?: $(grep -E 'PERFORMANCE|memory record' "$L/r50.txt" | tail -2 | tr '\n' ' ')"
s "fallback warnings: $(grep -c "cuDNN's preferred" "$L/r50.txt")"; grep -E "cuDNN's preferred|error" "$L/r50.txt" | head | tee -a "$OUT/summary.txt"
timeout 100 build/apps/train_resnet inputs/resnet50.toml --set train.device=cuda --set train.epochs=0 --set data.train=/tmp/r_train.h5 --set data.test=/tmp/r_test.h5 --set data.eval_images=64 --set data.crop_pad=0 --set data.flip=false --set checkpoint.at_end=false --set checkpoint.every=0 --set checkpoint.every_minutes=0 --set log.every=1 --set log.peak_tflops=989.5 --out /tmp/r50f --set train.steps=10 --set train.micro_batch=128 --set train.global_batch=128 --set train.eval_every=0 --set train.precision=fp32 > "$L/r50f.txt" 2>&1
s "resnet50 fp32 mb128 exit $?: $(grep -E 'PERFORMANCE|memory record' "$L/r50f.txt" | tail -2 | tr '\n' ' ')"
s "fallback warnings: $(grep -c "cuDNN's preferred" "$L/r50f.txt")"; grep -E "cuDNN's preferred|error" "$L/r50f.txt" | head | tee -a "$OUT/summary.txt"
tail -4 "$L/r50_plan.txt" | head -2 | tee -a "$OUT/summary.txt"
tar -C "$L" -czf "$OUT/logs.tar.gz" .
