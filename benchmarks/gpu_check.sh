#!/usr/bin/env bash
# One-shot GPU check of the "cuda" backend, for a session that has a GPU.
#
#   OUT=/some/dir bash benchmarks/gpu_check.sh        # (the device tool sets $OUT)
#
# 1. runs tests/test_cuda.py on the device with compiled kernels
#    (TRITON_INTERPRET=0: torch tensors live on cuda, numpy inputs are staged),
#    default cases then the slow ones;
# 2. runs tests/test_losses_cuda.py (the fused loss's Triton pieces, compiled)
#    and benchmarks/bench_losses.py --cuda (time and peak memory vs torch);
# 3. runs benchmarks/bench_cuda.py (GB/s vs torch and a device copy).
# Everything lands in $OUT: nvidia-smi.txt, pytest*.txt/.xml (pytest_losses.txt
# too), bench_cuda.md/.json/.png, bench_losses*.txt/.md, summary.txt. Budget:
# the steps' timeouts add up to ~13.5 minutes (330+90+120+120+150 s); expect less
# on an H200 (Triton compiles each kernel specialisation once; pytest -n 8
# spreads the compiles over the CPU cores).
# Exit status: 0 if the default tests (log-softmax and loss) passed and
# bench_cuda.py ran.
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-benchmarks/gpu_results}"
mkdir -p "$OUT"
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
export TRITON_INTERPRET=0
export TRITON_CACHE_DIR="${TRITON_CACHE_DIR:-/tmp/logsoftmax-triton-cache}"
{
  date -u
  nvidia-smi || true
  "$PY" -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__, 'device', torch.cuda.get_device_name())"
} > "$OUT/nvidia-smi.txt" 2>&1

NPROC=$(nproc 2>/dev/null || echo 4)
WORKERS=$(( NPROC > 8 ? 8 : NPROC ))
start=$(date +%s)
timeout 330 "$PY" -m pytest tests/test_cuda.py -q -m "not slow" -n "$WORKERS" \
  -p no:cacheprovider --junitxml="$OUT/pytest.xml" > "$OUT/pytest.txt" 2>&1
rc_tests=$?
t_tests=$(( $(date +%s) - start ))

start=$(date +%s)
timeout 90 "$PY" -m pytest tests/test_cuda.py -q -m slow -n "$WORKERS" \
  -p no:cacheprovider > "$OUT/pytest_slow.txt" 2>&1
rc_slow=$?
t_slow=$(( $(date +%s) - start ))

start=$(date +%s)
timeout 120 "$PY" -m pytest tests/test_losses_cuda.py -q -p no:cacheprovider \
  > "$OUT/pytest_losses.txt" 2>&1
rc_losses=$?
timeout 120 "$PY" benchmarks/bench_losses.py --cuda --out "$OUT" \
  > "$OUT/bench_losses.txt" 2>&1
rc_losses_bench=$?
t_losses=$(( $(date +%s) - start ))

start=$(date +%s)
timeout 150 "$PY" benchmarks/bench_cuda.py --out "$OUT" --repeat 20 > "$OUT/bench.txt" 2>&1
rc_bench=$?
t_bench=$(( $(date +%s) - start ))

{
  echo "tests (default): rc=$rc_tests in ${t_tests}s: $(tail -n 1 "$OUT/pytest.txt")"
  echo "tests (slow):    rc=$rc_slow in ${t_slow}s: $(tail -n 1 "$OUT/pytest_slow.txt")"
  echo "benchmark:       rc=$rc_bench in ${t_bench}s (table: $OUT/bench_cuda.md)"
  echo "losses (fused linear + cross-entropy): tests rc=$rc_losses, bench rc=$rc_losses_bench in ${t_losses}s: $(tail -n 1 "$OUT/pytest_losses.txt") (table: $OUT/bench_losses_cuda.md)"
} | tee "$OUT/summary.txt"
[ "$rc_tests" -eq 0 ] && [ "$rc_bench" -eq 0 ] && [ "$rc_losses" -eq 0 ]
