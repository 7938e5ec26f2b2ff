"""The PyTorch adapter (API.md section 6): ``logsoftmax.torch``.

- ``torch.ops.logsoftmax.*``: schemas, ``torch.library.opcheck`` for every
  op and dtype, ``torch.compile(fullgraph=True)`` capture (aot_eager; inductor
  under ``slow``), ``torch.func.vmap``.
- Values and gradients against PyTorch in float64 (first and second order),
  low precision against a float64 oracle, every ``cross_entropy`` option.
- Zero copy (the front door sees torch's own memory), new results, inputs
  untouched, non-contiguous inputs, errors, a training loop whose loss curve
  matches PyTorch's.
"""

from __future__ import annotations

import shutil

import ml_dtypes
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

import logsoftmax._api as api  # noqa: E402
import logsoftmax.torch as lt  # noqa: E402
from logsoftmax.torch import _ops  # noqa: E402

OPS = torch.ops.logsoftmax
DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64]
DT_IDS = ["f32", "bf16", "f16", "f64"]
F64 = torch.float64


def _rand(*shape, dtype=F64, seed=0, scale=3.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g, dtype=F64) * scale).to(dtype)


def _close64(a, b, rtol=1e-13, atol=1e-14):
    torch.testing.assert_close(a, b, rtol=rtol, atol=atol)


# --------------------------------------------------------------------------
# registration
# --------------------------------------------------------------------------
def test_schemas_are_the_contract():
    schemas = {
        "log_softmax": "logsoftmax::log_softmax(Tensor x, int dim) -> Tensor",
        "log_softmax_backward": "logsoftmax::log_softmax_backward("
        "Tensor grad_output, Tensor output, int dim) -> Tensor",
        "softmax": "logsoftmax::softmax(Tensor x, int dim) -> Tensor",
        "softmax_backward": "logsoftmax::softmax_backward("
        "Tensor grad_output, Tensor output, int dim) -> Tensor",
        "logsumexp": "logsoftmax::logsumexp(Tensor x, int[] dim, bool keepdim) "
        "-> Tensor",
    }
    for name, schema in schemas.items():
        assert str(getattr(OPS, name).default._schema) == schema


def _opcheck_args(name, dtype):
    x = _rand(4, 7, dtype=dtype).requires_grad_()
    if name in ("log_softmax", "softmax"):
        return (x, 1)
    if name == "logsumexp":
        return (x, [1], False)
    y = (torch.log_softmax if name == "log_softmax_backward" else torch.softmax)(
        _rand(4, 7, seed=1), 1
    ).to(dtype)
    return (_rand(4, 7, dtype=dtype, seed=2).requires_grad_(), y.requires_grad_(), 1)


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
@pytest.mark.parametrize(
    "name",
    ["log_softmax", "softmax", "log_softmax_backward", "softmax_backward", "logsumexp"],
)
def test_opcheck(name, dtype):
    result = torch.library.opcheck(getattr(OPS, name), _opcheck_args(name, dtype))
    assert set(result.values()) == {"SUCCESS"}, result


@pytest.mark.slow
@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
def test_opcheck_layouts(dtype):
    """Transposed, sliced, 3-D, 0-d and multi-dim logsumexp samples."""
    xt = _rand(7, 4, dtype=dtype).t().requires_grad_()
    xs = _rand(4, 9, dtype=dtype)[:, ::2].requires_grad_()
    x3 = _rand(2, 3, 5, dtype=dtype).requires_grad_()
    x0 = _rand(dtype=dtype).requires_grad_()
    for op in (OPS.log_softmax, OPS.softmax):
        for args in ((xt, 1), (xs, 0), (x3, 1), (x0, -1)):
            result = torch.library.opcheck(op, args)
            assert set(result.values()) == {"SUCCESS"}, (op, result)
    for args in ((x3, [0, 2], True), (x3, [], False), (xt, [0], False)):
        result = torch.library.opcheck(OPS.logsumexp, args)
        assert set(result.values()) == {"SUCCESS"}, result


