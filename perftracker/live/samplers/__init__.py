"""The live samplers: each collects one kind of evidence from a running job into the run directory."""
