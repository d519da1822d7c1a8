"""The figures of ``scripts/bench/bench.py``, one module per kind."""