# --------------------------------------------------------------------------
# torch.compile
# --------------------------------------------------------------------------
def _uses_every_op(x, target):
    y = lt.log_softmax(x * 2, 1)
    p = lt.softmax(x, -1)
    s = lt.logsumexp(x, 1)
    return lt.cross_entropy(x, target, label_smoothing=0.1) + y.sum() + (p * p).sum() + s.sum()


def _check_compiled(backend):
    import torch._dynamo

    torch._dynamo.reset()
    x = _rand(8, 10, dtype=torch.float32).requires_grad_()
    target = torch.arange(8) % 10
    explained = torch._dynamo.explain(_uses_every_op)(x, target)
    assert explained.graph_count == 1 and explained.graph_break_count == 0
    compiled = torch.compile(_uses_every_op, backend=backend, fullgraph=True)
    out = compiled(x, target)
    (grad,) = torch.autograd.grad(out, x)
    ref = _uses_every_op(x, target)
    (ref_grad,) = torch.autograd.grad(ref, x)
    torch.testing.assert_close(out, ref, rtol=1e-6, atol=1e-5)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-6, atol=1e-6)
    torch._dynamo.reset()


def test_compile_fullgraph_aot_eager():
    _check_compiled("aot_eager")


@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which("g++") is None and shutil.which("c++") is None,
    reason="inductor needs a C++ compiler",
)
def test_compile_fullgraph_inductor():
    _check_compiled("inductor")


def test_compiled_graph_calls_the_registered_ops():
    import torch._dynamo

    torch._dynamo.reset()
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    f = torch.compile(lambda x: lt.log_softmax(x, 0) + lt.logsumexp(x, 0), backend=backend,
                      fullgraph=True)
    f(_rand(5, 3))
    code = graphs[0].code
    assert "torch.ops.logsoftmax.log_softmax" in code
    assert "torch.ops.logsoftmax.logsumexp" in code
    torch._dynamo.reset()


# --------------------------------------------------------------------------
# values and gradients against PyTorch (float64)
# --------------------------------------------------------------------------
@pytest.mark.parametrize("shape,dim", [((5, 9), 1), ((5, 9), 0), ((2, 3, 4), 1), ((7,), -1)])
def test_values_and_grads_match_torch(shape, dim):
    x = _rand(*shape).requires_grad_()
    up = _rand(*shape, seed=3)
    for ours, theirs in ((lt.log_softmax, torch.log_softmax), (lt.softmax, torch.softmax)):
        y, ref = ours(x, dim), theirs(x, dim)
        _close64(y, ref)
        (gx,) = torch.autograd.grad(y, x, up)
        (gref,) = torch.autograd.grad(ref, x, up)
        _close64(gx, gref)
    every = list(range(len(shape)))
    for dims, keep in ((dim, False), ([0, -1] if len(shape) > 1 else [0], True), ([], False)):
        y, ref = lt.logsumexp(x, dims, keep), torch.logsumexp(x, every if dims == [] else dims, keep)
        _close64(y, ref)
        (gx,) = torch.autograd.grad(y.sum(), x)
        (gref,) = torch.autograd.grad(ref.sum(), x)
        _close64(gx, gref)


def test_second_derivatives_match_torch():
    """Hessian-vector products through every op, against PyTorch's."""
    x = _rand(4, 6).requires_grad_()
    v = _rand(4, 6, seed=5)
    weights = _rand(4, 6, seed=6)
    pairs = [
        (lambda t: lt.log_softmax(t, 1), lambda t: torch.log_softmax(t, 1)),
        (lambda t: lt.softmax(t, 0), lambda t: torch.softmax(t, 0)),
        (lambda t: lt.logsumexp(t, 1, True), lambda t: torch.logsumexp(t, 1, True)),
    ]
    for ours, theirs in pairs:
        hv = []
        for f in (ours, theirs):
            (g,) = torch.autograd.grad((torch.sin(f(x)) * weights[: f(x).shape[0]]).sum()
                                       if f(x).shape == x.shape else torch.sin(f(x)).sum(),
                                       x, create_graph=True)
            (h,) = torch.autograd.grad((g * v).sum(), x)
            hv.append(h)
        _close64(hv[0], hv[1], rtol=1e-12, atol=1e-13)


