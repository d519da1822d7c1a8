"""zotsink doctor: the verdict for every kind of mount, fed mountinfo lines; the probe and
the command on this machine's own directories."""

from __future__ import annotations

import errno
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from zotsink._core.fsinfo import Mount, mount_for, parse_mountinfo
from zotsink._doctor.doctor import ALL_WORK, DoctorReport, LockProbe, Probes, assess, doctor
from zotsink._doctor.lockscope import beegfs_setting
from zotsink.cli.doctor import doctor_cmd, doctor_lines
from zotsink.errors import UsageError

# the module, whatever the package attribute of the same name holds
doctor_mod = importlib.import_module("zotsink._doctor.doctor")

ROOT = "29 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw,discard"
NFS3 = (
    "rw,vers=3,rsize=1048576,wsize=1048576,namlen=255,hard,proto=tcp,timeo=600,retrans=2,"
    "sec=sys,mountaddr=10.0.0.1,mountvers=3,mountport=20048,mountproto=udp,{lock}addr=10.0.0.1"
)
BEEGFS = "60 29 0:50 / /beegfs rw,relatime - beegfs beegfs_nodev rw,cfgFile=/etc/beegfs/{conf}"


def mount(line: str, path: str = "/data/project/out.tsv") -> Mount:
    """The mount that holds ``path`` when mountinfo is ``/`` on ext4 plus ``line``."""
    m = mount_for(path, parse_mountinfo(f"{ROOT}\n{line}\n"))
    assert m is not None
    return m


def data(fstype: str, source: str, super_options: str, options: str = "rw,relatime") -> str:
    """A mountinfo line for ``/data``."""
    return f"50 29 0:45 / /data {options} shared:30 - {fstype} {source} {super_options}"


FAILS = {e: LockProbe(False, e) for e in (errno.ENOSYS, errno.ENOLCK, errno.EIO, errno.EACCES)}
OK = LockProbe(True)


def probes(flock: LockProbe = OK, fcntl: LockProbe = OK) -> Probes:
    return Probes(OK, flock, fcntl)


# -- local filesystems ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "line, fstype",
    [
        (ROOT, "ext4"),
        ("40 29 8:1 / /data rw,noatime - xfs /dev/sda1 rw,attr2,inode64,noquota", "xfs"),
        ("30 29 0:25 / /data rw,nosuid,nodev - tmpfs tmpfs rw,size=1048576k", "tmpfs"),
        ("31 29 0:26 / /data rw - btrfs /dev/sdb rw,space_cache=v2,subvolid=5", "btrfs"),
    ],
)
def test_local_filesystem_is_trusted_without_fsync(line: str, fstype: str) -> None:
    r = assess(mount(line), ALL_WORK)
    assert (r.fstype, r.family, r.fuse) == (fstype, "local", False)
    assert (r.ok, r.lock, r.locks, r.sync) == (True, "flock", "coherent", "none")
    assert r.warnings == ()
    assert "only processes on this host can reach this directory" in r.notes[0]
    assert doctor_lines(r)[-1] == "verdict: zotsink can be trusted here"


# -- NFS --------------------------------------------------------------------------------------


def test_nfs_with_its_lock_manager_is_coherent_and_fsynced() -> None:
    r = assess(mount(data("nfs", "srv:/export", NFS3.format(lock="local_lock=none,"))), ALL_WORK)
    assert (r.ok, r.family, r.lock, r.locks, r.sync) == (
        True,
        "network",
        "flock",
        "coherent",
        "fsync",
    )
    assert r.warnings == () and r.notes == ()
    v4 = "rw,vers=4.2,rsize=1048576,hard,proto=tcp,sec=sys,clientaddr=10.0.0.2,local_lock=none"
    r = assess(mount(data("nfs4", "srv:/", v4)), ALL_WORK)
    assert (r.ok, r.name, r.locks, r.sync) == (True, "NFSv4", "coherent", "fsync")


