"""NCCL configuration: the per-process context and the rules checked against it."""
