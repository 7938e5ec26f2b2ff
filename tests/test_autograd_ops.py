"""Every autograd op against PyTorch in float64: value, gradient (with a
random cotangent) and the Hessian-vector product through
``create_graph=True`` (double backward), plus finite differences and a
third derivative for the softmax family."""

from __future__ import annotations


import numpy as np
import pytest

import logsoftmax as ls
from logsoftmax import autograd as ag
from logsoftmax.nn import functional as F

torch = pytest.importorskip("torch")
TF = torch.nn.functional


def _close(ours, theirs, what, rtol=1e-10, atol=1e-12):
    a = np.asarray(ours.numpy() if isinstance(ours, ls.Tensor) else ours)
    b = theirs.detach().numpy() if torch.is_tensor(theirs) else np.asarray(theirs)
    assert a.shape == b.shape, f"{what}: shape {a.shape} vs torch {b.shape}"
    np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=what)


def check(fn_ours, fn_torch, arrays, seed=0, second=True):
    """Compare value, VJP and HVP of ``fn`` with torch (float64)."""
    rng = np.random.default_rng(seed)
    ours = [ls.tensor(a, requires_grad=True) for a in arrays]
    th = [torch.tensor(a, requires_grad=True) for a in arrays]
    out_o, out_t = fn_ours(*ours), fn_torch(*th)
    _close(out_o, out_t, "value")
    v = rng.standard_normal(out_t.shape)
    g_o = ag.grad(out_o, ours, grad_outputs=v, create_graph=True, allow_unused=True)
    g_t = torch.autograd.grad(
        out_t, th, torch.tensor(v), create_graph=True, allow_unused=True
    )
    for i, (a, b) in enumerate(zip(g_o, g_t)):
        assert (a is None) == (b is None), f"grad {i}: None mismatch"
        if a is not None:
            assert a.dtype == np.float64 and a.shape == arrays[i].shape
            _close(a, b, f"grad {i}")
    if not second:
        return
    ws = [rng.standard_normal(a.shape) for a in arrays]
    s_t = sum((b * torch.tensor(w)).sum() for b, w in zip(g_t, ws) if b is not None)
    s_o = sum((a * w).sum() for a, w in zip(g_o, ws) if a is not None)
    if not getattr(s_o, "requires_grad", False):
        # Our gradient is a constant of the inputs (e.g. relu's mask): torch's
        # second derivative must then be absent or zero.
        if getattr(s_t, "requires_grad", False):
            h_t = torch.autograd.grad(s_t, th, allow_unused=True)
            assert all(b is None or not b.any() for b in h_t)
        return
    h_o = ag.grad(s_o, ours, allow_unused=True)
    h_t = torch.autograd.grad(s_t, th, allow_unused=True)
    for i, (a, b) in enumerate(zip(h_o, h_t)):
        if b is None:
            assert a is None or not np.any(a.numpy()), f"hvp {i}: expected zero"
        else:
            assert a is not None, f"hvp {i}: missing"
            _close(a, b, f"hvp {i}")


R = np.random.default_rng(1)


def rand(*shape):
    return R.standard_normal(shape)


# -- elementwise with broadcasting ----------------------------------------------
@pytest.mark.parametrize(
    "sa,sb", [((3, 4), (3, 4)), ((3, 4), (4,)), ((2, 1, 4), (3, 1)), ((), (2, 3))]
)
@pytest.mark.parametrize("op", ["add", "sub", "mul", "div"])
def test_binary_broadcast(op, sa, sb):
    f = {
        "add": lambda a, b: a + b,
        "sub": lambda a, b: a - b,
        "mul": lambda a, b: a * b,
        "div": lambda a, b: a / b,
    }[op]
    b = rand(*sb)
    if op == "div":
        b = np.abs(b) + 0.5
    check(f, f, [rand(*sa), b])


@pytest.mark.parametrize("op", ["neg", "exp", "relu", "scalar"])
def test_unary(op):
    f_o = {
        "neg": lambda x: -x,
        "exp": lambda x: x.exp(),
        "relu": F.relu,
        "scalar": lambda x: 2.0 - x * 3 + 1 / (x * x + 1),
    }[op]
    f_t = {
        "neg": lambda x: -x,
        "exp": lambda x: x.exp(),
        "relu": TF.relu,
        "scalar": lambda x: 2.0 - x * 3 + 1 / (x * x + 1),
    }[op]
    check(f_o, f_t, [rand(3, 5)])