@pytest.mark.parametrize("lock_opt", ["nolock,local_lock=all,", "nolock,", "local_lock=all,"])
def test_nfs_nolock_is_node_local_and_not_trusted(lock_opt: str) -> None:
    r = assess(mount(data("nfs", "srv:/export", NFS3.format(lock=lock_opt))), ALL_WORK)
    assert (r.ok, r.lock, r.locks) == (False, "flock", "node-local")
    assert r.problem == "flock locks here are node-local: writers on other nodes are not excluded"
    assert any("locks never leave this client" in w for w in r.warnings)
    assert any("--lock lockfile" in w for w in r.warnings)
    # marker files are seen by every client: that choice is trusted, with its caveats
    r = assess(
        mount(data("nfs", "srv:/export", NFS3.format(lock=lock_opt))), ALL_WORK, lock="lockfile"
    )
    assert (r.ok, r.lock, r.locks) == (True, "lockfile", "marker")
    assert "not flock(1), Perl flock or lockf users" in r.warnings[0]


def test_nfs_local_lock_flock_needs_fcntl_locks() -> None:
    m = mount(data("nfs", "srv:/export", NFS3.format(lock="local_lock=flock,")))
    r = assess(m, ALL_WORK)
    assert (r.ok, r.lock, r.locks) == (False, "flock", "node-local")
    assert "flock locks stay on this client (fcntl locks reach the server: --lock fcntl)" in (
        r.locks_why
    )
    r = assess(m, ALL_WORK, lock="fcntl")
    assert (r.ok, r.lock, r.locks) == (True, "fcntl", "coherent")


def test_nfs_local_lock_posix_keeps_flock_usable() -> None:
    m = mount(data("nfs", "srv:/export", NFS3.format(lock="local_lock=posix,")))
    assert (assess(m, ALL_WORK).ok, assess(m, ALL_WORK).locks) == (True, "coherent")
    r = assess(m, ALL_WORK, lock="fcntl")
    assert (r.ok, r.locks) == (False, "node-local")
    assert "fcntl locks stay on this client (flock locks reach the server" in r.locks_why


def test_nfs_without_lockd_falls_back_to_marker_files_and_says_why() -> None:
    m = mount(data("nfs", "srv:/export", NFS3.format(lock="local_lock=none,")))
    r = assess(m, probes(FAILS[errno.ENOLCK], FAILS[errno.ENOLCK]))
    assert (r.ok, r.lock, r.locks) == (True, "lockfile", "marker")
    assert r.warnings[0].startswith("neither flock nor fcntl locks work here")
    assert any("start rpc.statd and lockd" in w for w in r.warnings)
    lines = doctor_lines(r)
    assert "flock       fails: ENOLCK (No locks available)" in lines
    assert "lock auto = lockfile" in lines


# -- Lustre -----------------------------------------------------------------------------------


def lustre(opt: str) -> Mount:
    return mount(data("lustre", "10.0.0.1@tcp:/lfs", f"rw,{opt}lazystatfs,encrypt"))


def test_lustre_flock_is_coherent() -> None:
    r = assess(lustre("flock,"), ALL_WORK)
    assert (r.ok, r.family, r.name, r.locks, r.sync) == (
        True,
        "cluster",
        "Lustre",
        "coherent",
        "fsync",
    )
    assert r.locks_why.startswith("mounted flock")
    # without either option, Lustre 2.13 and later behave as flock
    assert assess(lustre(""), ALL_WORK).locks == "coherent"


def test_lustre_localflock_is_node_local() -> None:
    r = assess(lustre("localflock,"), ALL_WORK)
    assert (r.ok, r.locks) == (False, "node-local")
    assert "mounted localflock" in r.warnings[0]


def test_lustre_noflock_falls_back_to_marker_files() -> None:
    r = assess(lustre("noflock,"), probes(FAILS[errno.ENOSYS], FAILS[errno.ENOSYS]))
    assert (r.ok, r.lock, r.locks) == (True, "lockfile", "marker")
    # an explicit kernel lock kind cannot work there
    r = assess(lustre("noflock,"), probes(FAILS[errno.ENOSYS], FAILS[errno.ENOSYS]), lock="flock")
    assert (r.ok, r.lock) == (False, None)
    assert r.problem == (
        "flock locks fail here with ENOSYS (Function not implemented); try --lock auto"
    )
    # a noflock mount whose locks nevertheless work is not vouched for
    r = assess(lustre("noflock,"), ALL_WORK)
    assert (r.ok, r.locks) == (False, "absent")


# -- BeeGFS -----------------------------------------------------------------------------------


