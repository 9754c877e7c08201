"""Kineto traces: read a trace file, classify its events, decide its rank."""
