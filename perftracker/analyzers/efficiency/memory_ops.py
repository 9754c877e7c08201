"""Byte models of the memory-bound ops: normalization, elementwise and reduction (their FLOPs are not counted: they
run on vector units, not the matrix units MFU and the roofline's compute roof are about).
"""

from __future__ import annotations

from perftracker.analyzers.efficiency.shapes import (
    ELEMENT_BYTES,
    FLOAT_DTYPES,
    ModelFn,
    OpArgs,
    OpModel,
    dims_label,
)

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