def test_beegfs_with_global_file_locks_is_coherent() -> None:
    conf = "# client\nsysMgmtdHost = mgmt\ntuneUseGlobalFileLocks    = true\n"
    r = assess(mount(BEEGFS.format(conf="c.conf"), "/beegfs/x"), ALL_WORK, conf)
    assert (r.ok, r.family, r.locks, r.sync) == (True, "cluster", "coherent", "fsync")
    assert "tuneUseGlobalFileLocks=true" in r.locks_why
    assert any("tuneUseGlobalAppendLocks is off" in n for n in r.notes)


@pytest.mark.parametrize(
    "conf, says",
    [
        ("tuneUseGlobalFileLocks = false\n", "tuneUseGlobalFileLocks = false in"),
        ("sysMgmtdHost = mgmt\n# tuneUseGlobalFileLocks = true\n", "is not set in"),
        (None, "could not be read, and BeeGFS checks locks on this node only"),
    ],
)
def test_beegfs_without_global_file_locks_is_node_local(conf: str | None, says: str) -> None:
    m = mount(BEEGFS.format(conf="client.conf"), "/beegfs/x")
    r = assess(m, ALL_WORK, conf, beegfs_conf_path="/etc/beegfs/client.conf")
    assert (r.ok, r.locks) == (False, "node-local")
    assert says in r.locks_why
    assert "/etc/beegfs/client.conf" in r.locks_why


def test_beegfs_setting_reads_key_value_lines() -> None:
    text = "a = 1\n  tuneUseGlobalFileLocks=false # old\ntuneUseGlobalFileLocks = true\n"
    assert beegfs_setting(text, "tuneUseGlobalFileLocks") == "true"  # the last one wins
    assert beegfs_setting(text, "a") == "1"
    assert beegfs_setting("#tuneUseGlobalFileLocks = true\n", "tuneUseGlobalFileLocks") is None
    assert beegfs_setting(None, "a") is None


def test_doctor_finds_the_beegfs_conf_the_mount_names(tmp_path: Path, monkeypatch) -> None:
    conf = tmp_path / "client.conf"
    conf.write_text("tuneUseGlobalFileLocks = true\n")
    m = Mount(str(tmp_path), "beegfs", "beegfs_nodev", frozenset({"rw"}), {f"cfgFile={conf}"})
    monkeypatch.setattr(doctor_mod, "mount_for", lambda path: m)
    r = doctor(tmp_path)
    assert (r.ok, r.fstype, r.locks) == (True, "beegfs", "coherent")
    assert str(conf) in r.locks_why


# -- GPFS, CephFS, GlusterFS ------------------------------------------------------------------


def test_gpfs_vouches_for_fcntl_locks_only() -> None:
    m = mount(data("gpfs", "gpfs0", "rw"))
    r = assess(m, ALL_WORK)
    assert (r.ok, r.locks, r.sync) == (False, "unknown", "fsync")
    assert "use --lock fcntl" in r.locks_why
    r = assess(m, ALL_WORK, lock="fcntl")
    assert (r.ok, r.lock, r.locks) == (True, "fcntl", "coherent")


def test_cephfs_kernel_client_is_coherent() -> None:
    r = assess(
        mount(data("ceph", "10.0.0.1:6789:/", "rw,name=admin,secret=<hidden>,acl")), ALL_WORK
    )
    assert (r.ok, r.family, r.fuse, r.locks, r.sync) == (
        True,
        "cluster",
        False,
        "coherent",
        "fsync",
    )


def test_cephfs_kernel_client_notes_its_lock_kinds_and_evictions() -> None:
    r = assess(mount(data("ceph", "10.0.0.1:6789:/", "rw,name=admin,acl")), ALL_WORK)
    lines = doctor_lines(r)
    assert "filesystem  ceph: CephFS, kernel client, a cluster filesystem" in lines
    assert (
        "locks       coherent: the Ceph metadata server (MDS) grants them across clients" in lines
    )
    assert any(
        "a lock taken with fcntl does not exclude one taken with flock" in n for n in r.notes
    )
    assert any("session_autoclose (300 s by default)" in n for n in r.notes)


