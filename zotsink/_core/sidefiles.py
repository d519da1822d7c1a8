"""Side files beside OUT, so that nothing is lost silently (the outlet decides when).

``OUT.rejects``            records zotsink refused, one per line as ``reason<TAB>record``.
``OUT.spill.<host>.<pid>`` records that could not be appended (lock timeout, ENOSPC, EDQUOT,
                           EIO); the writer's header, if it had one, is the first line.

Side files are never followed through symbolic links (``O_NOFOLLOW``); spill files are
created exclusively (``O_EXCL``) with permissions no wider than OUT's, and no side file
is ever writable by group or others, whatever the umask (:func:`side_mode`). A writer holds its
spill file's lock while it adds a batch, and checks under it that the name still leads to
its file: ``zotsink recover`` takes the same lock, so it never removes a batch that came
after it read the file, even from a writer on another host that is still running.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
from collections.abc import Callable, Iterable
from typing import Final

from ..errors import LockError, LockTimeout, WriteError, ZotsinkError
from .fileio import side_bits, write_all
from .locking import Locker
from .writer import Writer

__all__ = [
    "JOURNAL_SUFFIX",
    "find_spills",
    "host_name",
    "rejects_path",
    "save",
    "side_mode",
    "spill",
    "spill_name_problem",
]

#: A block too large to hold in memory, as a way to read it (again) in chunks.
Chunks = Callable[[], Iterable[bytes]]

#: Where spill files go when they cannot be written beside OUT, in order.
_FALLBACK_ENV: Final = ("ZOTSINK_SPILL_DIR", "TMPDIR")

#: Suffix of the journal recover writes beside a spill file while appending it to OUT.
JOURNAL_SUFFIX: Final = ".recovering"

#: Longest wait for the lock of a spill file just created (a recover may be looking at it).
_NEW_SPILL_LOCK_WAIT: Final = 5.0

#: Spill files this process created, per OUT, so later batches join the same file:
#: OUT -> (path, device, inode) of the file as created.
_open_spills: dict[str, tuple[str, int, int]] = {}


def host_name() -> str:
    # A host name with a "/" would turn the file name into a path: keep it a name.
    return os.uname().nodename.replace("/", "_") or "localhost"


def rejects_path(out: str) -> str:
    return out + ".rejects"


def _spill_dirs(out: str) -> list[str]:
    # never beside a device (/dev/null): that directory holds no files of anyone's
    dirs = [] if _is_device(out) else [os.path.dirname(os.path.abspath(out))]
    for var in _FALLBACK_ENV:
        if os.environ.get(var):
            dirs.append(os.environ[var])
    dirs.append("/tmp")
    seen: list[str] = []
    for d in dirs:
        if d not in seen:
            seen.append(d)
    return seen


def _is_device(path: str) -> bool:
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return False
    return stat.S_ISCHR(mode) or stat.S_ISBLK(mode)


def spill(
    out: str,
    data: bytes | Chunks,
    *,
    header: bytes | None = None,
    mode: int = 0o600,
    lock: str = "auto",
) -> str:
    """Save a batch meant for ``out`` to a spill file; returns its full path.

    Tried beside OUT first, then in ``$ZOTSINK_SPILL_DIR``, ``$TMPDIR`` and ``/tmp``. The
    data is fsynced before this returns. Raises :class:`WriteError` only when no place at
    all could take it.

    ``mode`` is OUT's: beside OUT the file gets no group or other bits OUT lacks (the owner
    always reads and writes it, so later batches can join it and recover can take it); in
    a fallback directory such as ``/tmp``, which others can list, it is ``0600``.
    ``lock`` is the kind OUT is locked with: the spill file is locked the same way.
    """
    previous = _open_spills.get(out)
    if previous is not None:
        try:
            _append_existing(previous, data, lock)
            return previous[0]
        except (OSError, LockError):
            # That place filled up too, or recover has the file (it is locked, or gone, or
            # replaced): start a new file.
            pass
    # abspath: an OUT given as "dir/" still names its spill file after "dir", beside it.
    base = os.path.basename(os.path.abspath(out)) + f".spill.{host_name()}.{os.getpid()}"
    errors: list[str] = []
    dirs = _spill_dirs(out)
    beside = os.path.dirname(os.path.abspath(out))
    for d in dirs:
        perm = side_bits(mode | 0o600) if d == beside and d == dirs[0] else 0o600
        for n in range(100):
            path = os.path.join(d, base if n == 0 else f"{base}.{n}")
            try:
                # O_EXCL never follows a symlink, even a dangling one, and never opens a file
                # someone else planted at the name: that name is skipped, the next one tried.
                fd = os.open(
                    path,
                    os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                    perm,
                )
            except FileExistsError:
                continue
            except OSError as e:
                errors.append(f"{d}: {e.strerror}")
                break
            st = os.fstat(fd)
            try:
                # Locked before the first byte: a recover that found the empty file removes
                # it under this lock, and then the name no longer leads here.
                locker = _lock(fd, path, lock, _NEW_SPILL_LOCK_WAIT)
            except LockTimeout:
                os.close(fd)
                continue
            try:
                if not _still_named(path, st):
                    continue
                _write(fd, header or b"", data)
                os.fsync(fd)
            except OSError as e:
                errors.append(f"{path}: {e.strerror}")
                if _still_named(path, st):
                    _remove_quietly(path)
                break
            finally:
                _unlock(locker)
                # A full MooseFS fails close() too; after the fsync it can lose nothing.
                with contextlib.suppress(OSError):
                    os.close(fd)
            _open_spills[out] = (path, st.st_dev, st.st_ino)
            return path
    count = data.count(b"\n") if isinstance(data, bytes) else sum(c.count(b"\n") for c in data())
    raise WriteError(
        f"could not save {count} record{'' if count == 1 else 's'} meant for {out} anywhere ("
        + "; ".join(errors)
        + "): they are lost unless the producer can send them again",
        path=out,
    )


def _append_existing(spill: tuple[str, int, int], data: bytes | Chunks, lock: str) -> None:
    path, dev, ino = spill
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != (dev, ino):
            # Not the file we created (recover took it, or someone put another in its place).
            raise FileExistsError(path)
        # No wait: a lock held by someone else is a recover's, and it removes the file.
        locker = _lock(fd, path, lock, 0.0)
        try:
            if not _still_named(path, st):
                raise FileExistsError(path)  # recover appended it to OUT and removed it
            size = os.fstat(fd).st_size
            try:
                _write(fd, b"", data)
                os.fsync(fd)
            except OSError:
                os.ftruncate(fd, size)
                raise
        finally:
            _unlock(locker)
    finally:
        os.close(fd)


def _lock(fd: int, path: str, kind: str, wait: float) -> Locker | None:
    """The spill file's lock, held while a batch goes in; None where no lock kind works
    (then recover cannot lock the file either, and refuses to take it)."""
    locker = Locker(kind, path)
    try:
        locker.acquire(fd, wait)
    except LockTimeout:
        raise
    except LockError:
        return None
    return locker


def _unlock(locker: Locker | None) -> None:
    if locker is not None:
        with contextlib.suppress(OSError):
            locker.release()


def _still_named(path: str, st: os.stat_result) -> bool:
    """Whether ``path`` still leads to the file ``st`` describes (recover removes files)."""
    try:
        now = os.lstat(path)
    except OSError:
        return False
    return (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino)


def _remove_quietly(path: str) -> None:
    with contextlib.suppress(OSError):
        os.remove(path)


def _write(fd: int, head: bytes, data: bytes | Chunks) -> None:
    if isinstance(data, bytes):
        write_all(fd, head + data)
        return
    if head:
        write_all(fd, head)
    for chunk in data():
        write_all(fd, chunk)


def save(writer: Writer, error: ZotsinkError, data: bytes | Chunks) -> None:
    """Save a batch that ``error`` kept out of ``writer``'s file to a spill file; note
    where on ``error`` (its ``spill_path`` and message)."""
    error.spill_path = spill(
        writer.path,
        data,
        header=writer.header,
        mode=_spill_mode(writer),
        lock=writer.locker.requested,
    )
    error.message += f"; the records were saved to {error.spill_path}"


def _spill_mode(writer: Writer) -> int:
    if writer.side_file:
        # The mode given is OUT's; whatever sits at the side file's name may have been
        # planted there, and must not choose who can read the spilled records.
        return writer.mode
    try:
        return os.stat(writer.path).st_mode & 0o666
    except OSError:
        return 0o600


def side_mode(out: str) -> int:
    """Permission bits for a new side file of ``out``: OUT's, so none is wider than OUT,
    and never write for group or others (:func:`~.fileio.side_bits`), whatever the umask:
    a group member who may append to OUT may not forge its ledger's rows or its log."""
    try:
        return side_bits(os.stat(out).st_mode)
    except OSError:
        return side_bits(0o666)


