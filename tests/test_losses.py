"""The loss family on arrays (API.md section 7): ``nll_loss``,
``cross_entropy`` and the fused ``linear_cross_entropy`` against PyTorch's
formulas in float64 (``torch.nn.functional`` computes the oracle here, on
the same inputs), the pitfalls other libraries' users hit, accuracy in eps,
and the memory bound of the fused loss.
"""

from __future__ import annotations

import itertools
import tracemalloc

import ml_dtypes
import numpy as np
import pytest

import logsoftmax
from logsoftmax import _linear_ce

torch = pytest.importorskip("torch")
F = torch.nn.functional

BF16 = np.dtype(ml_dtypes.bfloat16)
REDUCTIONS = ("mean", "sum", "none")


def _t(a):
    return None if a is None else torch.from_numpy(np.asarray(a))


def _close(a, b, tol=1e-12):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    assert a.shape == b.shape
    np.testing.assert_allclose(a, b, rtol=tol, atol=tol, equal_nan=True)


# --------------------------------------------------------------------------
# cross_entropy / nll_loss: the combination grid, float64 vs PyTorch
# --------------------------------------------------------------------------
SHAPES = [(7, 5), (5,), (3, 4, 2, 3)]


def _inputs(rng, shape, probs):
    x = rng.standard_normal(shape) * 3
    c = shape[1] if len(shape) > 1 else shape[0]
    tshape = (shape[0],) + shape[2:] if len(shape) > 1 else ()
    if probs:
        y = rng.random(shape)
        y /= y.sum(axis=1 if len(shape) > 1 else 0, keepdims=True)
        return x, y, c
    t = rng.integers(0, c, tshape)
    if t.ndim:
        t.flat[1] = -100  # one ignored target
    return x, np.asarray(t), c


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("smoothing", [0.0, 0.3, 1.0])
@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
@pytest.mark.parametrize("probs", [False, True], ids=["indices", "probs"])
def test_cross_entropy_matches_torch(reduction, smoothing, weighted, probs, rng):
    for shape in SHAPES:
        x, t, c = _inputs(rng, shape, probs)
        w = rng.random(c) + 0.1 if weighted else None
        got = logsoftmax.cross_entropy(x, t, w, reduction=reduction,
                                       label_smoothing=smoothing)
        want = F.cross_entropy(_t(x), _t(t), _t(w), reduction=reduction,
                               label_smoothing=smoothing).numpy()
        _close(got, want)
        assert got.dtype == np.float64


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
def test_nll_loss_matches_torch(reduction, weighted, rng):
    for shape in SHAPES:
        x, t, c = _inputs(rng, shape, False)
        w = rng.random(c) + 0.1 if weighted else None
        got = logsoftmax.nll_loss(x, t, w, reduction=reduction)
        want = F.nll_loss(_t(x), _t(t), _t(w), reduction=reduction).numpy()
        _close(got, want)


def test_ignore_index_may_be_a_class(rng):
    x = rng.standard_normal((6, 4))
    t = np.array([0, 1, 2, 3, 2, 2])
    for red in REDUCTIONS:
        _close(logsoftmax.cross_entropy(x, t, ignore_index=2, reduction=red,
                                        label_smoothing=0.1),
               F.cross_entropy(_t(x), _t(t), ignore_index=2, reduction=red,
                               label_smoothing=0.1).numpy())


@pytest.mark.parametrize("dtype", [np.float32, BF16, np.float16], ids=["f32", "bf16", "f16"])
def test_cross_entropy_low_precision_rounds_once(dtype, rng):
    x = (rng.standard_normal((16, 3000)) * 2).astype(dtype)
    t = rng.integers(0, 3000, 16)
    got = logsoftmax.cross_entropy(x, t, label_smoothing=0.1, reduction="none")
    assert got.dtype == np.dtype(dtype)
    ref = F.cross_entropy(torch.from_numpy(x.astype(np.float64)), _t(t),
                          label_smoothing=0.1, reduction="none").numpy()
    # the float32-or-better value rounded once: within half an ulp (+ f32 error)
    eps = float(ml_dtypes.finfo(dtype).eps)
    err = np.abs(got.astype(np.float64) - ref) / (eps * np.maximum(1, np.abs(ref)))
    assert err.max() <= (0.51 if dtype != np.float32 else 4.0)


