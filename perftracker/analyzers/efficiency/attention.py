"""Shape models of attention (scaled_dot_product_attention, its fused backends and math fallback, flash-attn's ops,
forward and backward): FLOPs 2*B*H*Sq*Sk*(D_qk + D_v), halved under a causal mask."""

from __future__ import annotations

from perftracker.analyzers.efficiency.shapes import ELEMENT_BYTES, FLOAT_DTYPES, ModelFn, OpArgs, OpModel

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
