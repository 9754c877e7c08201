"""Analyzers: pure functions from the Store to Findings. See `registry` for how they are run."""
