"""GPU-trace analyses: time breakdown, overlap, idle gaps."""
