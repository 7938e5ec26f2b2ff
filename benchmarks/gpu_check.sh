#!/usr/bin/env bash
# One-shot GPU check of the "cuda" backend, for a session that has a GPU.
#
#   OUT=/some/dir [PACK=/some/file.tgz] bash benchmarks/gpu_check.sh
#
# Steps, in order of what a short lease must not lose:
# 1. versions, nvidia-smi, and a smoke call of each op on the device;
# 2. tests/test_cuda.py's default cases with compiled kernels
#    (TRITON_INTERPRET=0: torch tensors live on cuda, numpy inputs are staged);
# 3. benchmarks/bench_cuda.py (GB/s vs torch and a device copy);
# 4. benchmarks/cuda_front_door.py (a small call's microseconds, where they go),
#    benchmarks/cuda_probe.py (registers and spills of each compiled kernel)
#    and benchmarks/cuda_tune.py (the block-size table on the deciding shapes);
# 5. tests/test_losses_cuda.py and benchmarks/bench_losses.py --cuda (the fused
#    linear + cross-entropy's Triton pieces: time and peak memory vs torch);
# 6. tests/test_cuda.py's slow cases.
# Everything lands in $OUT (summary.txt, nvidia-smi.txt, pytest*.txt,
# bench*.txt, bench_cuda.md/.json/.png, cuda_probe.md, cuda_tune.md/.json, bench_losses*).
# With PACK set, $OUT is re-packed into that tarball after every step, so a
# lease that ends mid-run still returns what was measured (the device tool
# returns at most 8 files). Each step has its own timeout (sent as SIGINT, so
# pytest still prints its summary); they add up to ~11 minutes (an H200 took 2.5). The package
# runs from src/ when it is not installed (a device image has no registry).
# Exit status: 0 if the default tests (log-softmax and loss) passed and
# bench_cuda.py ran.
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-benchmarks/gpu_results}"
PACK="${PACK:-}"
mkdir -p "$OUT"
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
export TRITON_INTERPRET=0
export TRITON_CACHE_DIR="${TRITON_CACHE_DIR:-/tmp/logsoftmax-triton-cache}"
NPROC=$(nproc 2>/dev/null || echo 4)
WORKERS=$(( NPROC > 8 ? 8 : NPROC ))

pack() { [ -n "$PACK" ] && tar czf "$PACK" -C "$OUT" . 2>/dev/null; return 0; }
# step NAME SECONDS CMD...: run CMD with a SIGINT timeout, log to $OUT/NAME.txt
step() {
  local name=$1 secs=$2; shift 2
  local t0=$(date +%s)
  timeout -s INT -k 10 "$secs" "$@" > "$OUT/$name.txt" 2>&1
  local rc=$?
  echo "$name: rc=$rc in $(( $(date +%s) - t0 ))s: $(tail -n 1 "$OUT/$name.txt")" >> "$OUT/summary.txt"
  pack
  return $rc
}

: > "$OUT/summary.txt"
{
  date -u
  nvidia-smi || true
  "$PY" -c "import torch, triton, numba, numpy; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__, 'numba', numba.__version__, 'numpy', numpy.__version__, 'device', torch.cuda.get_device_name())"
} > "$OUT/nvidia-smi.txt" 2>&1
pack

step smoke 60 "$PY" -c "
import torch, logsoftmax
x = torch.randn(64, 1000, device='cuda')
y = logsoftmax.log_softmax(x); torch.cuda.synchronize()
print('fwd max diff', (y - torch.log_softmax(x, -1)).abs().max().item())
d = torch.randn_like(x)
g = logsoftmax.log_softmax_backward(d, y)
print('bwd max diff', (g - torch._log_softmax_backward_data(d, y, 1, x.dtype)).abs().max().item())
print('smoke ok')"

step pytest 200 "$PY" -m pytest tests/test_cuda.py -q -m "not slow" -n "$WORKERS" \
  -p no:cacheprovider --durations=10 --junitxml="$OUT/pytest.xml"
rc_tests=$?

step bench 110 "$PY" benchmarks/bench_cuda.py --out "$OUT" --repeat 20
rc_bench=$?

step front_door 60 "$PY" benchmarks/cuda_front_door.py

step probe 90 "$PY" benchmarks/cuda_probe.py --out "$OUT"

step tune 130 "$PY" benchmarks/cuda_tune.py --out "$OUT" --repeat 15 --budget 100

step pytest_losses 45 "$PY" -m pytest tests/test_losses_cuda.py -q -p no:cacheprovider
rc_losses=$?
step bench_losses 45 "$PY" benchmarks/bench_losses.py --cuda --out "$OUT"

step pytest_slow 30 "$PY" -m pytest tests/test_cuda.py -q -m slow -n "$WORKERS" -p no:cacheprovider

cat "$OUT/summary.txt"
[ "$rc_tests" -eq 0 ] && [ "$rc_bench" -eq 0 ] && [ "$rc_losses" -eq 0 ]