def _spill_name(base: str) -> re.Pattern[str]:
    # <host> may hold dots (node17.cluster.org); the pid and the counter are digits.
    return re.compile(re.escape(base) + r"\.spill\..+\.[0-9]+(?:\.[0-9]+)?")


def spill_name_problem(out: str, path: str) -> str | None:
    """Why ``path`` is not named as a spill file of ``out`` (in any directory), or None.

    Only what :func:`spill` creates is a spill file of OUT: ``OUT.spill.<host>.<pid>``, or
    with ``.<n>`` after it. Not OUT, its rejects file, a journal, a spill file of another
    file, or anything else whose name merely starts with OUT's.
    """
    base = os.path.basename(os.path.abspath(out))
    name = os.path.basename(path)
    if _spill_name(base).fullmatch(name):
        return None
    if name.endswith(JOURNAL_SUFFIX) and _spill_name(base).fullmatch(name[: -len(JOURNAL_SUFFIX)]):
        return "a journal of recover, not records"
    if name == base:
        return (
            "it is OUT itself"
            if os.path.dirname(os.path.abspath(path)) == os.path.dirname(os.path.abspath(out))
            else "a file named like OUT, not a spill file"
        )
    if name == os.path.basename(rejects_path(base)):
        return "the rejects file: refused records with their reasons, not records to append"
    other = re.fullmatch(r"(.+)\.spill\..+\.[0-9]+(?:\.[0-9]+)?", name)
    if other:
        return f"a spill file of {other[1]}, not of {base}: recover it into that file"
    return f"not named {base}.spill.<host>.<pid>"


def find_spills(out: str) -> list[str]:
    """Spill files of ``out`` that lie beside it, oldest name first.

    Only regular files (not symbolic links) named as :func:`spill` names them: a journal,
    a lock marker or a note whose name starts the same way is not one.
    """
    import glob  # only recover and a failed append look for spill files

    name = _spill_name(os.path.basename(os.path.abspath(out)))
    found = []
    for p in glob.glob(glob.escape(out) + ".spill.*"):
        with contextlib.suppress(OSError):
            if name.fullmatch(os.path.basename(p)) and stat.S_ISREG(os.lstat(p).st_mode):
                found.append(p)
    return sorted(found)
