"""examples/torch_drop_in.py and examples/jax_drop_in.py (``make drop-in``):
their quick runs finish with the loss curves agreeing to 1e-9 relative in
float64 and the accuracy target reached (exit status 0)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.mark.slow
@pytest.mark.parametrize("example,framework", [("torch_drop_in.py", "torch"),
                                               ("jax_drop_in.py", "jax")])
def test_drop_in_example_runs(example, framework):
    pytest.importorskip(framework)
    pytest.importorskip("sklearn")
    run = subprocess.run([sys.executable, str(EXAMPLES / example), "--quick", "--plot", ""],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "within 1e-09" in run.stdout
