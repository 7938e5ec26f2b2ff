"""`make test`'s kernel warm-up: the two workers compile the kernels most
tests share, each kernel by one worker, before the tests start.

Why: on a cold numba cache most of `make test` is compiling (AMD EPYC Zen
3: 1258 s of compiling over both workers in an 819-s pytest run; one
signature of the short-row kernels takes 30-50 s), and both workers
started on tests that need the same kernels, so each compiled them: the
same signature in both workers was 221 s of that (``numba:compile``
events). With the warm-up: 17 s of 913, pytest 630 s. Here each worker compiles the signatures of
its share of the kernels (their ``compile``, which saves them to the disk
cache), then waits for the other's share, which its tests then load from
disk instead of compiling.

A kernel's signatures all go to one worker: numba updates a function's
cache index by read, add, write, and two processes saving signatures of
one kernel at once could lose an entry or give two entries one data file.

On with ``--warm-kernels`` (`make test` passes it) under pytest-xdist;
off for a single process, where it would compile kernels that a chosen
test may not need. The signatures are those of a cold run's profile (AMD
EPYC Zen 3), their costs ``benchmarks/warm_up.py``'s; a signature no test
uses only costs its compile, one no longer listed is compiled by the first
test that needs it.
"""

from __future__ import annotations

import importlib
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

#: storage types (the kernels see bfloat16 as uint16, float16 as int16)
_F32, _BF16, _F16 = np.float32, np.uint16, np.int16
_SAME = ((_F32, _F32), (_BF16, _BF16), (_F16, _F16))
#: the default run's pairs of other result types (float32 <-> bfloat16)
_MIXED = ((_F32, _BF16), (_BF16, _F32))

#: kernel -> (module, kind, [(input, result) storage types], seconds to
#: compile all of them on a cold cache in the warm-up, two workers at once:
#: ``python benchmarks/warm_up.py``, AMD EPYC Zen 3 (worker totals 224 and
#: 215 s, 228 s of wall time). A kernel of :data:`TOGETHER` took its
#: seconds after those before it in its group.
KERNELS = {
    "forward_short": ("rows", "rows", _SAME + _MIXED, 53),
    "forward_whole": ("rows", "rows", _SAME + _MIXED, 18),
    "forward_tiny": ("tiny", "rows", _SAME + _MIXED, 42),
    "forward_tiny_vector": ("tiny", "rows", _SAME + _MIXED, 28),
    "backward_short": ("rows", "bwd_rows", _SAME + _MIXED, 50),
    "backward_accurate": ("rows", "bwd_rows", _SAME + _MIXED, 35),
    "backward_tiny": ("tiny", "bwd_rows", _SAME + _MIXED, 17),
    "forward_range": ("rows", "rows", _SAME + _MIXED, 79),
    "forward_tiles": ("columns", "tiles", _SAME, 60),
    "backward_range": ("rows", "bwd_rows", _SAME + _MIXED[1:], 14),
    "backward_few": ("fewrows", "bwd_tiles", _SAME + _MIXED[1:], 20),
    "forward_few": ("fewrows", "tiles", _SAME + _MIXED[:1], 10),
    "backward_tiles": ("columns", "bwd_tiles", _SAME, 13),
}


#: kernels that share most of their helpers, compiled by one worker in this
#: order, which types those helpers once: one float32 signature of
#: ``forward_whole`` took 17.0 s alone and 3.9 s after ``forward_short``'s
#: (``python benchmarks/compile_libraries.py --kernels ...``, AMD EPYC Zen 3;
#: the three 32.8 s in all; the backward's three 22.9 s)
TOGETHER = (("forward_short", "forward_whole", "forward_tiny", "forward_tiny_vector"),
            ("backward_short", "backward_accurate", "backward_tiny"))


def share(worker: int, workers: int) -> list[str]:
    """The kernels of ``worker`` (of ``workers``): the costliest group
    first (a kernel on its own, or one of :data:`TOGETHER`), each to the
    worker with the least so far."""
    grouped = {name for group in TOGETHER for name in group}
    groups = list(TOGETHER) + [(name,) for name in KERNELS if name not in grouped]
    load = [0.0] * workers
    mine = []
    for group in sorted(groups, key=lambda names: -sum(KERNELS[name][3] for name in names)):
        w = load.index(min(load))
        load[w] += sum(KERNELS[name][3] for name in group)
        if w == worker:
            mine.extend(group)
    return mine


def signatures(name: str) -> list[tuple]:
    """The numba argument types of kernel ``name``'s listed signatures."""
    from logsoftmax.backends.cpu.native import kernel_types

    _, kind, pairs, _ = KERNELS[name]
    return [kernel_types(kind.startswith("bwd"), kind.endswith("tiles"), src, dst) for src, dst in pairs]


def warm(worker: int, workers: int, run_id: str, timeout: float = 900.0) -> None:
    """Compile ``worker``'s share, then wait (at most ``timeout`` seconds)
    for every worker of run ``run_id`` to have compiled its own."""
    for name in share(worker, workers):
        module = importlib.import_module(f"logsoftmax.backends.cpu.{KERNELS[name][0]}")
        for sig in signatures(name):
            getattr(module, name).compile(sig)
    done = _done_dir(run_id)
    done.mkdir(exist_ok=True)
    (done / str(worker)).touch()
    deadline = time.monotonic() + timeout
    while len(os.listdir(done)) < workers and time.monotonic() < deadline:
        time.sleep(0.5)


def _done_dir(run_id: str) -> Path:
    return Path(tempfile.gettempdir()) / f"logsoftmax-warm-{run_id}"


def clean(run_id: str) -> None:
    """Remove run ``run_id``'s markers (the first worker, at its end)."""
    shutil.rmtree(_done_dir(run_id), ignore_errors=True)
