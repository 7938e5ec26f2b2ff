"""Problems: one benchdnn softmax descriptor, its layouts and its repro line.

A :class:`Problem` is what benchdnn's softmax driver calls a ``prb_t``: the
direction, algorithm, data types, memory tags, axis, in-place flag and dims.
Everything here is pure description.

Memory tags (``--stag``/``--dtag``) are oneDNN's plain format tags, parsed by
:mod:`logsoftmax.formats` (re-exported here as :func:`tag_permutation` and
:func:`make_array`); ``any`` (dst only) means "use the source layout". Blocked
tags such as ``aBcd16b`` have no strided numpy view and are reported as
unsupported.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import numpy as np

from .. import dtypes
from ..formats import make_array, tag_permutation

__all__ = [
    "Problem",
    "DIRS",
    "ALGS",
    "DATA_TYPES",
    "tag_permutation",
    "make_array",
    "parse_dims",
    "dims_str",
]

#: benchdnn directions; FWD_I (inference) computes exactly what FWD_D does
DIRS = ("FWD_D", "FWD_I", "BWD_D")
#: benchdnn algorithms, with the aliases benchdnn's parser accepts
ALGS = {
    "SOFTMAX": "SOFTMAX",
    "SOFTMAX_ACCURATE": "SOFTMAX",
    "LOGSOFTMAX": "LOGSOFTMAX",
    "SOFTMAX_LOG": "LOGSOFTMAX",
}
#: data types the library computes in (benchdnn's names)
DATA_TYPES = ("f32", "bf16", "f16", "f64")
#: data types benchdnn knows but this library does not implement
KNOWN_UNSUPPORTED_DT = ("s8", "u8", "s32", "f8_e5m2", "f8_e4m3", "e8m0", "f4_e2m1")


@dataclasses.dataclass(frozen=True)
class Problem:
    """One softmax problem, as benchdnn's softmax driver describes it.

    Attributes:
      dims: logical shape (before ``mb`` is applied).
      dir: ``FWD_D``, ``FWD_I`` or ``BWD_D``.
      alg: ``SOFTMAX`` or ``LOGSOFTMAX``.
      sdt, ddt: forward: src and dst data types; backward: ``sdt`` is
        diff_src's, ``ddt`` is dst's and diff_dst's (benchdnn's convention).
      stag, dtag: memory tags; ``dtag="any"`` means the source layout.
      axis: logical, non-negative.
      inplace: forward writes into src, backward into diff_dst.
      mb: overrides ``dims[0]`` when non-zero (benchdnn's ``--mb``).
      acc_mode: ``strict`` (default: bf16/f16 must equal the rounded f32
        reference) or ``relaxed`` (f32 threshold for every data type).
      unsupported: options given that this driver cannot honour; the problem
        is skipped with them as the reason.
      name: optional label (problem id of a JSON problem file).
    """

    dims: tuple[int, ...]
    dir: str = "FWD_D"
    alg: str = "SOFTMAX"
    sdt: str = "f32"
    ddt: str = "f32"
    stag: str = "abx"
    dtag: str = "any"
    axis: int = 1
    inplace: bool = False
    mb: int = 0
    acc_mode: str = "strict"
    unsupported: tuple[str, ...] = ()
    name: str | None = None

    # -- derived ------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        """The logical shape with ``--mb`` applied."""
        if self.mb and self.dims:
            return (self.mb,) + tuple(self.dims[1:])
        return tuple(self.dims)

    @property
    def is_fwd(self) -> bool:
        return self.dir in ("FWD_D", "FWD_I")

    @property
    def nelems(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def axis_size(self) -> int:
        return self.shape[self.axis] if 0 <= self.axis < len(self.shape) else 0

    @property
    def out_dt(self) -> str:
        """Data type of the checked output (dst forward, diff_src backward)."""
        return self.ddt if self.is_fwd else self.sdt

    @property
    def in_dt(self) -> str:
        """Data type of the inputs (src forward, dst/diff_dst backward)."""
        return self.sdt if self.is_fwd else self.ddt

    @property
    def src_tag(self) -> str:
        """Tag of the input tensors (backward: dst/diff_dst take ``dtag``)."""
        if self.is_fwd:
            return self.stag
        return self.stag if self.dtag == "any" else self.dtag

    @property
    def dst_tag(self) -> str:
        """Tag of the output tensor (``any`` resolves to the input's)."""
        return self.src_tag if self.dtag == "any" else self.dtag

    @property
    def bytes_moved(self) -> int:
        """Minimum bytes a kernel moves: forward reads src and writes dst;
        backward reads dst and diff_dst and writes diff_src."""
        n = self.nelems
        size_in = dtypes.from_name(self.in_dt).itemsize
        size_out = dtypes.from_name(self.out_dt).itemsize
        return n * (size_in + size_out) if self.is_fwd else n * (2 * size_in + size_out)

    def repro(self) -> str:
        """benchdnn's repro line: non-default options, then the dims."""
        parts = ["--softmax"]
        default = Problem(dims=())
        if self.dir != default.dir:
            parts.append(f"--dir={self.dir}")
        if self.sdt != default.sdt:
            parts.append(f"--sdt={self.sdt}")
        if self.ddt != default.ddt:
            parts.append(f"--ddt={self.ddt}")
        if self.stag != default.stag:
            parts.append(f"--stag={self.stag}")
        if self.dtag != default.dtag:
            parts.append(f"--dtag={self.dtag}")
        if self.alg != default.alg:
            parts.append(f"--alg={self.alg}")
        if self.axis != default.axis:
            parts.append(f"--axis={self.axis}")
        if self.inplace:
            parts.append("--inplace=true")
        if self.mb:
            parts.append(f"--mb={self.mb}")
        if self.acc_mode != default.acc_mode:
            parts.append(f"--attr-acc-mode={self.acc_mode}")
        parts.extend(self.unsupported)
        parts.append(dims_str(self.dims))
        return " ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """The project's JSON problem form (plus ``mb``/``name``)."""
        return {
            "dir": "fwd" if self.is_fwd else "bwd",
            "alg": self.alg.lower(),
            "sdt": self.sdt,
            "ddt": self.ddt,
            "axis": self.axis,
            "shape": list(self.shape),
            "stag": self.stag,
            "dtag": self.dtag,
            "inplace": self.inplace,
            "name": self.name,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any], name: str | None = None) -> "Problem":
        """Build a problem from the JSON form of ``problems_public.json``
        (keys dir, alg, sdt, ddt, axis, shape, stag, dtag, inplace)."""
        missing = [k for k in ("dir", "sdt", "ddt", "axis", "shape") if k not in d]
        if missing:
            raise ValueError(
                f"problem {name or d!r}: missing key(s) {', '.join(missing)}; "
                "expected dir, alg, sdt, ddt, axis, shape, stag, dtag, inplace"
            )
        direction = {"fwd": "FWD_D", "bwd": "BWD_D"}.get(
            str(d["dir"]).lower(), str(d["dir"]).upper()
        )
        return cls(
            dims=tuple(int(n) for n in d["shape"]),
            dir=direction,
            alg=ALGS.get(str(d.get("alg", "logsoftmax")).upper(), str(d["alg"])),
            sdt=str(d["sdt"]),
            ddt=str(d["ddt"]),
            stag=str(d.get("stag", "abx")),
            dtag=str(d.get("dtag", "any")),
            axis=int(d["axis"]),
            inplace=bool(d.get("inplace", False)),
            name=name if name is not None else d.get("id"),
        )


# --------------------------------------------------------------------------
# dims
# --------------------------------------------------------------------------
_NAMED_DIM = re.compile(r"(mb|ic|id|ih|iw)(\d+)")


def parse_dims(text: str) -> tuple[int, ...]:
    """Parse ``256x1000`` or benchdnn's named form ``mb64ic128ih28iw28``.

    Named dims: ``mb`` (batch), ``ic`` (channels), ``id``, ``ih``, ``iw``
    (spatial); the logical shape is [mb, ic, id, ih, iw] with the absent
    spatial dims dropped (``mb`` defaults to 2 and ``ih``/``iw`` to each
    other, as benchdnn does).

    Raises:
      ValueError: naming the text and the accepted forms.
    """
    if re.fullmatch(r"\d+(x\d+)*", text):
        return tuple(int(n) for n in text.split("x"))
    # benchdnn's named form, optionally followed by a name: `..._nNAME`/`nNAME`
    m = re.fullmatch(r"((?:(?:mb|ic|id|ih|iw)\d+)+)(?:_?n.*)?", text)
    if m:
        vals = dict(_NAMED_DIM.findall(m.group(1)))
        if "ic" in vals:
            ih = vals.get("ih", vals.get("iw"))
            iw = vals.get("iw", vals.get("ih"))
            shape = [int(vals.get("mb", 2)), int(vals["ic"])]
            if "id" in vals:
                shape.append(int(vals["id"]))
            if ih is not None:
                shape += [int(ih), int(iw)]
            return tuple(shape)
    raise ValueError(
        f"could not parse problem dims {text!r}; expected AxBxC... "
        "(e.g. 256x1000) or named dims (e.g. mb64ic128ih28iw28)"
    )


def dims_str(dims) -> str:
    return "x".join(str(int(n)) for n in dims)
