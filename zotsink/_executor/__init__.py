"""``zotsink.Executor``: ``concurrent.futures`` over the elements of a job array.

It stands on the run wing's public names (``add_tasks``, ``close_tasks``, ``stop_runs``,
``read_records``, ``run_tasks``) and a few of its modules' functions; nothing below
imports it. Its parts:

- :mod:`.calls`: the task line of a call and the record of its answer, both ends' format;
- :mod:`.serve`: the elements' side, ``zotsink._executor.serve:call``;
- :mod:`.results`: how the client learns what was committed (the one place that reads the
  engine's files for it);
- :mod:`.directory`: the directory's files, the settings file and the elements' events;
- :mod:`.elements`: starting the elements (an array job, or local processes), their life,
  the cancel of queued ones; :mod:`.element`: one element's process;
- :mod:`.executor`: the Executor and its futures.
"""
