"""What one op instance computes, every shape model's answer (`OpModel`): its FLOPs (a multiply-add counts two) and
the least bytes it must move."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from perftracker.analyzers.efficiency.shapes import OpArgs


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
