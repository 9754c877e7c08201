"""Judging `perftracker sanity`'s measurements: each node against its peers and against its device's expected
figures (judge, with the expected figures and their sources)."""