def test_gradgradcheck_eager_and_dispatcher_paths():
    x = _rand(3, 5, scale=1.0).requires_grad_()
    fns = [
        lambda t: lt.log_softmax(t, 1),
        lambda t: lt.softmax(t, 0),
        lambda t: lt.logsumexp(t, [0, 1]),
        lambda t: OPS.log_softmax(t, 1),  # through the dispatcher's autograd
        lambda t: OPS.softmax(t, 1),
        lambda t: lt.cross_entropy(t, torch.tensor([0, 4, 2]), label_smoothing=0.2),
    ]
    for f in fns:
        assert torch.autograd.gradcheck(f, (x,))
        assert torch.autograd.gradgradcheck(f, (x,))


def test_eager_path_and_dispatcher_give_the_same_bits():
    x = _rand(6, 33, dtype=torch.float32).requires_grad_()
    up = _rand(6, 33, dtype=torch.float32, seed=1)
    for name in ("log_softmax", "softmax"):
        y_eager = getattr(lt, name)(x, 1)
        y_op = getattr(OPS, name)(x, 1)
        assert y_eager.grad_fn is not None and y_op.grad_fn is not None
        assert torch.equal(y_eager, y_op)
        assert torch.equal(*(torch.autograd.grad(y, x, up)[0] for y in (y_eager, y_op)))
    assert torch.equal(lt.logsumexp(x, 1), OPS.logsumexp(x, [1], False))


# --------------------------------------------------------------------------
# low precision: the float64 result rounded once (API.md section 1)
# --------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES[:3], ids=DT_IDS[:3])
def test_low_precision_accuracy(dtype):
    x = _rand(16, 300, dtype=dtype)
    x64 = x.to(F64)
    eps = torch.finfo(dtype).eps
    for ours, ref in (
        (lt.log_softmax(x, 1), torch.log_softmax(x64, 1)),
        (lt.softmax(x, 1), torch.softmax(x64, 1)),
        (lt.logsumexp(x, 1), torch.logsumexp(x64, 1)),
    ):
        assert ours.dtype == dtype
        err = (ours.to(F64) - ref).abs() / (eps * ref.abs().clamp(min=1))
        assert err.max().item() <= 1.0


# --------------------------------------------------------------------------
# cross_entropy and nll_loss: every option, PyTorch's formulas
# --------------------------------------------------------------------------
WEIGHT = torch.tensor([0.5, 2.0, 1.0, 0.25, 3.0], dtype=F64)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing", [0.0, 0.3])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("shape", [(6, 5), (3, 5, 4), (5,)], ids=["NC", "NCd", "C"])
def test_cross_entropy_class_indices(shape, weighted, smoothing, reduction):
    x = _rand(*shape).requires_grad_()
    tshape = shape[:1] + shape[2:] if len(shape) > 1 else ()
    target = torch.randint(0, 5, tshape, generator=torch.Generator().manual_seed(1))
    if target.dim():
        target.view(-1)[::3] = 2 if target.numel() > 1 else target.view(-1)[0]
        target.view(-1)[1] = -100 if target.numel() > 1 else target.view(-1)[0]
    kw = dict(weight=WEIGHT if weighted else None, reduction=reduction,
              label_smoothing=smoothing)
    ours, ref = lt.cross_entropy(x, target, **kw), F.cross_entropy(x, target, **kw)
    _close64(ours, ref)
    up = torch.ones_like(ref)
    _close64(torch.autograd.grad(ours, x, up)[0], torch.autograd.grad(ref, x, up)[0])
    kw["ignore_index"] = 2
    _close64(lt.cross_entropy(x, target.clamp(min=0), **kw),
             F.cross_entropy(x, target.clamp(min=0), **kw))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing", [0.0, 0.3])
@pytest.mark.parametrize("weighted", [False, True])
def test_cross_entropy_probability_targets(weighted, smoothing, reduction):
    x = _rand(4, 5, 3).requires_grad_()
    target = torch.softmax(_rand(4, 5, 3, seed=7), 1)
    kw = dict(weight=WEIGHT if weighted else None, reduction=reduction,
              label_smoothing=smoothing)
    ours, ref = lt.cross_entropy(x, target, **kw), F.cross_entropy(x, target, **kw)
    _close64(ours, ref)
    up = torch.ones_like(ref)
    _close64(torch.autograd.grad(ours, x, up)[0], torch.autograd.grad(ref, x, up)[0])


