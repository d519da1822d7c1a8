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
from typing import Final, NamedTuple

from .errors import WriteError

__all__ = ["RecoverReport", "find_spills", "recover", "reject", "rejects_path", "spill"]

#: Where spill files go when they cannot be written beside OUT, in order.
_FALLBACK_ENV: Final = ("ZOTSINK_SPILL_DIR", "TMPDIR")

#: Spill files this process created, per OUT, so later batches join the same file.
_open_spills: dict[str, str] = {}


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


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def spill(out: str, data: bytes, *, header: bytes | None = None, mode: int = 0o600) -> str:
    """Save a batch meant for ``out`` to a spill file; returns its full path.

    Tried beside OUT first, then in ``$ZOTSINK_SPILL_DIR``, ``$TMPDIR`` and ``/tmp``. The
    data is fsynced before this returns. Raises :class:`WriteError` only when no place at
    all could take it.
    """
    previous = _open_spills.get(out)
    if previous is not None:
        try:
            _append_existing(previous, data)
            return previous
        except OSError:
            pass  # that place filled up too: start a new file elsewhere
    base = os.path.basename(out) + f".spill.{_host()}.{os.getpid()}"
    errors: list[str] = []
    for d in _spill_dirs(out):
        for n in range(100):
            path = os.path.join(d, base if n == 0 else f"{base}.{n}")
            try:
                fd = os.open(
                    path,
                    os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                    mode & 0o666,
                )
            except FileExistsError:
                continue
            except OSError as e:
                errors.append(f"{d}: {e.strerror}")
                break
            try:
                _write_all(fd, (header or b"") + data)
                os.fsync(fd)
            except OSError as e:
                errors.append(f"{path}: {e.strerror}")
                os.close(fd)
                _remove_quietly(path)
                break
            os.close(fd)
            _open_spills[out] = path
            return path
    count = data.count(b"\n")
    raise WriteError(
        f"could not save {count} records meant for {out} anywhere ("
        + "; ".join(errors)
        + "): they are lost unless the producer can send them again",
        path=out,
    )


def _append_existing(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        size = os.fstat(fd).st_size
        try:
            _write_all(fd, data)
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
        path, lock=lock, sync=sync, timeout=timeout, side_file=True, mode=_mode_of(out)
    ) as w:
        w.append(lines)
    return path


def _mode_of(out: str) -> int:
    try:
        return os.stat(out).st_mode & 0o666
    except OSError:
        return 0o666


def find_spills(out: str) -> list[str]:
    """Spill files of ``out`` that lie beside it, oldest name first."""
    pattern = glob.escape(out) + ".spill.*"
    return sorted(p for p in glob.glob(pattern) if os.path.isfile(p) and not os.path.islink(p))


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


def recover(
    out: str,
    spills: Iterable[str] | None = None,
    *,
    lock: str = "auto",
    timeout: float = 600.0,
    force: bool = False,
) -> RecoverReport:
    """Append spill files to OUT under the lock, fsync, then remove each one.

    ``spills`` defaults to the spill files beside OUT. A spill file whose first line is
    OUT's header gives up that line when OUT already has it. A spill file is removed only
    after its records were written and fsynced, so an interrupted recover can be repeated.
    """
    from .writer import Writer

    out = os.fspath(out)
    paths = list(spills) if spills is not None else find_spills(out)
    done: list[str] = []
    busy = [p for p in paths if not force and _owner_alive(p)]
    records = size = 0
    with Writer(out, lock=lock, sync="fsync", timeout=timeout) as w:
        for p in paths:
            if p in busy:
                continue
            with open(p, "rb") as f:
                data = f.read()
            if data and not data.endswith(b"\n"):
                data += b"\n"
            nl = data.find(b"\n")
            first = data[: nl + 1] if nl >= 0 else None
            size += w.append(data, skip_first_line_if_equal=first, spill=False)
            records += data.count(b"\n") - (1 if w.skipped_first_line else 0)
            os.remove(p)
            done.append(p)
    return RecoverReport(done, records, size, busy)