def test_cross_entropy_errors(rng):
    x = rng.standard_normal((4, 5)).astype(np.float32)
    t = np.array([0, 1, 2, 3])
    with pytest.raises(TypeError, match="weight has dtype float64 but input has dtype float32"):
        logsoftmax.cross_entropy(x, t, np.ones(5))
    with pytest.raises(ValueError, match="reduction='avg'"):
        logsoftmax.cross_entropy(x, t, reduction="avg")
    with pytest.raises(ValueError, match="label_smoothing=1.5"):
        logsoftmax.cross_entropy(x, t, label_smoothing=1.5)
    with pytest.raises(TypeError, match="label_smoothing"):
        logsoftmax.cross_entropy(x, t, label_smoothing="0.1")
    with pytest.raises(IndexError, match="class index 7"):
        logsoftmax.cross_entropy(x, np.array([0, 1, 7, 3]))
    with pytest.raises(ValueError, match="target has shape"):
        logsoftmax.cross_entropy(x, np.array([0, 1]))
    with pytest.raises(TypeError, match="target has dtype float64 but input has dtype float32"):
        logsoftmax.cross_entropy(x, np.ones((4, 5)))
    with pytest.raises(ValueError, match="ignore_index=3 is not supported"):
        logsoftmax.cross_entropy(x, np.ones((4, 5), np.float32), ignore_index=3)
    with pytest.raises(ValueError, match="weight has shape"):
        logsoftmax.cross_entropy(x, t, np.ones(4, np.float32))
    with pytest.raises(TypeError, match="ignore_index"):
        logsoftmax.nll_loss(x, t, ignore_index=1.5)


def test_special_values_match_torch():
    x = np.array([[0.0, np.nan, 1.0], [np.inf, 0.0, 1.0], [-np.inf] * 3,
                  [-np.inf, 0.0, 1.0], [0.0, 1.0, 2.0]])
    t = np.array([0, 0, 0, 0, 1])
    for eps in (0.0, 0.2):
        _close(logsoftmax.cross_entropy(x, t, reduction="none", label_smoothing=eps),
               F.cross_entropy(_t(x), _t(t), reduction="none",
                               label_smoothing=eps).numpy())


# --------------------------------------------------------------------------
# linear_cross_entropy: every option, both schedules, float64 vs PyTorch
# --------------------------------------------------------------------------
def _torch_lce(x, w, t, b=None, cw=None, reduction="mean", eps=0.0, zl=0.0,
               cap=None, ignore_index=-100, grad=None):
    """The unfused oracle: logits, softcap, F.cross_entropy, z-loss."""
    xs = [None if a is None else torch.tensor(a, requires_grad=True) for a in (x, w, b)]
    z = xs[0] @ xs[1].T + (0 if xs[2] is None else xs[2])
    if cap:
        z = cap * torch.tanh(z / cap)
    tt = _t(t)
    ce = F.cross_entropy(z, tt, _t(cw), reduction=reduction,
                         ignore_index=ignore_index, label_smoothing=eps)
    lse = torch.logsumexp(z, 1)
    valid = tt != ignore_index
    zz = torch.where(valid, zl * lse**2, 0.0)
    extra = {"none": zz, "sum": zz.sum(), "mean": zz.sum() / valid.sum()}[reduction]
    loss = ce + extra
    if grad is None:
        return loss.detach().numpy()
    loss.backward(_t(grad))
    return (loss.detach().numpy(),) + tuple(
        None if a is None else a.grad.numpy() for a in xs)


@pytest.fixture(scope="module")
def lce_problem():
    rng = np.random.default_rng(7)
    n, h, v = 29, 6, 37
    t = rng.integers(0, v, n)
    t[[2, 11]] = -100
    return dict(x=rng.standard_normal((n, h)), w=rng.standard_normal((v, h)),
                b=rng.standard_normal(v), cw=rng.random(v) + 0.2, t=t)


_LCE_GRID = list(itertools.product(REDUCTIONS, [0.0, 0.25], [0.0, 0.01], [None, 2.5],
                                   [(8, 37), (8, 10), (64, 37)]))


