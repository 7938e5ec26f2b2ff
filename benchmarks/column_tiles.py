"""Column kernels at several tile widths, interleaved in one process.

``columns.tile_width_for`` picks how many columns a tile of a non-last-axis
problem spans (the arithmetic per column does not depend on it, only the
speed). This script calls the column kernels directly with each width
given, on the same arrays, in interleaved rounds on 2 threads
(``common.time_calls``: each round in its own order), checks that every
width gives the same bits, and prints the median time per width --
the measurements behind the widths ``tile_width_for`` chooses.

    python benchmarks/column_tiles.py 1000x65536 0 bwd --widths 1024,2048,4096
    python benchmarks/column_tiles.py 64x64x56x56 1 fwd

A problem is a shape, the reduction axis and ``fwd`` or ``bwd``
(log_softmax), in float32 unless ``--dtype bf16|f16`` (the fast path
then, as the library takes it for 16-bit data); without ``--widths``, the
width the library would choose and half and double it.

    python benchmarks/column_tiles.py 8x16x384x384 2 fwd --dtype f16 --widths 128,192,384
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import ml_dtypes
import numba
import numpy as np

import logsoftmax
from logsoftmax.backends import Op
from logsoftmax.backends.cpu import columns, native, segment
from logsoftmax.backends.cpu.layout import layout

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import cpu_info, time_calls  # noqa: E402


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("shape", help="e.g. 1000x65536")
    ap.add_argument("axis", type=int)
    ap.add_argument("direction", choices=("fwd", "bwd"))
    ap.add_argument("--widths", help="comma-separated tile widths (columns)")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--dtype", choices=("f32", "bf16", "f16"), default="f32")
    ap.add_argument("--numpy-out", action="store_true",
                    help="write into np.empty_like memory (huge pages where THP allows, as the "
                         "benchmark's out= calls) instead of the library's own (4 KiB pages)")
    args = ap.parse_args(argv)
    shape = tuple(int(v) for v in args.shape.split("x"))
    numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
    threads = numba.get_num_threads()
    rng = np.random.default_rng(0)
    dtype = {"f32": np.float32, "bf16": ml_dtypes.bfloat16, "f16": np.float16}[args.dtype]
    x = rng.standard_normal(shape, dtype=np.float32).astype(dtype)
    dd = rng.standard_normal(shape, dtype=np.float32).astype(dtype)
    y = logsoftmax.log_softmax(x, axis=args.axis)
    out = logsoftmax.log_softmax(x, axis=args.axis)  # the library's own output memory
    if args.numpy_out:
        out = np.empty_like(out)
    bwd = args.direction == "bwd"
    ops = [dd, y, out] if bwd else [x, out]
    lay = layout(shape, [a.strides for a in ops], [a.itemsize for a in ops], args.axis)
    if not lay.inner:
        raise SystemExit("the reduction axis is the last one: no column tiles")
    n1, n2, n, ni = lay.dims
    chosen = int(columns.tile_width_for(n, ni, bwd, threads, n1 * n2))
    widths = ([int(v) for v in args.widths.split(",")] if args.widths
              else sorted({max(64, chosen // 2), chosen, chosen * 2}))
    flat = lay.buffers(ops)
    # the precision path the library takes (cpu backend's rule: float32's
    # short reductions accurate, 16-bit data fast)
    accurate = np.bool_(dtype == np.float32
                        and n <= (segment.SHORT_BACKWARD if bwd else segment.SHORT))

    tiles = native.Parallel(columns, "backward_tiles" if bwd else "forward_tiles", native.over_tiles)

    def call(J):
        return lambda: tiles(threads, *flat, lay.g, int(Op.LOG_SOFTMAX), accurate, J)

    fns = {J: call(J) for J in widths}
    ref = None
    for J, f in fns.items():
        f()
        if ref is None:
            ref = out.copy()
        elif not np.array_equal(ref.view(np.uint8), out.view(np.uint8)):
            raise SystemExit(f"width {J} changed the result's bits")
    seconds, errors = time_calls({str(J): f for J, f in fns.items()}, args.rounds)
    if errors:
        raise SystemExit(f"a width failed: {errors}")
    print(f"CPU: {cpu_info()['model']}; {threads} threads; {args.shape} axis {args.axis} "
          f"{args.direction} {np.dtype(dtype).name}; output in {'numpy' if args.numpy_out else 'library'} memory; accurate path: {bool(accurate)}; tile_width_for chooses {chosen} columns; same bits: yes")
    print("| columns per tile | ms (median) |")
    print("|---:|---:|")
    for J, sec in seconds.items():
        print(f"| {J} | {sec * 1e3:.2f} |")


if __name__ == "__main__":
    main()
