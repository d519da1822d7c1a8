"""A format 1 ledger (zotsink 0.1) migrated to format 2, when a run of this release resumes it.

Under the format 1 ledger's exclusive lock (every run of either release appends under it):
its rows are read as format 2 rows (:mod:`zotsink._ledger.v1`: each task's claims, begins
and ends, the runs, the settings, the control rows) and written, with the states format 2
rows carry, to a new file beside it (created exclusive and without following a link), which
is fsynced and renamed over the ledger's name; the old file stays as ``LEDGER.v1`` (a hard
link made before the rename: no moment without a ledger at the name). A run of either
release waiting for the lock then finds another file at the name and opens it again: a run
of 0.1 refuses it (its first line is not the header it writes), a run of this release reads
it.

Nothing is migrated while a run of the old release lives (a task it claimed is held by a run
alive or that nothing here can tell of): it would go on appending format 1 rows to the file
it has open. The run that wanted to migrate stops with a message that says so.

The cursor of the migrated ledger stands at its first line: the claims of format 1 rows are
by name, so a cursor claim passes over every task they name (its history lives in each
run's view), and claims the others.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

from .._core.fileio import fsync_dir, write_all
from .._core.locking import Locker, open_locked
from .._ledger.format import FIELDS, INITIAL, advance, header_format, header_line, make_row
from .._ledger.read import Snapshot, first_line
from .._ledger.view import LedgerView
from ..errors import UsageError

__all__ = ["migrate"]


def _open(path: str) -> int:
    return os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)


def migrate(path: str, *, lock: str, timeout: float, judge: Any) -> bool:
    """Migrate the format 1 ledger at ``path`` (see the module's docstring); whether it was
    (False: another run did meanwhile). Raises :class:`UsageError` while a run of the
    old release lives."""
    locker = Locker(lock, path)
    (fd, _dev, ino), st, _waited = open_locked(path, lambda: _open(path), locker, timeout)
    try:
        found = header_format(first_line(fd, st.st_size))
        if found is None or found[0] != 1:
            return False  # migrated by another run meanwhile (or no ledger: refused later)
        snap = Snapshot.under_lock(path, fd, st.st_size, 0, fmt=1)
        rows = list(snap.rows())
        view = LedgerView()
        view.feed(rows)
        view.settle(judge)
        holding = [r for r, (claimed, running) in view.held_by().items() if claimed or running]
        if holding:
            run = view.runs[holding[0]]
            raise UsageError(
                f"{path} is a ledger of zotsink 0.1 and a run of that release still holds "
                f"tasks of it (on {run.host}, pid {run.pid}, job {run.job or '-'}): let the "
                "runs of 0.1 finish (or stop them with `zotsink stop` of that release), then "
                "run again: this release migrates the ledger to its format first",
                path=path,
            )
        data = [header_line()]
        state = INITIAL
        for _at, row in rows:
            state = advance(state, row.kind, row.fields)
            fields = [row.fields[name] for name in FIELDS[row.kind]]
            data.append(make_row(row.kind, row.time, row.run, fields, state))
        directory = os.path.dirname(os.path.abspath(path))
        tmp = f"{path}.v2.{os.getpid()}"
        out = os.open(
            tmp,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            st.st_mode & 0o777 & ~0o022,
        )
        try:
            write_all(out, b"".join(data))
            os.fsync(out)
        except BaseException:
            os.close(out)
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        os.close(out)
        keep = _free_name(path + ".v1")
        os.link(path, keep)
        os.rename(tmp, path)
        fsync_dir(directory)
        return True
    finally:
        with contextlib.suppress(OSError):
            locker.release()
        os.close(fd)
        del ino


def _free_name(base: str) -> str:
    """``base``, or ``base.N`` for the first N no file has."""
    if not os.path.lexists(base):
        return base
    n = 1
    while os.path.lexists(f"{base}.{n}"):
        n += 1
    return f"{base}.{n}"
