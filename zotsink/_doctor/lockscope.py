"""What is known about locks on each filesystem type: the part of ``zotsink doctor`` that no
probe on one host can find out.

A lock that works can still be seen on this node only (NFS ``nolock``, Lustre
``localflock``, BeeGFS without global locks, FUSE filesystems that keep locks in the local
kernel): every local test passes, yet writers on two nodes do not exclude each other and
records tear. So the verdict comes from the filesystem type and its mount options, as
documented by each filesystem (nfs(5), mount.lustre(8), beegfs-client.conf, mount.cifs(8),
the GFS2 and OCFS2 mount options), and for FUSE from whether the daemon passes locks on.
"""

from __future__ import annotations

from typing import Final

from .._core.fsinfo import Mount, is_network

__all__ = [
    "ABSENT",
    "CEPH_FUSE",
    "COHERENT",
    "MARKER",
    "NODE_LOCAL",
    "UNKNOWN",
    "beegfs_setting",
    "describe",
    "is_true",
    "kernel_scope",
]

#: Values of :attr:`DoctorReport.locks`.
COHERENT: Final = "coherent"  # a lock taken on one node excludes writers on every node
NODE_LOCAL: Final = "node-local"  # only writers on the same node are excluded
UNKNOWN: Final = "unknown"  # nothing is known either way
ABSENT: Final = "absent"  # the filesystem refuses kernel locks
MARKER: Final = "marker"  # no kernel locks used: OUT.lock marker files

# fstype -> (name, family); family is local, network, cluster or fuse
NAMES: Final = {
    "nfs": ("NFS", "network"),
    "nfs4": ("NFSv4", "network"),
    "cifs": ("SMB/CIFS", "network"),
    "smb3": ("SMB3", "network"),
    "smbfs": ("SMB", "network"),
    "9p": ("9P", "network"),
    "virtiofs": ("virtiofs", "network"),
    "afs": ("AFS", "network"),
    "lustre": ("Lustre", "cluster"),
    "gpfs": ("IBM Storage Scale (GPFS)", "cluster"),
    "beegfs": ("BeeGFS", "cluster"),
    "ceph": ("CephFS, kernel client", "cluster"),
    "ocfs2": ("OCFS2", "cluster"),
    "gfs2": ("GFS2", "cluster"),
    "panfs": ("PanFS", "cluster"),
    "wekafs": ("WekaFS", "cluster"),
    "pvfs2": ("OrangeFS", "cluster"),
    "orangefs": ("OrangeFS", "cluster"),
    "fuse.glusterfs": ("GlusterFS", "cluster"),
    "fuse.ceph-fuse": ("CephFS, ceph-fuse client", "cluster"),
    "fuse.ceph": ("CephFS, ceph-fuse client", "cluster"),
    "fuse.juicefs": ("JuiceFS", "cluster"),
    "fuse.mfs": ("MooseFS", "cluster"),
    "fuse.sshfs": ("sshfs", "fuse"),
    "fuse.bindfs": ("bindfs", "fuse"),
    "fuseblk": ("a FUSE filesystem on a local disk", "local"),
}
# FUSE filesystems whose daemons pass flock and fcntl locks on to their servers
FUSE_FORWARDING: Final = frozenset(
    {"fuse.glusterfs", "fuse.ceph-fuse", "fuse.ceph", "fuse.juicefs", "fuse.mfs"}
)
# the names mountinfo gives the FUSE client of CephFS
CEPH_FUSE: Final = frozenset({"fuse.ceph-fuse", "fuse.ceph"})
_TRUE: Final = frozenset({"true", "1", "yes", "on"})


def is_true(value: str | None) -> bool:
    """A beegfs-client.conf boolean that is on."""
    return value is not None and value.strip().lower() in _TRUE


def describe(fstype: str | None) -> tuple[str, str]:
    """(name in words, family): family is local, network, cluster, fuse or unknown."""
    if fstype is None:
        return "unknown", "unknown"
    if fstype in NAMES:
        return NAMES[fstype]
    if fstype == "fuse" or fstype.startswith("fuse."):
        return fstype.partition(".")[2] or "FUSE, type not named", "fuse"
    return fstype, "network" if is_network(fstype) else "local"


