"""Shape models of the GEMM family: mm, addmm, bmm, baddbmm, matmul, linear, _scaled_mm and the grouped GEMMs."""

from __future__ import annotations

import math

from perftracker.analyzers.efficiency.shapes import ELEMENT_BYTES, FLOAT_DTYPES, ModelFn, OpArgs, OpModel


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
