"""What bounds the float32 vocabulary forward at 4096x32000 on this CPU.

Issue 10 asks the ``out=`` forward for >= 80% of a same-run copy's speed.
This script measures, in one process and interleaved, the pieces that
decide whether that is reachable:

* **the copy** of the same bytes two ways on 2 threads: the driver's
  ``copy2`` (LLVM turns it into ``memcpy``, which streams) and a loop of
  512-bit non-temporal stores (``!nontemporal``, ``vmovntps``). Ordinary
  stores are measured by pass 2 alone below: the same loop with plain
  stores also becomes ``llvm.memcpy`` (seen in its LLVM IR), so it cannot;
  the non-temporal loop again with its source asked for ahead
  (``prefetch_ahead``, the kernels' own hint), and a read-only pass;
* **the one-pass floor**: the same streaming copy that also sums the
  kernels' ``exp`` of every element it moves (:func:`copy_exp`). Every
  forward reads ``x`` from memory once, computes an ``exp`` per element
  and writes ``y``; ours also takes each chunk's max and reads row
  ``r - 1`` again from L2 for its output, so it cannot beat this;
* **the two-pass floor** (:func:`two_pass_floor`): the least any *exact*
  forward of rows longer than L1 can do. ``y = x - lse`` needs the whole
  row's sum before its first write, and a row of 32000 float32 (128 KB)
  does not stay in L1 (48 KB), so each row is read from memory for its sum
  (as the one-pass floor) and read again, from L2, for its write (``x - c``
  by non-temporal stores: no max, no log). Four forms (:data:`TWO_PASS_FORMS`:
  a row's sum then its write; the same with the write asking for the next
  row; the write from the row's end, whose last part L1 still holds; and
  row ``r - 1``'s write inside row ``r``'s sum, as our kernel pipelines
  them), each with the source asked for 2048, 4096 or 8192 elements ahead.
  If the fastest of them is below 80% of memcpy's speed, no exact forward
  can meet that target on this CPU;
* **our forward** (``log_softmax(x, out=y)``) on the same arrays, and its
  two passes alone: the row statistics (read ``x``, an exp per element)
  and the write pass (``y = x - m - log s``);
* **the arithmetic alone**: our forward on rows that stay in cache (16 and
  64 rows of 32000, one thread), in ns per element, next to ``np.exp`` and
  ``torch.exp`` over the same 16 rows (the exponential alone, the largest
  part of the forward's arithmetic).

The compute floor for the big problem is then ``elements / threads *
(in-cache ns per element)``; if it exceeds 80% of the copy's time budget
the target cannot be met by overlapping memory and arithmetic better.

A last table does the same for float32, bfloat16 and float16, forward
and backward: a copy of the bytes each op must move (2 streams forward, 3
backward) against the arithmetic alone (in L2, one thread); where the
arithmetic alone exceeds 80% of the copy's speed, no overlap with memory
can meet that target.

The last table (problems whose copy runs from the L3, as p09) also gives
the two-pass floor's arithmetic alone, in L2 on one thread
(:func:`floor_ns`): the least arithmetic of any exact forward, against the
same 80% budget.

Run: ``python benchmarks/vocab_limits.py [--repeat 9]`` (prints only).
"""

from __future__ import annotations

import argparse
import mmap
import sys
from pathlib import Path

import numba
import numpy as np
from numba import njit, prange

import logsoftmax
from logsoftmax.backends.cpu._math import exp_f32_sum
from logsoftmax.backends.cpu._simd import wide_vectors
from logsoftmax.backends.cpu._vec import (
    W,
    prefetch_ahead,
    reduce_add,
    sfence,
    splat,
    vload,
    vstore,
    vstore_nt,
)
from logsoftmax.backends import Op
from logsoftmax.backends.cpu.rows import forward_range, row_stats
from logsoftmax.backends.cpu.segment import row_log, write_forward
from logsoftmax.driver.perf import add3, copy2, median_seconds

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import cpu_info  # noqa: E402

# an int, not the enum member: numba types an enum argument on every call
# (~16 us), which would be timed with the kernel
_LSM = int(Op.LOG_SOFTMAX)

ROWS, COLS = 4096, 32000


