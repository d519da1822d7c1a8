"""``zotsink run`` and ``zotsink status``: job-array tasks with one locked ledger.

The decisions (no I/O): state (``RunState``: fed a turn's events, returns instructions) ·
attempt (one attempt's phases and end) · queue (which tasks to claim and start next) ·
commit (when a group commit and begin rows are due) · halting (when failures stop the
claims) · events (the events and instructions the two sides share) · failures (how
failures are grouped) · relay (the relay chain's rule, and one run's side of it).

The I/O: pool (the poll loop, carrying out instructions) · commands and calls (the two
backends: command processes; function workers, with worker, frames and serve) · output
(records held per attempt, their append to OUT, the log) · ledger (the rows a run writes,
its claims) · look (what a look at other runs' tasks finds) · migrate (a format 1 ledger
made format 2) · alive (is a run, or a task's process, alive: the pid table, else the
scheduler) · backends, schedcmd, scheduler and schedout (a backend per batch scheduler,
the runner of their commands, the one asker of them, and what the commands print) ·
successor (a relay's checks under the lock, its submissions, ``add --relay``) · usage
(what a task used, measured) · tasks (task lists, read by offset) · logline (the log's
lines) · add and close (``zotsink add``, ``close``, ``stop``, ``release``) · options and
settings (a run's options checked; the recorded settings and their policy) · runner
(``run_tasks``) · status, runs, report, timeline, page, spread, advise (reading the ledger
back: counts, live runs, attempts, the HTML page, the advice).

The ledger's format and its one row view are :mod:`zotsink._ledger`; array arithmetic
:mod:`zotsink._arrays`.
"""
