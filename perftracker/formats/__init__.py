"""The formats floor: one parser per text format perftracker reads, below collectors/, live/ and analyzers/.

It imports nothing above `perftracker.values`, `perftracker.bounded` and `perftracker.errors`
(tests/test_architecture.py); the modules: docs/internals/collectors.md.
"""