def test_cross_entropy_edge_cases_match_torch():
    empty = _rand(0, 4)
    for target in (torch.zeros(0, dtype=torch.long), torch.rand(0, 4, dtype=F64)):
        assert torch.isnan(lt.cross_entropy(empty, target))
        assert torch.isnan(F.cross_entropy(empty, target))
    x = _rand(3, 4)
    all_ignored = torch.full((3,), -100)
    assert torch.isnan(lt.cross_entropy(x, all_ignored, label_smoothing=0.1))
    # legacy arguments
    t = torch.tensor([1, 0, 3])
    _close64(lt.cross_entropy(x, t, size_average=False), F.cross_entropy(x, t, reduction="sum"))
    _close64(lt.nll_loss(lt.log_softmax(x, 1), t, reduce=False),
             F.nll_loss(torch.log_softmax(x, 1), t, reduction="none"))
    _close64(lt.nll_loss(lt.log_softmax(x, 1), t, WEIGHT[:4], ignore_index=0),
             F.nll_loss(torch.log_softmax(x, 1), t, WEIGHT[:4], ignore_index=0))


def test_cross_entropy_errors():
    x, t = _rand(3, 4), torch.tensor([1, 0, 3])
    with pytest.raises(RuntimeError, match="label_smoothing=1.5"):
        lt.cross_entropy(x, t, label_smoothing=1.5)
    with pytest.raises(ValueError, match="reduction='avg'"):
        lt.cross_entropy(x, t, reduction="avg")
    with pytest.raises(RuntimeError, match="ignore_index=1"):
        lt.cross_entropy(x, torch.softmax(x, 1), ignore_index=1)
    with pytest.raises(RuntimeError, match="floating"):
        lt.cross_entropy(x, torch.zeros(3, 4, dtype=torch.long))
    with pytest.raises((IndexError, RuntimeError)):  # nll_loss's own check
        lt.cross_entropy(x, torch.tensor([1, 0, 7]))


# --------------------------------------------------------------------------
# zero copy, fresh results, untouched inputs, any strides
# --------------------------------------------------------------------------
def _spy(monkeypatch, name):
    """Record ``(args, result array)`` of every call of the front door's ``name``."""
    calls = []
    original = getattr(api, name)

    def spy(*args, **kwargs):
        result = original(*args, **kwargs)
        calls.append((args, result))
        return result

    monkeypatch.setattr(api, name, spy)
    return calls


def _address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced", "expanded"])
def test_zero_copy_any_strides(monkeypatch, dtype, layout):
    base = _rand(6, 10, dtype=dtype)
    x = {
        "contiguous": base,
        "transposed": base.t(),
        "sliced": base[1::2, ::3],
        "expanded": base[:1].expand(4, 10),
    }[layout].requires_grad_(layout != "expanded")
    before = x.detach().clone()
    version = x._version
    calls = _spy(monkeypatch, "log_softmax")
    bwd_calls = _spy(monkeypatch, "log_softmax_backward")
    y = lt.log_softmax(x, 0)
    (args, out) = calls[0]  # the result array: out= or the front door's own
    seen = args[0]
    elem = x.element_size()
    assert _address(seen) == x.data_ptr() and seen.strides == tuple(s * elem for s in x.stride())
    assert _address(out) == y.data_ptr()
    assert seen.dtype == _ops.FLOAT_DTYPES[dtype]
    # a new tensor, laid out like a dense input; the input untouched
    assert y.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
    assert torch.equal(x.detach(), before) and x._version == version
    if layout in ("contiguous", "transposed"):
        assert y.stride() == x.stride()
    ref = lt.log_softmax(x.detach().contiguous(), 0)
    assert torch.equal(y.detach(), ref)
    if x.requires_grad:
        g = _rand(*x.shape, dtype=dtype, seed=4).t().contiguous().t()  # strided grad
        (gx,) = torch.autograd.grad(y, x, g)
        args, out = bwd_calls[0]
        dd, dst = args[:2]
        assert _address(dd) == g.data_ptr() and _address(dst) == y.data_ptr()
        assert _address(out) == gx.data_ptr()


