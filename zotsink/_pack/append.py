"""Appending members to one shared tar: ``append_member`` and ``append_members``.

One call is one contiguous block of members written with one ``write()`` on an
``O_APPEND`` descriptor under the archive's exclusive lock, then (per the sync policy)
fsynced, then committed by its index rows. Before writing, under the same lock,
:func:`.archive.settle` cuts back a torn tail a killed writer left, so that the grid stays
whole for every reader. A lock timeout or a failed write saves the call's members to a
spill tar beside the archive (``ARCHIVE.spill.<host>.<pid>``), which
:func:`recover_archive` appends later.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import os
import time
import warnings
from collections.abc import Iterable, Mapping
from typing import Final, NamedTuple, Union

from .._core import sidefiles
from .._core.backoff import STALE_HANDLE, tries
from .._core.fileio import fresh_stat, open_created, side_bits, side_file_problem, write_all
from .._core.fsinfo import wants_fsync
from .._core.locking import Locker
from .._core.options import WriteOptions, write_options
from .._core.stamp import stamp_values, utc_now
from .._core.writer import seen_to, until_seen
from ..errors import LockError, RecordError, UsageError, WriteError, ZotsinkError, ZotsinkWarning
from . import tarfmt
from .archive import Settled, check_adoptable, rewrite_index, settle
from .index import HEADER, IndexCache, Row, format_rows, index_path
from .locked import locked_archive
from .tarfmt import TarDamage

__all__ = [
    "MAX_MEMBER",
    "Pending",
    "append_member",
    "append_members",
    "append_pending",
    "check_name",
]

#: Default largest member (``--max-member``): beyond it a member is refused.
MAX_MEMBER: Final = 4 << 30
#: Provenance recorded per member, in the index and in its PAX comment.
PROVENANCE: Final = ("time", "host", "job", "task", "tasknum", "attempt")
#: ... of which these do not change within a process,
_FIXED: Final = ("host", "job", "task")
#: ... and these are the task of ``zotsink run`` and its attempt (empty outside run, and
#: then left out of the PAX comment, which stays as it was before they were recorded).
_RUN: Final = ("tasknum", "attempt")

Data = Union[bytes, bytearray, memoryview]


class Pending(NamedTuple):
    """A member about to be appended, with the attributes its header gets."""

    name: str
    data: bytes
    mode: int = 0o644
    mtime: int | None = None  #: None: the time of the append
    uid: int | None = None  #: None: this process's
    gid: int | None = None
    provenance: Mapping[str, str] | None = None  #: None: this task's (see PROVENANCE)


#: Per process: what each archive's index held at our last look (see IndexCache).
_caches: dict[str, tuple[int, IndexCache]] = {}


def _cache(path: str) -> IndexCache:
    pid = os.getpid()
    got = _caches.get(path)
    if got is None or got[0] != pid:  # a forked child starts afresh
        got = _caches[path] = (pid, IndexCache())
    return got[1]


def check_name(name: str) -> str:
    """``name`` if tar can store and extract it safely; RecordError says what is wrong."""
    if not isinstance(name, str):
        raise RecordError(f"a member name must be a str, not {type(name).__name__}")
    why = None
    if not name:
        why = "it is empty"
    elif any(ord(c) < 32 or ord(c) == 127 for c in name):
        why = "it contains a control character (a newline, tab or NUL)"
    elif name.startswith("/"):
        why = "it is absolute; tar would strip the '/' on extraction"
    elif name.endswith("/"):
        why = "it ends in '/', which names a directory"
    elif any(part in ("", ".", "..") for part in name.split("/")):
        why = "it has an empty, '.' or '..' component"
    if why:
        raise RecordError(f"member name {name!r} refused: {why}")
    return name


#: The longest name of one path component that the filesystems tar extracts to can hold
#: (NAME_MAX of ext4, xfs, btrfs, NFS, Lustre): a longer one stores, but never extracts.
NAME_MAX: Final = 255


def _refuse_long_components(items: Iterable[Pending]) -> None:
    for it in items:
        long = [
            p for p in it.name.split("/") if len(p.encode("utf-8", "surrogateescape")) > NAME_MAX
        ]
        if long:
            raise UsageError(
                f"member name {it.name[:80]!r}... refused: its component {long[0][:40]!r}... has "
                f"{len(long[0].encode('utf-8', 'surrogateescape'))} bytes, over the "
                f"{NAME_MAX} a file name may have: tar could store it but never extract it; "
                "give a shorter --name or --prefix; nothing was appended"
            )


#: Per process and archive: the directories the index's names imply, with the rows list
#: they were read from and how many of its rows (see :func:`_refuse_clashes`).
_dirs: dict[str, tuple[list[Row], int, set[str]]] = {}


def _refuse_clashes(path: str, rows: list[Row], cache: IndexCache) -> None:
    """Refuse (UsageError) names that tar cannot extract beside the archive's others: a
    member ``res`` and then ``res/x`` (``res`` would have to be a file and a directory),
    or the other way round. Run under the archive's lock, after the index was read."""
    known = _dirs.get(path)
    if known is None or known[0] is not cache.rows or known[1] > len(cache.rows):
        known = (cache.rows, 0, set())
    dirs = known[2]
    for r in cache.rows[known[1] :]:
        dirs.update(_parents(r.name))
    _dirs[path] = (cache.rows, len(cache.rows), dirs)
    new_dirs = {d: r.name for r in rows for d in _parents(r.name)}
    new_files = {r.name for r in rows}
    for r in rows:
        if r.name in dirs or r.name in new_dirs:
            other = "a member of the archive" if r.name in dirs else repr(new_dirs[r.name])
            why = f"{other} needs {r.name!r} as a directory"
        else:
            parent = next((d for d in _parents(r.name) if d in cache.names or d in new_files), None)
            if parent is None:
                continue
            why = f"{parent!r} is a member (a file), and {r.name!r} needs it as a directory"
        raise UsageError(
            f"{path}: member name {r.name!r} refused: {why}; tar could store both but "
            "never extract both: give another --name or --prefix; nothing was appended",
            path=path,
        )