@njit(parallel=True)
def vector_copy_nt(src, dst, nthreads, fetch):
    """A 2-stream copy ``dst[:] = src`` in 512-bit vectors written by
    non-temporal stores (:func:`logsoftmax.backends.cpu._vec.vstore_nt`, the
    kernels' own); ``fetch``: the source asked for 4096 elements ahead by
    the kernels' own hint (:func:`logsoftmax.backends.cpu._vec.prefetch_ahead`:
    ``prefetcht1`` on Intel, ``prefetcht0`` on AMD Zen). (With ordinary
    stores the same loop measures nothing of them: LLVM recognises the copy
    and calls ``llvm.memcpy``, which streams.)"""
    per = dst.size // nthreads // W * W
    for t in prange(nthreads):
        wide_vectors()
        end = dst.size if t == nthreads - 1 else (t + 1) * per
        for i in range(t * per, end, W):
            if fetch:
                prefetch_ahead(src, i + 4096)
            vstore_nt(dst, i, vload(src, i))
        sfence()


@njit(parallel=True)
def copy_exp(src, dst, nthreads):
    """The floor of any forward that reads ``x`` from memory once: one
    streaming pass that moves every element as :func:`vector_copy_nt` does
    (source asked for ahead, ``dst = src - c`` by non-temporal stores) and
    also adds up ``exp(src - c)`` of every element (the kernels' own
    :func:`logsoftmax.backends.cpu._math.exp_f32_sum`, four accumulators,
    as :func:`logsoftmax.backends.cpu.segment.sum32_writing`). The forward
    does this and more: the max of each chunk, and row ``r - 1`` read again
    from L2 for its output."""
    per = dst.size // nthreads // (4 * W) * (4 * W)
    out = np.zeros(nthreads, np.float32)
    c = np.float32(4.0)
    for t in prange(nthreads):
        wide_vectors()
        a0 = splat(np.float32(0.0))
        a1 = a0
        a2 = a0
        a3 = a0
        for i in range(t * per, (t + 1) * per, 4 * W):
            for q in range(0, 4 * W, W):
                prefetch_ahead(src, i + 4096 + q)
            v0 = vload(src, i) - c
            v1 = vload(src, i + W) - c
            v2 = vload(src, i + 2 * W) - c
            v3 = vload(src, i + 3 * W) - c
            a0 = a0 + exp_f32_sum(v0)
            a1 = a1 + exp_f32_sum(v1)
            a2 = a2 + exp_f32_sum(v2)
            a3 = a3 + exp_f32_sum(v3)
            vstore_nt(dst, i, v0)
            vstore_nt(dst, i + W, v1)
            vstore_nt(dst, i + 2 * W, v2)
            vstore_nt(dst, i + 3 * W, v3)
        sfence()
        out[t] = reduce_add((a0 + a1) + (a2 + a3))
    return out


@njit(forceinline=True)
def _exp_block(src, i, c, a0, a1, a2, a3):
    """``copy_exp``'s arithmetic on the ``4 W`` elements from ``i``."""
    a0 = a0 + exp_f32_sum(vload(src, i) - c)
    a1 = a1 + exp_f32_sum(vload(src, i + W) - c)
    a2 = a2 + exp_f32_sum(vload(src, i + 2 * W) - c)
    a3 = a3 + exp_f32_sum(vload(src, i + 3 * W) - c)
    return a0, a1, a2, a3


@njit(forceinline=True)
def _write_block(src, dst, i, c, nt):
    """``dst = src - c`` on the ``4 W`` elements from ``i`` (the least a
    forward's write pass can do), by non-temporal stores if ``nt`` (the
    output to memory) or ordinary ones (the output kept in cache)."""
    for q in range(0, 4 * W, W):
        if nt:
            vstore_nt(dst, i + q, vload(src, i + q) - c)
        else:
            vstore(dst, i + q, vload(src, i + q) - c)


#: the forms of :func:`two_pass_floor`
TWO_PASS_FORMS = {
    "a row's sum, then its write": 0,
    "a row's sum, then its write, which asks for the next row ahead": 1,
    "a row's sum, then its write from the row's end (its last 48 KB still in L1)": 2,
    "pipelined: row r - 1's write inside row r's sum": 3,
}


