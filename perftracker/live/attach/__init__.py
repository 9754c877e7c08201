"""Discovery and attach: find the job, start or attach to it, its session's helpers."""
