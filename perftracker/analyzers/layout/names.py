"""Which parallel dimension a process group's `pg_desc` names, in the words of Megatron, torchtitan and DeepSpeed."""

from __future__ import annotations

import re

# Composite or special groups: their members span several dimensions (or a few ranks of one).
_COMPOSITE = re.compile(r"(_and_|with_cp|dp_cp|dp_shard_cp|embedding|amax|_gloo$|^model_parallel|mesh_default|"
                        r"default_pg|intra_|inter_|partial|hierarchical|expert_tensor|expert_data)")
_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("pp", re.compile(r"(pipeline|pipe\b|^pp$|^pp_|_pp$|mesh_pp)")),
    ("tp", re.compile(r"(tensor_model|tensor_parallel|^tp$|_tp$|mesh_tp|^model$|^mp_group$)")),
    ("cp", re.compile(r"(context_parallel|^cp$|_cp$|mesh_cp|sequence_parallel|^sp$)")),
    ("ep", re.compile(r"(expert_model|expert_parallel|^ep$|_ep$|mesh_ep)")),
    ("dp", re.compile(r"(data_parallel|^dp$|_dp$|mesh_dp|dp_replicate|dp_shard|^data$|replicate)")),
)


def is_composite(desc: str) -> bool:
    """The description names a group spanning several dimensions (or a special one): not a layout family."""
    return bool(_COMPOSITE.search(desc.strip().lower().lstrip("_")))


def dim_of_desc(desc: str) -> str | None:
    """tp | cp | ep | dp | pp when `desc` names exactly one dimension; None otherwise."""
    text = desc.strip().lower().lstrip("_")
    if not text or text == "undefined" or _COMPOSITE.search(text):
        return None
    hits = [dim for dim, pattern in _PATTERNS if pattern.search(text)]
    return hits[0] if len(hits) == 1 else None
