"""Pipeline-parallel jobs: per stage and step, the micro-batches, the schedule, the bubbles and the imbalance.

`views.stage_steps_view` measures each rank's steps (busy, waiting in receives and collectives, the order of its passes),
`schedule_sim` recognizes and simulates GPipe / 1F1B schedules, `analyzer.analyze_pipeline` turns them into
findings (stage imbalance, bubbles beyond the schedule's ideal).
"""
