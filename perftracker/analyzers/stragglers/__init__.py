"""Cross-rank analyses: collectives, stragglers, step times, degradation, sampled-stack profiles."""