def _parents(name: str) -> list[str]:
    """``a/b/c`` -> ``["a", "a/b"]``."""
    parts = name.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]


@functools.lru_cache(maxsize=64)
def _names(uid: int, gid: int) -> tuple[str, str]:
    """User and group names for the header (each lookup reads /etc/passwd: cached)."""
    import grp
    import pwd

    try:
        uname = pwd.getpwuid(uid).pw_name
    except KeyError:
        uname = ""
    try:
        gname = grp.getgrgid(gid).gr_name
    except KeyError:
        gname = ""
    return uname, gname


@functools.lru_cache(maxsize=1)
def _origin(pid: int) -> tuple[str, ...]:
    # host, job and task do not change within a process (the pid keys a forked child)
    return tuple(stamp_values(_FIXED))


def _provenance() -> dict[str, str]:
    # tasknum and attempt are read afresh: a long-lived process may run several tasks
    return dict(zip(PROVENANCE, (utc_now(), *_origin(os.getpid()), *stamp_values(_RUN))))


def _build(items: list[Pending], max_member: int) -> tuple[bytes, list[Row]]:
    """The bytes of all members and their index rows (offsets relative to the block)."""
    seen: set[str] = set()
    for it in items:
        check_name(it.name)
        if it.name in seen:
            raise RecordError(f"member name {it.name!r} is given twice in one append")
        seen.add(it.name)
        if not isinstance(it.data, (bytes, bytearray, memoryview)):
            kind = type(it.data).__name__
            raise RecordError(f"member {it.name!r}: data must be bytes, not {kind}")
        if len(it.data) > max_member:
            raise RecordError(
                f"member {it.name!r} has {len(it.data)} bytes, over the limit of {max_member}; "
                "raise --max-member if it belongs in the archive"
            )
    own = _provenance()
    now = int(time.time())
    pieces: list[bytes] = []
    rows: list[Row] = []
    pos = 0
    for it in items:
        data = bytes(it.data)
        digest = hashlib.sha256(data).hexdigest()
        prov = dict(own if it.provenance is None else it.provenance)
        uid = os.getuid() if it.uid is None else it.uid
        gid = os.getgid() if it.gid is None else it.gid
        uname, gname = _names(uid, gid)
        said = {k: v for k, v in prov.items() if v or k not in _RUN}
        comment = tarfmt.make_comment({"sha256": digest, **said})
        blob = tarfmt.build_member(
            it.name,
            data,
            mtime=now if it.mtime is None else it.mtime,
            mode=it.mode,
            uid=uid,
            gid=gid,
            uname=uname,
            gname=gname,
            comment=comment,
        )
        rows.append(Row(pos, len(data), it.name, digest, *(prov.get(k, "") for k in PROVENANCE)))
        pieces.append(blob)
        pos += len(blob)
    return b"".join(pieces), rows