@njit(forceinline=True)
def _floor_rows(src, dst, n, r0, r1, form, ahead, nt):
    """:func:`two_pass_floor` on rows ``[r0, r1)``: the sum of their terms."""
    c = np.float32(4.0)
    a0 = splat(np.float32(0.0))
    a1 = a0
    a2 = a0
    a3 = a0
    for r in range(r0, r1):
        row = r * n
        for i in range(row, row + n, 4 * W):
            for q in range(0, 4 * W, W):
                prefetch_ahead(src, i + ahead + q)
            a0, a1, a2, a3 = _exp_block(src, i, c, a0, a1, a2, a3)
            if form == 3 and r > r0:
                _write_block(src, dst, i - n, c, nt)
        if form == 0 or form == 1:
            for i in range(row, row + n, 4 * W):
                if form == 1 and r + 1 < r1:
                    for q in range(0, 4 * W, W):
                        prefetch_ahead(src, i + n + q)
                _write_block(src, dst, i, c, nt)
        elif form == 2:
            for i in range(row + n - 4 * W, row - 1, -4 * W):
                _write_block(src, dst, i, c, nt)
    if form == 3 and r1 > r0:
        for i in range((r1 - 1) * n, r1 * n, 4 * W):
            _write_block(src, dst, i, c, nt)
    if nt:
        sfence()
    return reduce_add((a0 + a1) + (a2 + a3))


@njit(parallel=True)
def two_pass_floor(src, dst, n, nthreads, form, ahead):
    """The floor of any exact forward of rows too long for L1 (32000 float32
    are 128 KB; L1d holds 48 KB): ``y = x - lse`` needs the whole row's sum
    before the first write, so each row is read from memory once (with
    :func:`copy_exp`'s arithmetic, its source asked for ``ahead`` elements
    ahead) and **read again**, from L2, for the write (``x - c`` rounded to
    the storage type by non-temporal stores: no max, no log). ``form``
    (:data:`TWO_PASS_FORMS`): 0, a row's sum and then its write; 1, the
    same with the write pass asking for the next row's lines; 2, the write
    pass from the row's end backwards, where L1 still holds the last part
    of the row; 3, row ``r - 1``'s write block by block inside row ``r``'s
    sum, as our kernel interleaves them (``rows._forward_pipelined``).
    ``src``/``dst``: float32, or bfloat16 bits as uint16."""
    rows = src.size // n
    out = np.zeros(nthreads, np.float32)
    for t in prange(nthreads):
        wide_vectors()
        out[t] = _floor_rows(src, dst, n, t * rows // nthreads, (t + 1) * rows // nthreads, form, ahead,
                             True)
    return out


