"""``logsoftmax dask-run`` on Zarr arrays generated here (threaded scheduler,
and a distributed scheduler by address)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import REF, assert_close_eps

pytest.importorskip("dask.array")
zarr = pytest.importorskip("zarr")

from logsoftmax.cli import main as cli_main  # noqa: E402


def _write(path, x, chunks):
    z = zarr.create_array(str(path), shape=x.shape, chunks=chunks, dtype=x.dtype)
    z[...] = x
    return str(path)


@pytest.fixture
def logits(tmp_path, rng):
    x = (rng.standard_normal((60, 250)) * 6).astype(np.float32)
    return x, _write(tmp_path / "logits.zarr", x, (16, 100))  # rows split in 3


@pytest.mark.parametrize("op", ["log_softmax", "softmax"])
def test_dask_run_writes_the_result(tmp_path, logits, op, capsys):
    x, src = logits
    dst = str(tmp_path / "out.zarr")
    assert cli_main(["dask-run", "--input", src, "--output", dst, "--op", op]) == 0
    out = zarr.open_array(dst)
    assert out.shape == x.shape and out.dtype == np.float32
    assert_close_eps(np.asarray(out[...]), REF[op](x, -1), np.float32, 4.0)
    captured = capsys.readouterr()
    assert "split rows" in captured.out and "GB/s" in captured.out
    assert "100% Completed" in captured.out + captured.err  # dask's ProgressBar


def test_dask_run_axis_chunks_and_dtype(tmp_path, logits):
    x, src = logits
    dst = str(tmp_path / "out.zarr")
    argv = ["dask-run", "--input", src, "--output", dst, "--axis", "0",
            "--chunks=-1,50", "--dtype", "f16", "--quiet"]
    assert cli_main(argv) == 0
    out = np.asarray(zarr.open_array(dst)[...])
    assert out.dtype == np.float16
    assert_close_eps(out, REF["log_softmax"](x, 0), np.float16, 4.0)


def test_dask_run_errors(tmp_path, logits, capsys):
    _, src = logits
    dst = str(tmp_path / "out.zarr")
    missing = str(tmp_path / "missing.zarr")
    assert cli_main(["dask-run", "--input", missing, "--output", dst]) == 2
    assert "could not open --input" in capsys.readouterr().err
    assert cli_main(["dask-run", "--input", src, "--output", dst, "--axis", "2"]) == 2
    assert "axis=2 is out of range" in capsys.readouterr().err
    assert cli_main(["dask-run", "--input", src, "--output", dst, "--chunks", "4"]) == 2
    assert "--chunks='4' must give 2 positive sizes" in capsys.readouterr().err
    assert cli_main(["dask-run", "--input", src, "--output", dst, "--quiet"]) == 0
    assert cli_main(["dask-run", "--input", src, "--output", dst]) == 2
    assert "exists; pass --overwrite" in capsys.readouterr().err
    assert cli_main(["dask-run", "--input", src, "--output", dst, "--overwrite",
                     "--quiet"]) == 0


def test_dask_run_on_a_scheduler_address(tmp_path, logits):
    distributed = pytest.importorskip("distributed")
    x, src = logits
    dst = str(tmp_path / "out.zarr")
    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None
    ) as cluster:
        argv = ["dask-run", "--input", src, "--output", dst,
                "--scheduler", cluster.scheduler_address]
        assert cli_main(argv) == 0
    assert_close_eps(np.asarray(zarr.open_array(dst)[...]),
                     REF["log_softmax"](x, -1), np.float32, 4.0)


def test_console_script_runs(tmp_path, logits):
    _, src = logits
    dst = str(tmp_path / "out.zarr")
    proc = subprocess.run(
        [sys.executable, "-m", "logsoftmax", "dask-run", "--input", src,
         "--output", dst, "--quiet"],
        capture_output=True, text=True, env={**os.environ}, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert zarr.open_array(dst).shape == (60, 250)


def test_dask_run_usage_errors_return_2(capsys):
    assert cli_main(["dask-run", "--input", "x.zarr"]) == 2
    assert "--output" in capsys.readouterr().err
    assert cli_main(["dask-run", "--help"]) == 0
    assert "--scheduler" in capsys.readouterr().out


def test_dask_run_progress_bar_only_on_a_terminal(tmp_path, logits, capsys,
                                                 monkeypatch):
    """In a log (no TTY) one line when done, no carriage-return redraws; on a
    terminal Dask's own bar."""
    _, src = logits
    argv = ["dask-run", "--input", src, "--output", str(tmp_path / "a.zarr")]
    assert cli_main(argv) == 0
    cap = capsys.readouterr()
    assert "\r" not in cap.out + cap.err
    assert cap.out.count("100% Completed") == 1
    assert cap.out.splitlines()[0].startswith("dask: 100% Completed | ")
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    argv[-1] = str(tmp_path / "b.zarr")
    assert cli_main(argv) == 0
    out = capsys.readouterr().out
    assert "\r[" in out and "| 100% Completed |" in out  # dask's ProgressBar