def test_ceph_fuse_is_named_from_its_mountinfo_line_and_trusted() -> None:
    # as ceph-fuse 16 mounts itself (scripts/cluster/ceph.sh)
    line = (
        "42 27 0:39 / /data rw,nosuid,nodev,relatime - fuse.ceph-fuse ceph-fuse"
        " rw,user_id=0,group_id=0,allow_other"
    )
    m = mount(line)
    assert (m.fstype, m.source) == ("fuse.ceph-fuse", "ceph-fuse")
    r = assess(m, ALL_WORK)
    assert (r.ok, r.family, r.fuse, r.lock, r.locks, r.sync) == (
        True,
        "cluster",
        True,
        "flock",
        "coherent",
        "fsync",
    )
    lines = doctor_lines(r)
    assert (
        "filesystem  fuse.ceph-fuse: CephFS, ceph-fuse client, a FUSE cluster filesystem" in lines
    )
    assert (
        "locks       coherent: ceph-fuse passes them to the Ceph metadata server (MDS),"
        " which grants them across clients" in lines
    )
    assert any("every program that writes OUT must take flock locks" in n for n in r.notes)
    # with --lock fcntl the note names the other kind
    r = assess(m, ALL_WORK, lock="fcntl")
    assert (r.ok, r.lock) == (True, "fcntl")
    assert any("every program that writes OUT must take fcntl locks" in n for n in r.notes)
    # marker files need no kernel lock: nothing to say about lock kinds or evictions
    r = assess(m, ALL_WORK, lock="lockfile")
    assert not any("CephFS" in n or "session_autoclose" in n for n in r.notes)


def test_glusterfs_is_a_coherent_fuse_cluster_filesystem() -> None:
    line = data(
        "fuse.glusterfs",
        "127.0.0.1:/vol",
        "rw,user_id=0,group_id=0,default_permissions,allow_other,max_read=131072",
    )
    r = assess(mount(line), ALL_WORK)
    assert (r.ok, r.family, r.fuse, r.lock, r.locks, r.sync) == (
        True,
        "cluster",
        True,
        "flock",
        "coherent",
        "fsync",
    )
    lines = doctor_lines(r)
    assert "filesystem  fuse.glusterfs: GlusterFS, a FUSE cluster filesystem" in lines
    assert "locks       coherent: GlusterFS passes them to its servers" in lines
    assert any(ln.startswith("sync auto = fsync: ") for ln in lines)


# -- FUSE without lock forwarding, and the unknown --------------------------------------------


@pytest.mark.parametrize(
    "fstype, source, says",
    [
        ("fuse.sshfs", "user@login:/data", "sshfs keeps locks in this host's kernel"),
        ("fuse.bindfs", "/srv/data", "--enable-lock-forwarding"),
        ("fuse.rclone", "s3:bucket", "fuse.rclone is not known to"),
        ("fuse", "/srv/data", "this mount does not even name its filesystem"),
    ],
)
def test_fuse_without_lock_forwarding_warns_and_is_not_trusted(
    fstype: str, source: str, says: str
) -> None:
    r = assess(mount(data(fstype, source, "rw,user_id=1000,group_id=1000")), ALL_WORK)
    assert (r.ok, r.fuse, r.family, r.locks, r.sync) == (False, True, "fuse", "node-local", "fsync")
    assert r.warnings[0].startswith("flock locks: ") and says in r.warnings[0]
    assert doctor_lines(r)[-1] == (
        "verdict: zotsink cannot be trusted here: flock locks here are node-local:"
        " writers on other nodes are not excluded"
    )


def test_fuseblk_is_a_local_disk() -> None:
    r = assess(
        mount(data("fuseblk", "/dev/sdc1", "rw,user_id=0,group_id=0,blksize=4096")), ALL_WORK
    )
    assert (r.ok, r.family, r.fuse, r.locks) == (True, "local", True, "coherent")


@pytest.mark.parametrize(
    "line, ok, locks",
    [
        (
            data("cifs", "//srv/share", "rw,vers=3.1.1,cache=strict,nobrl,uid=0"),
            False,
            "node-local",
        ),
        (data("cifs", "//srv/share", "rw,vers=3.1.1,cache=strict,uid=0"), True, "coherent"),
        (data("gfs2", "/dev/dm-3", "rw,localflocks"), False, "node-local"),
        (data("ocfs2", "/dev/dm-4", "rw,heartbeat=local"), True, "coherent"),
        (data("9p", "shared", "rw,trans=virtio,version=9p2000.L"), False, "unknown"),
    ],
)
def test_other_network_filesystems(line: str, ok: bool, locks: str) -> None:
    r = assess(mount(line), ALL_WORK)
    assert (r.ok, r.locks, r.sync) == (ok, locks, "fsync")