@pytest.mark.parametrize("reduction,eps,zl,cap,chunk", _LCE_GRID)
def test_linear_cross_entropy_matches_torch(lce_problem, reduction, eps, zl, cap, chunk):
    d = lce_problem
    rng = np.random.default_rng(1)
    g = rng.standard_normal(d["x"].shape[0]) if reduction == "none" else np.float64(0.6)
    want = _torch_lce(d["x"], d["w"], d["t"], d["b"], d["cw"], reduction, eps, zl,
                      cap, grad=g)
    p = _linear_ce.check("linear_cross_entropy", d["x"], d["w"], d["t"],
                         linear_bias=d["b"], weight=d["cw"], reduction=reduction,
                         label_smoothing=eps, z_loss=zl, softcap=cap, chunk_size=chunk)
    for grads in (False, True):  # recompute schedule, fused schedule
        loss, saved = _linear_ce.forward(p, grads=grads)
        _close(loss, want[0])
        for got, ref in zip(_linear_ce.backward(g, saved), want[1:]):
            _close(got, ref)
    public = logsoftmax.linear_cross_entropy(
        d["x"], d["w"], d["t"], linear_bias=d["b"], weight=d["cw"],
        reduction=reduction, label_smoothing=eps, z_loss=zl, softcap=cap)
    _close(public, want[0])


def test_linear_cross_entropy_errors(lce_problem):
    d = lce_problem
    x32 = d["x"].astype(np.float32)
    lce = logsoftmax.linear_cross_entropy
    with pytest.raises(TypeError, match="linear_weight has dtype float64 but input has dtype float32"):
        lce(x32, d["w"], d["t"])
    with pytest.raises(ValueError, match=r"linear_weight has shape \(37, 6\); expected \(V, 5\)"):
        lce(d["x"][:, :5], d["w"], d["t"])
    with pytest.raises(ValueError, match="linear_bias has shape"):
        lce(d["x"], d["w"], d["t"], linear_bias=d["b"][:3])
    with pytest.raises(ValueError, match="softcap=0"):
        lce(d["x"], d["w"], d["t"], softcap=0)
    with pytest.raises(ValueError, match="z_loss=-1"):
        lce(d["x"], d["w"], d["t"], z_loss=-1)
    with pytest.raises(ValueError, match="chunk_size"):
        lce(d["x"], d["w"], d["t"], chunk_size=(0, 3))
    with pytest.raises(IndexError, match="class index 37"):
        lce(d["x"], d["w"], np.full(d["x"].shape[0], 37))
    with pytest.raises(TypeError, match="target has dtype float64"):
        lce(d["x"], d["w"], d["t"].astype(np.float64))


# --------------------------------------------------------------------------
# pitfalls of other libraries, one test each
# --------------------------------------------------------------------------
def test_pitfall_reduction_none_gradients_per_row(lce_problem):
    """Liger-Kernel #968: with reduction="none" a per-row dloss must reach
    grad_weight row by row (it cannot be applied to precomputed grads)."""
    d = lce_problem
    g = np.linspace(-2, 3, d["x"].shape[0])
    want = _torch_lce(d["x"], d["w"], d["t"], d["b"], reduction="none", grad=g)
    p = _linear_ce.check("linear_cross_entropy", d["x"], d["w"], d["t"],
                         linear_bias=d["b"], reduction="none")
    loss, saved = _linear_ce.forward(p, grads=True)  # asks for fused grads
    assert saved.grads is None  # "none" always recomputes
    for got, ref in zip(_linear_ce.backward(g, saved), want[1:]):
        _close(got, ref)


def test_pitfall_z_loss_is_part_of_the_loss(lce_problem):
    """OLMo-core #702: the z-loss is *in* the returned loss (API.md), exactly
    z_loss * mean over valid rows of lse**2."""
    d = lce_problem
    base = logsoftmax.linear_cross_entropy(d["x"], d["w"], d["t"])
    with_z = logsoftmax.linear_cross_entropy(d["x"], d["w"], d["t"], z_loss=0.1)
    lse = np.log(np.exp(d["x"] @ d["w"].T).sum(1))
    valid = d["t"] != -100
    _close(with_z - base, 0.1 * np.mean(lse[valid] ** 2), tol=1e-10)


