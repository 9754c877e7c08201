"""Hangs and crashes: where each rank is, who never joined, who failed first."""
