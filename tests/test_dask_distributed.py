"""The Dask backend on ``dask.distributed``: a LocalCluster of 2 worker
processes gives results bit-identical to the threaded scheduler, survives a
worker killed mid-computation, and (slow) transforms a Zarr array several
times larger than the workers' memory without exceeding it.

One cluster serves the whole module (starting worker processes and loading
the kernels in them is the expensive part); the fault-tolerance test runs
last because it kills a worker (the nanny restarts it).
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import threading
import time

import numpy as np
import pytest

from conftest import assert_bitwise_equal, assert_close_eps, REF

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")
psutil = pytest.importorskip("psutil")
import cloudpickle  # noqa: E402  (a dependency of distributed)

import logsoftmax  # noqa: E402

# the block functions below travel to the workers by value: the workers
# cannot import this test module
cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        dashboard_address=None,
        silence_logs=40,
    )
    with distributed.Client(cluster) as c:
        yield c
    cluster.close()


def _threaded(y) -> np.ndarray:
    return y.compute(scheduler="threads")


def _on_cluster(client, y) -> np.ndarray:
    return client.compute(y).result()


@pytest.mark.parametrize("chunks", [(16, 300), (5, 70)], ids=["whole", "split"])
def test_cluster_is_bit_identical_to_threads(client, chunks):
    rng = np.random.default_rng(3)
    x = da.from_array((rng.standard_normal((32, 300)) * 5).astype(np.float32),
                      chunks=chunks)
    dd = da.from_array(rng.standard_normal((32, 300)).astype(np.float32),
                       chunks=chunks)
    y = logsoftmax.log_softmax(x)
    p = logsoftmax.softmax(x, 0)
    results = {
        "log_softmax": y,
        "softmax": p,
        "log_softmax_backward": logsoftmax.log_softmax_backward(dd, y),
        "softmax_backward": logsoftmax.softmax_backward(dd, p, 0),
        "logsumexp": logsoftmax.logsumexp(x, None),
        "logsumexp1": logsoftmax.logsumexp(x, 1, keepdims=True),
    }
    computed = client.compute(list(results.values()), sync=True)
    for (name, lazy), got in zip(results.items(), computed):
        assert_bitwise_equal(got, _threaded(lazy)), name


# --------------------------------------------------------------------------
# fault tolerance
# --------------------------------------------------------------------------
def _slow_block(block_info=None) -> np.ndarray:
    """Deterministic data for one block (seeded by its location), slowly, so
    that a worker can be killed while the computation is under way."""
    info = block_info[None]
    loc = info["chunk-location"]
    shape = info["chunk-shape"]
    time.sleep(0.05)
    seed = 1000 * loc[0] + loc[1]
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _tasks_in_memory(dask_scheduler=None) -> int:
    return sum(ts.state == "memory" for ts in dask_scheduler.tasks.values())


def test_a_killed_worker_is_recovered(client):
    shape, chunks = (40, 4000), (4, 500)  # 80 slow blocks, rows split in 8
    x = _slow_array(shape, chunks)
    assert x.shape == shape
    y = logsoftmax.log_softmax(x)
    expected = _threaded(y)

    future = client.compute(y)
    deadline = time.monotonic() + 30
    while client.run_on_scheduler(_tasks_in_memory) < 12:
        assert not future.done(), "finished before a worker could be killed"
        assert time.monotonic() < deadline, "no progress on the cluster"
        time.sleep(0.02)
    pids = client.run(os.getpid)
    victim = sorted(pids.values())[0]
    assert not future.done()
    os.kill(victim, signal.SIGKILL)

    got = future.result(timeout=120)
    assert not psutil.pid_exists(victim) or psutil.Process(victim).status() == (
        psutil.STATUS_ZOMBIE
    )
    assert_bitwise_equal(got, expected)
    x_local = _slow_array(shape, chunks).compute(scheduler="threads")
    assert_close_eps(got, REF["log_softmax"](x_local), np.float32, 4.0)


def _slow_array(shape, chunks):
    chunks = da.core.normalize_chunks(chunks, shape)
    return da.map_blocks(_slow_block, chunks=chunks, dtype=np.float32)


# --------------------------------------------------------------------------
# out of core (slow): Zarr several times larger than the workers' memory
# --------------------------------------------------------------------------
class _PeakRss:
    """Samples the resident memory of some processes every 20 ms."""

    def __init__(self, pids):
        self.procs = [psutil.Process(p) for p in pids]
        self.peak = dict.fromkeys(pids, 0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            for p in self.procs:
                try:
                    self.peak[p.pid] = max(self.peak[p.pid], p.memory_info().rss)
                except psutil.Error:
                    pass
            time.sleep(0.02)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


@pytest.fixture
def scratch(tmp_path):
    """A tmp dir removed right after the test (pytest keeps the last three
    otherwise, and this one holds 6 GiB)."""
    yield tmp_path
    shutil.rmtree(tmp_path, ignore_errors=True)


@pytest.mark.slow
def test_out_of_core_zarr_stays_under_the_memory_limit(scratch):
    zarr = pytest.importorskip("zarr")
    tmp_path = scratch
    limit = 512 * 2**20  # per worker; 1 GiB for the cluster
    shape, chunks = (4096, 196608), (256, 32768)  # 3 GiB of f32, rows in 6 blocks
    src, dst = tmp_path / "logits.zarr", tmp_path / "logprobs.zarr"
    rs = da.random.default_rng(11)
    x = rs.standard_normal(shape, chunks=chunks, dtype=np.float32)
    # no compression: generation and I/O dominate otherwise
    da.to_zarr(x, str(src), compressors=None)
    assert x.nbytes >= 3 * 2 * limit

    cluster = distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        dashboard_address=None,
        memory_limit=limit,
        silence_logs=40,
    )
    try:
        with distributed.Client(cluster) as c:
            pids = list(c.run(os.getpid).values())
            y = logsoftmax.log_softmax(da.from_zarr(str(src)))
            start = time.perf_counter()
            with _PeakRss(pids) as rss:
                c.compute(da.to_zarr(y, str(dst), compute=False)).result()
            seconds = time.perf_counter() - start
            # no worker died and was replaced on the way
            assert sorted(c.run(os.getpid).values()) == sorted(pids)
    finally:
        cluster.close()
    print(f"\nout of core: {2 * x.nbytes / seconds / 1e9:.2f} GB/s read+written, "
          f"peak RSS {max(rss.peak.values()) / 2**20:.0f} MiB per worker "
          f"(limit {limit / 2**20:.0f} MiB)")
    assert max(rss.peak.values()) < limit
    out = zarr.open_array(str(dst))
    rows = np.asarray(zarr.open_array(str(src))[:8])
    assert_close_eps(np.asarray(out[:8]), REF["log_softmax"](rows), np.float32, 4.0)
