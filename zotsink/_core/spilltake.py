"""Taking a spill file found by name, for the two recovers (OUT's lines, an archive's tars).

Three rules, one place:

- A spill file named on the command line must be named as one of OUT's spill files and
  must not be OUT itself. ``zotsink recover results.tar results.tar`` (or any other file
  named by mistake) would otherwise be read, appended and then removed.
- A spill file (or recover's journal) is opened without following a link and without
  blocking on a FIFO, and is trusted only as a regular file of the user's own: in a shared
  directory another user may plant one, to slip records in or to make recover hang.
- Its writer's lock is taken and held until it is removed: a writer still alive (on
  another host recover cannot tell) cannot add a batch between the read and the removal.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator

from ..errors import UsageError
from .fileio import same_file, side_file_problem
from .locking import Locker, open_locked
from .sidefiles import spill_name_problem

__all__ = ["Refused", "check_spill_names", "locked_spill", "open_side"]


class Refused(Exception):
    """This spill file (or its journal) cannot be trusted; the message says why."""


def open_side(path: str) -> int:
    """Open a spill file or journal found by name: never through a link, never blocking on
    a FIFO, and only a regular file of the user's own. -1 when it is gone;
    :class:`Refused` (saying why, of "it") otherwise."""
    flags = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        try:
            fd = os.open(path, flags | os.O_RDWR)
        except PermissionError:
            fd = os.open(path, flags | os.O_RDONLY)
    except FileNotFoundError:
        return -1
    except OSError as e:
        why = "it is a symbolic link" if e.errno == errno.ELOOP else e.strerror or str(e)
        raise Refused(why if e.errno == errno.ELOOP else f"cannot open it: {why}") from None
    problem = side_file_problem(os.fstat(fd))
    if problem:
        os.close(fd)
        raise Refused(problem)
    return fd


@contextlib.contextmanager
def locked_spill(
    path: str, lock: str, timeout: float, advice: str
) -> Iterator[tuple[int, os.stat_result] | None]:
    """``(fd, stat)`` of the spill file at ``path`` with its writer's lock held until the
    block ends; None when it is gone (another recover took it). :class:`Refused`, with
    ``advice`` after the reason, when it cannot be trusted."""

    def opener() -> int:
        try:
            fd = open_side(path)
        except Refused as e:
            raise Refused(f"{e}; {advice}") from None
        if fd < 0:
            raise FileNotFoundError(errno.ENOENT, "gone", path)
        return fd

    locker = Locker(lock, path)
    try:
        (fd, _dev, _ino), st, _waited = open_locked(path, opener, locker, timeout)
    except FileNotFoundError:
        yield None
        return
    try:
        yield fd, st
    finally:
        with contextlib.suppress(OSError):
            locker.release()
        os.close(fd)


def check_spill_names(out: str, paths: list[str], what: str = "files") -> None:
    """Refuse, before anything is done, every named file that is not a spill file of OUT."""
    bad = []
    for p in paths:
        why = spill_name_problem(out, p)
        if why is None and same_file(p, out):
            why = "it is OUT itself"
        if why is not None:
            bad.append(f"{p} ({why})")
    if bad:
        base = os.path.basename(os.path.abspath(out))
        raise UsageError(
            f"not spill {what} of {out}: " + "; ".join(bad) + f". recover takes only files "
            f"named {base}.spill.<host>.<pid>[.<n>]: name those, or none to take every one "
            f"beside {out}",
            path=out,
        )
