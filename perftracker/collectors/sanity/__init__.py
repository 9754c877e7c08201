"""`perftracker sanity`'s measurements: per-device compute and memory (bench), communication over the job's
ranks (comm), the node's own facts (node). Collectors only: judging them is analyzers/sanity."""
