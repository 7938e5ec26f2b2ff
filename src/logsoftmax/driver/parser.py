"""Parse benchdnn softmax command lines and batch files into problems.

benchdnn reads its arguments left to right: ``--key=value`` options change
the current settings, which persist until changed or until ``--reset``; each
bare dims token (``256x1000``, ``mb64ic128ih28iw28``) emits one problem per
combination of the comma-separated values of the current settings.
``--batch=FILE`` reads FILE's tokens (``#`` starts a comment) as if they
stood on the command line, sharing the same settings, recursively.

Options that apply to the whole run (``--mode``, ``--csv``, ``--backend``...)
may appear anywhere; the last value wins. See ``docs/driver.md``.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import re
from .problem import ALGS, DATA_TYPES, DIRS, KNOWN_UNSUPPORTED_DT, Problem, parse_dims

__all__ = ["UsageError", "Settings", "RunOptions", "parse_args", "MODES", "FILLS"]

MODES = ("C", "P", "CP", "R")
FILLS = ("benchdnn", "random")
_MAX_BATCH_DEPTH = 16


class UsageError(ValueError):
    """A command-line error: unknown option, bad value, missing file."""


@dataclasses.dataclass
class Settings:
    """Per-problem settings (benchdnn's ``settings_t``); lists multiply."""

    dir: list[str] = dataclasses.field(default_factory=lambda: ["FWD_D"])
    alg: list[str] = dataclasses.field(default_factory=lambda: ["SOFTMAX"])
    sdt: list[str] = dataclasses.field(default_factory=lambda: ["f32"])
    ddt: list[str] = dataclasses.field(default_factory=lambda: ["f32"])
    stag: list[str] = dataclasses.field(default_factory=lambda: ["abx"])
    dtag: list[str] = dataclasses.field(default_factory=lambda: ["any"])
    axis: list[int] = dataclasses.field(default_factory=lambda: [1])
    inplace: list[bool] = dataclasses.field(default_factory=lambda: [False])
    mb: list[int] = dataclasses.field(default_factory=lambda: [0])
    acc_mode: list[str] = dataclasses.field(default_factory=lambda: ["strict"])
    unsupported: dict[str, str] = dataclasses.field(default_factory=dict)
    match: re.Pattern | None = None

    def problems(self, dims: tuple[int, ...]) -> list[Problem]:
        out = []
        for d, a, s, dd, st, dt, ax, ip, mb, acc in itertools.product(
            self.dir,
            self.alg,
            self.sdt,
            self.ddt,
            self.stag,
            self.dtag,
            self.axis,
            self.inplace,
            self.mb,
            self.acc_mode,
        ):
            prb = Problem(
                dims=dims,
                dir=d,
                alg=a,
                sdt=s,
                ddt=dd,
                stag=st,
                dtag=dt,
                axis=ax,
                inplace=ip,
                mb=mb,
                acc_mode=acc,
                unsupported=tuple(f"{k}={v}" for k, v in self.unsupported.items()),
            )
            if self.match is None or self.match.search(prb.repro()):
                out.append(prb)
        return out


@dataclasses.dataclass
class RunOptions:
    """Options for the whole run (benchdnn's global ``--mode`` & co.)."""

    mode: str = "CP"
    fill: str | None = None  # None: benchdnn for C/CP, random for P
    backend: str | None = None
    engine: str = "cpu"
    max_ms_per_prb: float | None = None  # None: 1000 (the main job: 250/100)
    fix_times_per_prb: int = 0
    min_times_per_prb: int = 5
    perf_template: str | None = None
    csv: str | None = None
    json: str | None = None
    plot: str | None = None
    compare: tuple[str, ...] = ()
    problems_file: str | None = None
    limit: int | None = None
    offset: int = 0
    quick: bool = False
    progress: bool | None = None  # None: only for more than one problem
    verbose: int = 0
    seed: int = 0
    table: bool | None = None  # None: the main job's table, not for descriptors
    match: re.Pattern | None = None  # the last --match (selects --problems too)

    @property
    def effective_fill(self) -> str:
        if self.fill is not None:
            return self.fill
        return "random" if self.mode == "P" else "benchdnn"


def _bool(text: str, opt: str) -> bool:
    low = text.lower()
    if low in ("true", "1", "yes", "on"):
        return True
    if low in ("false", "0", "no", "off"):
        return False
    raise UsageError(f"{opt}: expected true or false, got {text!r}")


def _int(text: str, opt: str, minimum: int | None = None) -> int:
    try:
        v = int(text)
    except ValueError:
        raise UsageError(f"{opt}: expected an integer, got {text!r}") from None
    if minimum is not None and v < minimum:
        raise UsageError(f"{opt}: expected an integer >= {minimum}, got {v}")
    return v


def _choice(text: str, opt: str, choices, aliases: dict | None = None) -> str:
    table = aliases if aliases is not None else {c: c for c in choices}
    key = text.upper()
    if key in table:
        return table[key]
    raise UsageError(
        f"{opt}: unknown value {text!r}; expected one of {', '.join(choices)}"
    )


def _dt(text: str, opt: str) -> str:
    if text in DATA_TYPES or text in KNOWN_UNSUPPORTED_DT:
        return text
    raise UsageError(
        f"{opt}: unknown data type {text!r}; expected one of {', '.join(DATA_TYPES)}"
    )


def _tag(text: str, opt: str) -> str:
    if re.fullmatch(r"[a-lA-Lx0-9]+", text) or text == "any":
        return text
    raise UsageError(
        f"{opt}: {text!r} is not a memory tag; expected abx, axb, any or a tag "
        "such as acdb"
    )


_SETTING_PARSERS = {
    "--dir": ("dir", lambda v, o: _choice(v, o, DIRS)),
    "--alg": ("alg", lambda v, o: _choice(v, o, ("SOFTMAX", "LOGSOFTMAX"), ALGS)),
    "--sdt": ("sdt", _dt),
    "--ddt": ("ddt", _dt),
    "--stag": ("stag", _tag),
    "--dtag": ("dtag", _tag),
    "--axis": ("axis", lambda v, o: _int(v, o, 0)),
    "--inplace": ("inplace", _bool),
    "--mb": ("mb", lambda v, o: _int(v, o, 0)),
    "--attr-acc-mode": (
        "acc_mode",
        lambda v, o: _choice(
            v, o, ("strict", "relaxed", "f32", "any"),
            {"STRICT": "strict", "RELAXED": "relaxed", "F32": "strict",
             "ANY": "relaxed"},
        ),
    ),
}

# benchdnn options this driver knows but cannot honour: problems created while
# one is set to a non-default value are skipped, with the option as the reason.
_UNSUPPORTED = (
    "--attr-scales",
    "--attr-post-ops",
    "--attr-zero-points",
    "--attr-fpmath",
    "--attr-scratchpad",
    "--attr-deterministic",
    "--attr-rounding-mode",
    "--attr-dropout",
    "--ctx-init",
    "--ctx-exe",
)


def _run_option(opts: RunOptions, key: str, val: str) -> bool:
    """Apply a whole-run option; False if ``key`` is not one."""
    if key == "--mode":
        mode = val.upper()
        if mode == "PC":
            mode = "CP"
        if mode not in MODES:
            raise UsageError(
                f"--mode: unknown mode {val!r}; expected C (correctness), "
                "P (performance), CP (both) or R (run only)"
            )
        opts.mode = mode
    elif key == "--fill":
        if val not in FILLS:
            raise UsageError(f"--fill: expected benchdnn or random, got {val!r}")
        opts.fill = val
    elif key == "--backend":
        opts.backend = val
    elif key == "--engine":
        if val.split(":")[0] not in ("cpu", "gpu"):
            raise UsageError(f"--engine: expected cpu or gpu, got {val!r}")
        opts.engine = val.split(":")[0]
    elif key == "--max-ms-per-prb":
        opts.max_ms_per_prb = float(_int(val, key, 1))
    elif key == "--fix-times-per-prb":
        opts.fix_times_per_prb = _int(val, key, 0)
    elif key == "--perf-template":
        opts.perf_template = val
    elif key in ("--csv", "--json", "--plot"):
        setattr(opts, key[2:], val)
    elif key == "--compare":
        libs = tuple(v for v in val.split(",") if v)
        bad = [v for v in libs if v not in ("torch", "numpy")]
        if bad:
            raise UsageError(
                f"--compare: unknown library {bad[0]!r}; expected torch, numpy"
            )
        opts.compare = libs
    elif key == "--problems":
        opts.problems_file = val
    elif key == "--limit":
        opts.limit = _int(val, key, 0)
    elif key == "--offset":
        opts.offset = _int(val, key, 0)
    elif key == "--seed":
        opts.seed = _int(val, key, 0)
    elif key in ("--verbose", "-v"):
        opts.verbose = _int(val, key, 0)
    elif key == "--progress":
        opts.progress = _bool(val, key)
    elif key == "--table":
        opts.table = _bool(val, key)
    else:
        return False
    return True


_FLAGS = {
    "--quick": ("quick", True),
    "--no-progress": ("progress", False),
    "--progress": ("progress", True),
    "--table": ("table", True),
}


class _State:
    def __init__(self):
        self.settings = Settings()
        self.opts = RunOptions()
        self.problems: list[Problem] = []
        self.saw_problem = False


def _consume(state: _State, tokens: list[str], where: str, base_dir: str, depth: int):
    for tok in tokens:
        if tok in ("--softmax", "--driver=softmax"):
            continue  # benchdnn's driver selector: the only driver here
        if tok.startswith("--") and tok[2:].split("=")[0] in (
            "conv", "matmul", "eltwise", "binary", "reorder", "pool", "lnorm",
            "bnorm", "sum", "concat", "shuffle", "resampling", "graph",
        ) and "=" not in tok:
            raise UsageError(
                f"{where}: {tok} selects a driver this tool lacks; only --softmax"
            )
        if tok == "--reset":
            state.settings = Settings()
            continue
        if tok in _FLAGS:
            attr, value = _FLAGS[tok]
            setattr(state.opts, attr, value)
            continue
        if tok in ("-h", "--help"):
            raise UsageError("help")
        if re.fullmatch(r"-v\d+", tok):  # benchdnn's -vN
            state.opts.verbose = int(tok[2:])
            continue
        if tok.startswith("-"):
            key, eq, val = tok.partition("=")
            if not eq:
                raise UsageError(f"{where}: option {tok!r} needs a value ({tok}=VALUE)")
            if key == "--batch":
                _batch(state, val, base_dir, depth)
            elif key == "--match":
                try:
                    state.settings.match = re.compile(val) if val else None
                except re.error as e:
                    raise UsageError(
                        f"--match: bad regular expression {val!r}: {e}"
                    ) from None
                state.opts.match = state.settings.match
            elif key == "--dt":
                state.settings.sdt = state.settings.ddt = [
                    _dt(v, key) for v in val.split(",")
                ]
            elif key in _SETTING_PARSERS:
                attr, conv = _SETTING_PARSERS[key]
                if not val:
                    raise UsageError(f"{where}: {key} needs a value")
                setattr(state.settings, attr, [conv(v, key) for v in val.split(",")])
            elif key in _UNSUPPORTED or key.startswith("--attr-"):
                if val in ("", "def", "none"):
                    state.settings.unsupported.pop(key, None)
                else:
                    state.settings.unsupported[key] = val
            elif not _run_option(state.opts, key, val):
                raise UsageError(
                    f"{where}: unknown option {key!r}; see `logsoftmax bench --help`"
                )
            continue
        try:
            dims = parse_dims(tok)
        except ValueError as e:
            raise UsageError(f"{where}: {e}") from None
        state.saw_problem = True
        state.problems.extend(state.settings.problems(dims))


def _batch(state: _State, path: str, base_dir: str, depth: int) -> None:
    if depth >= _MAX_BATCH_DEPTH:
        raise UsageError(
            f"--batch={path}: batch files nest deeper than {_MAX_BATCH_DEPTH} "
            "levels (a file that includes itself?)"
        )
    candidates = [path] if os.path.isabs(path) else [os.path.join(base_dir, path), path]
    for cand in candidates:
        if os.path.isfile(cand):
            break
    else:
        raise UsageError(
            f"--batch={path}: file not found (looked in {', '.join(candidates)})"
        )
    with open(cand, encoding="utf-8") as f:
        tokens = []
        for line in f:
            tokens += line.split("#", 1)[0].split()
    here = os.path.dirname(os.path.abspath(cand))
    _consume(state, tokens, f"--batch={path}", here, depth + 1)


def parse_args(argv: list[str]) -> tuple[list[Problem], RunOptions, bool]:
    """Parse a benchdnn-style command line.

    Returns:
      ``(problems, options, saw_problem)``: problems in command-line order
      (``--match`` applied), the whole-run options, and whether any dims
      token appeared (False means "run the main job or --problems").

    Raises:
      UsageError: unknown option, bad value, missing batch file; the message
        names the option (or batch file) and what was expected.
    """
    state = _State()
    _consume(state, list(argv), "command line", os.getcwd(), 0)
    return state.problems, state.opts, state.saw_problem
