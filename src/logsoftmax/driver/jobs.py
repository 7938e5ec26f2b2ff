"""Problem lists: the main job (perf set, or its quick copy) and JSON files.

The main job runs, for every distinct (shape, axis, layout) of
``data/perf_set.json``, LOGSOFTMAX forward and backward in f32, bf16 and f16
(12 perf problems -> 11 configurations -> 66 problems). ``--quick`` runs
smaller copies of four of them (NCHW channel axis, the same in channels-last,
an LLM vocabulary row, attention rows), about 0.8-2 M elements each, so that
``make demo`` finishes in well under two minutes including compilation.
"""

from __future__ import annotations

import json
import re
from importlib import resources

from .problem import Problem

__all__ = [
    "main_job_problems",
    "load_problem_file",
    "matches",
    "perf_set",
    "QUICK_CONFIGS",
]

DTYPES = ("f32", "bf16", "f16")
DIRS = ("FWD_D", "BWD_D")

#: (name, shape, axis, tag): smaller copies of perf00, perf01, perf08, perf03
QUICK_CONFIGS = (
    ("quick-nchw", (4, 64, 56, 56), 1, "abcd"),
    ("quick-nhwc", (4, 64, 56, 56), 1, "acdb"),
    ("quick-vocab", (64, 32000), 1, "ab"),
    ("quick-attn", (1, 16, 128, 384), 3, "abcd"),
)


def perf_set() -> list[dict]:
    """The entries of ``data/perf_set.json`` (the 12 perf problems) as dicts."""
    text = resources.files("logsoftmax").joinpath("data/perf_set.json").read_text()
    return json.loads(text)


def _perf_configs() -> list[tuple[str, tuple[int, ...], int, str]]:
    seen, configs = set(), []
    for p in perf_set():
        key = (tuple(p["shape"]), int(p["axis"]), p["stag"])
        if key not in seen:
            seen.add(key)
            configs.append((p.get("perf_id", ""), *key))
    return configs


def matches(prb: Problem, pattern: re.Pattern) -> bool:
    """``--match``: the regex is searched in the repro line and the name."""
    return bool(pattern.search(prb.repro()) or (prb.name and pattern.search(prb.name)))


def main_job_problems(quick: bool = False) -> list[Problem]:
    """The main job's problems: each configuration x {fwd, bwd} x {f32, bf16, f16}."""
    configs = QUICK_CONFIGS if quick else _perf_configs()
    return [
        Problem(dims=shape, dir=d, alg="LOGSOFTMAX", sdt=dt, ddt=dt, stag=tag,
                dtag=tag, axis=axis, name=name)
        for name, shape, axis, tag in configs
        for d in DIRS
        for dt in DTYPES
    ]


def load_problem_file(
    path: str, *, offset: int = 0, limit: int | None = None,
    match: re.Pattern | None = None,
) -> list[Problem]:
    """Problems from a JSON list in the project's form (problems_public.json:
    keys dir, alg, sdt, ddt, axis, shape, stag, dtag, inplace).

    ``match`` keeps the problems whose repro line matches; then ``offset`` /
    ``limit`` select a slice. A path that is not a file is looked up among
    the package's data files (``problems_public.json``, ``perf_set.json``).

    Raises:
      ValueError: the file is not a JSON list of problem objects.
      FileNotFoundError: neither the path nor a packaged file exists.
    """
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        res = resources.files("logsoftmax").joinpath("data", path)
        if not res.is_file():
            raise FileNotFoundError(
                f"--problems={path}: no such file (nor a packaged data file)"
            ) from None
        data = json.loads(res.read_text())
    if not isinstance(data, list) or not all(isinstance(d, dict) for d in data):
        raise ValueError(f"--problems={path}: expected a JSON list of problem objects")
    problems = [Problem.from_dict(d, name=d.get("id") or d.get("perf_id") or f"#{i}")
                for i, d in enumerate(data)]
    if match is not None:
        problems = [p for p in problems if matches(p, match)]
    end = None if limit is None else offset + limit
    return problems[offset:end]