def test_no_mountinfo_means_no_verdict() -> None:
    r = assess(None, ALL_WORK)
    assert (r.ok, r.family, r.locks, r.sync) == (False, "unknown", "unknown", "fsync")
    assert "filesystem  unknown: /proc/self/mountinfo names no mount for it" in doctor_lines(r)


# -- what the probes say ----------------------------------------------------------------------


def test_flock_unsupported_falls_back_to_fcntl_with_a_warning() -> None:
    r = assess(mount(ROOT), probes(FAILS[errno.ENOSYS]))
    assert (r.ok, r.lock) == (True, "fcntl")
    assert r.warnings[0] == (
        "flock fails here with ENOSYS (Function not implemented): zotsink falls back to"
        " fcntl locks, so peers must use lockf/fcntl too"
    )


def test_a_lock_call_failing_otherwise_is_not_trusted() -> None:
    # Locker falls back only on ENOSYS/ENOLCK/EOPNOTSUPP; EIO is an error, as here
    r = assess(mount(ROOT), probes(FAILS[errno.EIO]))
    assert (r.ok, r.lock) == (False, None)
    assert r.problem == "flock locks fail here with EIO (Input/output error)"
    assert "lock auto = none works" in doctor_lines(r)


def test_a_directory_that_takes_no_file_is_not_trusted() -> None:
    bad = FAILS[errno.EACCES]
    r = assess(mount(ROOT), Probes(bad, bad, bad))
    assert (r.ok, r.lock) == (False, None)
    assert r.problem == "cannot create a file in it: EACCES (Permission denied)"
    assert "probe       cannot create a file here: EACCES (Permission denied)" in doctor_lines(r)


def test_unknown_lock_kind_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="unknown lock kind 'nfs'"):
        assess(mount(ROOT), ALL_WORK, lock="nfs")


def test_report_round_trips_through_json() -> None:
    r = assess(mount(data("fuse.sshfs", "u@h:/d", "rw")), probes(fcntl=FAILS[errno.ENOSYS]))
    d = json.loads(json.dumps(r.to_dict()))
    assert d["ok"] is False and d["fstype"] == "fuse.sshfs" and d["locks"] == "node-local"
    assert d["probes"]["fcntl"] == {"ok": False, "errno": errno.ENOSYS, "error": FAILS[38].error}
    assert d["probes"]["flock"] == {"ok": True, "errno": None, "error": None}


# -- doctor() and the command on this machine -------------------------------------------------


def test_doctor_probes_a_real_directory_and_leaves_nothing(tmp_path: Path) -> None:
    (tmp_path / "out.tsv").write_text("a\n")
    r = doctor(tmp_path)
    assert isinstance(r, DoctorReport)
    assert r.probes == ALL_WORK and r.lock == "flock" and r.directory == str(tmp_path.resolve())
    assert sorted(os.listdir(tmp_path)) == ["out.tsv"]
    # a file names its directory
    assert doctor(tmp_path / "out.tsv").directory == r.directory


def test_doctor_of_a_missing_directory_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no such directory"):
        doctor(tmp_path / "nope")


def cli_runner() -> CliRunner:
    # click 8.1 (the last for Python 3.9) mixes stderr into stdout unless told not to;
    # click 8.2 keeps them apart always and dropped the switch
    try:
        return CliRunner(mix_stderr=False)  # type: ignore[call-arg]
    except TypeError:
        return CliRunner()


