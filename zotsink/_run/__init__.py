"""``zotsink run`` and ``zotsink status``: job-array tasks with one locked ledger.

tasks (task lists) · ledger (the rows a run writes, the claim) · states (the one fold of
rows into task states, the tally) · settings (the recorded settings and their policy) ·
queue (which tasks are this run's next) · pool (the poll loop) · attempt (one attempt's
phases and output) · commit (group commit) · worker (function workers) · logline (the
log's lines) · alive (is a start row's run alive) · runner (``run_tasks``) · status. The
ledger's file format and readers are :mod:`zotsink._ledgerfile`; array arithmetic
:mod:`zotsink._arrays`.
"""
