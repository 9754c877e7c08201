"""`perftracker sanity`'s measurements: the launch checked (launch), communication over the job's ranks
(comm), the node's own facts (node), one rank's time-boxed run with its per-device compute and memory figures
(measure) and the hand-over to the one writer (handover). Collectors only: judging them is analyzers/sanity."""

QUICK_S = 20.0  # `--quick`: the check's time box in seconds
DEFAULT_S = 120.0  # the default time box (torch-free here: the CLI's help reads them without importing torch)
JOIN_FLOOR_S = 60.0  # every rank may take this long (or the box, if longer) to join: nodes start at different times


def join_s(time_box_s: float) -> float:
    """The longest wait for every rank to join (and, without torchrun's agent store, for rank 0's store)."""
    return max(JOIN_FLOOR_S, time_box_s)
