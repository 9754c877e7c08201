"""Importing this module registers every built-in analyzer (one import per analyzer module)."""

from perftracker.analyzers import (
    breakdown,  # noqa: F401
    idle,  # noqa: F401
    inputs,  # noqa: F401
    nccl_config,  # noqa: F401
    overlap,  # noqa: F401
    steps,  # noqa: F401
)
from perftracker.analyzers import straggler  # noqa: F401
from perftracker.analyzers import degradation  # noqa: F401
from perftracker.analyzers import rdma  # noqa: F401
from perftracker.analyzers import gpu_health  # noqa: F401
from perftracker.analyzers import topology  # noqa: F401
from perftracker.analyzers import bandwidth  # noqa: F401
from perftracker.analyzers import hang  # noqa: F401
from perftracker.analyzers import crash  # noqa: F401
