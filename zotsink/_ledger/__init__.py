"""A run's ledger: its file format and its one row view, below every reader and writer.

format (the rows, their fields, the state each carries, the header) · read (the one cutter
of a ledger's bytes into rows, a snapshot's rows, the last row's state) · v1 (format 1
ledgers read as format 2 rows) · view (the one fold of rows into where each task stands,
the runs, the control rows) · runs (a run from its rows; what a view asks of the world
about runs) · events (rows as what happened to each task, for listings) ·
control (close, open, stop) · pieces (the parts of OUT that ok ends claim).
"""
