"""``zotsink run`` and ``zotsink status``: job-array tasks with one locked ledger.

tasks (task lists, chunks, array specs) · ledger (rows, states, the claim) · queue (which
tasks are this run's next) · pool (the poll loop) · attempt (one attempt's phases and
output) · commit (group commit) · worker (function workers) · logline (the log's lines) ·
alive (is a run alive) · runner (``run_tasks``) · status.
"""
