"""Stacks: py-spy snapshots and sampled-stack recordings of every rank."""
