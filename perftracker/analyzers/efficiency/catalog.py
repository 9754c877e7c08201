"""Which shape model knows which op: `model_op(name, args)`, the one table of op names and models (None: no model
fits, never a guess)."""

from __future__ import annotations

from perftracker.analyzers.efficiency import gemm
from perftracker.analyzers.efficiency.attention import ATTENTION_MODELS
from perftracker.analyzers.efficiency.conv import CONV_MODELS
from perftracker.analyzers.efficiency.memory_ops import MEMORY_MODELS
from perftracker.analyzers.efficiency.model import ModelFn, OpModel
from perftracker.analyzers.efficiency.shapes import OpArgs

GEMM_MODELS: dict[str, ModelFn] = {
    "aten::mm": gemm.mm, "aten::addmm": gemm.addmm, "aten::_addmm_activation": gemm.addmm,
    "aten::bmm": gemm.bmm, "aten::baddbmm": gemm.baddbmm, "aten::matmul": gemm.matmul,
    "aten::linear": gemm.linear, "aten::_scaled_mm": gemm.scaled_mm,
    "aten::_grouped_mm": gemm.grouped_mm, "aten::_scaled_grouped_mm": gemm.grouped_mm,
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
