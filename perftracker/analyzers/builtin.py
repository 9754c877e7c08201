"""Importing this module registers every built-in analyzer (one import per analyzer module)."""

from perftracker.analyzers import inputs  # noqa: F401
from perftracker.analyzers import breakdown  # noqa: F401
from perftracker.analyzers import overlap  # noqa: F401
from perftracker.analyzers import idle  # noqa: F401
from perftracker.analyzers import steps  # noqa: F401
