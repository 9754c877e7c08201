"""`perftracker sanity`'s measurements: per-device compute and memory (bench), communication over the job's
ranks (comm), the node's own facts (node). Collectors only: judging them is analyzers/sanity."""

QUICK_S = 20.0  # `--quick`: the check's time box in seconds
DEFAULT_S = 120.0  # the default time box (torch-free here: the CLI's help reads them without importing torch)