def test_logsumexp_result_shares_the_kernels_memory(monkeypatch):
    calls = []
    original = api.logsumexp

    def spy(*args, **kwargs):
        calls.append(original(*args, **kwargs))
        return calls[-1]

    monkeypatch.setattr(api, "logsumexp", spy)
    for dtype in DTYPES:
        r = lt.logsumexp(_rand(3, 4, dtype=dtype), 1)
        assert r.data_ptr() == _address(calls[-1]) and r.dtype == dtype


# --------------------------------------------------------------------------
# dtypes, 0-d, empty, special values
# --------------------------------------------------------------------------
def test_dtype_argument_and_promotion():
    x = _rand(3, 4, dtype=torch.float32)
    y = lt.log_softmax(x, 1, dtype=F64)
    assert y.dtype == F64
    _close64(y, torch.log_softmax(x, 1, dtype=F64))
    assert lt.softmax(torch.arange(4), 0).dtype == torch.float32
    assert lt.logsumexp(torch.tensor([True, False]), 0).dtype == torch.float32
    with pytest.raises(TypeError, match="complex64"):
        lt.log_softmax(torch.zeros(3, dtype=torch.complex64), 0)


def test_zero_d_and_empty_match_torch():
    s = torch.tensor(2.5, dtype=F64)
    for d in (0, -1):
        assert torch.equal(lt.log_softmax(s, d), torch.log_softmax(s, d))
        assert torch.equal(lt.softmax(s, d), torch.softmax(s, d))
        assert torch.equal(lt.logsumexp(s, d), torch.logsumexp(s, d))
    e = torch.empty(0, 5, dtype=F64)
    assert lt.log_softmax(e, 1).shape == (0, 5)
    assert torch.equal(lt.logsumexp(torch.empty(3, 0), 1), torch.full((3,), -torch.inf))


def test_special_values_match_torch():
    inf, nan = float("inf"), float("nan")
    x = torch.tensor([[0.0, -inf, 1.0], [nan, 0.0, 1.0], [inf, 0.0, 1.0], [-inf, -inf, -inf]],
                     dtype=F64)
    for ours, theirs in ((lt.log_softmax, torch.log_softmax), (lt.softmax, torch.softmax)):
        torch.testing.assert_close(ours(x, 1), theirs(x, 1), equal_nan=True)
    torch.testing.assert_close(lt.logsumexp(x, 1), torch.logsumexp(x, 1), equal_nan=True)


# --------------------------------------------------------------------------
# errors, devices, dispatch
# --------------------------------------------------------------------------
def test_dim_errors_follow_torch_types():
    x = _rand(3, 4)
    for f in (lambda: lt.log_softmax(x, 2), lambda: lt.softmax(x, -3),
              lambda: OPS.log_softmax(x, 5), lambda: lt.logsumexp(x, [0, 2]),
              lambda: lt.log_softmax(torch.tensor(1.0), 1)):
        with pytest.raises(IndexError, match="dim="):
            f()
    with pytest.raises(TypeError, match="dim"):
        lt.log_softmax(x, 1.0)
    with pytest.raises(RuntimeError, match="repeats"):
        lt.logsumexp(x, [1, -1])
    y = torch.log_softmax(x, 1)
    with pytest.raises(ValueError, match="shape"):
        OPS.log_softmax_backward(x[:2], y, 1)
    with pytest.raises(TypeError, match="dtype"):
        OPS.softmax_backward(x.float(), y, 1)


def test_fake_kernels_validate_at_trace_time():
    from torch._subclasses import FakeTensorMode

    with FakeTensorMode():
        x = torch.empty(3, 5)
        assert lt.log_softmax(x, 1).shape == (3, 5)
        assert lt.logsumexp(x, [0, 1], True).shape == (1, 1)
        with pytest.raises(IndexError, match="dim=2"):
            lt.softmax(x, 2)
    meta = lt.log_softmax(torch.empty(2, 3, device="meta"), 1)
    assert meta.device.type == "meta" and meta.shape == (2, 3)


