"""The step graph: the cross-rank step graph and its what-if replay, the critical path, the op-level graph."""
