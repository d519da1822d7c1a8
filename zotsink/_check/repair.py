"""``zotsink verify --repair``: damaged lines out of OUT, under the exclusive lock.

The lock is taken on OUT itself, and OUT is read again under it, so records appended after
the check are not lost. The good lines go to a temporary file beside OUT with OUT's mode,
which is fsynced; the bad lines are appended to ``OUT.rejects`` (fsynced) with their
reasons; then the temporary file is renamed over OUT and the directory fsynced. Writers
waiting for the lock see that OUT names a new file and follow it. A crash before the rename
leaves OUT as it was (and perhaps copies of its bad lines in OUT.rejects): never a hole.

With the ``fcntl`` lock kind the lock belongs to the process and vanishes when it closes ANY
descriptor of OUT: everything here reads OUT through the one locked descriptor.
"""

from __future__ import annotations

import contextlib
import functools
import os
import stat
import warnings
from typing import Final

from .._core import outlet
from .._core.fileio import fsync_dir, write_all
from .._core.locking import Locker, open_locked
from ..errors import InputError, WriteError, ZotsinkError, ZotsinkWarning
from .check import check
from .report import CHUNK, KEPT_KINDS, VerifyReport

__all__ = ["repair_locked"]

#: Bad lines held in memory before they are written to OUT.rejects.
_REJECT_BATCH: Final = 8 << 20


def repair_locked(
    p: str, fmt: str, has_header: bool, allow_dup: bool, lock: str, timeout: float, keep: int
) -> VerifyReport:
    """Repair OUT under its exclusive lock; the report of what was found and moved."""

    def opener() -> int:
        try:
            # O_RDWR: an exclusive fcntl lock needs a descriptor open for writing. Every read
            # goes through this one descriptor: closing a second one of OUT would drop it.
            return os.open(p, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            raise InputError(f"{p} does not exist", path=p) from None
        except OSError as e:
            raise WriteError(f"cannot open {p} to repair it: {e.strerror}", path=p) from e

    locker = Locker(lock, p)
    (fd, _dev, _ino), st, _waited = open_locked(p, opener, locker, timeout)
    try:
        report = VerifyReport(p, fmt, allow_duplicates=allow_dup)
        _rewrite(p, fd, st, report, has_header, keep, lock, timeout)
        return report
    finally:
        locker.release()
        os.close(fd)


def _rewrite(
    p: str,
    fd: int,
    st: os.stat_result,
    report: VerifyReport,
    has_header: bool,
    keep: int,
    lock: str,
    timeout: float,
) -> None:
    """Under the lock: good lines to a temporary file, bad ones to OUT.rejects, rename."""
    import tempfile

    # Through a symbolic link, replace the file it points to, not the link.
    target = os.path.realpath(p)
    directory = os.path.dirname(target)
    try:
        # O_EXCL under a fresh name, mode 0600 until it gets OUT's mode below
        tfd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.repair.", dir=directory)
    except OSError as e:
        raise WriteError(
            f"cannot create a temporary file in {directory} to repair {p}: {e.strerror}; "
            f"{p} is unchanged",
            path=p,
        ) from e
    reject = functools.partial(outlet.reject, p, lock=lock, sync="fsync", timeout=timeout)
    renamed = False
    try:
        _match_owner(tfd, st, p)
        bad: list[tuple[str, bytes]] = []
        bad_size = 0
        good: list[bytes] = []
        good_size = 0
        for raw, problem, is_header in check(fd, st.st_size, report, has_header, keep, False):
            if problem is None or (problem.kind in KEPT_KINDS and is_header):
                good.append(raw)
                good_size += len(raw)
                if good_size >= CHUNK:
                    write_all(tfd, b"".join(good))
                    good, good_size = [], 0
                continue
            report.moved += 1
            bad.append((problem.reason(), raw))
            bad_size += len(raw)
            if bad_size >= _REJECT_BATCH:
                # Saved before OUT is replaced: a crash in between leaves copies, never holes.
                report.rejects_path = reject(bad)
                bad, bad_size = [], 0
        write_all(tfd, b"".join(good))
        os.fsync(tfd)
        if report.moved:
            if bad:
                report.rejects_path = reject(bad)
            os.rename(tmp, target)
            renamed = True
            report.repaired = True
            fsync_dir(directory)
    except ZotsinkError:
        raise  # OUT.rejects could not be written: that error says where its lines went
    except OSError as e:
        raise WriteError(
            f"cannot repair {p}: {e.strerror or e}; {p} is unchanged", path=p, errno=e.errno
        ) from e
    finally:
        os.close(tfd)
        if not renamed:
            _remove(tmp)


def _match_owner(tfd: int, st: os.stat_result, p: str) -> None:
    """Give the new OUT the old one's permissions (and group, when we may)."""
    os.fchmod(tfd, stat.S_IMODE(st.st_mode))
    with contextlib.suppress(PermissionError):
        os.fchown(tfd, st.st_uid if os.geteuid() == 0 else -1, st.st_gid)
    now = os.fstat(tfd)
    if (now.st_uid, now.st_gid) != (st.st_uid, st.st_gid):
        warnings.warn(
            f"the repaired {p} belongs to uid {now.st_uid} gid {now.st_gid}, not uid "
            f"{st.st_uid} gid {st.st_gid} like before: check that its other writers may "
            "still write to it",
            ZotsinkWarning,
            stacklevel=5,
        )


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.remove(path)
