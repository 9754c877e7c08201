"""Live collection from running jobs: find the job, sample it side by side, never harm it."""