def append_member(path: str | os.PathLike[str], name: str, data: Data, **options: object) -> Row:
    """Append one member; its index row. Options as for :func:`append_members`."""
    return append_members(path, [(name, data)], **options)[0]  # type: ignore[arg-type]


def append_members(
    path: str | os.PathLike[str],
    members: Mapping[str, Data] | Iterable[tuple[str, Data] | Pending],
    *,
    replace: bool = False,
    lock: str = "auto",
    sync: str = "auto",
    timeout: float = 600.0,
    max_member: int = MAX_MEMBER,
    seal: bool = False,
) -> list[Row]:
    """Append members (name -> bytes) to the tar at ``path``, adjacent, under one lock hold.

    Returns their index rows. Raises :class:`RecordError` (nothing appended) for a bad name,
    a name already in the archive (unless ``replace``: tar extracts the last member of a
    name), or a member over ``max_member`` bytes. Under ``zotsink run`` (``ZOTSINK_TASKNUM``
    and ``ZOTSINK_ATTEMPT`` set) each member records its task and attempt, and a retry may
    append a name again: when every member of that name is of the same task and an earlier
    attempt, the new one is appended after them, and tar extracts it.

    On a lock timeout or a failed write the members are saved to a spill tar and
    :class:`LockTimeout` / :class:`LockError` / :class:`WriteError` is raised with its
    ``spill_path``. ``seal`` ends the archive with the two zero blocks of a finished tar, for
    export; the next append removes them.
    """
    # the shared options, refused in the words of every other writer
    opts = write_options(lock=lock, sync=sync, timeout=timeout)
    raw = members.items() if isinstance(members, Mapping) else members
    items = [m if isinstance(m, Pending) else Pending(m[0], m[1]) for m in raw]
    return append_pending(path, items, opts, replace=replace, max_member=max_member, seal=seal)


def append_pending(
    path: str | os.PathLike[str],
    items: list[Pending],
    opts: WriteOptions,
    *,
    replace: bool = False,
    max_member: int = MAX_MEMBER,
    seal: bool = False,
    spill: bool = True,
) -> list[Row]:
    """:func:`append_members` for members with their own attributes, with the lock, sync
    and timeout of ``opts`` (:func:`.options.write_options`, built by the caller at its
    edge); ``spill=False`` raises without saving them (for :func:`.recover.recover_archive`,
    whose spill file has them)."""
    path = os.fspath(path)
    if path == "-":  # a tar on standard output is `tar cf - FILE...`: pack appends to a file
        raise UsageError(
            "ARCHIVE - would be a file named '-': pack appends to a named, shared tar; name it"
        )
    if not items:
        return []
    blob, rows = _build(items, max_member)  # checks each name first
    _refuse_long_components(items)
    locker = Locker(opts.lock, path)
    remote = wants_fsync(path)  # a network or FUSE filesystem
    fsync = opts.sync == "fsync" or (opts.sync == "auto" and remote)
    timeout = opts.timeout
    try:
        return _append_locked(path, blob, rows, locker, timeout, fsync, remote, replace, seal)
    except (LockError, WriteError) as e:  # LockTimeout is a LockError
        if spill:
            _save(path, e, blob)
        raise
    except RecordError:
        raise
    except OSError as e:
        err = WriteError(f"cannot append to {path}: {e.strerror or e}", path=path, errno=e.errno)
        if spill:
            _save(path, err, blob)
        raise err from e


