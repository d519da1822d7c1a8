"""Small file operations that several modules need, written once."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import sys
from collections.abc import Iterable, Iterator
from typing import Any, Final

from .backoff import CREATE_RACE, tries

__all__ = [
    "TAR_ENDINGS",
    "RefusedFile",
    "ShortRead",
    "capped_lines",
    "file_kind",
    "fresh_stat",
    "fsync_dir",
    "is_tar_name",
    "line_blocks",
    "lines_backwards",
    "lines_with_ends",
    "open_for_append",
    "open_regular",
    "owner_problem",
    "pread_chunks",
    "same_file",
    "shared_write_problem",
    "side_bits",
    "side_file_problem",
    "split_lines",
    "write_all",
]


#: Names of tar archives: collect reads such a SOURCE as one; a record writer refuses
#: such an OUT (lines in a pack archive read as a torn member, which the next pack cuts).
TAR_ENDINGS: Final = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz")


def is_tar_name(path: str) -> bool:
    return path.lower().endswith(TAR_ENDINGS)


def same_file(a: str, b: str) -> bool:
    """Whether two names lead to one file (by name, through links or as hard links); a name
    that does not exist yet is no other file."""
    if os.path.abspath(a) == os.path.abspath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


#: What a file that is not a regular file is, for messages.
_KINDS: Final = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def file_kind(mode: int) -> str:
    """``"a FIFO"``, ``"a directory"``, ...: what a file of ``mode`` is, for a message."""
    if stat.S_ISREG(mode):
        return "a regular file"
    return next((k for test, k in _KINDS if test(mode)), "not a regular file")


def open_regular(path: str) -> tuple[int, os.stat_result]:
    """Open ``path`` for reading: ``(fd, its fstat)``, or ``(-1, its fstat)``, nothing left
    open, when it is not a regular file. Opened without blocking: a FIFO at the name (one
    planted in a shared directory, or a typo) would otherwise hang the open until someone
    writes to it; a regular file's descriptor is blocking again. ``OSError`` as from open(2).
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode):
            os.set_blocking(fd, True)
            return fd, st
    except BaseException:
        os.close(fd)
        raise
    os.close(fd)
    return -1, st


class ShortRead(OSError):
    """A file read short of the size its server gives (a client's cache lags): read it
    again after a pause."""


class RefusedFile(OSError):
    """A file zotsink will not append to (not a regular file, a planted link or file);
    its ``strerror`` says why and what to do."""


def write_all(fd: int, data: bytes | bytearray | memoryview) -> int:
    """Write all of ``data``: one write() unless the kernel cuts it short; the bytes written."""
    done = os.write(fd, data)
    if done == len(data):  # the common case: one call, no view
        return done
    # Released on the way out, error or not: ``data`` may be a view of a buffer that its
    # owner must be able to resize later, and an error's traceback would keep this alive.
    with memoryview(data) as view:
        while done < len(view):
            with view[done:] as rest:
                n = os.write(fd, rest)
            if n <= 0:  # a regular file never takes 0 bytes of a non-empty write: no spin
                raise OSError(errno.EIO, "write returned 0")
            done += n
    return done


