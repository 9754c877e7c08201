"""The shape models: an op's FLOPs and bytes from its recorded arguments, per family (GEMM, attention, convolution,
the memory-bound ops), and `model_op(name, args)` over `MODELS`, the one table of op names and their models (None:
no model fits, never a guess)."""

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

# GEMM: mm, addmm, bmm, baddbmm, matmul, linear, _scaled_mm and the grouped GEMMs.


def gemm_model(m: int, n: int, k: int, batch: int, a_dtype: str, b_dtype: str, out_dtype: str, bias: bool = False,
               backward: bool = False) -> OpModel | None:
    """The model of a (batched) GEMM [batch, M, K] x [batch, K, N]."""
    if a_dtype not in FLOAT_DTYPES or min(m, n, k, batch) <= 0:
        return None
    packed = 2 if a_dtype == "fp4" else 1
    a_bytes, b_bytes = ELEMENT_BYTES[a_dtype], ELEMENT_BYTES.get(b_dtype, ELEMENT_BYTES[a_dtype])
    out_bytes = ELEMENT_BYTES.get(out_dtype, a_bytes)
    if a_dtype in ("fp8", "fp4"):
        out_bytes = 2  # scaled GEMMs write BF16 (the common case; the trace does not say)
    moved = batch * (m * k * a_bytes + k * n * b_bytes + m * n * out_bytes + (n * out_bytes if bias else 0))
    shape = f"M={m},N={n},K={k * packed}" + (f",B={batch}" if batch > 1 else "")
    return OpModel("gemm", 2.0 * m * n * k * packed * batch, float(moved), a_dtype, shape, m, n, k * packed, batch,
                   backward=backward)


def _matrices(at: int, batched: bool, out_dtype: str = "", bias_at: int = -1) -> ModelFn:
    """[M, K] x [K, N] (or [B, M, K] x [B, K, N]) at arguments `at` and `at` + 1, a bias tensor at `bias_at`."""
    def model(args: OpArgs) -> OpModel | None:
        a, b = args.dims[at], args.dims[at + 1]
        if len(a) != (3 if batched else 2) or len(b) != len(a) or a[-1] != b[-2] or (batched and a[0] != b[0]):
            return None
        return gemm_model(a[-2], b[-1], a[-1], a[0] if batched else 1, args.dtype(at), args.dtype(at + 1),
                          out_dtype or args.dtype(at), bias=bias_at >= 0 and args.tensor(bias_at))

    return model


mm, bmm = _matrices(0, batched=False), _matrices(0, batched=True)
addmm, baddbmm = _matrices(1, batched=False, bias_at=0), _matrices(1, batched=True, bias_at=0)  # bias, mat1, mat2
# self, mat2, scale_a, scale_b, bias, scale_result, out_dtype, ...
scaled_mm = _matrices(0, batched=False, out_dtype="bf16", bias_at=4)


def matmul(args: OpArgs) -> OpModel | None:
    """torch.matmul's cases: vectors become matrices of one row or column; leading dims of the first operand fold
    into M when the second is a matrix; otherwise they broadcast as the batch."""
    a, b = list(args.dims[0]), list(args.dims[1])
    if not a or not b:
        return None
    a = [1, *a] if len(a) == 1 else a
    b = [*b, 1] if len(b) == 1 else b
    if a[-1] != b[-2]:
        return None
    if len(b) == 2:
        return gemm_model(math.prod(a[:-1]), b[1], a[-1], 1, args.dtype(0), args.dtype(1), args.dtype(0))
    batch_a, batch_b = a[:-2], b[:-2]
    width = max(len(batch_a), len(batch_b))
    batch_a, batch_b = [1] * (width - len(batch_a)) + batch_a, [1] * (width - len(batch_b)) + batch_b
    if any(x != y and 1 not in (x, y) for x, y in zip(batch_a, batch_b)):
        return None
    batch = math.prod(max(x, y) for x, y in zip(batch_a, batch_b))
    return gemm_model(a[-2], b[-1], a[-1], batch, args.dtype(0), args.dtype(1), args.dtype(0))


def linear(args: OpArgs) -> OpModel | None:  # input [..., K], weight [N, K], bias [N]
    x, w = args.dims[0], args.dims[1]
    if len(w) != 2 or not x or x[-1] != w[1]:
        return None
    return gemm_model(math.prod(x[:-1]), w[0], w[1], 1, args.dtype(0), args.dtype(1), args.dtype(0),
                      bias=args.tensor(2))


def grouped_mm(args: OpArgs) -> OpModel | None:
    """aten::_grouped_mm / _scaled_grouped_mm (MoE): a 2-D [total_M, K] by a 3-D [G, K, N] (groups by offsets, the
    FLOPs of all groups are 2*total_M*K*N), or 3-D by 3-D (a batch). Other layouts (2-D by 2-D with offsets along K)
    get no model."""
    a, b = args.dims[0], args.dims[1]
    if len(a) == 2 and len(b) == 3 and a[1] == b[1]:
        return gemm_model(a[0], b[2], a[1], 1, args.dtype(0), args.dtype(1), "bf16")
    if len(a) == 3 and len(b) == 3 and a[0] == b[0] and a[2] == b[1]:
        return gemm_model(a[1], b[2], a[2], a[0], args.dtype(0), args.dtype(1), "bf16")
    return None