def test_pitfall_softcap_in_every_path(lce_problem):
    """Cut Cross-Entropy #48: the softcap must be applied in the forward, the
    fused and the recompute backward, chunked by tokens and by classes."""
    d = lce_problem
    want = _torch_lce(d["x"], d["w"], d["t"], cap=1.5, grad=np.float64(1.0))
    nocap = _torch_lce(d["x"], d["w"], d["t"], grad=np.float64(1.0))
    assert abs(want[0] - nocap[0]) > 0.1  # the cap matters here
    for chunk, grads in itertools.product([(8, 37), (5, 9)], [False, True]):
        p = _linear_ce.check("linear_cross_entropy", d["x"], d["w"], d["t"],
                             softcap=1.5, chunk_size=chunk)
        loss, saved = _linear_ce.forward(p, grads=grads)
        _close(loss, want[0])
        for got, ref in zip(_linear_ce.backward(np.float64(1.0), saved), want[1:]):
            _close(got, ref)


@pytest.mark.parametrize("offset", [1e3, 3e4])
def test_pitfall_large_shared_offset(offset, rng):
    """PyTorch #195829: logits sharing a large offset (a large bias) must
    give the same loss as without it: the loss is (m - z_t) + log s, with
    no lse - z_t cancellation at the offset's magnitude."""
    n, h, v = 32, 16, 1000
    x = rng.standard_normal((n, h)).astype(np.float32)
    w = (rng.standard_normal((v, h)) * 0.3).astype(np.float32)
    t = rng.integers(0, v, n)
    b = np.full(v, offset, np.float32)
    z = x.astype(np.float64) @ w.T.astype(np.float64)
    zs = (z.astype(np.float32) + np.float32(offset)).astype(np.float64)  # f32 logits
    ref = F.cross_entropy(torch.from_numpy(zs), _t(t), reduction="none").numpy()
    got = logsoftmax.linear_cross_entropy(x, w, t, linear_bias=b, reduction="none")
    err = np.abs(got - ref) / (np.finfo(np.float32).eps * np.maximum(1, np.abs(ref)))
    assert err.max() < 64
    got_ce = logsoftmax.cross_entropy(zs.astype(np.float32), t, reduction="none")
    err = np.abs(got_ce - ref) / (np.finfo(np.float32).eps * np.maximum(1, np.abs(ref)))
    assert err.max() < 4


def test_pitfall_mean_over_no_valid_rows_is_nan(lce_problem):
    d = lce_problem
    t = np.full(d["x"].shape[0], -100)
    assert np.isnan(logsoftmax.cross_entropy(d["x"][:, :5], t))
    assert np.isnan(logsoftmax.nll_loss(d["x"][:, :5], t))
    assert np.isnan(logsoftmax.cross_entropy(d["x"][:, :5], t, label_smoothing=0.1))
    p = _linear_ce.check("linear_cross_entropy", d["x"], d["w"], t, z_loss=0.1)
    loss, saved = _linear_ce.forward(p, grads=True)
    assert np.isnan(loss)
    gx, gw, _ = _linear_ce.backward(np.float64(1.0), saved)
    assert not gx.any() and not gw.any()  # PyTorch: zero gradients
    assert logsoftmax.linear_cross_entropy(d["x"], d["w"], t, reduction="sum") == 0


def test_pitfall_label_smoothing_with_class_weights(lce_problem, rng):
    """PyTorch's formula: the smoothing term is class-weighted and "mean"
    divides both terms by sum w_t (not by N, not by sum w)."""
    d = lce_problem
    x, t, cw = d["x"] @ d["w"].T, d["t"], d["cw"]
    got = logsoftmax.cross_entropy(x, t, cw, label_smoothing=0.4)
    valid = t != -100
    lp = x - np.log(np.exp(x).sum(1, keepdims=True))
    nll = -(cw[t[valid]] * lp[valid, t[valid]]).sum()
    smooth = -(lp[valid] * cw).sum()
    by_hand = (0.6 * nll + 0.4 / x.shape[1] * smooth) / cw[t[valid]].sum()
    _close(got, by_hand)
    _close(logsoftmax.linear_cross_entropy(d["x"], d["w"], t, weight=cw,
                                           label_smoothing=0.4), by_hand)


