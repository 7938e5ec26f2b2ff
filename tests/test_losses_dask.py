"""The loss family on dask arrays: lazy, the same values as numpy, global
``"mean"`` denominators, and a ``distributed.LocalCluster`` of 2 processes."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import logsoftmax
from logsoftmax import _linear_ce

da = pytest.importorskip("dask.array")
import dask  # noqa: E402

REDUCTIONS = ("mean", "sum", "none")


@pytest.fixture(scope="module")
def problem():
    rng = np.random.default_rng(11)
    n, h, v = 40, 8, 23
    t = rng.integers(0, v, n)
    t[:9] = -100  # the first block is entirely ignored: per-block means would differ
    return dict(x=rng.standard_normal((n, h)), w=rng.standard_normal((v, h)),
                b=rng.standard_normal(v), cw=rng.random(v) + 0.1, t=t)


def _close(a, b):
    np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_linear_cross_entropy_dask_matches_numpy(problem, reduction):
    d = problem
    kw = dict(linear_bias=d["b"], weight=d["cw"], reduction=reduction,
              label_smoothing=0.1, z_loss=1e-3, softcap=4.0)
    xd = da.from_array(d["x"], chunks=(9, 8))
    td = da.from_array(d["t"], chunks=9)
    lazy = logsoftmax.linear_cross_entropy(xd, d["w"], td, **kw)
    assert isinstance(lazy, da.Array)
    _close(lazy.compute(), logsoftmax.linear_cross_entropy(d["x"], d["w"], d["t"], **kw))
    # gradients: grad_input blockwise, grad_weight / grad_bias tree sums
    from logsoftmax.backends import dask_losses

    g = np.linspace(0.5, 1.5, d["x"].shape[0]) if reduction == "none" else np.float64(0.7)
    p = _linear_ce.check("linear_cross_entropy", d["x"], d["w"], d["t"], **kw)
    want = _linear_ce.backward(g, _linear_ce.forward(p)[1])
    pd = _linear_ce.check("linear_cross_entropy", xd, d["w"], td, **kw)
    got = dask_losses.linear_cross_entropy_grads(
        pd, da.from_array(g, chunks=9) if reduction == "none" else g)
    for a, b in zip(dask.compute(*got), want):
        _close(a, b)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_cross_entropy_dask_matches_numpy(reduction):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((6, 5, 4))
    t = rng.integers(0, 5, (6, 4))
    t[0, 0] = -100
    y = rng.random((6, 5, 4))
    w = rng.random(5)
    xd = da.from_array(x, chunks=(2, 3, 3))  # the class axis split: gathered per block
    for fn, tgt, kw in ((logsoftmax.cross_entropy, t, dict(label_smoothing=0.2)),
                        (logsoftmax.nll_loss, t, {}),
                        (logsoftmax.cross_entropy, y, dict(label_smoothing=0.2))):
        got = fn(xd, da.from_array(tgt, chunks=2), w, reduction=reduction, **kw)
        assert isinstance(got, da.Array)
        _close(got.compute(), fn(x, tgt, w, reduction=reduction, **kw))


def test_linear_cross_entropy_on_local_cluster(problem):
    distributed = pytest.importorskip("distributed")
    import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    d = problem
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1,
                                       processes=True, dashboard_address=None,
                                       silence_logs=40)
    try:
        with distributed.Client(cluster) as client:
            xd = da.from_array(d["x"], chunks=(10, 8))
            td = da.from_array(d["t"], chunks=10)
            for red in ("mean", "none"):
                lazy = logsoftmax.linear_cross_entropy(xd, d["w"], td, reduction=red,
                                                       z_loss=1e-3)
                got = client.compute(lazy).result()
                _close(got, logsoftmax.linear_cross_entropy(
                    d["x"], d["w"], d["t"], reduction=red, z_loss=1e-3))
    finally:
        cluster.close()
