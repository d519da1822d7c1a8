"""Side files beside OUT, so that nothing is lost silently.

``OUT.rejects``            records zotsink refused, one per line as ``reason<TAB>record``.
``OUT.spill.<host>.<pid>`` records that could not be appended (lock timeout, ENOSPC, EDQUOT,
                           EIO); the writer's header, if it had one, is the first line.

Side files are never followed through symbolic links (``O_NOFOLLOW``); spill files are
created exclusively (``O_EXCL``) with permissions no wider than OUT's.
"""

from __future__ import annotations

import contextlib
import functools
import glob
import os
from collections.abc import Iterable
from typing import Any, Final, NamedTuple

from .errors import WriteError
from .fileio import fsync_dir, write_all

__all__ = [
    "JOURNAL_SUFFIX",
    "RecoverReport",
    "find_spills",
    "recover",
    "reject",
    "rejects_path",
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


def _sha256(data: bytes = b"") -> Any:
    # imported here, not at the top: hashlib costs ~2.5 ms of every CLI start, and only
    # recover needs it
    import hashlib

    return hashlib.sha256(data)


def _host() -> str:
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
    base = os.path.basename(os.path.abspath(out)) + f".spill.{_host()}.{os.getpid()}"
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
    """Append refused records to ``OUT.rejects`` as ``reason<TAB>record`` lines; its path."""
    from .writer import Writer

    lines = b"".join(
        reason.replace("\t", " ").replace("\n", " ").encode() + b"\t" + rec.rstrip(b"\n") + b"\n"
        for reason, rec in items
    )
    path = rejects_path(out)
    with Writer(
        path, lock=lock, sync=sync, timeout=timeout, side_file=True, mode=side_mode(out)
    ) as w:
        w.append(lines)
    return path


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


class RecoverReport(NamedTuple):
    """What :func:`recover` moved into OUT, and the spill files it left to a live writer."""

    files: list[str]
    records: int
    bytes: int
    busy: list[str]


def _owner_alive(path: str) -> bool:
    """Whether the spill file's writer still runs on this host (it may append more)."""
    tail = os.path.basename(path).split(".spill.", 1)[-1]  # <host>.<pid>[.<n>]
    mine = _host() + "."
    if not tail.startswith(mine):
        return False  # another host's writer: this host cannot tell, and it has ended its job
    pid_text = tail[len(mine) :].split(".", 1)[0]
    if not pid_text.isdigit() or int(pid_text) == os.getpid():
        return False
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class _Skip(Exception):
    """Raised under OUT's lock: this spill file is not to be appended."""

    def __init__(self, done: bool) -> None:
        super().__init__()
        self.done = done  # True: its records are in OUT already; False: another recover has it


def _claim(spill: str, digest: str, fd: int, st: os.stat_result, payload: bytes) -> None:
    """Under OUT's lock, just before ``payload`` (a spill file's records) goes to OUT.

    A recover killed after OUT's fsync but before it removed the spill file would append
    the same records again on the next run. So a journal beside the spill file first notes
    where they go (OUT's device, inode, offset, length and digest) and which spill content
    they are; a later recover that finds the journal, and those bytes in OUT, only removes
    the spill file. Holding the lock also keeps two recovers from taking one spill file.
    """
    journal = spill + JOURNAL_SUFFIX
    if _already_in(journal, digest, fd, st):
        raise _Skip(done=True)
    if not os.path.exists(spill):
        raise _Skip(done=False)  # another recover appended it meanwhile
    note = f"{digest} {st.st_dev} {st.st_ino} {st.st_size} {len(payload)} "
    note += _sha256(payload).hexdigest() + "\n"
    jfd = os.open(
        journal, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
    )
    try:
        write_all(jfd, note.encode())
        os.fsync(jfd)
    finally:
        os.close(jfd)
    fsync_dir(os.path.dirname(journal) or ".")


def _already_in(journal: str, digest: str, fd: int, st: os.stat_result) -> bool:
    """Whether ``journal`` proves that this spill content was appended to OUT (open as fd)."""
    try:
        with open(journal, "rb") as f:
            fields = f.read(4096).decode("ascii").split()
        data_digest, dev, ino, offset, length, payload_digest = fields
        if data_digest != digest or (int(dev), int(ino)) != (st.st_dev, st.st_ino):
            return False
        pos, end = int(offset), int(offset) + int(length)
        if st.st_size < end:
            return False
        h = _sha256()
        while pos < end:
            chunk = os.pread(fd, min(1 << 20, end - pos), pos)
            if not chunk:
                return False
            h.update(chunk)
            pos += len(chunk)
    except (OSError, ValueError):  # none, unreadable or damaged: proves nothing
        return False
    return h.hexdigest() == payload_digest


def recover(
    out: str,
    spills: Iterable[str] | None = None,
    *,
    lock: str = "auto",
    timeout: float = 600.0,
    force: bool = False,
) -> RecoverReport:
    """Append spill files to OUT under the lock, fsync, then remove each one.

    ``spills`` defaults to the spill files beside OUT. For a tsv or csv OUT, a spill file
    whose first line is OUT's header gives up that line when OUT already has it. A spill file
    is removed only after its records were written and fsynced, and a journal beside it
    (``SPILL.recovering``) lets a recover that was interrupted in between be repeated
    without appending them twice.
    """
    from .records import format_for
    from .writer import Writer

    out = os.fspath(out)
    # Only a tsv or csv OUT starts with a header (verify and read_records read it so). In
    # lines format a spill file's first line is a record, and one equal to OUT's first line
    # must not be taken for a repeated header and dropped; a lines OUT written with
    # --columns may then show its header line once more, which is visible, not lost.
    headed = format_for(out) != "lines"
    paths = list(spills) if spills is not None else find_spills(out)
    done: list[str] = []
    busy = [p for p in paths if not force and _owner_alive(p)]
    records = size = 0
    with Writer(out, lock=lock, sync="fsync", timeout=timeout) as w:
        for p in paths:
            if p in busy:
                continue
            try:
                with open(p, "rb") as f:
                    data = f.read()
            except FileNotFoundError:
                continue  # another recover took it
            if data and not data.endswith(b"\n"):
                data += b"\n"
            nl = data.find(b"\n")
            first = data[: nl + 1] if nl >= 0 and headed else None
            claim = functools.partial(_claim, p, _sha256(data).hexdigest())
            try:
                size += w.append(
                    data, skip_first_line_if_equal=first, spill=False, under_lock=claim
                )
                records += data.count(b"\n") - (1 if w.skipped_first_line else 0)
            except _Skip as e:
                if not e.done:
                    continue
            # Only now, with the records fsynced in OUT: the spill file, then its journal.
            with contextlib.suppress(FileNotFoundError):
                os.remove(p)
            _remove_quietly(p + JOURNAL_SUFFIX)
            done.append(p)
    if spills is None:
        for j in glob.glob(glob.escape(out) + ".spill.*" + JOURNAL_SUFFIX):
            if not os.path.lexists(j[: -len(JOURNAL_SUFFIX)]):
                _remove_quietly(j)  # its spill file is gone: a recover died before this
    return RecoverReport(done, records, size, busy)
