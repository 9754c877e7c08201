"""Root causes: stragglers joined with the host evidence that can explain them (`chains`), and the
rules of what can explain what (`causality`: where the extra time is, and when)."""

from perftracker.analyzers.rootcause.chains import link_findings, straggler_kind

__all__ = ["link_findings", "straggler_kind"]
