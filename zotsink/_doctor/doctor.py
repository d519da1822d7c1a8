"""``zotsink doctor``: can zotsink be trusted in this directory?

Two sources of truth, kept apart so every verdict can be tested without root:

* what the filesystem *is*: its type and mount options from ``/proc/self/mountinfo``
  (:mod:`zotsink._core.fsinfo`), plus, for BeeGFS, its client configuration file, which decides
  whether locks reach the metadata servers and which mountinfo does not show;
* what the kernel *does*: a probe that takes and drops a flock and an fcntl lock on a
  scratch file in the directory.

:func:`assess` turns both into a :class:`DoctorReport` and does no I/O. The danger it looks
for is a lock that works but is only seen on this node (NFS ``nolock``, Lustre
``localflock``, BeeGFS without global locks, FUSE filesystems that keep locks in the local
kernel): every probe succeeds, yet writers on two nodes do not exclude each other and
records tear. No probe on one host can see that: it comes from what is known about each
filesystem (:mod:`zotsink._doctor.lockscope`).
"""

from __future__ import annotations

import contextlib
import errno as _errno
import fcntl
import os
import socket
import uuid
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

from .._core.fsinfo import Mount, is_network, mount_for, wants_fsync
from .._core.locking import LOCK_KINDS, LOCKFILE_LEASE, UNSUPPORTED_ERRNOS
from ..errors import UsageError
from .lockscope import (
    ABSENT,
    CEPH_FUSE,
    MARKER,
    NODE_LOCAL,
    UNKNOWN,
    beegfs_setting,
    describe,
    is_true,
    kernel_scope,
)

__all__ = ["ALL_WORK", "DoctorReport", "LockProbe", "Probes", "assess", "doctor", "probe"]

#: Where a BeeGFS client reads its settings when the mount names no ``cfgFile``.
BEEGFS_CLIENT_CONF: Final = "/etc/beegfs/beegfs-client.conf"
#: Mount points and their configuration files, one ``MOUNTPOINT CONF`` pair a line.
BEEGFS_MOUNTS_CONF: Final = "/etc/beegfs/beegfs-mounts.conf"


class LockProbe(NamedTuple):
    """One non-blocking lock attempt on a scratch file: did it work, and if not, why."""

    ok: bool
    errno: int | None = None

    @property
    def error(self) -> str | None:
        """``EACCES (Permission denied)``, or None when the attempt worked."""
        if self.errno is None:
            return None
        return f"{_errno.errorcode.get(self.errno, self.errno)} ({os.strerror(self.errno)})"


class Probes(NamedTuple):
    """What the kernel did in the directory: create a file, flock it, fcntl-lock it."""

    create: LockProbe
    flock: LockProbe
    fcntl: LockProbe


#: Probes of a directory where everything works (for callers that only want the knowledge).
ALL_WORK: Final = Probes(LockProbe(True), LockProbe(True), LockProbe(True))


