#!/bin/bash
# The GPU checks, prepared to run as one call of the workplace's device machine:
#   device call:  command "bash lab/diagnostics/device_checks.sh", timeout_s 600, carry [".whl"] (below)
# Steps in order of what matters most, each with its own limit and all inside BUDGET seconds (a
# step that would start past it is skipped, one that hangs costs only its own limit):
# 1. tests/machinery/test_cuda.py (float32 GPU against CPU, bf16-mixed, 16-mixed warning, no host sync in a
#    round, the CUDA-graphed update against eager, graphed the default on CUDA);
# 2. the issue's first target as users run it (and with GELU and w_reg 0.1, target_cos_gelu) (no device waits around timed sections): configs/cos.yaml's
#    run (cos, 20 seeds x 2000 rounds, m=32), graphed (the full pass where the capture fails: a figure all the same);
#    then the same with the progress bar's R/t on the device, as the package logged it until call 4 (Lightning
#    reads it on the host after every batch: the wait a round that costs, paired), and through cuBLASLt
#    (--blas cublaslt: may split the weight gradient's long inner dimension);
# 3. lab/diagnostics/gpu_wait_finder.py: where a round makes the host wait for the device (the cos run took about
#    host + device time on an H200, not the larger of the two);
#    lab/diagnostics/gpu_drift.py: where the float32 GPU run leaves the CPU run, and S=4 against four S=1 (and again
#    through cuBLASLt: whether its choices keep a seed's results independent of the seeds beside it);
# 4. the history passes side by side (chunked, full, masked, graphed) with the time split;
# 5. lab/diagnostics/gpu_profile.py: the kernels one round's graphed update launches, and their time;
#    lab/diagnostics/gpu_capture_probe.py: whether one seed's graphed fit captures (it failed in calls 3-4, not since),
#    and if not, which operation breaks it and which of four candidate mends lets it capture;
# 6. the second target, square at m=500 (20 seeds x 2000 rounds): with TF32 matmuls, in bf16-mixed (whether
#    bf16 pays where the matmuls, not the launches, set the pace), and in plain float32 (the slowest, last).
# Meanwhile, on the CPU cores the GPU steps leave (three quarters), the cos run on that machine's
# CPU: the baseline beside the GPU figures. Output: $OUT/log.txt (every step), $OUT/cpu.txt,
# $OUT/summary.md (one table). Last run: docs/performance.md, "On a GPU".
OUT=${OUT:-/tmp/device_checks}
BUDGET=${BUDGET:-550}
STEPS=${STEPS:-}  # e.g. STEPS="versions tests target_cos": run only the steps named (all when empty)
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
# The device machine's image has torch and Lightning but not jsonargparse (the CLI's parser: without it the
# tests that run the CLI fail). Fetch it here as wheels, carried with the call (.whl, ignored by git):
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 \
#     -d .whl jsonargparse docstring-parser typeshed-client
if ! python3 -c "import jsonargparse" 2>/dev/null && ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl &&
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
LOG=$OUT/log.txt
: > "$LOG"
: > "$OUT/status.tmp"
NCPU=$(nproc)
GPU_CORES=$((NCPU / 4))  # the GPU steps' host threads; the rest run the CPU baseline
pin_gpu=(); pin_cpu=()
if [ "$GPU_CORES" -ge 2 ] && command -v taskset >/dev/null; then  # the GPU's host thread and the CPU baseline apart
  pin_gpu=(taskset -c "0-$((GPU_CORES - 1))"); pin_cpu=(taskset -c "$GPU_CORES-$((NCPU - 1))")
fi
step() {  # step NAME SECONDS COMMAND...: run with a limit (cut to the budget left), output into the log
  local name=$1 limit=$2; shift 2
  if [ -n "$STEPS" ] && [[ " $STEPS " != *" $name "* ]]; then return 1; fi  # STEPS="a b": only these steps
  local left=$((BUDGET - SECONDS))
  if [ "$left" -lt 15 ]; then
    printf '| %s | skipped (budget spent) | 0s |\n' "$name" >> "$OUT/status.tmp"; return
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "== $(date +%T) $name (limit ${limit}s): $*" | tee -a "$LOG"
  local start=$SECONDS
  timeout "$limit" "${pin_gpu[@]}" "$@" 2>&1 | tee -a "$LOG"
  local rc=${PIPESTATUS[0]}
  echo "== $name: exit $rc" | tee -a "$LOG"
  printf '| %s | %s | %ss |\n' "$name" "$([ "$rc" = 124 ] && echo "124 (limit)" || echo "$rc")" "$((SECONDS - start))" >> "$OUT/status.tmp"
  return "$rc"
}
background() {  # background NAME SECONDS COMMAND...: on the other CPU cores, output into $OUT/cpu.txt
  local name=$1 limit=$2; shift 2
  ( echo "== $(date +%T) $name (limit ${limit}s, cores ${pin_cpu[*]:-all}): $*"
    OMP_NUM_THREADS=$((NCPU - GPU_CORES)) timeout "$limit" "${pin_cpu[@]}" "$@" 2>&1; echo "== $name: exit $?" ) >> "$OUT/cpu.txt"
}
: > "$OUT/cpu.txt"
CPU_LIMIT=$((BUDGET - 10))
BG=
if [ -z "$STEPS" ] || [[ " $STEPS " == *" bench_cpu "* ]]; then
  background bench_cpu_cos "$CPU_LIMIT" python3 scripts/benchmark.py --accelerator cpu --seeds 20 --rounds 2000 --naive-seeds 0 &
  BG=$!
