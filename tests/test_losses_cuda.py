"""The fused linear + cross-entropy's CUDA pieces (Triton kernels, torch
GEMMs) against the float64 oracle. Without a GPU the kernels run in Triton's
interpreter on CPU tensors (``TRITON_INTERPRET=1``, set before Triton is
imported); ``benchmarks/gpu_check.sh`` runs this file on a GPU with
``TRITON_INTERPRET=0`` (tensors then live on ``cuda``).
"""

from __future__ import annotations

import itertools
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from logsoftmax import _linear_ce  # noqa: E402
from logsoftmax.backends.cuda import losses as cuda_losses  # noqa: E402

F = torch.nn.functional
INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") not in ("0", "")
if not INTERPRETED and not torch.cuda.is_available():
    pytest.skip("no GPU and TRITON_INTERPRET=0", allow_module_level=True)
DEVICE = "cpu" if INTERPRETED else "cuda"
# the interpreter evaluates both sides of tl.where (inf - inf in the unused one)
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def _oracle(x, w, t, b, cw, reduction, eps, zl, cap, grad):
    xs = [None if a is None else a.detach().double().cpu().requires_grad_()
          for a in (x, w, b)]
    z = xs[0] @ xs[1].T + (0 if xs[2] is None else xs[2])
    if cap:
        z = cap * torch.tanh(z / cap)
    tt = t.cpu()
    ce = F.cross_entropy(z, tt, None if cw is None else cw.double().cpu(),
                         reduction=reduction, label_smoothing=eps)
    lse = torch.logsumexp(z, 1)
    valid = tt != -100
    zz = torch.where(valid, zl * lse**2, 0.0)
    loss = ce + {"none": zz, "sum": zz.sum(), "mean": zz.sum() / valid.sum()}[reduction]
    loss.backward(grad.double().cpu())
    return [loss.detach()] + [None if a is None else a.grad for a in xs]


def _cases():
    """Every option on and off together by default; the full grid is slow."""
    out = []
    for red, eps, zl, cap, chunk in itertools.product(
            ["mean", "none"], [0.0, 0.2], [0.0, 1e-2], [None, 2.0],
            [(16, 40), (16, 13)]):
        fast = (eps, zl, cap) in ((0.0, 0.0, None), (0.2, 1e-2, 2.0))
        out.append(pytest.param(red, eps, zl, cap, chunk,
                                marks=() if fast else pytest.mark.slow))
    return out


@pytest.mark.parametrize("reduction,eps,zl,cap,chunk", _cases())
def test_cuda_pieces_match_oracle(reduction, eps, zl, cap, chunk):
    g = torch.Generator().manual_seed(0)
    n, h, v = 20, 8, 40
    x = torch.randn(n, h, generator=g).to(DEVICE)
    w = torch.randn(v, h, generator=g).to(DEVICE)
    b = torch.randn(v, generator=g).to(DEVICE)
    cw = (torch.rand(v, generator=g) + 0.2).to(DEVICE)
    t = torch.randint(0, v, (n,), generator=g)
    t[3] = -100
    t = t.to(DEVICE)
    grad = torch.rand(n, generator=g) if reduction == "none" else torch.tensor(0.8)
    want = _oracle(x, w, t, b, cw, reduction, eps, zl, cap, grad)
    p = _linear_ce.check("linear_cross_entropy", x, w, t, linear_bias=b, weight=cw,
                         reduction=reduction, label_smoothing=eps, z_loss=zl,
                         softcap=cap, chunk_size=chunk)
    for fused in (False, True):
        loss, saved = _linear_ce.forward(p, grads=fused, ops=cuda_losses.CudaOps())
        got = [loss] + list(_linear_ce.backward(grad.to(DEVICE), saved))
        for a, ref in zip(got, want):
            np.testing.assert_allclose(a.detach().double().cpu().numpy(), ref.numpy(),
                                       rtol=2e-5, atol=2e-5)


def test_cuda_large_offset_and_bf16():
    """Logits sharing a large offset, and a bf16 loss rounded once."""
    g = torch.Generator().manual_seed(1)
    n, h, v = 8, 16, 300
    x = torch.randn(n, h, generator=g).to(DEVICE)
    w = (torch.randn(v, h, generator=g) * 0.3).to(DEVICE)
    t = torch.randint(0, v, (n,), generator=g).to(DEVICE)
    b = torch.full((v,), 3e4).to(DEVICE)
    p = _linear_ce.check("linear_cross_entropy", x, w, t, linear_bias=b,
                         reduction="none")
    loss, _ = _linear_ce.forward(p, ops=cuda_losses.CudaOps())
    z = (x.cpu().double() @ w.cpu().double().T).float().double() + 3e4
    ref = F.cross_entropy(z.float().double(), t.cpu(), reduction="none")
    err = (loss.cpu().double() - ref).abs() / (2**-23 * ref.abs().clamp(min=1))
    assert err.max() < 64
    xb, wb = x.bfloat16(), w.bfloat16()
    p = _linear_ce.check("linear_cross_entropy", xb, wb, t)
    loss, _ = _linear_ce.forward(p, ops=cuda_losses.CudaOps())
    assert loss.dtype == torch.bfloat16
    ref = F.cross_entropy(xb.cpu().double() @ wb.cpu().double().T, t.cpu())
    assert abs(loss.double().item() - ref.item()) <= 2**-8 * max(1, abs(ref.item()))


def test_cross_entropy_on_the_cuda_backend():
    """``logsoftmax.cross_entropy`` / ``nll_loss`` with the "cuda" backend
    (numpy arrays under ``use_backend`` in the interpreter; torch tensors on
    a GPU) against PyTorch in float64."""
    import logsoftmax

    rng = np.random.default_rng(4)
    x = rng.standard_normal((6, 5, 3))
    t = rng.integers(0, 5, (6, 3))
    t[0, 0] = -100
    y = rng.random((6, 5, 3))
    w = rng.random(5) + 0.1
    arr = (lambda a: a) if INTERPRETED else (lambda a: torch.from_numpy(a).cuda())
    with logsoftmax.use_backend("cuda"):
        for red in ("mean", "sum", "none"):
            for fn, tgt, kw in ((logsoftmax.cross_entropy, t, dict(label_smoothing=0.2)),
                                (logsoftmax.nll_loss, t, {}),
                                (logsoftmax.cross_entropy, y, dict(label_smoothing=0.2))):
                got = fn(arr(x), arr(tgt), arr(w), reduction=red, **kw)
                ref_fn = getattr(F, fn.__name__)
                ref = ref_fn(torch.from_numpy(x), torch.from_numpy(tgt),
                             torch.from_numpy(w), reduction=red, **kw)
                got = got.cpu().numpy() if isinstance(got, torch.Tensor) else got
                np.testing.assert_allclose(np.asarray(got, np.float64), ref.numpy(),
                                           rtol=1e-12, atol=1e-12)
