"""NCCL inputs: debug logs, their line patterns, platform profiles."""
