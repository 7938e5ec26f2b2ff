"""Does where ``out`` lies change an ``out=`` call's speed? (issue 10)

``out=`` must never be slower than allocating, yet in full ``make bench``
runs rows of 32 (262144x32 float32) came out 1.03-1.07x slower with a numpy
``out`` than with the pool's buffer. One suspect is 4K aliasing: a load
whose address matches an earlier, still pending store's in the low 12 bits
waits for it, and ``x`` and a numpy ``out`` from the same allocator often
share their page offset while the pool's page-aligned buffers do not.

This script puts ``x`` at a page boundary and times, interleaved (medians
of ``--rounds``), the allocating call and ``out=`` into numpy buffers whose
page offset is 0, 64, 1024, 2048 and 3072 bytes (0: the same as ``x``'s).

    python benchmarks/out_placement.py [--op fwd|bwd] [--rows 262144] [--n 32]
"""

from __future__ import annotations

import argparse

import numpy as np

import logsoftmax
from logsoftmax.driver.perf import median_seconds

OFFSETS = (0, 64, 1024, 2048, 3072)
PAGE = 4096


def _at_page_offset(shape, offset: int) -> np.ndarray:
    """A float32 array of ``shape`` starting ``offset`` bytes into a page."""
    nbytes = int(np.prod(shape)) * 4
    raw = np.empty(nbytes + 2 * PAGE, np.uint8)
    start = (-raw.ctypes.data) % PAGE + offset
    return raw[start : start + nbytes].view(np.float32).reshape(shape)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--op", choices=("fwd", "bwd"), default="fwd")
    ap.add_argument("--rows", type=int, default=262144)
    ap.add_argument("--n", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=21)
    args = ap.parse_args(argv)
    shape = (args.rows, args.n)
    rng = np.random.default_rng(0)
    x = _at_page_offset(shape, 0)
    x[...] = rng.standard_normal(shape).astype(np.float32) * 3
    outs = {off: _at_page_offset(shape, off) for off in OFFSETS}
    for o in outs.values():
        o.fill(0)  # fault the pages in before timing
    if args.op == "fwd":

        def call(out=None):
            return logsoftmax.log_softmax(x, out=out)

    else:
        y = logsoftmax.log_softmax(x)
        dd = _at_page_offset(shape, 512)
        dd[...] = rng.standard_normal(shape).astype(np.float32)

        def call(out=None):
            return logsoftmax.log_softmax_backward(dd, y, out=out)

    fns = {"allocating": call}
    fns.update({f"out= at page offset {off}": (lambda o=o: call(o)) for off, o in outs.items()})
    seconds = median_seconds(fns, args.rounds)
    print(f"{args.rows}x{args.n} float32 {args.op}, x at page offset 0; "
          f"medians of {args.rounds} interleaved rounds")
    for k, t in seconds.items():
        print(f"{k:>26}: {t * 1e3:.3f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
