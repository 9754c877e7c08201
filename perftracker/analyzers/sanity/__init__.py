"""Judging `perftracker sanity`'s measurements: each node against its peers and against its device's expected
figures (judge), the expected figures with their sources (expected)."""
