"""Kernel families from GPU kernel names: GEMM, attention, convolution, reduction, elementwise,
communication, memory, other.

`family_of(name, klass)` is the one place that says which family a GPU kernel belongs to.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from perftracker.analyzers.traces.grouping import codes_of

FAMILIES = ("GEMM", "attention", "convolution", "reduction", "elementwise", "communication", "memory", "other")

FAMILY_RULES: tuple[tuple[str, re.Pattern[str]], ...] = tuple((family, re.compile(pattern, re.IGNORECASE)) for
                                                              family, pattern in (
    ("attention", r"fmha|flash|attention|attn|sdpa|scaled_dot_product|(^|[^a-z])mha[^a-z]"),
    # "conv" only as a whole name part: `conv2d`, `grouped_conv_fwd`, `cudnnConvolution`, `convolve`, never the
    # `Conv` of `_typeConvert` (a fused RMS-norm kernel's helper) or `convert`
    ("convolution", r"(?-i:(?<![A-Za-z])[Cc]|(?<=[a-z])C)onv(?:olution|olve)?(?-i:(?![a-z]))"
                    r"|wgrad|dgrad|fprop|implicit_gemm|winograd|im2col|col2im"),
    ("GEMM", r"(?<!fb)gemm|gemv|cublas|cutlass|^Cijk_|matmul|xmma|wgmma|nvjet|rocblas|hipblaslt|^triton_tem_|bmm"),
    ("reduction", r"reduce|reduction|softmax|batch_?norm|layer_?norm|group_?norm|rms_?norm|instance_?norm"
                  r"|welford|\bbn_(fw|bw)|cub::Device(Segmented)?Reduce|^triton_(red|per)_|argmax|argmin"),
    ("memory", r"copy|memcpy|memset|fillBuffer|nchwToNhwc|nhwcToNchw|transpose"),
    ("elementwise", r"elementwise|pointwise|^triton_poi_|multi_tensor_apply|vectorized|unrolled|functor|dropout"
                    r"|relu|gelu|silu|sigmoid|tanh|fill"),
))


def family_of(name: str, klass: str = "compute") -> str:
    """The family of one GPU kernel: its loader class first (communication, memory), then its name."""
    if klass == "comm":
        return "communication"
    if klass == "memory":
        return "memory"
    for family, pattern in FAMILY_RULES:
        if pattern.search(name):
            return family
    return "other"


def families(names: pd.Series, klasses: pd.Series) -> pd.Categorical:
    """`family_of` of every row (a categorical of FAMILIES), computed once per distinct (name, class)."""
    name_codes, name_values = codes_of(names)
    klass_codes, klass_values = codes_of(klasses)
    width = len(klass_values) + 1
    distinct, inverse = np.unique(name_codes * width + klass_codes, return_inverse=True)
    index = {family: i for i, family in enumerate(FAMILIES)}
    per_pair = np.array([index[family_of(str(name_values[p // width]), str(klass_values[p % width]))]
                         for p in distinct.tolist()], dtype=np.int64)
    codes = per_pair[inverse.reshape(-1)] if len(per_pair) else np.empty(0, dtype=np.int64)
    result: pd.Categorical = pd.Categorical.from_codes(codes, dtype=pd.CategoricalDtype(list(FAMILIES)))
    return result
