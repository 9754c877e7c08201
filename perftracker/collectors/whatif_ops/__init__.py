"""The OSDI'25 straggler what-if artifact's format: per-operation Parquet records, a `meta` YAML, a Chrome-trace
timeline (ByteDance-Seed/StragglerAnalysis), read into the Store (`inputs.load_whatif_inputs`)."""
