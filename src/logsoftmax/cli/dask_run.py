"""``logsoftmax dask-run``: log-softmax (or softmax) of a Zarr array with Dask.

Reads ``--input`` lazily with ``dask.array.from_zarr`` (one Dask block per
Zarr chunk, or ``--chunks``), runs :func:`logsoftmax.log_softmax` /
:func:`logsoftmax.softmax` through the front door (so the ``"dask"`` backend
picks the whole-row or split-row plan from the chunking), and streams the
result to ``--output`` with ``to_zarr``; nothing holds the whole array in
memory. The work runs on Dask's threaded scheduler, or on a
``dask.distributed`` cluster given by ``--scheduler ADDRESS``, with Dask's
own progress bar on a terminal (``dask.diagnostics.ProgressBar`` locally,
``distributed.progress`` on a cluster); when the output is not a terminal (a
log, CI) a local run prints one line when it is done, a cluster run none.

Example::

    logsoftmax dask-run --input logits.zarr --output logprobs.zarr --axis -1
    logsoftmax dask-run --input logits.zarr --output p.zarr --op softmax \\
        --scheduler tcp://10.0.0.5:8786

Exit status: 0 on success, 2 for bad arguments or unreadable input, 1 if the
computation failed.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

__all__ = ["main", "build_parser"]

#: names of the local schedulers; anything else is a distributed address
LOCAL_SCHEDULERS = ("threads", "synchronous", "processes")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="logsoftmax dask-run",
        description="Log-softmax (or softmax) of a Zarr array with Dask, "
        "written to another Zarr array.",
    )
    p.add_argument("--input", required=True, help="input Zarr array (path or URL)")
    p.add_argument("--output", required=True, help="output Zarr array (path or URL)")
    p.add_argument("--axis", type=int, default=-1, help="reduced axis (default -1)")
    p.add_argument(
        "--op",
        choices=("log_softmax", "softmax"),
        default="log_softmax",
        help="the function to apply (default log_softmax)",
    )
    p.add_argument(
        "--scheduler",
        default="threads",
        help="'threads' (default), 'synchronous', 'processes', or the address "
        "of a dask.distributed scheduler (e.g. tcp://host:8786)",
    )
    p.add_argument(
        "--chunks",
        default=None,
        help="rechunk the input on read, e.g. --chunks=1024,8000 or "
        "--chunks=-1,8000 (-1: whole axis; default: the Zarr chunks); a chunk "
        "shorter than the axis splits rows across blocks",
    )
    p.add_argument(
        "--dtype",
        default=None,
        help="result dtype (f32, f16, f64; default: the input's)",
    )
    p.add_argument(
        "--overwrite", action="store_true", help="replace --output if it exists"
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar or summary")
    return p


def _parse_chunks(text: str | None, ndim: int):
    if text is None:
        return None
    try:
        chunks = tuple(int(c) for c in text.split(","))
    except ValueError:
        raise ValueError(
            f"--chunks={text!r} is not a comma-separated list of integers"
        ) from None
    if len(chunks) != ndim or any(c == 0 or c < -1 for c in chunks):
        raise ValueError(
            f"--chunks={text!r} must give {ndim} positive sizes (or -1 for a whole "
            "axis), one per dimension of the input"
        )
    return chunks


def _fail(msg: str, status: int = 2) -> int:
    print(f"logsoftmax dask-run: {msg}", file=sys.stderr)
    return status


def main(argv: list[str]) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:  # --help (0) or a usage error (2), already printed
        return int(e.code or 0)
    try:
        import dask.array as da
    except ImportError:
        return _fail("dask is not installed; pip install 'logsoftmax[dask]'")
    import logsoftmax
    from logsoftmax import dtypes

    try:
        x = da.from_zarr(args.input)
    except Exception as e:  # zarr raises several types for a missing/bad store
        return _fail(f"could not open --input {args.input!r} as a Zarr array: {e}")
    if os.path.exists(args.output) and not args.overwrite:
        return _fail(f"--output {args.output!r} exists; pass --overwrite to replace it")
    try:
        chunks = _parse_chunks(args.chunks, x.ndim)
        dtype = None if args.dtype is None else dtypes.from_name(args.dtype)
    except ValueError as e:
        return _fail(str(e))
    if chunks is not None:
        x = x.rechunk(chunks)
    try:
        y = getattr(logsoftmax, args.op)(x, args.axis, dtype=dtype)
    except (IndexError, TypeError, ValueError) as e:
        return _fail(str(e))

    axis = args.axis % x.ndim
    plan = "split rows" if x.numblocks[axis] > 1 else "whole rows"
    store = da.to_zarr(y, args.output, mode="w", compute=False)
    start = time.perf_counter()
    try:
        if args.scheduler in LOCAL_SCHEDULERS:
            _run_local(store, args.scheduler, args.quiet)
        else:
            _run_distributed(store, args.scheduler, args.quiet)
    except Exception as e:
        return _fail(f"computation failed: {type(e).__name__}: {e}", status=1)
    seconds = time.perf_counter() - start
    if not args.quiet:
        moved = x.nbytes + y.nbytes
        print(
            f"{args.op} over axis {args.axis} of {x.shape} {x.dtype} "
            f"({x.numblocks} blocks, {plan}) -> {args.output} {y.dtype}: "
            f"{seconds:.2f} s, {moved / seconds / 1e9:.2f} GB/s read+written"
        )
    return 0


def _run_local(store, scheduler: str, quiet: bool) -> None:
    from dask.callbacks import Callback
    from dask.diagnostics import ProgressBar

    if quiet:
        store.compute(scheduler=scheduler)
        return
    if sys.stdout.isatty():
        with ProgressBar():
            store.compute(scheduler=scheduler)
        return
    # no terminal (a log, CI): dask's bar would redraw ten times a second with
    # carriage returns; one line when the work is done says the same
    start = time.perf_counter()

    def done(dsk, state, errored):
        if not errored:
            seconds = time.perf_counter() - start
            print(f"dask: 100% Completed | {seconds:.1f}s", flush=True)

    with Callback(finish=done):
        store.compute(scheduler=scheduler)


def _run_distributed(store, address: str, quiet: bool) -> None:
    from distributed import Client, progress

    with Client(address) as client:
        future = client.compute(store)
        if not quiet and sys.stdout.isatty():  # a text bar needs a terminal
            progress(future)
            print()
        future.result()
