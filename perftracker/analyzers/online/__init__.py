"""Verdicts for live samplers: the analyzers' rules behind the `perftracker.live.diagnosis` seam."""

from perftracker.analyzers.online.diagnosis import AnalyzerDiagnosis

__all__ = ["AnalyzerDiagnosis"]
