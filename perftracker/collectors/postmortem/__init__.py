"""Post-mortem inputs: flight-recorder dumps, job logs, error files, kernel logs."""
