"""Importing this module registers every built-in analyzer (one import per analyzer module)."""

from perftracker.analyzers import (
    bandwidth,  # noqa: F401
    breakdown,  # noqa: F401
    crash,  # noqa: F401
    degradation,  # noqa: F401
    gpu_health,  # noqa: F401
    gpu_links,  # noqa: F401
    hang,  # noqa: F401
    idle,  # noqa: F401
    inputs,  # noqa: F401
    nccl_config,  # noqa: F401
    overlap,  # noqa: F401
    rdma,  # noqa: F401
    rdma_pfc,  # noqa: F401
    stack_profile,  # noqa: F401
    steps,  # noqa: F401
    straggler,  # noqa: F401
    topology,  # noqa: F401
)
