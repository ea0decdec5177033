#!/bin/bash
# The GPU checks, prepared to run as one call of the workplace's device machine (about 9 minutes):
#   device call:  command "bash scripts/device_checks.sh", timeout_s 600
# 1. tests/test_cuda.py (float32 GPU against CPU, bf16-mixed, 16-mixed warning, no host sync in a
#    round, CUDA-graphed update against eager), and
#    scripts/gpu_drift.py (where the float32 GPU run leaves the CPU run: with and without Adam steps);
# 2. benchmark: seed-rounds/s and the train / refit / Gram / select split, GPU float32 and
#    bf16-mixed, the history passes (full, masked, graphed), and the same config on that
#    machine's CPU for the baseline;
# 3. square at m = 500 (the width table), float32 against bf16-mixed, graphed: whether bf16 pays
#    where the matmuls, not the launches, set the pace.
# Each step has its own time limit (540 s in all: the 9 minutes of one call), so one that hangs
# does not cost the others; all output is in $OUT.
OUT=${OUT:-/tmp/device_checks}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
step() {  # step NAME SECONDS COMMAND...: run with a limit, keep its output in $OUT/NAME.txt
  local name=$1 limit=$2; shift 2
  echo "== $(date +%T) $name: $*"
  local start=$SECONDS
  timeout "$limit" "$@" 2>&1 | tee "$OUT/$name.txt"
  local rc=${PIPESTATUS[0]}
  echo "== $name: exit $rc"
  printf '| %s | %s | %ss |\n' "$name" "$rc" "$((SECONDS - start))" >> "$OUT/status.md"
}
: > "$OUT/status.md"
step gpu 15 nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
step versions 30 python3 -c "import torch, lightning; print(torch.__version__, lightning.__version__, torch.cuda.get_device_name(0))"
step tests 175 python3 -m pytest -q -p no:cacheprovider tests/test_cuda.py
step drift 60 python3 scripts/gpu_drift.py
step bench_gpu 80 python3 scripts/benchmark.py --accelerator gpu --precision 32-true bf16-mixed --seeds 20 --rounds 300 --naive-seeds 0
step bench_gpu_walk 70 python3 scripts/benchmark.py --accelerator gpu --history-pass full masked graphed --seeds 20 --rounds 200 --naive-seeds 0
step bench_cpu 60 python3 scripts/benchmark.py --accelerator cpu --seeds 20 --rounds 300 --naive-seeds 0
step bench_gpu_wide 50 python3 scripts/benchmark.py --accelerator gpu --task square --width 500 --precision 32-true bf16-mixed --history-pass graphed --seeds 20 --rounds 150 --naive-seeds 0
# One table at the end: each step's exit status and time, then the figures that matter
{
  echo "| step | exit | time |"; echo "|---|---|---|"; cat "$OUT/status.md"
  echo; grep -h -E "passed|failed|error" "$OUT/tests.txt" | tail -3
  echo; grep -h -A 5 "^variant" "$OUT/drift.txt"
  echo; grep -h -E "^vectorized" "$OUT"/bench_*.txt
} | tee "$OUT/summary.md"
