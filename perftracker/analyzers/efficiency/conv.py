"""Shape model of convolution (aten::convolution / _convolution / conv1d-3d / cudnn_convolution, and its backward):
FLOPs 2 * N * C_out * prod(output spatial) * (C_in / groups) * prod(kernel)."""

from __future__ import annotations

import math
from functools import partial

from perftracker.analyzers.efficiency.shapes import (
    ELEMENT_BYTES,
    FLOAT_DTYPES,
    ModelFn,
    OpArgs,
    OpModel,
    dims_label,
)


def _conv(args: OpArgs, x_at: int, stride_at: int, transposed_at: int | None, groups_at: int,
          grads: int = 0) -> OpModel | None:
    x, w = args.dims[x_at], args.dims[x_at + 1]
    dtype = args.dtype(x_at)
    spatial = len(x) - 2
    if spatial < 1 or len(w) != len(x) or dtype not in FLOAT_DTYPES:
        return None
    if transposed_at is not None and args.flag(transposed_at):
        return None

    def per_dim(at: int, default: int) -> tuple[int, ...]:
        values = args.ints(at) or (default,)
        return values * spatial if len(values) == 1 else values

    stride, padding, dilation = per_dim(stride_at, 1), per_dim(stride_at + 1, 0), per_dim(stride_at + 2, 1)
    groups = (args.ints(groups_at) or (1,))[0]
    if len(stride) != spatial or len(padding) != spatial or len(dilation) != spatial or groups <= 0:
        return None
    out = [(x[2 + i] + 2 * padding[i] - dilation[i] * (w[2 + i] - 1) - 1) // stride[i] + 1 for i in range(spatial)]
    if min(out) <= 0 or x[1] != w[1] * groups:
        return None
    n, c_out = x[0], w[0]
    flops = 2.0 * n * c_out * math.prod(out) * w[1] * math.prod(w[2:])
    moved = (math.prod(x) + math.prod(w) + n * c_out * math.prod(out)) * ELEMENT_BYTES[dtype]
    backward = grads > 0
    return OpModel("conv", flops * (grads if backward else 1), float(moved * (2 if backward else 1)), dtype,
                   dims_label(args, (x_at, x_at + 1)), backward=backward)


# input, weight, bias, stride, padding, dilation, transposed, output_padding, groups
convolution = partial(_conv, x_at=0, stride_at=3, transposed_at=6, groups_at=8)
conv_nd = partial(_conv, x_at=0, stride_at=3, transposed_at=None, groups_at=6)  # conv1d/2d/3d: ..., dilation, groups


def cudnn_convolution(args: OpArgs) -> OpModel | None:  # self, weight, padding, stride, dilation, groups, ...
    x = args.dims[0]
    spatial = len(x) - 2
    swapped = OpArgs(args.dims, args.dtypes, (*args.concrete[:2], "", args.value(3), args.value(2), args.value(4),
                                             "False", "", args.value(5)))
    return convolution(swapped) if spatial >= 1 else None


def convolution_backward(args: OpArgs) -> OpModel | None:
    """grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed, output_padding, groups,
    output_mask."""
    mask = [part.strip().lower() == "true" for part in args.value(10).strip("[]").split(",")]
    grads = sum(mask[:2]) if len(mask) >= 2 else 2
    return _conv(args, 1, 4, 7, 9, grads=grads) if grads else None


CONV_MODELS: dict[str, ModelFn] = {
    "aten::convolution": convolution, "aten::_convolution": convolution,
    "aten::conv1d": conv_nd, "aten::conv2d": conv_nd, "aten::conv3d": conv_nd,
    "aten::cudnn_convolution": cudnn_convolution, "aten::miopen_convolution": cudnn_convolution,
    "aten::convolution_backward": convolution_backward,
}
