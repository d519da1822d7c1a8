"""``zotsink run`` and ``zotsink status``: job-array tasks with one locked ledger.

tasks (task lists, chunks, array specs) · ledger (rows, states) · output (OUT and the log) ·
pool (the processes and their pipes, signals) · runner (``run_tasks``) · status.
"""