# -- linear algebra ---------------------------------------------------------------
@pytest.mark.parametrize(
    "sa,sb", [((3, 4), (4, 5)), ((4,), (4, 5)), ((3, 4), (4,)), ((4,), (4,)),
              ((2, 3, 4), (4, 5)), ((2, 1, 3, 4), (5, 4, 2))]
)
def test_matmul(sa, sb):
    check(lambda a, b: a @ b, lambda a, b: a @ b, [rand(*sa), rand(*sb)])


def test_matmul_then_square_hessian():
    # A nonzero Hessian needs a nonlinearity: sum((a @ b)**2).
    f = lambda a, b: ((a @ b) * (a @ b)).sum()  # noqa: E731
    check(f, f, [rand(3, 4), rand(4, 2)])


@pytest.mark.parametrize("x_shape", [(5, 4), (2, 3, 4), (4,)])
@pytest.mark.parametrize("bias", [True, False])
def test_linear(x_shape, bias):
    arrays = [rand(*x_shape), rand(3, 4)] + ([rand(3)] if bias else [])
    f_o = lambda x, w, *b: F.relu(F.linear(x, w, *b)) * F.linear(x, w, *b)  # noqa
    f_t = lambda x, w, *b: TF.relu(TF.linear(x, w, *b)) * TF.linear(x, w, *b)  # noqa
    check(f_o, f_t, arrays)


# -- reductions and shapes ------------------------------------------------------------
@pytest.mark.parametrize("axis,keepdims", [(None, False), (1, True), ((0, 2), False),
                                           (-1, False)])
@pytest.mark.parametrize("red", ["sum", "mean"])
def test_reductions(red, axis, keepdims):
    def f(x):
        y = x * x
        dim = axis if axis is not None else tuple(range(3))
        if torch.is_tensor(x):
            return getattr(y, red)(dim=dim, keepdim=keepdims)
        return getattr(y, red)(axis=axis, keepdims=keepdims)

    check(f, f, [rand(2, 3, 4)])


def test_reshape_transpose():
    def f(x):
        return (x.reshape(4, -1).T * x.reshape(6, 4).T.reshape(-1, 4)).reshape(24)

    check(f, f, [rand(2, 3, 4)])


# -- the softmax family ---------------------------------------------------------------
@pytest.mark.parametrize("shape,axis", [((4, 7), 1), ((4, 7), 0), ((2, 3, 5), 1),
                                         ((6,), -1), ((3, 1), 1)])
@pytest.mark.parametrize("fn", ["log_softmax", "softmax"])
def test_softmax_family(fn, shape, axis):
    f_o = lambda x: getattr(F, fn)(x * x, axis)  # noqa: E731  (x*x: a nonlinear input)
    f_t = lambda x: getattr(TF, fn)(x * x, axis)  # noqa: E731
    check(f_o, f_t, [rand(*shape)])


def test_log_softmax_third_derivative_matches_torch():
    x_np = rand(3, 5)
    v, w, z = rand(3, 5), rand(3, 5), rand(3, 5)
    x_o = ls.tensor(x_np, requires_grad=True)
    x_t = torch.tensor(x_np, requires_grad=True)
    (g_o,) = ag.grad(F.log_softmax(x_o, 1), x_o, v, create_graph=True)
    (g_t,) = torch.autograd.grad(TF.log_softmax(x_t, 1), x_t, torch.tensor(v),
                                 create_graph=True)
    (h_o,) = ag.grad((g_o * w).sum(), x_o, create_graph=True)
    (h_t,) = torch.autograd.grad((g_t * torch.tensor(w)).sum(), x_t, create_graph=True)
    (t_o,) = ag.grad((h_o * z).sum(), x_o)
    (t_t,) = torch.autograd.grad((h_t * torch.tensor(z)).sum(), x_t)
    _close(t_o, t_t, "third derivative")


# -- losses -----------------------------------------------------------------------
LOSS_CASES = [
    dict(),
    dict(reduction="sum"),
    dict(reduction="none"),
    dict(weight=True),
    dict(weight=True, reduction="sum"),
    dict(weight=True, reduction="none"),
    dict(ignore=True),
    dict(ignore=True, weight=True),
    dict(ignore=True, weight=True, reduction="none"),
]


