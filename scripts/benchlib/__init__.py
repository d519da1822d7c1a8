"""The figures of ``scripts/bench.py``, one module per kind."""
