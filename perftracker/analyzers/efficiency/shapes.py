"""A shape model's input and answer: an op's arguments as the trace recorded them (`Input Dims`, `Input type`,
`Concrete Inputs`), parsed and typed (`parse_args`: an `OpArgs`, None when they are not JSON lists of the expected
shape), and what the op computes (`OpModel`: its FLOPs, a multiply-add counting two, and the least bytes it moves)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import msgspec

# Trace type names (c10 scalar type names as the profiler writes them) -> short dtype.
_DTYPES = {
    "double": "fp64", "float": "fp32", "c10::Half": "fp16", "c10::BFloat16": "bf16",
    "c10::Float8_e4m3fn": "fp8", "c10::Float8_e5m2": "fp8", "c10::Float8_e4m3fnuz": "fp8", "c10::Float8_e5m2fnuz": "fp8",
    "c10::Float4_e2m1fn_x2": "fp4",
    "long int": "int64", "int": "int32", "short int": "int16", "signed char": "int8", "unsigned char": "uint8",
    "bool": "bool",
}
# Bytes per element as the dims count them (a Float4_e2m1fn_x2 element packs two FP4 values in one byte).
ELEMENT_BYTES = {"fp64": 8, "fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "fp4": 1, "int64": 8, "int32": 4, "int16": 2,
                 "int8": 1, "uint8": 1, "bool": 1}
FLOAT_DTYPES = frozenset({"fp64", "fp32", "fp16", "bf16", "fp8", "fp4"})
MAX_DIM = 2**40  # a dimension past this is not a tensor's: the op gets no model


def dtype_of(type_name: str) -> str:
    """Short dtype of a trace type name, '' when it is not a tensor element type perftracker knows."""
    return _DTYPES.get(type_name, "")


@dataclass(frozen=True)
class OpArgs:
    """One op's arguments: tensor dims per argument ([] for non-tensors), dtype per argument ('' for non-tensors),
    and the concrete value text per argument ('' when the trace did not record one)."""

    dims: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...]
    concrete: tuple[str, ...]

    def numel(self, i: int) -> int:
        """Elements of tensor argument i (0 when absent)."""
        return math.prod(self.dims[i]) if i < len(self.dims) and self.dims[i] else 0

    def tensor(self, i: int) -> bool:
        return i < len(self.dims) and bool(self.dims[i]) and self.dtype(i) != ""

    def dtype(self, i: int) -> str:
        return self.dtypes[i] if i < len(self.dtypes) else ""

    def value(self, i: int) -> str:
        return self.concrete[i] if i < len(self.concrete) else ""

    def flag(self, i: int) -> bool:
        """A concrete boolean argument ('True' / 'False'; absent or anything else: False)."""
        return self.value(i).strip().lower() == "true"

    def ints(self, i: int) -> tuple[int, ...] | None:
        """A concrete int list argument ('[1, 2]', or a single int '3'), None when absent or not ints."""
        text = self.value(i).strip().strip("[]")
        if not text:
            return None
        parts = [p.strip() for p in text.split(",")]
        if not all(p.lstrip("-").isdigit() and len(p) < 19 for p in parts):
            return None
        return tuple(int(p) for p in parts)


def _dims(value: object) -> tuple[int, ...] | None:
    if not isinstance(value, list):
        return None
    if not all(type(d) is int and 0 <= d <= MAX_DIM for d in value):
        return () if value and all(isinstance(d, list) for d in value) else None  # a TensorList: no single shape
    return tuple(value)


def parse_args(dims_text: str, types_text: str, concrete_text: str) -> OpArgs | None:
    """The parsed arguments, None when the dims or types are absent or not lists of the expected shape."""
    if not dims_text or not types_text:
        return None
    try:
        dims, types = msgspec.json.decode(dims_text), msgspec.json.decode(types_text)
        concrete = msgspec.json.decode(concrete_text) if concrete_text else []
    except msgspec.DecodeError:
        return None
    if not isinstance(dims, list) or not isinstance(types, list) or not isinstance(concrete, list):
        return None
    parsed = [_dims(d) for d in dims]
    if any(d is None for d in parsed):
        return None
    return OpArgs(dims=tuple(d for d in parsed if d is not None),
                  dtypes=tuple(dtype_of(t) if isinstance(t, str) else "" for t in types),
                  concrete=tuple(c if isinstance(c, str) else "" for c in concrete))


@dataclass(frozen=True)
class OpModel:
    """family: gemm | attention | conv | norm | elementwise | reduction; dtype: the compute dtype ("bf16", ...);
    shape: a short label of the dims; m, n, k, batch: a GEMM's problem (-1 for other families); causal: attention
    with a causal mask; backward: the op computes gradients by its own name (autograd ancestors are found later)."""

    family: str
    flops: float
    bytes: float
    dtype: str
    shape: str
    m: int = -1
    n: int = -1
    k: int = -1
    batch: int = -1
    causal: bool = False
    backward: bool = False


ModelFn = Callable[[OpArgs], "OpModel | None"]


def dims_label(args: OpArgs, indices: tuple[int, ...] | None = None) -> str:
    """'[16,559,1024]x[1024,1024]': the tensor arguments' dims (those of `indices`, default all tensors)."""
    picked = indices if indices is not None else tuple(i for i in range(len(args.dims)) if args.tensor(i))
    return "x".join("[" + ",".join(map(str, args.dims[i])) + "]" for i in picked if args.tensor(i))