def test_cli_reports_on_stderr_and_json_on_stdout(tmp_path: Path) -> None:
    res = cli_runner().invoke(doctor_cmd, [str(tmp_path), "--json"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    assert report["ok"] is True and report["lock"] == "flock"
    assert "zotsink: verdict: zotsink can be trusted here" in res.stderr
    assert "zotsink: flock       works" in res.stderr


def test_cli_exits_1_on_a_fuse_mount_without_lock_forwarding(tmp_path: Path, monkeypatch) -> None:
    m = Mount(str(tmp_path), "fuse.sshfs", "user@login:/data", frozenset({"rw"}))
    monkeypatch.setattr(doctor_mod, "mount_for", lambda path: m)
    res = cli_runner().invoke(doctor_cmd, [str(tmp_path)])
    assert res.exit_code == 1
    assert "zotsink: warning: flock locks: sshfs keeps locks in this host's kernel" in res.stderr
    assert "verdict: zotsink cannot be trusted here" in res.stderr
    assert cli_runner().invoke(doctor_cmd, [str(tmp_path), "-q"]).stderr == ""


def test_cli_exits_1_when_no_file_can_be_made(tmp_path: Path, monkeypatch) -> None:
    bad = FAILS[errno.EACCES]
    monkeypatch.setattr(doctor_mod, "probe", lambda d: Probes(bad, bad, bad))
    res = cli_runner().invoke(doctor_cmd, [str(tmp_path)])
    assert res.exit_code == 1
    assert "cannot create a file in it: EACCES (Permission denied)" in res.stderr


def test_command_line_errors_are_short(tmp_path: Path, zotsink) -> None:
    r = zotsink("doctor", tmp_path / "nope")
    assert r.returncode == 2
    assert (
        r.stderr
        == f"zotsink: error: {tmp_path / 'nope'}: no such directory; name the".encode()
        + (b" directory that will hold OUT\n")
    )
    r = zotsink("doctor", "--lock", "nfs", tmp_path)
    assert r.returncode == 2 and b"Traceback" not in r.stderr
    r = zotsink("doctor", tmp_path)
    assert r.returncode == 0 and r.stdout == b"" and b"Traceback" not in r.stderr


def test_public_names_load_lazily() -> None:
    code = (
        "import sys, zotsink\n"
        "assert 'zotsink._doctor.doctor' not in sys.modules\n"
        "from zotsink import doctor, DoctorReport\n"
        "assert callable(doctor) and doctor.__name__ == 'doctor'\n"
        "assert DoctorReport.__name__ == 'DoctorReport'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# -- MooseFS ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fstype, source",
    [
        ("fuse", "mfs\\04310.0.0.5:9421"),  # as mfsmount mounts it: only the source says so
        ("fuse.mfs", "mfs\\04310.0.0.5:9421"),  # mounted with -o subtype=mfs
        ("fuse.moosefs", "mfsmaster:9421"),
    ],
)
def test_moosefs_is_a_coherent_fuse_cluster_filesystem_and_fsynced(
    fstype: str, source: str
) -> None:
    m = mount(data(fstype, source, "rw,user_id=0,group_id=0,allow_other"))
    assert m.fstype == "fuse.mfs"
    r = assess(m, ALL_WORK)
    assert (r.ok, r.family, r.fuse, r.lock, r.locks, r.sync) == (
        True,
        "cluster",
        True,
        "flock",
        "coherent",
        "fsync",
    )
    lines = doctor_lines(r)
    assert "filesystem  fuse.mfs: MooseFS, a FUSE cluster filesystem" in lines
    assert "locks       coherent: MooseFS passes them to its servers" in lines
    why = next(ln for ln in lines if ln.startswith("sync auto = fsync: "))
    assert "ENOSPC" in why and "mfsmount acknowledges a write" in why
    assert any("ECANCELED" in n for n in r.notes)


def test_moosefs_source_in_mountinfo_is_unescaped_and_shown() -> None:
    line = (
        "42 27 0:39 / /data rw,nosuid,nodev,relatime - fuse mfs\\04310.232.0.1:19421"
        " rw,user_id=0,group_id=0,allow_other"
    )
    m = mount(line)
    assert (m.fstype, m.source) == ("fuse.mfs", "mfs#10.232.0.1:19421")
    r = assess(m, ALL_WORK)
    assert "MooseFS, named by the mount's source mfs#10.232.0.1:19421" in r.notes


def test_plain_fuse_from_another_source_is_not_taken_for_moosefs() -> None:
    m = mount(data("fuse", "mfsdata:/x", "rw,user_id=0,group_id=0"))
    assert m.fstype == "fuse"
    assert assess(m, ALL_WORK).locks == "node-local"