def _save(path: str, e: ZotsinkError, blob: bytes) -> None:
    mode = sidefiles.side_mode(path) if os.path.exists(path) else 0o600
    e.spill_path = sidefiles.spill(path, blob, mode=mode)
    e.message += (
        f"; the members were saved to the spill tar {e.spill_path}: "
        f"`zotsink recover {path}` appends them"
    )


def _open_index(path: str, mode: int) -> int:
    idx = index_path(path)
    # O_NONBLOCK: a FIFO planted at the name must not hang the open before it is refused
    fd = open_created(
        idx,
        os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
        mode,
    )
    try:
        # the index may be shared like the archive, but never planted, and never a FIFO
        problem = side_file_problem(os.fstat(fd), idx, own=False)
        if problem:
            raise WriteError(
                f"{idx}, the index of {path}, is not written to: {problem}; choose "
                "another archive (and ask its owner or an administrator to remove it)",
                path=idx,
                errno=errno.EPERM,
            )
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _append_locked(
    path: str,
    blob: bytes,
    rows: list[Row],
    locker: Locker,
    timeout: float,
    fsync: bool,
    remote: bool,
    replace: bool,
    seal: bool,
) -> list[Row]:
    cache = _cache(path)
    with locked_archive(path, locker, timeout) as fd:
        mode = side_bits(os.fstat(fd).st_mode)  # the index's: the archive's, less go-w
        if not os.path.lexists(index_path(path)):
            check_adoptable(fd, path)  # before the index is made: nothing left behind
        idx_fd = _open_index(path, mode)
        try:
            try:
                for last in tries(STALE_HANDLE):
                    if idx_fd < 0:  # after the pause: the client's cache has let go
                        idx_fd = _open_index(path, mode)
                    try:
                        settled = _settle_seen(fd, idx_fd, cache, path, mode, fsync, remote)
                        break
                    except OSError as e:
                        # another client replaced the index (a rebuild): follow its name
                        if e.errno != errno.ESTALE or last:
                            raise
                        with contextlib.suppress(OSError):
                            os.close(idx_fd)
                        idx_fd = -1
                        cache.reset()
            except TarDamage as e:
                raise WriteError(
                    f"{path} is damaged at {e} and zotsink cuts only the torn tail of a killed "
                    f"writer; nothing was appended: run `zotsink verify {path}`",
                    path=path,
                    errno=errno.EIO,
                ) from e
            if settled.rebuilt:
                os.close(idx_fd)
                idx_fd = -1
                idx_fd = _open_index(path, mode)
                cache.refresh(idx_fd, remote)
            for note in settled.notes(path):
                warnings.warn(note, ZotsinkWarning, stacklevel=4)
            if cache.old_columns and not cache.problems:
                # An index of eight columns, from an older version: rewritten whole with the
                # run columns, so that every row has the columns its first line names. (With
                # a malformed row it is left as it is: rows of either width are read.)
                rewrite_index(path, cache.rows, mode=mode)
                os.close(idx_fd)
                idx_fd = -1
                idx_fd = _open_index(path, mode)
                cache.reset()
                cache.refresh(idx_fd, remote)
            if not replace:
                _refuse_existing(path, rows, cache)
            _refuse_clashes(path, rows, cache)
            base = settled.end
            placed = [r._replace(offset=base + r.offset) for r in rows]
            try:
                write_all(fd, blob)
                if fsync:
                    os.fsync(fd)
            except OSError as e:
                _cut(fd, base)
                raise WriteError(
                    f"cannot append to {path}: {e.strerror or e}", path=path, errno=e.errno
                ) from e
            # The commit: the members are whole (and durable per the policy) before their rows.
            lines = (HEADER if cache.consumed == 0 else b"") + format_rows(placed)
            try:
                write_all(idx_fd, lines)
                if fsync:
                    os.fsync(idx_fd)
            except OSError as e:
                _cut(idx_fd, cache.consumed)
                _cut(fd, base)
                raise WriteError(
                    f"cannot append to {index_path(path)}: {e.strerror or e}",
                    path=path,
                    errno=e.errno,
                ) from e
            cache.add(placed, cache.consumed + len(lines))
            st = os.fstat(fd)
            cache.archive_end = (st.st_dev, st.st_ino, base + len(blob))
            if seal:
                _seal(fd, fsync)
            return placed
        finally:
            if idx_fd >= 0:
                with contextlib.suppress(OSError):  # ESTALE: replaced by another client
                    os.close(idx_fd)


