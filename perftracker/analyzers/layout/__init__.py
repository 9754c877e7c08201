"""Where each rank sits in the job: tensor, pipeline, data, expert and context parallel dimensions.

`infer.infer_layout` reads the group table (`RunInfo.process_groups`) and the send/recv neighbours
(`p2p.p2p_ops`) into a typed `model.Layout`; `views.layout_view` is that Layout for an analysis, `views.layout_grid`
the per-worker table of the report's DP x PP grid; `positions.with_positions` adds each named rank's place to
findings.
"""
