"""The formats floor: one parser per text format perftracker reads, below collectors/, live/ and analyzers/.

Each module parses one format and nothing else: `log_lines.py` (the one rank-prefix grammar of log lines, their
timestamps and colour codes), `framework_steps.py` (step times from Megatron-LM, DeepSpeed, Hugging Face Trainer,
Lightning and torchtitan log lines: what `attach` reads live and `analyze` reads from a job log),
`framework_throughput.py` (the TFLOP/s per GPU and MFU those logs report), `nccl_lists.py` (NCCL's device and
interface list syntax, `NCCL_IB_HCA=^=mlx5_0:1,...`). Every room may import it; it imports nothing above
`perftracker.values`, `perftracker.bounded` and `perftracker.errors` (tests/test_architecture.py).
"""