def _settle_seen(
    fd: int, idx_fd: int, cache: IndexCache, path: str, mode: int, fsync: bool, remote: bool
) -> Settled:
    """:func:`.archive.settle`, on a network filesystem once this client reads what the
    server's sizes say is there. A GlusterFS client may serve a small archive or index from
    content it cached before another node appended: settle would take the short read for a
    torn member (a false "damaged"), or, the new index rows unseen too, cut a whole member.
    The wait is the record writer's for OUT's first line, for the index rows settle reads
    and for a verdict of damage (real damage is reported after the wait, as before).
    """
    if not remote:
        return settle(fd, idx_fd, cache, archive=path, mode=mode, fsync=fsync)
    dev, ino, size = fresh_stat(idx_fd, True)
    same = cache.ident == (dev, ino) and size >= cache.consumed
    seen_to(idx_fd, size, cache.consumed if same else 0)

    def look() -> Settled | TarDamage:
        try:
            return settle(fd, idx_fd, cache, archive=path, mode=mode, fsync=fsync, coherent=True)
        except TarDamage as e:  # raised before settle changes anything
            return e

    got = until_seen(look, lambda r: not isinstance(r, TarDamage))
    if isinstance(got, TarDamage):
        raise got
    return got


def _refuse_existing(path: str, rows: list[Row], cache: IndexCache) -> None:
    taken = [r for r in rows if r.name in cache.names]
    if not taken:
        return
    earlier: dict[str, list[Row]] = {r.name: [] for r in taken}
    for old in cache.rows:
        if old.name in earlier:
            earlier[old.name].append(old)
    for r in taken:
        if _is_retry(r, earlier[r.name]):
            continue
        old = cache.rows[cache.names[r.name]]
        where = ", ".join(
            f"{k} {v}"
            for k, v in (
                ("host", old.host),
                ("job", old.job),
                ("task", old.task),
                ("run task", old.tasknum),
                ("attempt", old.attempt),
            )
            if v
        )
        raise RecordError(
            f"{path} already has a member named {r.name!r} (offset {old.offset}, appended "
            f"{old.time or 'at an unknown time'}{' by ' + where if where else ''}); nothing was "
            "appended: give another name or --prefix, or --replace to add a newer one "
            "(tar extracts the last member of a name)",
            path=path,
        )


def _is_retry(new: Row, earlier: list[Row]) -> bool:
    """Whether ``new`` is a later attempt of the run task that appended every member of its
    name so far: a retry rewrites what its failed attempts wrote, and is appended after
    them. Anything else (another task, the same or an older attempt, a member packed
    outside run) is a name given twice by mistake."""
    mine = new.run_attempt()
    if mine is None:
        return False
    for old in earlier:
        theirs = old.run_attempt()
        if theirs is None or theirs[0] != mine[0] or theirs[1] >= mine[1]:
            return False
    return True


def _seal(fd: int, fsync: bool) -> None:
    # Two zero blocks: the end-of-archive marker for tools that want a finished tar. Not
    # part of any member; the next writer strips them under the lock.
    write_all(fd, bytes(2 * tarfmt.BLOCK))
    if fsync:
        os.fsync(fd)


def _cut(fd: int, size: int) -> None:
    # We hold the lock, so ``size`` is exact: nothing partial stays behind.
    with contextlib.suppress(OSError):
        os.ftruncate(fd, size)