def test_unsupported_device_raises_not_implemented():
    with pytest.raises(NotImplementedError, match="'meta'"):
        _ops.as_array(torch.empty(2, device="meta"))
    lazy = pytest.importorskip("torch._lazy.ts_backend")
    try:
        lazy.init()
        t = torch.ones(3, device="lazy")
    except Exception as e:  # pragma: no cover - build without the lazy backend
        pytest.skip(f"no lazy device here: {e}")
    with pytest.raises(NotImplementedError, match="lazy"):
        lt.log_softmax(t, 0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_tensors_run_on_the_cuda_backend():  # pragma: no cover - GPU only
    x = _rand(8, 1000, dtype=torch.float32).cuda().requires_grad_()
    y = lt.log_softmax(x, 1)
    assert y.device == x.device
    torch.testing.assert_close(y, torch.log_softmax(x, 1), rtol=1e-5, atol=1e-5)
    (g,) = torch.autograd.grad(y.sum(), x)
    assert g.device == x.device


def test_vmap_runs_one_batched_call(monkeypatch):
    calls = _spy(monkeypatch, "log_softmax")
    x = _rand(4, 5, 3)
    out = torch.func.vmap(lambda t: lt.log_softmax(t, 0), in_dims=2)(x)
    assert len(calls) == 1
    _close64(out, torch.func.vmap(lambda t: torch.log_softmax(t, 0), in_dims=2)(x))
    _close64(torch.func.vmap(lambda t: lt.logsumexp(t, [0, 1]))(x), torch.logsumexp(x, [1, 2]))


# --------------------------------------------------------------------------
# modules and a training loop
# --------------------------------------------------------------------------
def test_modules_are_torch_modules():
    x, t = _rand(4, 5), torch.tensor([0, 1, 4, 2])
    assert isinstance(lt.LogSoftmax(1), torch.nn.LogSoftmax)
    assert torch.equal(lt.LogSoftmax(1)(x), lt.log_softmax(x, 1))
    assert torch.equal(lt.Softmax(dim=0)(x), lt.softmax(x, 0))
    loss = lt.CrossEntropyLoss(weight=WEIGHT, label_smoothing=0.1, reduction="sum")
    assert isinstance(loss, torch.nn.CrossEntropyLoss)
    assert "weight" in loss.state_dict()
    _close64(loss(x, t), torch.nn.CrossEntropyLoss(weight=WEIGHT, label_smoothing=0.1,
                                                   reduction="sum")(x, t))


def _train(loss_fn, steps=25):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(12, 32), torch.nn.ReLU(), torch.nn.Linear(32, 6)
    ).double()
    opt = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(64, 12, generator=g, dtype=F64)
    y = (x[:, :6].argmax(1) + (x[:, 6] > 0)) % 6
    losses = []
    for _ in range(steps):
        loss = loss_fn(model(x), y, label_smoothing=0.05)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return np.array(losses)


def test_training_loss_curve_matches_pytorch():
    ours, theirs = _train(lt.cross_entropy), _train(F.cross_entropy)
    assert ours[-1] < 0.5 * ours[0]  # it learns
    np.testing.assert_allclose(ours, theirs, rtol=1e-9)


def test_import_logsoftmax_does_not_import_torch_or_jax():
    import subprocess
    import sys

    code = "import sys, logsoftmax; print('torch' in sys.modules, 'jax' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["False", "False"]


def test_bfloat16_view_is_bit_exact():
    x = _rand(3, 4, dtype=torch.bfloat16)
    a = _ops.as_array(x)
    assert a.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(a.astype(np.float32), x.float().numpy())



def test_large_results_keep_torchs_layout():
    """Results of >= 4 MiB live in numpy's memory (huge pages) but have
    exactly ``torch.empty_like``'s strides, as the fake kernel says."""
    assert _ops.LARGE_RESULT_BYTES <= 1 << 22
    for x in (_rand(2048, 600, dtype=torch.float32).t(),
              _rand(1200, 1800, dtype=torch.bfloat16)[:, ::2]):
        y = lt.log_softmax(x, 0)
        assert y.stride() == torch.empty_like(x).stride() and y.dtype == x.dtype
        assert torch.equal(y, lt.log_softmax(x.contiguous(), 0))
