"""Dask backend: overhead against one CPU call, and out-of-core throughput.

What is measured (medians of ``--repeat`` interleaved runs, warm-up excluded):

1. Overhead on a 4096 x 32000 float32 array (512 MB in, 512 MB out), the
   threaded scheduler, against one allocating call of the ``"cpu"`` backend:
   - whole rows: 8 row chunks (512 x 32000), one fused kernel call per block;
   - split rows: the axis in 4 chunks (8 x 4 = 32 blocks of 512 x 8000), the
     two-phase plan (per-block partials, tree merge, elementwise pass).
   Each Dask case is timed twice: ``.compute()`` (which also concatenates the
   blocks into one numpy array: one extra 512 MB copy) and ``da.store`` into a
   preallocated array (what an out-of-core run pays). ``da.store`` computes
   each block into an array of its own and then copies it into the target,
   so the same 8 blocks are also timed without dask: into slices of the
   target, the copies alone, and block-then-copy (the floor of any
   ``da.store``).
   Bytes: the forward reads x once and writes y once in one call; the split
   plan reads x twice (phase 1 and phase 2) plus a few floats per row.

2. Out of core: log-softmax of an uncompressed Zarr array on disk (``--zarr-gb``)
   to another, on the threaded scheduler; GB/s counts bytes read + written.

3. On paper, for N machines that each hold 1/N of every row (vocabulary
   parallel): bytes that cross the network per row for the split plan (one
   (max, sum) pair of float64 per block up the tree, one pair back down)
   against gathering each row onto one machine.

Run: ``python benchmarks/bench_dask.py [--quick] [--repeat 5] [--zarr-gb 1]``.
Prints markdown tables (docs/performance.md, "Dask backend", quotes them).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

import numpy as np

from logsoftmax.driver.perf import median_seconds  # interleaved, warm-up excluded


def overhead(rows: int, cols: int, repeat: int) -> None:
    import dask
    import dask.array as da

    import logsoftmax

    x = np.random.default_rng(0).standard_normal((rows, cols), np.float32) * 4
    out = np.empty_like(x)
    whole = da.from_array(x, chunks=(rows // 8, cols))
    split = da.from_array(x, chunks=(rows // 8, cols // 4))

    def dask_compute(d):
        return lambda: logsoftmax.log_softmax(d).compute()

    def dask_store(d):
        return lambda: da.store(logsoftmax.log_softmax(d), out, lock=False)

    blocks = np.split(x, 8)
    outs = np.split(out, 8)
    results = [logsoftmax.log_softmax(b) for b in blocks]  # for the copies alone

    def on_two_threads(per_block):
        # the 8 blocks on 2 Python threads, one numba thread each, as dask's
        # threaded scheduler runs them, without dask's scheduling
        def run():
            import numba
            from concurrent.futures import ThreadPoolExecutor

            def one(i):
                numba.set_num_threads(1)
                per_block(i)

            with ThreadPoolExecutor(2) as ex:
                list(ex.map(one, range(8)))

        return run

    def into_slice(i):
        logsoftmax.log_softmax(blocks[i], out=outs[i])

    def copy_result(i):
        outs[i][...] = results[i]

    def compute_then_copy(i):
        outs[i][...] = logsoftmax.log_softmax(blocks[i])

    cases = {
        "cpu backend, one call": lambda: _cpu(x),
        "cpu backend, one call, out=": lambda: logsoftmax.log_softmax(x, out=out),
        "8 row blocks on 2 threads, no dask (out= slices)": on_two_threads(into_slice),
        # da.store computes each block into an array of its own, then copies it
        # into the target: the copy alone, and both without dask (its floor)
        "8 row blocks on 2 threads: the copies alone": on_two_threads(copy_result),
        "8 row blocks on 2 threads: block, then copy (da.store's floor)": on_two_threads(
            compute_then_copy
        ),
        "dask, 8 row chunks, store of x - 1 (dask's own cost)": lambda: da.store(
            whole - 1, out, lock=False
        ),
        "dask, 8 row chunks, compute()": dask_compute(whole),
        "dask, 8 row chunks, store": dask_store(whole),
        "dask, 8x4 blocks (split axis), compute()": dask_compute(split),
        "dask, 8x4 blocks (split axis), store": dask_store(split),
    }
    with dask.config.set(scheduler="threads"):
        t = median_seconds(cases, repeat)
    base = t["cpu backend, one call"]
    base_out = t["cpu backend, one call, out="]  # issue 10's yardstick
    nbytes = 2 * x.nbytes
    print(f"\n### Overhead: log_softmax of {rows}x{cols} f32, threaded scheduler "
          f"(median of {repeat})\n")
    print("| case | ms | GB/s (read+write) | vs cpu | vs cpu out= |")
    print("|---|---:|---:|---:|---:|")
    for name, sec in t.items():
        print(f"| {name} | {sec * 1e3:.0f} | {nbytes / sec / 1e9:.1f} | "
              f"{sec / base:.2f}x | {sec / base_out:.2f}x |")


def _cpu(x):
    import logsoftmax

    with logsoftmax.use_backend("cpu"):
        return logsoftmax.log_softmax(x)


def out_of_core(gb: float, repeat: int) -> None:
    import dask
    import dask.array as da

    import logsoftmax

    cols = 32000
    rows = max(256, int(gb * 1e9 / (4 * cols)) // 256 * 256)
    tmp = Path(tempfile.mkdtemp(prefix="bench_dask_"))
    try:
        src = str(tmp / "logits.zarr")
        x = da.random.default_rng(1).standard_normal(
            (rows, cols), chunks=(256, cols), dtype=np.float32
        )
        with dask.config.set(scheduler="threads"):
            da.to_zarr(x, src, compressors=None)
        nbytes = 2 * x.nbytes
        cases = {}
        for label, chunks in (("whole rows", (256, cols)),
                              ("split axis in 4", (256, cols // 4))):
            dst = str(tmp / f"out-{len(cases)}.zarr")

            def run(chunks=chunks, dst=dst):
                y = logsoftmax.log_softmax(da.from_zarr(src, chunks=chunks))
                da.to_zarr(y, dst, mode="w", compressors=None)

            cases[label] = run
        with dask.config.set(scheduler="threads"):
            t = median_seconds(cases, repeat)
        print(f"\n### Out of core: Zarr {rows}x{cols} f32 ({x.nbytes / 1e9:.2f} GB, "
              f"uncompressed, 256-row chunks) -> Zarr, threaded scheduler "
              f"(median of {repeat})\n")
        print("| plan | s | GB/s (read+write) |")
        print("|---|---:|---:|")
        for name, sec in t.items():
            print(f"| {name} | {sec:.2f} | {nbytes / sec / 1e9:.2f} |")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def on_paper(cols: int = 32000, itemsize: int = 4) -> None:
    print(f"\n### Network bytes per row, rows of {cols} f32 spread over N machines\n")
    print("| N | split plan: partials up + stats down | gather the row | ratio |")
    print("|---:|---:|---:|---:|")
    for n in (2, 4, 8, 64):
        split = 2 * n * 16  # (max, sum) in float64, one pair per block, both ways
        gather = (n - 1) / n * cols * itemsize  # all remote pieces to one machine
        print(f"| {n} | {split} B | {gather:,.0f} B | {gather / split:,.0f}x |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="512x32000, 0.25 GB Zarr")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--zarr-gb", type=float, default=1.0)
    args = p.parse_args()
    rows = 512 if args.quick else 4096
    overhead(rows, 32000, args.repeat)
    out_of_core(0.25 if args.quick else args.zarr_gb, max(1, args.repeat // 2))
    on_paper()


if __name__ == "__main__":
    main()