@dataclass(frozen=True)
class DoctorReport:
    """What :func:`doctor` found; ``ok`` is False when zotsink cannot be trusted there."""

    directory: str
    mount_point: str | None
    fstype: str | None
    source: str | None
    options: tuple[str, ...]
    name: str  # what the filesystem is, in words
    family: str  # local, network, cluster, fuse or unknown
    fuse: bool
    probes: Probes
    requested_lock: str  # the --lock judged: auto or a kind
    lock: str | None  # the kind that would be used; None when none works
    locks: str  # coherent, node-local, unknown, marker (OUT.lock files) or absent
    locks_why: str
    sync: str  # what --sync auto does here: fsync or none
    sync_why: str
    ok: bool
    problem: str | None = None  # why zotsink cannot be trusted here
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data (``zotsink doctor --json``)."""
        return {
            "directory": self.directory,
            "ok": self.ok,
            "problem": self.problem,
            "mount_point": self.mount_point,
            "fstype": self.fstype,
            "source": self.source,
            "options": list(self.options),
            "filesystem": self.name,
            "family": self.family,
            "fuse": self.fuse,
            "probes": {
                k: {"ok": p.ok, "errno": p.errno, "error": p.error}
                for k, p in self.probes._asdict().items()
            },
            "requested_lock": self.requested_lock,
            "lock": self.lock,
            "locks": self.locks,
            "locks_why": self.locks_why,
            "sync": self.sync,
            "sync_why": self.sync_why,
            "warnings": list(self.warnings),
            "notes": list(self.notes),
        }


def _auto_kind(p: Probes) -> str | None:
    """The kind ``--lock auto`` settles on, as :class:`zotsink._core.locking.Locker` does."""
    if p.flock.ok:
        return "flock"
    if p.flock.errno not in UNSUPPORTED_ERRNOS:
        return None  # Locker raises LockError here instead of falling back
    if p.fcntl.ok:
        return "fcntl"
    return "lockfile" if p.fcntl.errno in UNSUPPORTED_ERRNOS else None


def assess(
    mount: Mount | None,
    probes: Probes,
    beegfs_conf: str | None = None,
    *,
    beegfs_conf_path: str = BEEGFS_CLIENT_CONF,
    lock: str = "auto",
    fsync: bool | None = None,
    directory: str = "",
) -> DoctorReport:
    """The verdict for a directory on ``mount`` given what the probes saw. No I/O.

    ``beegfs_conf`` is the text of the BeeGFS client configuration (None: unreadable);
    ``fsync`` what ``--sync auto`` decides (by default: from the mount's type).
    """
    if lock not in LOCK_KINDS:
        raise UsageError(f"unknown lock kind {lock!r}: use one of {', '.join(LOCK_KINDS)}")
    warnings: list[str] = []
    notes: list[str] = []
    problem: str | None = None
    t = mount.fstype if mount else None
    name, family = describe(t)
    if fsync is None:
        fsync = True if mount is None else is_network(mount.fstype)

    if lock == "auto":
        kind = _auto_kind(probes)
    else:
        kind = lock if lock == "lockfile" or getattr(probes, lock).ok else None
    if not probes.create.ok:
        kind = None
        problem = f"cannot create a file in it: {probes.create.error}"

    if mount is None:
        scope, why = UNKNOWN, "the filesystem could not be identified"
    elif kind == "lockfile":
        scope, why = MARKER, "no kernel locks: OUT.lock marker files, which every node sees"
    else:
        scope, why = kernel_scope(mount, kind or "flock", (beegfs_conf_path, beegfs_conf))

    if problem is None and kind is None:
        failed = "flock" if lock == "auto" else lock
        err = getattr(probes, failed).error
        problem = f"{failed} locks fail here with {err}" + (
            "; try --lock auto" if lock != "auto" else ""
        )
    elif problem is None and scope == NODE_LOCAL:
        problem = f"{kind} locks here are node-local: writers on other nodes are not excluded"
    elif problem is None and scope in (UNKNOWN, ABSENT):
        problem = f"zotsink cannot tell whether {kind} locks exclude writers on other nodes"

    if kind == "lockfile":
        why_marker = (
            "neither flock nor fcntl locks work here: zotsink falls back to"
            if lock == "auto"
            else "--lock lockfile:"
        )
        warnings.append(
            f"{why_marker} OUT.lock marker files, which exclude zotsink writers on every node"
            " but not flock(1), Perl flock or lockf users; a marker left by a crashed node"
            f" is broken after {LOCKFILE_LEASE:g} s (ZOTSINK_LOCKFILE_LEASE)"
        )
    elif lock == "auto" and kind == "fcntl":
        warnings.append(
            f"flock fails here with {probes.flock.error}: zotsink falls back to fcntl locks,"
            " so peers must use lockf/fcntl too"
        )
    if scope in (NODE_LOCAL, UNKNOWN, ABSENT) and kind:
        warnings.append(f"{kind} locks: {why}")
        if kind != "lockfile":
            warnings.append(
                "run zotsink from one node only here, or use --lock lockfile (marker files"
                " every node sees), or write OUT to a filesystem with shared locks"
            )
    if _errno.ENOLCK in (probes.flock.errno, probes.fcntl.errno):
        warnings.append(
            "ENOLCK: the lock manager does not answer (on NFSv3: start rpc.statd and lockd"
            " on this client, and make sure the server runs them)"
        )
    if family == "local":
        notes.append(
            "only processes on this host can reach this directory: a job array spread over"
            " several nodes needs OUT on a shared filesystem"
        )
    if t == "beegfs":
        append = beegfs_setting(beegfs_conf, "tuneUseGlobalAppendLocks")
        if not is_true(append):
            notes.append(
                "tuneUseGlobalAppendLocks is off: O_APPEND is coordinated per node only;"
                " zotsink's lock and fsync keep appends whole as long as file locks are global"
            )
    if t == "fuse.glusterfs":
        notes.append(
            "another client may see appends up to a second late (FUSE attribute cache,"
            " attribute-timeout=1 s by default): run zotsink cat, verify or missing a moment"
            " after the writers finished, or mount readers with --attribute-timeout=0"
        )
    if t == "fuse.mfs":
        if mount is not None and mount.source.startswith("mfs#"):
            notes.append(f"MooseFS, named by the mount's source {mount.source}")
        notes.append(
            "MooseFS refuses a flock now and then with ECANCELED when OUT is opened anew for"
            " every append; zotsink takes it for a busy lock and tries again"
        )
    if (t == "ceph" or t in CEPH_FUSE) and kind in ("flock", "fcntl"):
        other = "fcntl" if kind == "flock" else "flock"
        notes.append(
            f"CephFS keeps flock and fcntl locks apart (a lock taken with {other} does not"
            f" exclude one taken with {kind}): every program that writes OUT must take"
            f" {kind} locks, as zotsink does here"
        )
        notes.append(
            "a lock held through a client that stops answering (its node died) stays held"
            " until the MDS evicts that client, after session_autoclose (300 s by default):"
            " writers on other nodes wait until then, within --timeout"
        )
    if fsync and t == "fuse.mfs":
        sync_why = (
            "mfsmount acknowledges a write before its chunkservers have it, reports a full"
            " filesystem (ENOSPC) only at fsync or close, and its lock exclusion was seen to"
            " lapse between writers that reopen OUT without fsyncing: zotsink fsyncs before"
            " the unlock"
        )
    elif fsync:
        sync_why = (
            "the client acknowledges a write before it reaches the server, so zotsink"
            " fsyncs before the unlock"
        )
    else:
        sync_why = "a local filesystem shows a write to every reader once it returns"

    return DoctorReport(
        directory=directory,
        mount_point=mount.mount_point if mount else None,
        fstype=t,
        source=mount.source if mount else None,
        options=tuple(sorted(mount.all_options)) if mount else (),
        name=name,
        family=family,
        fuse=bool(t) and (t == "fuse" or t.startswith("fuse.") or t == "fuseblk"),
        probes=probes,
        requested_lock=lock,
        lock=kind,
        locks=scope,
        locks_why=why,
        sync="fsync" if fsync else "none",
        sync_why=sync_why,
        ok=problem is None,
        problem=problem,
        warnings=tuple(warnings),
        notes=tuple(notes),
    )


def probe(directory: str) -> Probes:
    """Create a scratch file in ``directory``, take and drop each lock kind, remove it."""
    name = f".zotsink-doctor.{socket.gethostname()}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
    path = os.path.join(directory, name)
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as e:
        bad = LockProbe(False, e.errno)
        return Probes(bad, bad, bad)
    try:
        return Probes(
            LockProbe(True),
            _try(fd, fcntl.flock, fcntl.LOCK_EX | fcntl.LOCK_NB),
            _try(fd, fcntl.lockf, fcntl.LOCK_EX | fcntl.LOCK_NB),
        )
    finally:
        os.close(fd)
        # a scratch file left behind harms nothing; its name says what it is
        with contextlib.suppress(OSError):
            os.unlink(path)


def _try(fd: int, call: Any, op: int) -> LockProbe:
    try:
        call(fd, op)
    except OSError as e:
        return LockProbe(False, e.errno)
    # Unlock explicitly: on FUSE the unlock that close() implies travels with the
    # asynchronous release, so the lock could outlive the probe by a moment.
    try:
        call(fd, fcntl.LOCK_UN)
    except OSError as e:
        return LockProbe(False, e.errno)
    return LockProbe(True)


def _beegfs_conf(mount: Mount) -> tuple[str, str | None]:
    """The client configuration of a BeeGFS mount: (path, text or None if unreadable)."""
    path = mount.option("cfgFile")
    if not path:
        path = BEEGFS_CLIENT_CONF
        try:
            with open(BEEGFS_MOUNTS_CONF, encoding="utf-8", errors="replace") as f:
                for line in f:
                    fields = line.split("#", 1)[0].split()
                    if len(fields) >= 2 and fields[0].rstrip("/") == mount.mount_point.rstrip("/"):
                        path = fields[1]
        except OSError:
            pass
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return path, f.read()
    except OSError:
        return path, None


def doctor(directory: str | os.PathLike[str] = ".", *, lock: str = "auto") -> DoctorReport:
    """Check ``directory`` (or the directory of a file) for zotsink: see :class:`DoctorReport`.

    ``lock`` is the ``--lock`` setting to judge (``auto`` by default).
    """
    d = os.fspath(directory)
    if os.path.isfile(d):
        d = os.path.dirname(os.path.abspath(d))
    if not os.path.isdir(d):
        raise UsageError(f"{d}: no such directory; name the directory that will hold OUT")
    real = os.path.realpath(d)
    mount = mount_for(real)
    conf_path, conf = _beegfs_conf(mount) if mount and mount.fstype == "beegfs" else ("", None)
    return assess(
        mount,
        probe(real),
        conf,
        beegfs_conf_path=conf_path or BEEGFS_CLIENT_CONF,
        lock=lock,
        fsync=wants_fsync(os.path.join(real, "OUT")),
        directory=real,
    )
