"""The tar format as ``pack`` writes and checks it: one member at a time on the 512-byte grid.

A member is its headers (a PAX extended header, when present, then the ustar header), its
data, and zero padding to the next multiple of 512. ``pack`` never writes the two zero
blocks that end an archive: every tar reader lists an archive without them, while archives
concatenated with them hide everything after the first end (GNU tar and bsdtar without
``-i``, tarfile without ``ignore_zeros``).

Headers are built by :meth:`tarfile.TarInfo.tobuf`, the standard PAX encoder. They are read
back here, not through :mod:`tarfile`: a torn member in the middle of an archive shifts the
grid, and tarfile then reports success while reading garbage, so it cannot be the judge of
an archive. :func:`walk` checks every header's checksum and magic, and that every member's
data lies within the file.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Final, NamedTuple

__all__ = [
    "BLOCK",
    "COMMENT_TAG",
    "Member",
    "TarDamage",
    "build_member",
    "file_reader",
    "make_comment",
    "member_at",
    "padded",
    "parse_comment",
    "walk",
]

#: The tar grid: every header and every member's data start on a multiple of this.
BLOCK: Final = 512
#: First word of the PAX ``comment`` record pack writes. ``comment`` is a standard keyword,
#: so readers keep quiet about it; a keyword of our own would make GNU tar warn on every member.
COMMENT_TAG: Final = "zotsink"
#: Header type flags of a regular file (``\0`` is the pre-POSIX spelling).
_REGULAR: Final = (b"0", b"\0", b"7")
#: Type flags of headers that describe the next header rather than being members.
_META: Final = (b"x", b"g", b"L", b"K")
_ZERO_BLOCK: Final = bytes(BLOCK)

#: ``read(offset, length)`` -> bytes; fewer than ``length`` only at the end of the file.
Reader = Callable[[int, int], bytes]


def padded(size: int) -> int:
    """``size`` rounded up to the 512-byte grid."""
    return -(-size // BLOCK) * BLOCK


class Member(NamedTuple):
    """One member as found in an archive."""

    offset: int  #: where its first header starts (the PAX header, when it has one)
    data_offset: int  #: where its data starts
    size: int  #: bytes of data
    name: str
    mtime: int
    regular: bool  #: a regular file (pack writes nothing else)
    pax: dict[str, str]  #: its PAX records (``path``, ``comment``, ...)
    mode: int = 0o644
    uid: int = 0
    gid: int = 0

    @property
    def end(self) -> int:
        """Where the next member starts."""
        return self.data_offset + padded(self.size)


class TarDamage(Exception):
    """The archive's structure breaks at ``offset`` (the member there is torn or broken).

    ``tail`` is True for a member cut short by the end of the file, the mark of a writer
    killed mid-append; anything else (bad checksum, no magic, zero blocks followed by
    data, data that does not match its sha256) is damage no zotsink writer leaves.
    """

    def __init__(self, offset: int, why: str, *, tail: bool = False) -> None:
        super().__init__(f"offset {offset}: {why}")
        self.offset = offset
        self.why = why
        self.tail = tail


def build_member(
    name: str,
    data: bytes,
    *,
    mtime: int,
    mode: int = 0o644,
    uid: int = 0,
    gid: int = 0,
    uname: str = "",
    gname: str = "",
    comment: str | None = None,
) -> bytes:
    """Headers, data and padding of one regular-file member, ready to append."""
    import tarfile  # slow to import: only the pack commands pay for it

    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = mtime
    info.mode = mode & 0o7777
    info.uid, info.gid = uid, gid
    info.uname, info.gname = uname, gname
    info.type = tarfile.REGTYPE
    if comment is not None:
        info.pax_headers = {"comment": comment}
    # PAX: long or non-ASCII names and large ids go into standard PAX records.
    head = info.tobuf(format=tarfile.PAX_FORMAT, encoding="utf-8", errors="strict")
    return head + data + bytes(padded(len(data)) - len(data))


def make_comment(fields: Mapping[str, str]) -> str:
    """The PAX comment pack records with each member: ``zotsink k=v k=v ...``."""

    # Values are percent-escaped ("%" and " " only) so that the words split back exactly.
    def esc(v: str) -> str:
        return v.replace("%", "%25").replace(" ", "%20")

    return " ".join([COMMENT_TAG, *(f"{k}={esc(v)}" for k, v in fields.items())])


def parse_comment(comment: str | None) -> dict[str, str]:
    """The fields of a comment written by :func:`make_comment`; {} for any other comment."""
    if not comment:
        return {}
    words = comment.split(" ")
    if words[0] != COMMENT_TAG:
        return {}
    out: dict[str, str] = {}
    for w in words[1:]:
        k, sep, v = w.partition("=")
        if sep:
            out[k] = v.replace("%20", " ").replace("%25", "%")
    return out


def _number(field: bytes) -> int:
    """A numeric header field: octal text, or GNU base-256 when the top bit is set."""
    if field and field[0] & 0x80:
        value = field[0] & 0x3F if field[0] == 0x80 else -1
        for b in field[1:]:
            value = (value << 8) | b
        return value
    text = field.split(b"\0", 1)[0].strip(b" ")
    return int(text, 8) if text else 0


def _checksum_ok(block: bytes) -> bool:
    try:
        stored = _number(block[148:156])
    except ValueError:
        return False
    # The sum counts the checksum field as eight spaces; old tars summed signed bytes.
    rest = block[:148] + block[156:]
    unsigned = sum(rest) + 8 * 32
    return stored == unsigned or stored == unsigned - 256 * sum(1 for b in rest if b & 0x80)


def _parse_pax(data: bytes, offset: int) -> dict[str, str]:
    """PAX records ``"<len> <key>=<value>\\n"``; malformed ones are damage."""
    out: dict[str, str] = {}
    pos = 0
    while pos < len(data):
        if data[pos] == 0:  # padding some writers leave at the end of the records
            break
        sp = data.find(b" ", pos)
        try:
            length = int(data[pos:sp])
        except ValueError:
            raise TarDamage(offset, "malformed PAX record") from None
        rec = data[sp + 1 : pos + length]
        if length <= 0 or not rec.endswith(b"\n") or b"=" not in rec:
            raise TarDamage(offset, "malformed PAX record")
        key, _, value = rec[:-1].partition(b"=")
        out[key.decode("utf-8", "replace")] = value.decode("utf-8", "surrogateescape")
        pos += length
    return out


def _read(read: Reader, offset: int, length: int, limit: int) -> bytes:
    want = min(length, max(limit - offset, 0))
    return read(offset, want) if want else b""


def member_at(read: Reader, offset: int, limit: int) -> Member | None:
    """The member whose first header starts at ``offset``, checked; None at an archive end.

    ``limit`` is the file's size: a member whose headers or data reach past it is torn.
    Raises :class:`TarDamage` for a torn or broken member. None means zero blocks from
    ``offset`` to ``limit`` (an archive sealed for export).
    """
    pax: dict[str, str] = {}
    long_name: str | None = None
    first = offset
    pos = offset
    while True:
        block = _read(read, pos, BLOCK, limit)
        if len(block) < BLOCK:
            raise TarDamage(
                first,
                f"torn member: only {limit - first} bytes of its headers are in the file",
                tail=True,
            )
        if block == _ZERO_BLOCK:
            if pos != first:
                raise TarDamage(first, "a zero block where a header should follow")
            if _all_zero(read, pos, limit):
                return None
            raise TarDamage(pos, "zero blocks in the middle of the archive")
        if block[257:262] != b"ustar":
            raise TarDamage(pos, "no ustar magic: not a tar header (the grid is broken)")
        if not _checksum_ok(block):
            raise TarDamage(pos, "header checksum does not match")
        try:
            mode, uid, gid = (_number(block[a : a + 8]) for a in (100, 108, 116))
            size = _number(block[124:136])
            mtime = _number(block[136:148])
        except ValueError:
            raise TarDamage(pos, "unreadable size or time in the header") from None
        flag = block[156:157]
        data_at = pos + BLOCK
        if flag in _META:
            body = _read(read, data_at, size, limit)
            if len(body) < size:
                raise TarDamage(
                    first, f"torn member: its {size}-byte PAX header is cut short", tail=True
                )
            if flag == b"x":
                pax.update(_parse_pax(body, pos))
            elif flag == b"L":  # GNU long name; K (long link target) is skipped
                long_name = body.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
            pos = data_at + padded(size)
            continue
        if "size" in pax:
            try:
                size = int(pax["size"])
            except ValueError:
                raise TarDamage(pos, "unreadable PAX size") from None
        name = pax.get("path") or long_name or _ustar_name(block)
        if data_at + padded(size) > limit:
            have = max(limit - data_at, 0)
            what = (
                f"{have} of its {size} data bytes are in the file"
                if have < size
                else "its padding to 512 bytes is cut short"
            )
            raise TarDamage(first, f"torn member {name!r}: {what}", tail=True)
        if "uid" in pax or "gid" in pax:
            uid, gid = int(pax.get("uid", uid)), int(pax.get("gid", gid))
        return Member(first, data_at, size, name, mtime, flag in _REGULAR, pax, mode, uid, gid)


def _ustar_name(block: bytes) -> str:
    name = block[0:100].split(b"\0", 1)[0]
    prefix = block[345:500].split(b"\0", 1)[0]
    full = prefix + b"/" + name if prefix else name
    return full.decode("utf-8", "surrogateescape")


def _all_zero(read: Reader, pos: int, limit: int) -> bool:
    while pos < limit:
        chunk = read(pos, min(1 << 20, limit - pos))
        if not chunk:
            return True
        if chunk.count(0) != len(chunk):
            return False
        pos += len(chunk)
    return True


def walk(read: Reader, start: int, limit: int) -> Iterator[Member]:
    """Every member from ``start`` to ``limit``, in order; :class:`TarDamage` where it breaks.

    Ends quietly at ``limit`` or at zero blocks that run to ``limit`` (a sealed archive).
    """
    pos = start
    while pos < limit:
        m = member_at(read, pos, limit)
        if m is None:
            return
        yield m
        pos = m.end


def file_reader(fd: int) -> Reader:
    """A :data:`Reader` over an open descriptor (pread: no shared file position)."""
    import os

    def read(offset: int, length: int) -> bytes:
        out = os.pread(fd, length, offset)
        while len(out) < length:  # pread may return short on network filesystems
            more = os.pread(fd, length - len(out), offset + len(out))
            if not more:
                break
            out += more
        return out

    return read