def beegfs_setting(conf_text: str | None, key: str) -> str | None:
    """The value of ``key`` in a beegfs-client.conf text (``key = value``; ``#`` comments)."""
    if conf_text is None:
        return None
    found = None
    for line in conf_text.splitlines():
        name, sep, value = line.split("#", 1)[0].partition("=")
        if sep and name.strip() == key:
            found = value.strip()  # the last one wins, as in the client's own parser
    return found


def kernel_scope(m: Mount, kind: str, beegfs: tuple[str, str | None]) -> tuple[str, str]:
    """Whether a ``kind`` lock taken here excludes writers on other nodes, and why."""
    t, opts = m.fstype, m.all_options
    if t == "fuseblk" or not is_network(t):
        return COHERENT, "every process that can open a file here runs on this host"
    if t in ("nfs", "nfs4"):
        local = m.option("local_lock")
        if "nolock" in opts or local == "all":
            why = "nolock" if "nolock" in opts else "local_lock=all"
            return NODE_LOCAL, f"mounted {why}: locks never leave this client"
        if local == kind or (local == "posix" and kind == "fcntl"):
            other = "fcntl" if kind == "flock" else "flock"
            return NODE_LOCAL, (
                f"mounted local_lock={local}: {kind} locks stay on this client"
                f" ({other} locks reach the server: --lock {other})"
            )
        return COHERENT, "NFS sends them to the server's lock manager"
    if t == "lustre":
        if "localflock" in opts:
            return NODE_LOCAL, "mounted localflock: locks are checked on this client only"
        if "noflock" in opts:
            return ABSENT, "mounted noflock: Lustre refuses flock and fcntl locks"
        why = "mounted flock" if "flock" in opts else "flock is Lustre's default since 2.13"
        return COHERENT, f"{why}: the servers keep them"
    if t == "gpfs":
        if kind == "fcntl":
            return COHERENT, "GPFS byte-range locks are cluster-wide"
        return UNKNOWN, (
            "GPFS sites differ on whether flock is cluster-wide; its fcntl byte-range locks"
            " always are: use --lock fcntl"
        )
    if t == "beegfs":
        path, text = beegfs
        value = beegfs_setting(text, "tuneUseGlobalFileLocks")
        if is_true(value):
            return COHERENT, f"tuneUseGlobalFileLocks={value} in {path}: the servers keep them"
        if text is None:
            return NODE_LOCAL, (
                f"{path} could not be read, and BeeGFS checks locks on this node only unless"
                " tuneUseGlobalFileLocks = true"
            )
        setting = "is not set" if value is None else f"= {value}"
        return NODE_LOCAL, (
            f"tuneUseGlobalFileLocks {setting} in {path}: BeeGFS checks locks on this node"
            " only; set it to true on every client"
        )
    if t in ("ocfs2", "gfs2"):
        if "localflocks" in opts:
            return NODE_LOCAL, "mounted localflocks: locks are checked on this node only"
        return COHERENT, "the cluster lock manager keeps them"
    if t in ("cifs", "smb3", "smbfs"):
        if "nobrl" in opts:
            return NODE_LOCAL, "mounted nobrl: lock requests are not sent to the server"
        return COHERENT, "the SMB server keeps them"
    if t == "ceph":
        return COHERENT, "the Ceph metadata server (MDS) grants them across clients"
    if t in CEPH_FUSE:
        return COHERENT, (
            "ceph-fuse passes them to the Ceph metadata server (MDS), which grants them"
            " across clients"
        )
    if t in FUSE_FORWARDING:
        name = NAMES[t][0].split(",")[0]
        return COHERENT, f"{name} passes them to its servers"
    if t == "fuse.sshfs":
        return NODE_LOCAL, "sshfs keeps locks in this host's kernel and never tells the server"
    if t == "fuse.bindfs":
        return NODE_LOCAL, (
            "bindfs keeps locks in this host's kernel unless started with"
            " --enable-lock-forwarding, which mountinfo does not show"
        )
    if t == "fuse":
        return NODE_LOCAL, (
            "FUSE keeps locks in this host's kernel unless the filesystem passes them on,"
            " and this mount does not even name its filesystem (bindfs, for one, does not)"
        )
    if t.startswith("fuse."):
        return NODE_LOCAL, (
            "FUSE keeps locks in this host's kernel unless the filesystem passes them on,"
            f" and {t} is not known to"
        )
    return UNKNOWN, f"zotsink does not know whether {t} shares locks between nodes"
