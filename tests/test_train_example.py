"""examples/train_digits.py: the same loss curve as PyTorch, and the
accuracy targets of its quick run."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import logsoftmax as ls

pytest.importorskip("sklearn")
EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "train_digits.py"


@pytest.fixture(scope="module")
def td():
    spec = importlib.util.spec_from_file_location("train_digits", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.set_threads(1)
    return mod


def test_loss_curve_matches_pytorch_float64(td):
    """Same MLP, same initial weights, same batches, float64, 20 SGD-momentum
    steps: every loss equal to PyTorch's to rel 1e-10."""
    torch = pytest.importorskip("torch")
    x_tr, y_tr, _, _ = td.load_data(0, dtype=np.float64)
    model = td.make_model(32, dtype=np.float64, seed=3)
    opt = ls.nn.SGD(model.parameters(), lr=0.1, momentum=0.9)
    l1, l2 = model.layers[0], model.layers[2]
    tnn = torch.nn
    tm = tnn.Sequential(tnn.Linear(64, 32), tnn.ReLU(), tnn.Linear(32, 10)).double()
    with torch.no_grad():
        for ours, theirs in ((l1, tm[0]), (l2, tm[2])):
            theirs.weight.copy_(torch.from_numpy(ours.weight.numpy()))
            theirs.bias.copy_(torch.from_numpy(ours.bias.numpy()))
    topt = torch.optim.SGD(tm.parameters(), lr=0.1, momentum=0.9)
    rng = np.random.default_rng(0)
    ours_curve, torch_curve = [], []
    for _ in range(20):
        b = rng.choice(len(x_tr), 64, replace=False)
        ours_curve.append(td.train_step(model, opt, x_tr[b], y_tr[b]))
        loss = torch.nn.functional.cross_entropy(
            tm(torch.from_numpy(x_tr[b])), torch.from_numpy(y_tr[b])
        )
        topt.zero_grad()
        loss.backward()
        topt.step()
        torch_curve.append(loss.item())
    np.testing.assert_allclose(ours_curve, torch_curve, rtol=1e-10)
    assert ours_curve[-1] < 0.8 * ours_curve[0]  # it does learn
    np.testing.assert_allclose(
        l2.weight.numpy(), tm[2].weight.detach().numpy(), rtol=1e-9, atol=1e-12
    )


def test_quick_run_reaches_targets_and_plots(td, tmp_path, capsys):
    png = tmp_path / "curve.png"
    assert td.main(["--quick", "--no-progress", "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "float32: test accuracy" in out and "bf16 autocast: test accuracy" in out
    assert png.stat().st_size > 10_000 and png.read_bytes()[:4] == b"\x89PNG"


def test_bf16_run_really_uses_bf16_matmuls(td):
    x_tr, y_tr, _, _ = td.load_data(0)
    model = td.make_model(16)
    with ls.amp.autocast(ls.bfloat16):
        hidden = model.layers[0](x_tr[:8])
        loss = ls.nn.functional.cross_entropy(model.layers[2](hidden), y_tr[:8])
    assert hidden.dtype == ls.bfloat16 and loss.dtype == ls.float32
    loss.backward()
    assert all(p.grad.dtype == ls.float32 for p in model.parameters())


def test_progress_bar_only_on_a_terminal(td, capsys, monkeypatch):
    """`make demo` in a log: one line per epoch, no carriage-return bar."""
    data = td.load_data(0)
    small = tuple(a[:256] for a in data)
    td.train(small, epochs=2, batch=64, label="f32", hidden=8)
    out = capsys.readouterr().out
    assert "\r" not in out
    assert [ln.split(":")[0] for ln in out.splitlines()] == ["f32 epoch 1",
                                                            "f32 epoch 2"]
    items = [1, 2]
    assert td._bar(items, "x", progress=True) is items  # stdout is no TTY
    monkeypatch.setattr(td.sys.stdout, "isatty", lambda: True)
    bar = td._bar(items, "x", progress=True)  # a bar on a terminal
    assert bar is not items and list(bar) == items
    assert td._bar(items, "x", progress=False) is items
