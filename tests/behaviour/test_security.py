"""Side files in a shared directory: never through a planted link, never readable by more
people than OUT.

Spill files are created with ``O_EXCL|O_NOFOLLOW``: a name someone planted (a symlink, even
a dangling one, or any file) is skipped for the next free one. ``OUT.rejects`` is shared by
every writer, so it is opened with ``O_NOFOLLOW`` and must be a regular file. New side files
take OUT's permission bits (the owner may always read and write its own spill file);
spill files outside OUT's directory are ``0600``. ``collect`` (when present) never follows a
symlink out of its SOURCE and never extracts a tar member: member names are only data.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import zotsink
from zotsink._core import sidefiles
from zotsink._core.records import MAX_LINE

HOST = os.uname().nodename

# Holds an exclusive flock on argv[1] until its stdin closes.
HOLDER = r"""
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.read()
"""

# Runs the CLI after planting a symlink (to argv[1]) at the spill file name this process
# would use first (argv[2] is OUT), as an attacker guessing pids would.
PLANTED = r"""
import os, sys
victim, out = sys.argv[1], sys.argv[2]
os.symlink(victim, f"{out}.spill.{os.uname().nodename}.{os.getpid()}")
sys.argv = ["zotsink", *sys.argv[2:]]
from zotsink.cli import main
main()
"""


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def umask0(cmd: list[str]) -> list[str]:
    """The command run with umask 000, so every permission bit comes from zotsink."""
    return ["sh", "-c", 'umask 000 && exec "$@"', "sh", *cmd]


@pytest.fixture
def holder(tmp_path: Path, reap):
    """Holds the lock on tmp_path/out.txt while the test runs."""
    out = tmp_path / "out.txt"
    out.touch()
    proc = reap(
        subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(out)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
    )
    assert proc.stdout.readline() == b"held\n"
    yield out
    proc.communicate(b"", timeout=10)


@pytest.mark.parametrize(
    ("out_mode", "data"),
    [
        (0o640, b"ok\nnul\0\n"),
        (0o600, b"ok\nnul\0\n"),
        (0o664, b"ok\nnul\0\n"),
        (0o640, b"x" * (MAX_LINE + 1) + b"\n"),  # streamed to OUT.rejects by its own path
    ],
    ids=["0640", "0600", "0664", "0640-overlong"],
)
def test_rejects_are_no_wider_than_out(
    tmp_path: Path, zotsink_cmd: list[str], child_env, out_mode: int, data: bytes
) -> None:
    out = tmp_path / "out.txt"
    out.touch()
    out.chmod(out_mode)
    cmd = umask0([*zotsink_cmd, str(out)])
    r = subprocess.run(cmd, input=data, capture_output=True, env=child_env())
    assert r.returncode == 1, r.stderr
    # never wider than OUT, and never writable by group or others even when OUT is
    assert mode(tmp_path / "out.txt.rejects") == out_mode & 0o644


def test_spill_beside_out_is_no_wider_than_out(
    holder: Path, zotsink_cmd: list[str], child_env
) -> None:
    out = holder
    out.chmod(0o640)
    cmd = [*zotsink_cmd, "--timeout", "0", str(out)]
    r = subprocess.run(umask0(cmd), input=b"rec\n", capture_output=True, env=child_env())
    assert r.returncode == 75, r.stderr
    (spill,) = out.parent.glob("out.txt.spill.*")
    assert mode(spill) == 0o640
    assert spill.read_bytes() == b"rec\n"


def test_spill_elsewhere_is_private(tmp_path: Path, zotsink_cmd: list[str], child_env) -> None:
    spill_dir = tmp_path / "spill"
    spill_dir.mkdir()
    cmd = [*zotsink_cmd, str(tmp_path / "gone" / "out.txt")]
    env = child_env({"ZOTSINK_SPILL_DIR": str(spill_dir)})
    r = subprocess.run(umask0(cmd), input=b"rec\n", capture_output=True, env=env)
    assert r.returncode == 74, r.stderr
    (spill,) = spill_dir.iterdir()
    assert mode(spill) == 0o600


@pytest.mark.parametrize("dangling", [False, True], ids=["to-a-file", "dangling"])
def test_spill_never_follows_a_planted_symlink(tmp_path: Path, dangling: bool) -> None:
    out = str(tmp_path / "out.txt")
    victim = tmp_path / "victim"
    if not dangling:
        victim.write_bytes(b"precious\n")
    base = f"{out}.spill.{HOST}.{os.getpid()}"
    os.symlink(victim, base)
    path = sidefiles.spill(out, b"rec\n", mode=0o644)
    assert path == base + ".1"
    assert Path(path).read_bytes() == b"rec\n"
    assert not os.path.islink(path)
    if dangling:
        assert not victim.exists()  # O_CREAT through the link would have made it
    else:
        assert victim.read_bytes() == b"precious\n"


def test_cli_spill_skips_a_planted_symlink(holder: Path, child_env) -> None:
    out = holder
    victim = out.parent / "victim"
    victim.write_bytes(b"precious\n")
    r = subprocess.run(
        [sys.executable, "-c", PLANTED, str(victim), str(out), "--timeout", "0"],
        input=b"rec\n",
        capture_output=True,
        env=child_env(),
    )
    err = r.stderr.decode()
    assert r.returncode == 75, err
    m = re.search(r"^zotsink: 1 record is safe in (\S+);", err, re.M)
    assert m and re.fullmatch(rf"{re.escape(str(out))}\.spill\.{re.escape(HOST)}\.\d+\.1", m[1])
    assert Path(m[1]).read_bytes() == b"rec\n"
    assert victim.read_bytes() == b"precious\n"


@pytest.mark.parametrize("planted", ["symlink", "dangling-symlink", "fifo"])
def test_rejects_never_go_through_a_planted_name(tmp_path: Path, zotsink, planted: str) -> None:
    out = tmp_path / "out.txt"
    out.touch()
    out.chmod(0o640)
    victim = tmp_path / "victim"
    rejects = tmp_path / "out.txt.rejects"
    if planted == "fifo":
        os.mkfifo(rejects, 0o666)
        why = (
            "it is a FIFO, not a regular file; name another OUT "
            "(or remove it, if it was put there by mistake)"
        )
    else:
        if planted == "symlink":
            victim.write_bytes(b"precious\n")
            victim.chmod(0o666)
        os.symlink(victim, rejects)
        why = "it is a symbolic link, which side files never follow"
    r = zotsink(out, input=b"good\nbad\0\n", timeout=30)
    err = r.stderr.decode()
    assert r.returncode == 74, err
    assert "Traceback" not in err
    saved = Path(f"{rejects}.spill.{HOST}.{saved_pid(err)}")
    assert err == (
        f"zotsink: 1 record refused; they are in {saved}\n"
        f"zotsink: error: cannot open {rejects} for appending: {why}; the records were saved "
        f"to {saved}\n"
    )
    assert saved.read_bytes() == b"byte 6: NUL byte\tbad\0\n"
    assert mode(saved) == 0o640  # OUT's, not the planted file's
    assert out.read_bytes() == b"good\n"
    if planted == "symlink":
        assert victim.read_bytes() == b"precious\n"
    elif planted == "dangling-symlink":
        assert not victim.exists()


def saved_pid(err: str) -> str:
    m = re.search(r"\.rejects\.spill\.[^.\s]+\.(\d+)\n", err)
    assert m, err
    return m[1]


def test_collect_never_follows_symlinks_out_of_its_source(tmp_path: Path) -> None:
    collect = zotsink.collect
    src, outside = tmp_path / "src", tmp_path / "outside"
    (src / "sub").mkdir(parents=True)
    (outside / "d").mkdir(parents=True)
    (outside / "secret.txt").write_text("k:secret\n")
    (outside / "d" / "x.txt").write_text("k:secret-too\n")
    (src / "a.txt").write_text("k:1\n")
    (src / "sub" / "b.txt").write_text("k:2\n")
    os.symlink(outside / "secret.txt", src / "link.txt")
    os.symlink(outside / "d", src / "linkdir")
    out = tmp_path / "out.tsv"
    report = collect([src], out)
    assert out.read_bytes() == b"source\tk\na.txt\t1\nsub/b.txt\t2\n"
    assert sorted(name for name, _why in report.skipped) == ["link.txt", "linkdir"]


def test_collect_reads_tar_members_in_place_and_names_are_only_data(
    tmp_path: Path, monkeypatch
) -> None:
    import io
    import tarfile

    collect = zotsink.collect
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    absolute = str(tmp_path / "abs.txt")
    with tarfile.open(work / "t.tar", "w") as t:
        for name, data in [("../evil.txt", b"k:3\n"), (absolute, b"k:4\n"), ("ok.txt", b"k:5\n")]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("passwd")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        t.addfile(link)
    report = collect(["t.tar"], "out.tsv")
    rows = sorted((work / "out.tsv").read_bytes().splitlines()[1:])
    assert rows == sorted([b"../evil.txt\t3", absolute.encode() + b"\t4", b"ok.txt\t5"])
    assert [name for name, _why in report.skipped] == ["passwd"]
    # Nothing was extracted: no file appeared where the member names point.
    assert not (tmp_path / "evil.txt").exists() and not os.path.exists(absolute)
    assert sorted(p.name for p in work.iterdir()) == ["out.tsv", "t.tar"]