def fsync_dir(directory: str) -> None:
    """fsync a directory so that a name created or renamed in it is on disk; best effort.

    Some filesystems refuse to fsync a directory: the rename or create is done either way.
    """
    try:
        fd = os.open(directory or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def pread_chunks(fd: int, size: int, chunk: int = 1 << 20, start: int = 0) -> Iterator[bytes]:
    """Bytes ``start`` to ``size`` of an open file in chunks, read with pread (the file
    offset is left alone, so an O_APPEND writer on the same descriptor is not disturbed).
    Stops early if the file turns out shorter."""
    pos = start
    while pos < size:
        data = os.pread(fd, min(chunk, size - pos), pos)
        if not data:
            return
        pos += len(data)
        yield data


def open_for_append(path: str, mode: int, *, side_file: bool = False) -> tuple[int, bool]:
    """Open (or create) ``path`` for locked appends: ``(fd, readable)``.

    O_RDWR where allowed, so the torn-tail and header checks can pread the same descriptor
    (opening a second one would drop an fcntl lock the moment it is closed); else O_WRONLY.
    Only a regular file is ever appended to: a FIFO or device planted at the name would
    swallow the records or hang the writer (O_NONBLOCK keeps the open itself from hanging).
    A side file (OUT.rejects, the ledger) is never followed through a symbolic link, must
    belong to this user, and is created without write for group or others
    (:func:`side_bits`); OUT itself is followed through a link only where the kernel's
    protected_symlinks rule would allow it (see :func:`_link_allowed`), whatever the sysctl,
    and is not written when another user planted it (see :func:`side_file_problem`).
    Raises ``OSError`` with the errno that says why.
    """
    flags = os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NONBLOCK
    if side_file:
        flags |= os.O_NOFOLLOW
        mode = side_bits(mode)
    elif not _link_allowed(path):
        raise RefusedFile(
            errno.EPERM,
            "it is a symbolic link in a shared sticky directory that belongs to neither you "
            "nor the directory's owner, so it is not followed; remove it",
        )
    try:
        fd = open_created(path, flags | os.O_RDWR, mode)
        readable = True
    except PermissionError:
        fd = open_created(path, flags | os.O_WRONLY, mode)
        readable = False
    try:
        st = os.fstat(fd)
        problem = side_file_problem(st, path, own=side_file)
        if problem and not stat.S_ISREG(st.st_mode):
            raise RefusedFile(
                errno.EINVAL,
                f"it is {file_kind(st.st_mode)}, not a regular file; name another OUT "
                "(or remove it, if it was put there by mistake)",
            )
        if problem:
            rule = "a side file is only ever your own" if side_file else "it is not written to"
            raise RefusedFile(errno.EPERM, f"{problem}: {rule}; remove it or choose another OUT")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, readable


def open_created(path: str, flags: int, mode: int) -> int:
    """``os.open`` with ``O_CREAT`` (not ``O_EXCL``), robust to a create race.

    A FUSE client (GlusterFS) that looked the name up before another client created the
    file sends its own create after, and the server answers EEXIST even though the open
    was not exclusive. The file is there now: the open is tried again, which looks it up
    (tasks of one array start together, and the first record creates OUT), after pauses
    that let the client's old lookup of the name expire (:data:`.backoff.CREATE_RACE`).
    Raises the last ``OSError``.
    """
    for last in tries(CREATE_RACE):
        try:
            return os.open(path, flags, mode)
        except FileExistsError:
            if flags & os.O_EXCL or last:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


#: Permission bits a side file never has, whatever the umask (002 is usual in a group's
#: directories) or OUT's mode: a file zotsink keeps as its own record (the ledger, the log,
#: rejects, spills, a pack index) is written by its owner only.
SHARED_WRITE: Final = stat.S_IWGRP | stat.S_IWOTH


def side_bits(mode: int) -> int:
    """The permission bits of ``mode`` that a new side file gets: never group's or others'
    write (OUT itself keeps the umask's: it is the user's data, often meant for a group)."""
    return mode & 0o666 & ~SHARED_WRITE


def shared_write_problem(st: os.stat_result) -> str | None:
    """Why a file that decides what zotsink does (a ledger: its rows say which tasks are
    done) is not to be trusted by its permissions: others than its owner may write it."""
    who = [w for bit, w in ((stat.S_IWGRP, "group"), (stat.S_IWOTH, "others")) if st.st_mode & bit]
    if not who:
        return None
    return f"{' and '.join(who)} may write it (mode {stat.S_IMODE(st.st_mode):04o})"


def owner_problem(st: os.stat_result) -> str | None:
    """Why a file or directory (``st``: its stat) is not this user's own, or None."""
    if st.st_uid == os.geteuid():
        return None
    return f"it belongs to {_user_name(st.st_uid)}, not to you"


def side_file_problem(
    st: os.stat_result, path: str | None = None, *, own: bool = True
) -> str | None:
    """Why a file found at a name zotsink writes to or trusts (``st``: its fstat, taken
    after an open that did not follow a planted link) must not be used, or None. The one
    check for every file zotsink appends to or reads back as its own:

    - it is a regular file (a FIFO or device would swallow records or hang the writer);
    - with ``own`` (``OUT.rejects``, spill files, recover's journals, the ledger): it is
      this user's: in a shared directory another user may plant a file at the name, to
      read the records written to it, or to feed records, rows or a forged journal back;
    - without ``own`` (OUT, the log, a pack index: files a group may share): it was not
      planted, that is, in a sticky directory that everyone may write to (``/tmp``, a
      shared scratch area) it belongs to this user or to the directory's owner: the kernel's
      ``protected_regular`` rule, whatever the sysctl. Needs ``path`` to find the
      directory.

    Links are the caller's open: a side file is opened ``O_NOFOLLOW``; OUT is followed only
    where :func:`_link_allowed` says the kernel's ``protected_symlinks`` rule would.
    """
    if not stat.S_ISREG(st.st_mode):
        return "it is not a regular file"
    if st.st_uid == os.geteuid():
        return None
    if own:
        return owner_problem(st)
    if path is None:
        return None
    try:
        parent = os.stat(os.path.dirname(os.path.abspath(path)))
    except OSError:
        return None  # the open found it: a directory that cannot be looked at is no proof
    shared = parent.st_mode & stat.S_ISVTX and parent.st_mode & stat.S_IWOTH
    if shared and st.st_uid != parent.st_uid:
        return (
            f"it belongs to {_user_name(st.st_uid)} and lies in a shared sticky directory "
            "that belongs to neither of you, where anyone may put a file at a name you are "
            "about to use"
        )
    return None


def _user_name(uid: int) -> str:
    import pwd  # only on this error path

    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _link_allowed(path: str) -> bool:
    """Whether a symbolic link at ``path`` may be followed (True when it is no link).

    The kernel's protected_symlinks rule, applied whether or not the sysctl is on: in a
    sticky, world-writable directory (/tmp, a shared scratch directory) a link is followed
    only if it belongs to this user or to the directory's owner. Otherwise another user
    could point OUT at the victim's own private file. Nobody else can replace a link that
    passed the check: the sticky bit lets only its owner remove or rename it.
    """
    try:
        link = os.lstat(path)
    except OSError:
        return True  # nothing there yet (O_CREAT makes a file) or unreadable: open decides
    if not stat.S_ISLNK(link.st_mode):
        return True
    try:
        parent = os.stat(os.path.dirname(os.path.abspath(path)))
    except OSError:
        return False
    shared = parent.st_mode & stat.S_ISVTX and parent.st_mode & stat.S_IWOTH
    return not shared or link.st_uid in (os.geteuid(), parent.st_uid)


# -- a coherent view of another client's appends -------------------------------------------
# On network and FUSE filesystems a client may serve a cached size (and cached pages) for a
# while after another client appended, even under the lock: GlusterFS and NFS both do. pack
# needs exact sizes (index offsets, where a torn tail starts), so there it asks the server:
# statx with AT_STATX_FORCE_SYNC for the size, after dropping the file's cached pages so
# that the bytes read next come from the server too.
_AT_EMPTY_PATH: Final = 0x1000
_AT_STATX_FORCE_SYNC: Final = 0x2000
_STATX_BASIC: Final = 0x7FF
_statx: list[Any] = []


def _load_statx() -> Any:
    if not _statx:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        _statx.append(getattr(libc, "statx", None))
    return _statx[0]


def fresh_stat(fd: int, coherent: bool) -> tuple[int, int, int]:
    """(device, inode, size) of an open file; with ``coherent``, as the server has it now."""
    st = os.fstat(fd)
    ident = (st.st_dev, st.st_ino)
    if not coherent:
        return (*ident, st.st_size)
    with contextlib.suppress(OSError):
        # fsync goes to the server even with nothing to write, and its reply carries the
        # file's current attributes: GlusterFS's client refreshes its cached size from it
        os.fsync(fd)
    with contextlib.suppress(OSError):
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    statx = _load_statx()
    if statx is None:  # no statx in this libc: fstat is the best there is
        return (*ident, st.st_size)
    import ctypes

    buf = ctypes.create_string_buffer(256)
    if statx(fd, b"", _AT_EMPTY_PATH | _AT_STATX_FORCE_SYNC, _STATX_BASIC, buf) != 0:
        err = ctypes.get_errno()
        if err in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
            return (*ident, st.st_size)
        raise OSError(err, os.strerror(err))
    # struct statx: stx_size is the u64 at byte 40
    return (*ident, int.from_bytes(buf.raw[40:48], sys.byteorder))


def line_blocks(chunks: Iterable[bytes]) -> Iterator[tuple[list[bytes], bool]]:
    """The lines (no newlines) of a stream of chunks, one list per chunk: ``(lines, True)``;
    a final piece with no newline comes alone as ``([piece], False)``. The one line splitter
    (readers, verify, the pack index); a line longer than a chunk is joined once, not once
    per chunk."""
    pending: list[bytes] = []
    for chunk in chunks:
        if b"\n" not in chunk:
            pending.append(chunk)
            continue
        if pending:
            pending.append(chunk)
            chunk = b"".join(pending)
            pending = []
        lines = chunk.split(b"\n")
        rest = lines.pop()
        yield lines, True
        if rest:
            pending.append(rest)
    if pending:
        yield [b"".join(pending)], False


def lines_backwards(fd: int, size: int, cap: int) -> Iterator[bytes | None]:
    """The lines of an open file's first ``size`` bytes, last first, without their
    newlines: first what follows the last newline (b"" when the bytes end with one), then
    each whole line; a line longer than ``cap`` comes as None, never held whole (a crash's
    run of zero bytes where a row was being written). :class:`ShortRead` when the file
    cannot be read up to ``size`` (a network client that knows the server's size and
    still reads up to the size it cached). The one backward cutter: a reader of a file's
    last lines (the ledger's last row) cuts them here."""
    end = size
    pending: list[bytes] = []  # the line being put together, read backwards, in order
    held = 0
    while end > 0:
        start = max(0, end - _BACK_WINDOW)
        block = os.pread(fd, end - start, start)
        if end == size and len(block) < end - start:
            # short of the end: whatever the read ends with is not the last line
            raise ShortRead(errno.EAGAIN, f"read {len(block)} of the last {end - start} bytes")
        parts = block.split(b"\n")
        for seg in reversed(parts[1:]):  # each is preceded by a newline in this window
            if held + len(seg) > cap:
                yield None
            else:
                yield b"".join([seg, *pending]) if pending else seg
            pending, held = [], 0
        head = parts[0]
        if held + len(head) > cap:
            pending, held = [], cap + 1  # too long to be a row, whatever comes before
        elif head:
            pending.insert(0, head)
            held += len(head)
        end = start
    if held <= cap:
        yield b"".join(pending)  # the first line: the header


#: Bytes read at a time by lines_backwards.
_BACK_WINDOW: Final = 1 << 16


def capped_lines(chunks: Iterable[bytes], cap: int) -> Iterator[bytes]:
    """The lines (no newlines) of a stream of chunks, each cut to its first ``cap`` bytes;
    a final piece with no newline is left out. Unlike :func:`line_blocks`, no line is ever
    held whole: of a line of any length only its start is kept while the rest is read past,
    for readers that show a line's head (the log's lines in ``status --failed``)."""
    pending = b""  # the start of a line whose newline is still to come, at most ``cap``
    for chunk in chunks:
        lines = chunk.split(b"\n")
        rest = lines.pop()
        for line in lines:
            yield (pending + line[:cap])[:cap] if pending else line[:cap]
            pending = b""
        if len(pending) < cap:
            pending += rest[: cap - len(pending)]


def lines_with_ends(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """The lines of a stream of chunks, each with its newline; a final piece with no
    newline (a torn fragment) comes last as it is. For readers that must keep the exact
    bytes (verify's csv records, which may span lines)."""
    for lines, complete in line_blocks(chunks):
        if complete:
            for line in lines:
                yield line + b"\n"
        else:
            yield lines[0]


def split_lines(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """The lines of a stream of chunks; a final piece with no newline (a torn fragment) is
    not a line and is left out."""
    for lines, complete in line_blocks(chunks):
        if complete:
            yield from lines