GEMM_MODELS: dict[str, ModelFn] = {
    "aten::mm": mm, "aten::addmm": addmm, "aten::_addmm_activation": addmm, "aten::bmm": bmm, "aten::baddbmm": baddbmm,
    "aten::matmul": matmul, "aten::linear": linear, "aten::_scaled_mm": scaled_mm, "aten::_grouped_mm": grouped_mm,
    "aten::_scaled_grouped_mm": grouped_mm,
}


# Attention (scaled_dot_product_attention, its fused backends and math fallback, flash-attn's ops, forward and
# backward): FLOPs 2*B*H*Sq*Sk*(D_qk + D_v), halved under a causal mask.
BWD_FACTOR = 2.5


def _attention(args: OpArgs, q_at: int, heads_first: bool, causal: bool, backward: bool) -> OpModel | None:
    q, k, v = args.dims[q_at], args.dims[q_at + 1], args.dims[q_at + 2]
    dtype = args.dtype(q_at)
    if len(q) != 4 or len(k) != 4 or len(v) != 4 or dtype not in FLOAT_DTYPES:
        return None
    if heads_first:
        (b, h, sq, d), (_, hk, sk, dk), (_, _, _, dv) = q, k, v
    else:
        (b, sq, h, d), (_, sk, hk, dk), (_, _, _, dv) = q, k, v
    if d != dk or min(b, h, sq, sk, d, dv, hk) <= 0:
        return None
    flops = 2.0 * b * h * sq * sk * (d + dv) * (0.5 if causal else 1.0)
    elems = b * sq * h * d + b * sk * hk * (d + dv) + b * sq * h * dv
    if backward:
        flops *= BWD_FACTOR
        elems = 2 * elems  # reads Q, K, V, dO (and O), writes dQ, dK, dV
    shape = f"B={b},H={h},Sq={sq},Sk={sk},D={d}" + (f",Hkv={hk}" if hk != h else "")
    return OpModel("attention", flops, float(elems * ELEMENT_BYTES[dtype]), dtype, shape, causal=causal,
                   backward=backward)


def _model(q_at: int, causal_at: int, heads_first: bool, backward: bool = False) -> ModelFn:
    def model(args: OpArgs) -> OpModel | None:
        return _attention(args, q_at, heads_first, args.flag(causal_at), backward=backward)

    return model


def efficient_forward(args: OpArgs) -> OpModel | None:
    """aten::_efficient_attention_forward: custom_mask_type (argument 9) 1 or 2 is causal."""
    return _attention(args, 0, False, args.value(9).strip() in ("1", "2"), backward=False)


# (op name, model): the argument positions are those of the ops' schemas in aten/src/ATen/native/native_functions.yaml
# (and flash_attn's flash_attn_interface.py for the flash_attn:: ops).
ATTENTION_MODELS = {
    "aten::scaled_dot_product_attention": _model(0, 5, True),
    "aten::_scaled_dot_product_attention_math": _model(0, 5, True),
    "aten::_scaled_dot_product_flash_attention": _model(0, 4, True),
    "aten::_scaled_dot_product_flash_attention_for_cpu": _model(0, 4, True),
    "aten::_scaled_dot_product_efficient_attention": _model(0, 6, True),
    "aten::_scaled_dot_product_cudnn_attention": _model(0, 6, True),
    "aten::_flash_attention_forward": _model(0, 8, False),
    "aten::_efficient_attention_forward": efficient_forward,
    "flash_attn::_flash_attn_forward": _model(0, 5, False),
    "aten::_scaled_dot_product_flash_attention_backward": _model(1, 11, True, backward=True),
    "aten::_scaled_dot_product_efficient_attention_backward": _model(1, 11, True, backward=True),
    "aten::_scaled_dot_product_cudnn_attention_backward": _model(1, 14, True, backward=True),
    "aten::_flash_attention_backward": _model(1, 11, False, backward=True),
    "flash_attn::_flash_attn_backward": _model(1, 11, False, backward=True),
}
MATH_ATTENTION = "aten::_scaled_dot_product_attention_math"


# Convolution (aten::convolution / _convolution / conv1d-3d / cudnn_convolution, and its backward):
# FLOPs 2 * N * C_out * prod(output spatial) * (C_in / groups) * prod(kernel).


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


