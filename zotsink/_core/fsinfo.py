"""Which filesystem a path lives on, read from ``/proc/self/mountinfo``.

The sync policy rests on it: network and FUSE filesystems acknowledge a write before it
reaches the server, so an unlock can overtake the data (measured on GlusterFS with client
write-behind on: locked appends tore until the writer fsynced before unlocking).
"""

from __future__ import annotations

import os
from typing import Final, NamedTuple

__all__ = [
    "NETWORK_FSTYPES",
    "Mount",
    "fs_type",
    "is_network",
    "mount_for",
    "parse_mountinfo",
    "wants_fsync",
]

#: Filesystem types whose writes must be fsynced before the lock is released.
NETWORK_FSTYPES: Final = frozenset(
    {
        "nfs",
        "nfs4",
        "lustre",
        "gpfs",
        "beegfs",
        "ceph",
        "cifs",
        "smb3",
        "smbfs",
        "9p",
        "fuse",
        "fuseblk",
        "glusterfs",
        "afs",
        "ocfs2",
        "gfs2",
        "pvfs2",
        "orangefs",
        "panfs",
        "wekafs",
        "virtiofs",
    }
)


class Mount(NamedTuple):
    """One line of mountinfo: where, what type, from where, with which options.

    ``fstype`` names the filesystem as FUSE subtypes do (``fuse.NAME``) also for a client
    that mountinfo shows as plain ``fuse`` but whose source names it: see :func:`fs_type`.
    """

    mount_point: str
    fstype: str
    source: str
    options: frozenset[str] = frozenset()
    super_options: frozenset[str] = frozenset()

    @property
    def all_options(self) -> frozenset[str]:
        return self.options | self.super_options

    def option(self, name: str) -> str | None:
        """Value of ``name=value`` among the options, ``""`` for a bare flag, None if absent."""
        for opt in self.all_options:
            key, sep, val = opt.partition("=")
            if key == name:
                return val if sep else ""
        return None


def _unescape(field_: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as \ooo octal
    if "\\" not in field_:
        return field_
    out, i = [], 0
    while i < len(field_):
        c = field_[i]
        if c == "\\" and i + 4 <= len(field_) and field_[i + 1 : i + 4].isdigit():
            out.append(chr(int(field_[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(c)
            i += 1
    return "".join(out)


def fs_type(fstype: str, source: str) -> str:
    """The filesystem type of a mountinfo line, with MooseFS named.

    mfsmount mounts as plain ``fuse`` (``fuse.mfs`` only with ``-o subtype=mfs``, and some
    packages say ``fuse.moosefs``); its source ``mfs#HOST:PORT`` always names it. Plain
    ``fuse`` would otherwise leave MooseFS among the FUSE filesystems that keep locks in
    the local kernel.
    """
    if fstype == "fuse.moosefs" or (fstype == "fuse" and source.startswith("mfs#")):
        return "fuse.mfs"
    return fstype


def parse_mountinfo(text: str) -> list[Mount]:
    """Parse the text of ``/proc/self/mountinfo`` (see proc(5)); bad lines are skipped."""
    mounts: list[Mount] = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        lf = left.split()
        rf = right.split()
        if len(lf) < 6 or len(rf) < 2:
            continue
        source = _unescape(rf[1])
        mounts.append(
            Mount(
                mount_point=_unescape(lf[4]),
                fstype=fs_type(rf[0], source),
                source=source,
                options=frozenset(lf[5].split(",")),
                super_options=frozenset(rf[2].split(",")) if len(rf) > 2 else frozenset(),
            )
        )
    return mounts


def _read_mountinfo() -> list[Mount]:
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
            return parse_mountinfo(f.read())
    except OSError:
        return []


def mount_for(path: str | os.PathLike[str], mounts: list[Mount] | None = None) -> Mount | None:
    """The mount holding ``path`` (longest mount-point prefix of its real path).

    ``path`` need not exist yet: its nearest existing parent decides.
    """
    real = os.path.realpath(os.fspath(path))
    if mounts is None:
        mounts = _read_mountinfo()
    best: Mount | None = None
    for m in mounts:
        mp = m.mount_point
        inside = real == mp or real.startswith(mp.rstrip("/") + "/") or mp == "/"
        # later lines win on ties: a mount stacked over another shadows it
        if inside and (best is None or len(mp) >= len(best.mount_point)):
            best = m
    return best


def is_network(fstype: str) -> bool:
    """True for network, cluster and FUSE filesystems."""
    return fstype in NETWORK_FSTYPES or fstype.startswith("fuse.")


_policy_cache: dict[str, bool] = {}


def wants_fsync(path: str | os.PathLike[str]) -> bool:
    """Whether ``--sync auto`` fsyncs before unlocking for a file at ``path``.

    Decided by the directory's filesystem, cached per directory for the process.
    """
    directory = os.path.dirname(os.path.abspath(os.fspath(path)))
    cached = _policy_cache.get(directory)
    if cached is None:
        m = mount_for(directory)
        cached = _statfs_says_network(directory) if m is None else is_network(m.fstype)
        _policy_cache[directory] = cached
    return cached


# f_type magic numbers of network filesystems, for when mountinfo cannot be read
_NETWORK_MAGIC: Final = {
    0x6969: "nfs",
    0x0BD00BD0: "lustre",
    0x47504653: "gpfs",
    0x19830326: "beegfs",
    0x00C36400: "ceph",
    0xFF534D42: "cifs",
    0xFE534D42: "smb2",
    0x01021997: "9p",
    0x65735546: "fuse",
}


def _statfs_says_network(directory: str) -> bool:
    # os.statvfs has no f_type; ask libc's statfs through ctypes only on this rare path.
    try:
        import ctypes
        import ctypes.util

        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        buf = (ctypes.c_long * 32)()
        if libc.statfs(os.fsencode(directory), buf) != 0:
            return True  # unknown: fsync is the safe side
        return (buf[0] & 0xFFFFFFFF) in _NETWORK_MAGIC
    except (OSError, AttributeError):
        return True
