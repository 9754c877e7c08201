"""Run-to-run comparison: what changed between a base run and a new one (`perftracker diff`)."""
