#!/usr/bin/env bash
# Device call 1 of the 2026-11-28 session (H200): NCCL probe, then gpu_session.sh with the layout matrix in parallel
# with phase A (host-staged mpi backend always; nccl too when the machine has NCCL >= 2.30), then bench gpt, resnet.
set -u
mkdir -p "$OUT/s"
bash validation/nccl_carry.sh probe --adopt > "$OUT/nccl_probe.txt" 2>&1; probe=$?
echo "probe rc $probe"; tail -3 "$OUT/nccl_probe.txt"
cat > /tmp/layouts.sh <<'IN'
set -u
mkdir -p "$OUT/layouts"
python3 validation/gpu_layouts.py --backend mpi --budget 235 --timeout 60 --fresh --work /tmp/gl_mpi \
  --record "$OUT/layouts/layouts_mpi.jsonl" --out "$LOGS/layouts_mpi" > "$LOGS/layouts_mpi_runner.log" 2>&1 &
if [ "$PROBE" = 0 ]; then
  ( NCCL_MULTI_RANK_GPU_ENABLE=1 timeout 60 mpirun --oversubscribe --bind-to none -np 2 \
      build/tests/mpi/comm/test_comm_nccl --gtest_color=no > "$LOGS/test_comm_nccl_np2.log" 2>&1
    echo "exit $?" >> "$LOGS/test_comm_nccl_np2.log"
    python3 validation/gpu_layouts.py --backend nccl --budget 170 --timeout 60 --fresh --work /tmp/gl_nccl \
      --record "$OUT/layouts/layouts_nccl.jsonl" --out "$LOGS/layouts_nccl" > "$LOGS/layouts_nccl_runner.log" 2>&1 ) &
fi
wait
tail -5 "$LOGS"/layouts_*_runner.log
tar -C "$LOGS" -czf "$OUT/layouts/layouts_logs.tar.gz" $(cd "$LOGS" && ls -d layouts_* test_comm_nccl_np2.log 2>/dev/null)
IN
PROBE=$probe bash validation/gpu_session.sh "$OUT/s" --budget 580 --bench gpt,resnet --sanitize memcheck,racecheck \
  --extra "layouts=PROBE=$probe bash /tmp/layouts.sh"
echo "session rc $?"
cat "$OUT/s/summary.txt"
