"""Side files beside OUT, so that nothing is lost silently.

``OUT.rejects``            records zotsink refused, one per line as ``reason<TAB>record``.
``OUT.spill.<host>.<pid>`` records that could not be appended (lock timeout, ENOSPC, EDQUOT,
                           EIO); the writer's header, if it had one, is the first line.

Side files are never followed through symbolic links (``O_NOFOLLOW``); spill files are
created exclusively (``O_EXCL``) with permissions no wider than OUT's.
"""

from __future__ import annotations

import contextlib
import glob
import os
from collections.abc import Iterable
from typing import Final

from ..errors import HeaderMismatch, LockError, WriteError, ZotsinkError
from .fileio import write_all
from .writer import Writer

__all__ = [
    "JOURNAL_SUFFIX",
    "append_or_save",
    "find_spills",
    "host_name",
    "reject",
    "rejects_path",
    "rejects_writer",
    "save",
    "side_mode",
    "spill",
]

#: Where spill files go when they cannot be written beside OUT, in order.
_FALLBACK_ENV: Final = ("ZOTSINK_SPILL_DIR", "TMPDIR")

#: Suffix of the journal recover writes beside a spill file while appending it to OUT.
JOURNAL_SUFFIX: Final = ".recovering"

#: Spill files this process created, per OUT, so later batches join the same file:
#: OUT -> (path, device, inode) of the file as created.
_open_spills: dict[str, tuple[str, int, int]] = {}


def host_name() -> str:
    # A host name with a "/" would turn the file name into a path: keep it a name.
    return os.uname().nodename.replace("/", "_") or "localhost"


def rejects_path(out: str) -> str:
    return out + ".rejects"


def _spill_dirs(out: str) -> list[str]:
    dirs = [os.path.dirname(os.path.abspath(out))]
    for var in _FALLBACK_ENV:
        if os.environ.get(var):
            dirs.append(os.environ[var])
    dirs.append("/tmp")
    seen: list[str] = []
    for d in dirs:
        if d not in seen:
            seen.append(d)
    return seen


def spill(out: str, data: bytes, *, header: bytes | None = None, mode: int = 0o600) -> str:
    """Save a batch meant for ``out`` to a spill file; returns its full path.

    Tried beside OUT first, then in ``$ZOTSINK_SPILL_DIR``, ``$TMPDIR`` and ``/tmp``. The
    data is fsynced before this returns. Raises :class:`WriteError` only when no place at
    all could take it.

    ``mode`` is OUT's: beside OUT the file gets no group or other bits OUT lacks (the owner
    always reads and writes it, so later batches can join it and recover can take it); in
    a fallback directory such as ``/tmp``, which others can list, it is ``0600``.
    """
    previous = _open_spills.get(out)
    if previous is not None:
        try:
            _append_existing(previous, data)
            return previous[0]
        except OSError:
            pass  # that place filled up too (or was replaced): start a new file elsewhere
    # abspath: an OUT given as "dir/" still names its spill file after "dir", beside it.
    base = os.path.basename(os.path.abspath(out)) + f".spill.{host_name()}.{os.getpid()}"
    errors: list[str] = []
    dirs = _spill_dirs(out)
    for d in dirs:
        perm = (mode & 0o666) | 0o600 if d == dirs[0] else 0o600
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
            try:
                write_all(fd, (header or b"") + data)
                os.fsync(fd)
            except OSError as e:
                errors.append(f"{path}: {e.strerror}")
                os.close(fd)
                _remove_quietly(path)
                break
            st = os.fstat(fd)
            os.close(fd)
            _open_spills[out] = (path, st.st_dev, st.st_ino)
            return path
    count = data.count(b"\n")
    raise WriteError(
        f"could not save {count} records meant for {out} anywhere ("
        + "; ".join(errors)
        + "): they are lost unless the producer can send them again",
        path=out,
    )


def _append_existing(spill: tuple[str, int, int], data: bytes) -> None:
    path, dev, ino = spill
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != (dev, ino):
            # Not the file we created (recover took it, or someone put another in its place).
            raise FileExistsError(path)
        size = st.st_size
        try:
            write_all(fd, data)
            os.fsync(fd)
        except OSError:
            os.ftruncate(fd, size)
            raise
    finally:
        os.close(fd)


def _remove_quietly(path: str) -> None:
    with contextlib.suppress(OSError):
        os.remove(path)


def reject(
    out: str,
    items: Iterable[tuple[str, bytes]],
    *,
    lock: str = "auto",
    sync: str = "auto",
    timeout: float = 600.0,
) -> str:
    """Append refused records to ``OUT.rejects`` as ``reason<TAB>record`` lines; its path.

    When OUT.rejects itself cannot be written, the lines go to its spill file and the
    error raised names it.
    """
    lines = b"".join(
        reason.replace("\t", " ").replace("\n", " ").encode() + b"\t" + rec.rstrip(b"\n") + b"\n"
        for reason, rec in items
    )
    path = rejects_path(out)
    with Writer(path, lock=lock, sync=sync, side_file=True, mode=side_mode(out)) as w:
        append_or_save(w, lines, timeout)
    return path


def rejects_writer(out: str, *, lock: str = "auto", sync: str = "auto") -> Writer:
    """A writer on ``OUT.rejects`` (for a refused record too large to hold in memory)."""
    return Writer(rejects_path(out), lock=lock, sync=sync, side_file=True, mode=side_mode(out))


def save(writer: Writer, error: ZotsinkError, data: bytes) -> None:
    """Save a batch that ``error`` kept out of ``writer``'s file to a spill file; note
    where on ``error`` (its ``spill_path`` and message)."""
    error.spill_path = spill(writer.path, data, header=writer.header, mode=_spill_mode(writer))
    error.message += f"; the records were saved to {error.spill_path}"


def append_or_save(writer: Writer, data: bytes, timeout: float) -> int:
    """``writer.append(data)``, and when it fails, the batch saved where the user will look.

    A header mismatch sends the records to OUT.rejects (the records are fine, OUT is the
    wrong place for them); a lock timeout, a failed lock call or a failed write sends them
    to a spill file, for ``zotsink recover``. Either way the error is raised again with its
    ``spill_path``: a caller never has to save anything itself. A lock call that fails
    outright (an explicit ``--lock`` kind the filesystem lacks) would lose a batch read
    from a pipe just as a timeout would: exit 74 always means "spilled".
    """
    try:
        return writer.append(data, timeout=timeout)
    except HeaderMismatch as e:
        lines = data.splitlines()
        e.spill_path = reject(
            writer.path,
            (("header mismatch", ln) for ln in lines),
            lock=writer.locker.requested,
            timeout=timeout,
        )
        e.message += f"; the {len(lines)} records were saved to {e.spill_path}"
        raise
    except (LockError, WriteError) as e:  # LockTimeout is a LockError
        save(writer, e, data)
        raise


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
    """Permission bits for a new side file of ``out``: OUT's, so none is wider than OUT."""
    try:
        return os.stat(out).st_mode & 0o666
    except OSError:
        return 0o666


def find_spills(out: str) -> list[str]:
    """Spill files of ``out`` that lie beside it, oldest name first."""
    pattern = glob.escape(out) + ".spill.*"
    return sorted(
        p
        for p in glob.glob(pattern)
        if os.path.isfile(p) and not os.path.islink(p) and not p.endswith(JOURNAL_SUFFIX)
    )
