"""Where each rank sits in the job: tensor, pipeline, data, expert and context parallel dimensions."""