# Byte models of the memory-bound ops: normalization, elementwise and reduction (their FLOPs are not counted: they
# run on vector units, not the matrix units MFU and the roofline's compute roof are about).
_ELEMENTWISE = (
    "add", "add_", "sub", "sub_", "mul", "mul_", "div", "div_", "neg", "exp", "log", "pow", "sqrt", "rsqrt", "tanh",
    "sigmoid", "relu", "relu_", "gelu", "silu", "silu_", "threshold_backward", "gelu_backward", "silu_backward",
    "sigmoid_backward", "tanh_backward", "clamp", "clamp_", "where", "masked_fill", "masked_fill_", "native_dropout",
    "dropout", "native_dropout_backward", "addcmul_", "addcdiv_", "lerp_", "mul_scalar", "abs", "sin", "cos",
    "maximum", "minimum", "reciprocal", "square", "erf", "_foreach_add_", "_foreach_mul_",
)
_NORM = ("layer_norm", "native_layer_norm", "native_layer_norm_backward", "rms_norm", "_fused_rms_norm",
         "batch_norm", "native_batch_norm", "cudnn_batch_norm", "native_batch_norm_backward", "group_norm",
         "native_group_norm", "native_group_norm_backward", "_fused_rms_norm_backward")
_SOFTMAX = ("softmax", "_softmax", "log_softmax", "_log_softmax", "_softmax_backward_data",
            "_log_softmax_backward_data")
_REDUCE = ("sum", "mean", "amax", "amin", "max", "min", "norm", "linalg_vector_norm", "var_mean", "std")


def _tensors(args: OpArgs) -> list[int]:
    return [i for i in range(len(args.dims)) if args.tensor(i)]


def _first_float(args: OpArgs, tensors: list[int]) -> str:
    """The first floating-point tensor's dtype, else the first tensor's (index copies and masks move bytes too)."""
    return next((args.dtype(i) for i in tensors if args.dtype(i) in FLOAT_DTYPES),
                next((args.dtype(i) for i in tensors if args.dtype(i) in ELEMENT_BYTES), ""))


def _read_bytes(args: OpArgs, tensors: list[int]) -> int:
    return sum(args.numel(i) * ELEMENT_BYTES[args.dtype(i)] for i in tensors)


def _with_output(family: str, write_out: bool) -> ModelFn:
    def model(args: OpArgs) -> OpModel | None:
        tensors = _tensors(args)
        dtype = _first_float(args, tensors)
        if not tensors or not dtype:
            return None
        out = max(args.numel(i) for i in tensors) * ELEMENT_BYTES[dtype] if write_out else 0
        return OpModel(family, 0.0, float(_read_bytes(args, tensors) + out), dtype, dims_label(args))

    return model


def _read(first: int) -> ModelFn:
    """An op that moves its first `first` tensors once: copy_(self=dst, src) (src read, dst written); fill_ and
    zero_ (self written)."""
    def model(args: OpArgs) -> OpModel | None:
        tensors = _tensors(args)
        dtype = _first_float(args, tensors)
        if len(tensors) < first or not dtype:
            return None
        return OpModel("elementwise", 0.0, float(_read_bytes(args, tensors[:first])), dtype, dims_label(args, (0,)))

    return model


# c10::ScalarType codes as `Concrete Inputs` print a dtype argument (c10/core/ScalarType.h order).
_SCALAR_TYPES = {"0": "uint8", "1": "int8", "2": "int16", "3": "int32", "4": "int64", "5": "fp16", "6": "fp32",
                 "7": "fp64", "11": "bool", "15": "bf16", "23": "fp8", "24": "fp8", "25": "fp8", "26": "fp8"}


def to_copy(args: OpArgs) -> OpModel | None:  # _to_copy(self, dtype, ...): read once, written once in `dtype`
    tensors = _tensors(args)
    dtype = _first_float(args, tensors)
    if not tensors or not dtype:
        return None
    out = _SCALAR_TYPES.get(args.value(1).strip(), args.dtype(tensors[0]))
    moved = args.numel(tensors[0]) * (ELEMENT_BYTES[args.dtype(tensors[0])] + ELEMENT_BYTES[out])
    return OpModel("elementwise", 0.0, float(moved), dtype, dims_label(args, (0,)))


MEMORY_MODELS: dict[str, ModelFn] = {
    **{f"aten::{n}": _with_output("elementwise", True) for n in _ELEMENTWISE},
    **{f"aten::{n}": _with_output("norm", True) for n in _NORM},
    **{f"aten::{n}": _with_output("reduction", True) for n in _SOFTMAX},
    **{f"aten::{n}": _with_output("reduction", False) for n in _REDUCE},
    "aten::copy_": _read(2), "aten::_to_copy": to_copy, "aten::fill_": _read(1), "aten::zero_": _read(1),
}


MODELS: dict[str, ModelFn] = {**MEMORY_MODELS, **CONV_MODELS, **ATTENTION_MODELS, **GEMM_MODELS}


def model_op(name: str, args: OpArgs) -> OpModel | None:
    """The model of `name` applied to `args`, None when no model applies."""
    fn = MODELS.get(name)
    if fn is None:
        return None
    try:
        return fn(args)
    except (IndexError, ValueError, ZeroDivisionError):  # arguments that do not fit the op's signature
        return None