@njit
def _floor_loop(src, dst, n, reps):
    """:func:`two_pass_floor`'s arithmetic (form 0, ordinary stores) on rows
    that stay in cache, ``reps`` times, on the calling thread."""
    wide_vectors()
    s = np.float32(0.0)
    for _ in range(reps):
        s += _floor_rows(src, dst, n, 0, src.size // n, 0, 4096, False)
    return s


@njit(parallel=True)
def read_sum(src, nthreads):
    """A read-only pass: the sum of ``src`` in four float32 vectors."""
    per = src.size // nthreads // (4 * W) * (4 * W)
    out = np.zeros(nthreads, np.float32)
    for t in prange(nthreads):
        wide_vectors()
        a0 = splat(np.float32(0.0))
        a1 = a0
        a2 = a0
        a3 = a0
        for i in range(t * per, (t + 1) * per, 4 * W):
            a0 = a0 + vload(src, i)
            a1 = a1 + vload(src, i + W)
            a2 = a2 + vload(src, i + 2 * W)
            a3 = a3 + vload(src, i + 3 * W)
        out[t] = reduce_add((a0 + a1) + (a2 + a3))
    return out


@njit(parallel=True, nogil=True)
def pass1_only(x, m, s, nthreads):
    """The forward's first pass alone: every row's ``(max, sum)``."""
    rows, n = x.shape
    for t in prange(nthreads):
        for r in range(t * rows // nthreads, (t + 1) * rows // nthreads):
            m[r], s[r] = row_stats(x[r], n, False)


@njit(parallel=True, nogil=True)
def pass2_only(x, y, m, s, nthreads):
    """The forward's second pass alone (``y = x - m - log s``), ``x`` read
    from memory rather than from L2 as in the whole forward."""
    rows, n = x.shape
    for t in prange(nthreads):
        for r in range(t * rows // nthreads, (t + 1) * rows // nthreads):
            write_forward(x[r], y[r], 0, n, 0, False, m[r], row_log(s[r]), 1.0 / s[r])


def _page_aligned(shape) -> np.ndarray:
    """A zeroed float32 array on fresh pages (``vmovntps`` needs 64-byte
    aligned addresses; numpy's large arrays are only 16-byte aligned)."""
    n = int(np.prod(shape))
    a = np.frombuffer(mmap.mmap(-1, n * 4), np.float32).reshape(shape)
    a[:] = 0
    return a


def in_cache_ns(rows: int, threads: int, repeat: int) -> float:
    """Our forward on ``rows x 32000`` float32 (in cache), ns per element
    and thread."""
    numba.set_num_threads(threads)
    x = np.random.default_rng(0).standard_normal((rows, COLS), dtype=np.float32)
    y = np.empty_like(x)
    calls = max(1, 2000 // rows)

    def run():
        for _ in range(calls):
            logsoftmax.log_softmax(x, out=y)

    t = median_seconds({"ours": run}, repeat)["ours"] / calls
    return t / x.size * 1e9 * threads


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=9)
    a = ap.parse_args(argv)
    print(f"CPU: {cpu_info()['model']}; 2 threads for the big problem\n")

    numba.set_num_threads(2)
    x = _page_aligned((ROWS, COLS))
    x[:] = np.random.default_rng(1).standard_normal((ROWS, COLS), dtype=np.float32)
    y = _page_aligned((ROWS, COLS))  # zeroed and touched: no first-touch faults
    m, s = np.empty(ROWS), np.empty(ROWS)
    pass1_only(x, m, s, 2)
    xf, yf = x.reshape(-1), y.reshape(-1)
    big = median_seconds(
        {
            "copy (memcpy)": lambda: copy2(xf.view(np.uint64), yf.view(np.uint64)),
            "copy (non-temporal stores)": lambda: vector_copy_nt(xf, yf, 2, False),
            "copy (non-temporal stores, source prefetched ahead)":
                lambda: vector_copy_nt(xf, yf, 2, True),
            "copy that also sums exp of every element (one pass: the floor of any forward)":
                lambda: copy_exp(xf, yf, 2),
            **{f"two-pass floor, {name}, {ahead} ahead":
               (lambda form=form, ahead=ahead: two_pass_floor(xf, yf, COLS, 2, form, ahead))
               for name, form in TWO_PASS_FORMS.items() for ahead in (2048, 4096, 8192)},
            "read alone (a sum of x)": lambda: read_sum(xf, 2),
            "ours log_softmax out=": lambda: logsoftmax.log_softmax(x, out=y),
            "ours, pass 1 alone (row statistics)": lambda: pass1_only(x, m, s, 2),
            "ours, pass 2 alone (x read from memory)": lambda: pass2_only(x, y, m, s, 2),
        },
        a.repeat,
    )
    base = big["copy (memcpy)"]
    print(f"| {ROWS}x{COLS} f32, 2 threads | ms | % of memcpy's speed |")
    print("|---|---:|---:|")
    for name, t in big.items():
        print(f"| {name} | {t * 1e3:.1f} | {base / t:.0%} |")
    one_pass = next(t for name, t in big.items() if name.startswith("copy that also"))
    ours = big["ours log_softmax out="]
    two_pass = min(t for name, t in big.items() if name.startswith("two-pass floor"))
    print(f"\nThe one-pass floor runs at {base / one_pass:.0%} of memcpy's speed, ours at "
          f"{base / ours:.0%} ({one_pass / ours:.0%} of the floor's speed). 80% of memcpy's "
          f"speed allows {base / 0.8 * 1e3:.1f} ms: {base / 0.8 / one_pass - 1:+.1%} on top of "
          f"the one streaming pass, for the max pass and the reread of each row from L2.")
    print(f"The two-pass floor (its fastest form) runs at {base / two_pass:.0%} of "
          f"memcpy's speed; ours at {two_pass / ours:.0%} of it.")

    ns1 = {r: in_cache_ns(r, 1, a.repeat) for r in (16, 64)}
    ns2 = in_cache_ns(64, 2, a.repeat)
    numba.set_num_threads(2)
    row16 = np.random.default_rng(2).standard_normal(16 * COLS, dtype=np.float32)
    out16 = np.empty_like(row16)
    fns = {"np.exp": lambda: np.exp(row16, out=out16)}
    try:
        import torch

        torch.set_num_threads(1)
        t16, o16 = torch.from_numpy(row16), torch.from_numpy(out16)
        fns["torch.exp"] = lambda: torch.exp(t16, out=o16)
    except ImportError:
        pass
    exps = {k: v / row16.size * 1e9 for k, v in median_seconds(fns, a.repeat).items()}

    print("\n| in cache, one thread | ns per element |")
    print("|---|---:|")
    for r, v in ns1.items():
        print(f"| ours, {r}x{COLS} | {v:.3f} |")
    print(f"| ours, 64x{COLS}, 2 threads (per thread) | {ns2:.3f} |")
    for k, v in exps.items():
        print(f"| {k} alone, 16x{COLS} | {v:.3f} |")

    per_thread = ROWS * COLS / 2
    floor = per_thread * min(ns1.values()) * 1e-9
    print(
        f"\nArithmetic alone for {ROWS}x{COLS} on 2 threads: {floor * 1e3:.1f} ms "
        f"= {base / floor:.0%} of memcpy's speed at best (perfect overlap with memory); "
        f"80% needs <= {base / 0.8 * 1e3:.1f} ms, i.e. <= "
        f"{base / 0.8 / per_thread * 1e9:.3f} ns per element and thread."
    )
    sixteen_bit(a.repeat)
    cached_copy(a.repeat)
    return 0


def sixteen_bit(repeat: int) -> None:
    """The same bound for bfloat16/float16 (and float32) forward and
    backward: the copy of the bytes each op must move at 2 threads against
    the arithmetic alone (one thread, 4 rows of 32000 in L2, ns per
    element, times the elements per thread)."""
    import ml_dtypes

    print(f"\n| {ROWS}x{COLS}, 2 threads | copy of its bytes (2 streams fwd, 3 bwd) | 80% budget | "
          "in-cache ns/element (1 thread) | arithmetic alone | arithmetic / budget |")
    print("|---|---:|---:|---:|---:|---:|")
    rng = np.random.default_rng(3)
    for name, dt in (("f32", np.float32), ("bf16", ml_dtypes.bfloat16), ("f16", np.float16)):
        for direction in ("fwd", "bwd"):
            numba.set_num_threads(2)
            words = ROWS * COLS * np.dtype(dt).itemsize // 8  # one stream, as uint64
            bufs = [np.full(words, 7, np.uint64) for _ in range(2 if direction == "fwd" else 3)]
            if direction == "fwd":
                copy_fn = lambda: copy2(bufs[0], bufs[1])  # noqa: E731
            else:
                copy_fn = lambda: add3(bufs[0], bufs[1], bufs[2])  # noqa: E731
            copy_s = median_seconds({"c": copy_fn}, repeat)["c"]
            del bufs
            numba.set_num_threads(1)
            x = (rng.standard_normal((4, COLS)) * 3).astype(dt)  # in L2
            y = logsoftmax.log_softmax(x)
            d = rng.standard_normal((4, COLS)).astype(dt)
            o = np.empty_like(x)
            calls = 200  # per sample: ~10 ms, far above the timer's resolution

            def fn():
                for _ in range(calls):
                    if direction == "fwd":
                        logsoftmax.log_softmax(x, out=o)
                    else:
                        logsoftmax.log_softmax_backward(d, y, out=o)

            ns = median_seconds({"op": fn}, repeat)["op"] / calls / x.size * 1e9
            arith = ROWS * COLS / 2 * ns * 1e-9
            budget = copy_s / 0.8
            print(f"| {name} {direction} | {copy_s * 1e3:.1f} ms | {budget * 1e3:.1f} ms | "
                  f"{ns:.3f} | {arith * 1e3:.1f} ms | {arith / budget:.2f} |")
    numba.set_num_threads(2)



@njit
def _kernel_loop(xb, ob, g, reps):
    for _ in range(reps):
        forward_range(xb, ob, g, _LSM, False, 0, g[0])


def kernel_ns(dt, rows: int, n: int, repeat: int) -> float:
    """The row kernel alone (``rows.forward_range``, fast path, called in a
    compiled loop: no call overhead), one thread, on ``rows x n`` elements
    of ``dt`` that stay in cache between calls: ns per element."""
    import ml_dtypes

    x = (np.random.default_rng(4).standard_normal((rows, n)) * 3).astype(dt)
    o = np.empty_like(x)
    storage = {np.dtype(ml_dtypes.bfloat16): np.uint16, np.dtype(np.float16): np.int16}
    st = storage.get(np.dtype(dt), np.float32)
    xb, ob = x.view(st).reshape(-1), o.view(st).reshape(-1)
    g = np.array([rows, 1, n, 1, 0, n, 0, 1, 1, 0, n, 0, 1, 1], np.int64)
    reps = max(1, 20_000_000 // x.size)
    _kernel_loop(xb, ob, g, 1)
    return median_seconds({"k": lambda: _kernel_loop(xb, ob, g, reps)}, repeat)["k"] / reps / x.size * 1e9


def floor_ns(dt, rows: int, n: int, repeat: int) -> float:
    """:func:`two_pass_floor`'s arithmetic alone (its sum pass and its
    write pass, one thread, ``rows x n`` elements of ``dt`` that stay in
    cache), ns per element: the least arithmetic any exact forward does."""
    import ml_dtypes

    x = (np.random.default_rng(4).standard_normal((rows, n)) * 3).astype(dt)
    storage = {np.dtype(ml_dtypes.bfloat16): np.uint16}
    xb = x.view(storage.get(np.dtype(dt), np.float32)).reshape(-1)
    ob = np.empty_like(xb)
    reps = max(1, 20_000_000 // x.size)
    _floor_loop(xb, ob, n, 1)
    return median_seconds({"k": lambda: _floor_loop(xb, ob, n, reps)}, repeat)["k"] / reps / x.size * 1e9


def cached_copy(repeat: int) -> None:
    """Problems whose copy runs from the L3, as p09 (256x128256 bfloat16,
    66 MB each way): there the copy is far faster than memory allows a
    forward, and the bound is the kernel's own arithmetic with its data in
    L2 (two rows, one thread), times the elements per thread."""
    import ml_dtypes

    print("\n| problem, 2 threads | copy of its bytes | 80% budget | kernel alone in L2 (ns/element, 1 thread) "
          "| kernel alone, elements per thread | kernel / budget "
          "| two-pass floor's arithmetic in L2 (ns/element) | floor / budget |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, dt, rows, n in (("p09 256x128256 bf16 fwd", ml_dtypes.bfloat16, 256, 128256),
                              ("v32k 4096x32000 bf16 fwd", ml_dtypes.bfloat16, 4096, 32000),
                              ("v32k 4096x32000 f32 fwd", np.float32, 4096, 32000)):
        numba.set_num_threads(2)
        words = rows * n * np.dtype(dt).itemsize // 8
        a, b = np.full(words, 7, np.uint64), np.full(words, 7, np.uint64)
        copy_s = median_seconds({"c": lambda: copy2(a, b)}, repeat)["c"]
        del a, b
        ns = kernel_ns(dt, 2, n, repeat)
        fns = floor_ns(dt, 2, n, repeat)
        alone = rows * n / 2 * ns * 1e-9
        least = rows * n / 2 * fns * 1e-9
        budget = copy_s / 0.8
        print(f"| {name} | {copy_s * 1e3:.2f} ms | {budget * 1e3:.2f} ms | {ns:.3f} | "
              f"{alone * 1e3:.2f} ms | {alone / budget:.2f} | {fns:.3f} | {least / budget:.2f} |")
    numba.set_num_threads(2)


if __name__ == "__main__":
    raise SystemExit(main())
