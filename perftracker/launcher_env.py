"""The environment variables launchers use to tell a process its rank (one list for the whole package).

Dependency-free on purpose: the in-job hook and its sitecustomize import it at interpreter start.
"""

from __future__ import annotations

from collections.abc import Mapping

# torchrun, Slurm, Open MPI, MPICH/Intel MPI, PMIx: the first one set wins.
RANK_VARS = ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK")
LOCAL_RANK_VARS = ("LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "PMI_LOCAL_RANK")
WORLD_VARS = ("WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")


def first_int(env: Mapping[str, str], names: tuple[str, ...]) -> int | None:
    """The first of `names` set to a non-negative integer (ASCII digits, at most 9) in `env`, or None."""
    for name in names:
        value = env.get(name, "").strip()
        if value.isascii() and value.isdigit() and len(value) <= 9:  # '²'.isdigit() is True, int('²') fails
            return int(value)
    return None


def rank_in(env: Mapping[str, str]) -> int | None:
    """The global rank the launcher gave the process, or None when it gave none."""
    return first_int(env, RANK_VARS)