def _case_id(case) -> str:
    return "-".join(f"{k}={v}" for k, v in case.items()) or "mean"


def _loss_args(case, shape, seed=3):
    rng = np.random.default_rng(seed)
    c = shape[1] if len(shape) > 1 else shape[0]
    tshape = (shape[0],) + shape[2:] if len(shape) > 1 else ()
    target = rng.integers(0, c, size=tshape)
    kw = {}
    if case.get("ignore"):
        target = np.where(rng.random(tshape) < 0.3, 1, target) if tshape else target
        kw["ignore_index"] = 1
    if case.get("weight"):
        kw["weight"] = rng.random(c) + 0.5
    if "reduction" in case:
        kw["reduction"] = case["reduction"]
    return target, kw


def _torch_kw(kw):
    return {k: torch.tensor(v) if k == "weight" else v for k, v in kw.items()}


@pytest.mark.parametrize("case", LOSS_CASES, ids=_case_id)
@pytest.mark.parametrize("shape", [(6, 5), (3, 4, 2), (5,)])
def test_nll_loss_through_log_softmax(case, shape):
    target, kw = _loss_args(case, shape)
    tt = torch.tensor(target)
    ax = 1 if len(shape) > 1 else 0
    f_o = lambda x: F.nll_loss(F.log_softmax(x * x, ax), target, **kw)  # noqa: E731
    f_t = lambda x: TF.nll_loss(TF.log_softmax(x * x, ax), tt, **_torch_kw(kw))  # noqa
    check(f_o, f_t, [rand(*shape)])


@pytest.mark.parametrize("case", LOSS_CASES, ids=_case_id)
@pytest.mark.parametrize("shape", [(6, 5), (3, 4, 2), (5,)])
def test_cross_entropy(case, shape):
    target, kw = _loss_args(case, shape)
    tt = torch.tensor(target)
    f_o = lambda x: F.cross_entropy(x * x, target, **kw)  # noqa: E731
    f_t = lambda x: TF.cross_entropy(x * x, tt, **_torch_kw(kw))  # noqa: E731
    check(f_o, f_t, [rand(*shape)])


def test_nll_loss_direct_input_is_linear():
    # nll_loss applied to a leaf: first derivative constant, HVP zero.
    target = np.array([0, 2, 1])
    tt = torch.tensor(target)
    check(lambda x: F.nll_loss(x, target), lambda x: TF.nll_loss(x, tt), [rand(3, 4)])


def test_cross_entropy_hvp_of_mlp():
    """Hessian-vector product through the whole classifier, vs torch."""
    target = np.array([0, 2, 1, 2])

    def f(x, w1, b1, w2):
        ours = isinstance(x, ls.Tensor)
        lin, relu = (F.linear, F.relu) if ours else (TF.linear, TF.relu)
        ce = F.cross_entropy if ours else TF.cross_entropy
        t = target if ours else torch.tensor(target)
        return ce(lin(relu(lin(x, w1, b1)), w2), t)

    check(f, f, [rand(4, 5), rand(6, 5), rand(6), rand(3, 6)])


# -- finite differences (independent of torch) -------------------------------------
@pytest.mark.parametrize("fn", ["log_softmax", "softmax", "cross_entropy"])
def test_gradient_matches_finite_differences(fn):
    rng = np.random.default_rng(7)
    x0 = rng.standard_normal((3, 4))
    target = np.array([1, 0, 3])
    w = rng.standard_normal((3, 4))

    def scalar(xa):
        x = ls.tensor(xa, requires_grad=True)
        if fn == "cross_entropy":
            return F.cross_entropy(x, target), x
        return (getattr(F, fn)(x, 1) * w).sum(), x

    loss, x = scalar(x0)
    loss.backward()
    num = np.zeros_like(x0)
    h = 1e-6
    for idx in np.ndindex(x0.shape):
        xp, xm = x0.copy(), x0.copy()
        xp[idx] += h
        xm[idx] -= h
        num[idx] = (scalar(xp)[0].item() - scalar(xm)[0].item()) / (2 * h)
    np.testing.assert_allclose(x.grad.numpy(), num, rtol=1e-6, atol=1e-8)