elif [[ " $STEPS " == *" bench_cpu_act "* ]]; then  # ReLU against GELU on a quiet CPU, alternated (one thread: the package picks it at this size)
  background bench_cpu_act "$CPU_LIMIT" python3 scripts/benchmark.py --accelerator cpu --seeds 20 --rounds 400 --naive-seeds 0 --activation relu gelu relu gelu relu gelu &
  BG=$!
fi
step versions 30 bash -c "nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; python3 -c 'import torch, lightning; print(torch.__version__, lightning.__version__, torch.cuda.get_device_name(0))'; nproc; python3 -c 'import triton; print(\"triton\", triton.__version__)' 2>&1 | tail -1"
step tests 150 python3 -m pytest -q -p no:cacheprovider tests/machinery/test_cuda.py
step target_cos 70 python3 scripts/benchmark.py --accelerator gpu --history-pass graphed --unsynced --seeds 20 --rounds 2000 --naive-seeds 0 ||
  step target_cos_full 100 python3 scripts/benchmark.py --accelerator gpu --history-pass full --unsynced --seeds 20 --rounds 2000 --naive-seeds 0
step target_cos_gelu 70 python3 scripts/benchmark.py --accelerator gpu --history-pass graphed --unsynced --seeds 20 --rounds 2000 --naive-seeds 0 --activation gelu --w-reg 0.1
step target_cos_wait 70 python3 scripts/benchmark.py --accelerator gpu --history-pass graphed --unsynced --progress-value device --seeds 20 --rounds 2000 --naive-seeds 0
step target_cos_lt 70 python3 scripts/benchmark.py --accelerator gpu --history-pass graphed --unsynced --blas cublaslt --seeds 20 --rounds 2000 --naive-seeds 0
step wait_finder 60 python3 lab/diagnostics/gpu_wait_finder.py
step drift 70 python3 lab/diagnostics/gpu_drift.py
step drift_lt 70 python3 lab/diagnostics/gpu_drift.py --blas cublaslt
step bench_gpu_walk 60 python3 scripts/benchmark.py --accelerator gpu --history-pass chunked full masked graphed --seeds 20 --rounds 200 --naive-seeds 0
step profile 40 python3 lab/diagnostics/gpu_profile.py
step capture_probe 90 python3 lab/diagnostics/gpu_capture_probe.py
step tf32_square 120 python3 scripts/benchmark.py --accelerator gpu --task square --width 500 --matmul-precision high --history-pass graphed --unsynced --seeds 20 --rounds 2000 --naive-seeds 0
step bf16_square 120 python3 scripts/benchmark.py --accelerator gpu --task square --width 500 --precision bf16-mixed --history-pass graphed --unsynced --seeds 20 --rounds 2000 --naive-seeds 0
step target_square 200 python3 scripts/benchmark.py --accelerator gpu --task square --width 500 --history-pass graphed --unsynced --seeds 20 --rounds 2000 --naive-seeds 0
# the CPU baseline stops with the budget
left=$((BUDGET - SECONDS)); [ "$left" -lt 1 ] && left=1
if [ -n "$BG" ]; then
  timeout "$left" tail --pid="$BG" -f /dev/null; pkill -P "$BG" 2>/dev/null; pkill -f "scripts/benchmark.py --accelerator cpu" 2>/dev/null
fi
# One table at the end: each step's exit status and time, then the figures that matter
{
  echo "| step | exit | time |"; echo "|---|---|---|"; cat "$OUT/status.tmp"
  echo; grep -h -E "^(NVIDIA|H[0-9]|[0-9]+\.[0-9]+\.[0-9]+)" "$LOG" | head -3
  echo; grep -h -E "[0-9]+ (passed|failed|skipped)|^FAILED|^ERROR" "$LOG" | tail -8
  echo; grep -h -E "^(== bench|== target|== bf16|== tf32|vectorized|torch |triton )" "$LOG" "$OUT/cpu.txt"
  echo; grep -h -A 4 "^action (host ms a round)" "$LOG"
  echo; grep -h -E -A 5 "^(variant|GPU runs through)" "$LOG"; grep -h -A 6 "^S=4 against" "$LOG"
  echo; grep -h -E "^(Adam steps|theta refit|graph replay|dW )" "$LOG"
  echo; grep -h -E "^(alone .*FAILED|one-seed graphed fit|mends that let)" "$LOG" | head -14
} > "$OUT/summary.md"
rm -f "$OUT/status.tmp"
cat "$OUT/summary.md"
