"""What the first allocating call of a process pays to map its result.

The allocating path takes big results from ``backends/cpu/alloc.py``'s
pool: fresh anonymous maps with 4 KiB pages, faulted in by
``MADV_POPULATE_WRITE`` on the call's threads (``alloc.fault_in``) before
the kernel streams into them. This times that alone, for a 4096x32000
float32 result (the first-call problem of ``bench_cpu.py``), on two threads
and on one, in a fresh process (run it several times: the first call of a
process is what it measures).

Run: ``python benchmarks/first_touch.py`` (prints one line).
"""

from __future__ import annotations

import time

import numpy as np

from logsoftmax.backends.cpu import alloc


def main() -> None:
    x = np.zeros((4096, 32000), np.float32)
    times = []
    for threads in (2, 1):
        out = alloc.empty_like(x, x.dtype)  # a new map each time: the first is still alive
        t = time.perf_counter()
        alloc.fault_in(out, threads)
        times.append(time.perf_counter() - t)
    print(f"fault_in of a fresh {x.nbytes / 2**20:.0f} MiB result: {times[0] * 1e3:.1f} ms on 2 threads, "
          f"{times[1] * 1e3:.1f} ms on 1")


if __name__ == "__main__":
    main()
