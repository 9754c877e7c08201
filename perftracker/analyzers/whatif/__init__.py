"""What-if analysis of pipeline-parallel jobs recorded per operation (OSDI'25's method): the step's dependency
graph (`ops_graph`), its replay, the slowdown metrics, the findings and views (`analyzer`)."""