# --------------------------------------------------------------------------
# accuracy at vocabulary size, and memory
# --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def vocab_problem():
    rng = np.random.default_rng(3)
    n, h, v = 24, 32, 32000
    x = rng.standard_normal((n, h)).astype(np.float32)
    w = (rng.standard_normal((v, h)) * 0.4).astype(np.float32)
    return x, w, rng.integers(0, v, n)


@pytest.mark.parametrize("dtype", [np.float32, BF16, np.float16], ids=["f32", "bf16", "f16"])
def test_linear_cross_entropy_accuracy_at_v32000(vocab_problem, dtype):
    """f32 loss within 64 eps of float64 at V = 32000; bf16/f16 within one ulp
    of the float64 value of the same (rounded) inputs."""
    x, w, t = (a.astype(dtype) if a.dtype.kind == "f" else a for a in vocab_problem)
    z = x.astype(np.float64) @ w.astype(np.float64).T
    ref = F.cross_entropy(torch.from_numpy(z), _t(t), reduction="none").numpy()
    eps = float(ml_dtypes.finfo(dtype).eps)
    for red, r in (("none", ref), ("mean", np.asarray(ref.mean()))):
        got = logsoftmax.linear_cross_entropy(x, w, t, reduction=red)
        assert got.dtype == np.dtype(dtype)
        err = np.abs(got.astype(np.float64) - r) / (eps * np.maximum(1, np.abs(r)))
        assert err.max() <= (64 if dtype == np.float32 else 1.0)


def test_linear_cross_entropy_peak_memory():
    """No (N, V) array: the forward + backward's peak extra memory is the
    gradients plus one chunk plus O(N), far below the logits' size."""
    rng = np.random.default_rng(5)
    n, h, v = 1024, 32, 16000
    x = rng.standard_normal((n, h)).astype(np.float32)
    w = (rng.standard_normal((v, h)) * 0.1).astype(np.float32)
    t = rng.integers(0, v, n)
    logits = n * v * 4
    grads = (n * h + v * h) * 4
    for chunk, fused in (((64, v), True), ((n, 2000), False), (None, True)):
        p = _linear_ce.check("linear_cross_entropy", x, w, t, chunk_size=chunk,
                             z_loss=1e-4, softcap=30.0)
        rows, cols = p.chunk
        _linear_ce.backward(np.float32(1), _linear_ce.forward(p, grads=fused)[1])
        tracemalloc.start()  # (after a warm-up: imports allocate too)
        loss, saved = _linear_ce.forward(p, grads=fused)
        gx, gw, _ = _linear_ce.backward(np.float32(1), saved)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        # gradients + one chunk + one rows x H accumulation tile + O(N) state
        bound = grads + rows * cols * 4 + rows * h * 4 + 64 * n + (1 << 16)
        assert peak <= bound, (chunk, peak, bound)
        # the default chunk here is 512 of the 1024 rows: half the logits
        assert peak < (logits if chunk is None else logits / 4)


# --------------------------------------------------------------------------
# torch adapter piece
# --------------------------------------------------------------------------
def test_torch_adapter_matches_unfused(lce_problem):
    import logsoftmax.torch as lt

    d = lce_problem
    for red in REDUCTIONS:
        xs = [torch.tensor(d[k], requires_grad=True) for k in ("x", "w", "b")]
        loss = lt.linear_cross_entropy(xs[0], xs[1], _t(d["t"]), linear_bias=xs[2],
                                       weight=_t(d["cw"]), reduction=red,
                                       label_smoothing=0.1, z_loss=0.01, softcap=3.0)
        g = torch.rand(loss.shape, dtype=torch.float64)
        loss.backward(g)
        want = _torch_lce(d["x"], d["w"], d["t"], d["b"], d["cw"], red, 0.1, 0.01,
                          3.0, grad=g.numpy())
        _close(loss.detach().numpy(), want[0])
        for a, ref in zip(xs, want[1:]):
            _close(a.grad.numpy(), ref)
    module = lt.LinearCrossEntropyLoss(reduction="sum")
    x32 = torch.tensor(d["x"], dtype=torch.float32)
    w32 = torch.tensor(d["w"], dtype=torch.float32)
    _close(module(x32, w32, _t(d["t"])).item(),
           float(_torch_lce(d["x"], d["w"], d["t"], reduction="sum")), tol=1e-5)
