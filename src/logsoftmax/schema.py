"""Op schemas: what every op is, as data, in one registry.

An :class:`OpSchema` names an op and fixes the facts the dispatcher needs
without running it: its version, its AMP policy (:class:`AmpPolicy`), whether
it is deterministic, and how many tensor inputs and outputs it has. The
autograd dispatcher (:func:`logsoftmax.autograd.tensor.dispatch`) reads the
schema of the op class it runs and applies the AMP rule there, so no op
mentions autocast itself.

Schemas are registered by decorating an op class with :func:`register`, and
:func:`registry` returns ``name -> OpSchema`` for every registered op. This
module is the ground floor: it imports nothing of the package. The registry
fills itself when the ops' modules are imported, which importing
:mod:`logsoftmax.autograd` does (``logsoftmax.registry`` is resolved through
that package, so it always lists every op):

>>> import logsoftmax
>>> logsoftmax.registry()["log_softmax"]  # doctest: +NORMALIZE_WHITESPACE
OpSchema(name='log_softmax', version=1, amp_policy=<AmpPolicy.FORCE_FP32: 'force_fp32'>,
         deterministic=True, input_arity=1, output_arity=1)
"""

from __future__ import annotations

import enum
import types
from dataclasses import dataclass
from typing import Callable, Mapping, TypeVar

__all__ = ["AmpPolicy", "OpSchema", "registry", "register", "get_schema"]


class AmpPolicy(enum.Enum):
    """What an op does with its floating inputs under an active autocast.

    Outside autocast every policy leaves dtypes alone.
    """

    #: cast float32/float16/bfloat16 inputs to the autocast dtype (matmul, linear);
    #: float64 inputs are left alone, as in PyTorch.
    PROMOTE = "promote"
    #: ignore autocast: compute in the inputs' own (promoted) dtype (elementwise
    #: ops, relu, reshape).
    KEEP_INPUT = "keep_input"
    #: cast floating inputs to float32, compute and return float32 (softmax,
    #: log_softmax, losses, reductions); float64 stays float64 (never downcast).
    FORCE_FP32 = "force_fp32"


@dataclass(frozen=True)
class OpSchema:
    """The static description of one op (frozen: schemas are values).

    Attributes:
      name: the op's registry key, e.g. ``"log_softmax"``.
      version: bumped whenever the op's semantics change.
      amp_policy: how the dispatcher casts the op's inputs under autocast.
      deterministic: bit-identical results for identical inputs, whatever the
        thread count.
      input_arity: number of tensor inputs (differentiable or not, e.g. a
        loss's ``target``); optional inputs such as ``bias`` count.
      output_arity: number of tensor outputs.
    """

    name: str
    version: int
    amp_policy: AmpPolicy
    deterministic: bool = True
    input_arity: int = 1
    output_arity: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(
                f"OpSchema: name must be a non-empty str, got {self.name!r}"
            )
        if not isinstance(self.amp_policy, AmpPolicy):
            raise TypeError(
                f"OpSchema: amp_policy must be an AmpPolicy, got {self.amp_policy!r}"
            )
        for field in ("version", "input_arity", "output_arity"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(
                    f"OpSchema: {field} must be a non-negative int, got {value!r}"
                )


_REGISTRY: dict[str, OpSchema] = {}

T = TypeVar("T")


def register(schema: OpSchema) -> Callable[[T], T]:
    """Class decorator: register ``schema`` and attach it to the class.

    The class gets ``schema`` (the op's current schema) and
    ``schema_v{version}`` attributes. Registering a different schema under a
    name already taken raises ``ValueError``; re-registering an equal one (a
    module reload) is a no-op.
    """
    if not isinstance(schema, OpSchema):
        raise TypeError(f"register: expected an OpSchema, got {type(schema).__name__}")

    def decorate(cls: T) -> T:
        old = _REGISTRY.get(schema.name)
        if old is not None and old != schema:
            raise ValueError(
                f"register: op {schema.name!r} is already registered as {old}; "
                f"refusing to replace it with {schema}"
            )
        _REGISTRY[schema.name] = schema
        cls.schema = schema  # type: ignore[attr-defined]
        setattr(cls, f"schema_v{schema.version}", schema)
        return cls

    return decorate


def registry() -> Mapping[str, OpSchema]:
    """``name -> OpSchema`` for every registered op (a read-only view)."""
    return types.MappingProxyType(dict(sorted(_REGISTRY.items())))


def get_schema(name: str) -> OpSchema:
    """The schema registered as ``name``; ``KeyError`` listing the known ops."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(
            f"no op named {name!r}; registered ops: {', '.join(sorted(_REGISTRY))}"
        ) from None
