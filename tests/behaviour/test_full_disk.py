"""Full disk, quota and I/O errors: exit 74, OUT ends with a whole record, the rest spilled.

ENOSPC is real: OUT lives on a small tmpfs this test mounts (root only; it skips with the
reason otherwise). EDQUOT and EIO are injected into a child zotsink by a shim that replaces
``os.write`` / ``os.fsync`` for OUT's descriptor only, so side files are written normally.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# Runs the CLI with os.write/os.fsync failing on OUT (argv: OUT ERRNO BUDGET OP ARGS...):
# OP "write": the first BUDGET bytes are written (the write that crosses it comes back
# short, as on a filling disk), every later write fails with ERRNO; OP "fsync": every
# fsync of OUT fails with ERRNO.
SHIM = r"""
import errno, os, sys
target, err, budget, op = sys.argv[1], getattr(errno, sys.argv[2]), [int(sys.argv[3])], sys.argv[4]
target = os.path.realpath(target)
real_write, real_fsync = os.write, os.fsync

def is_out(fd):
    try:
        return os.readlink(f"/proc/self/fd/{fd}") == target
    except OSError:
        return False

def write(fd, data):
    if op != "write" or not is_out(fd):
        return real_write(fd, data)
    if budget[0] <= 0:
        raise OSError(err, os.strerror(err))
    n = real_write(fd, memoryview(data)[: budget[0]])
    budget[0] -= n
    return n

def fsync(fd):
    if op == "fsync" and is_out(fd):
        raise OSError(err, os.strerror(err))
    return real_fsync(fd)

os.write, os.fsync = write, fsync
sys.argv = ["zotsink", *sys.argv[5:]]
from zotsink.cli import main
main()
"""

SPILLED = re.compile(r"^zotsink: (\d+) records? (?:is|are) safe in (\S+); run `([^`]*)`", re.M)


def make_records(n: int, tag: str = "r") -> list[bytes]:
    # 64 bytes each, unique, so every line of OUT can be checked whole
    return [f"{tag}-{i:07d}-".encode().ljust(63, b"x") + b"\n" for i in range(n)]


def check_split(out: Path, spill: Path, records: list[bytes]) -> tuple[list[bytes], list[bytes]]:
    """OUT holds whole records only, the spill the rest: together each record exactly once."""
    data = out.read_bytes()
    assert data == b"" or data.endswith(b"\n")
    written = data.splitlines(keepends=True)
    saved = spill.read_bytes().splitlines(keepends=True)
    known = set(records)
    assert all(line in known for line in written), "a line in OUT is not a whole record"
    assert sorted(written + saved) == sorted(records)
    return written, saved


@contextlib.contextmanager
def mounted_tmpfs(where: Path, size: str) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    where.mkdir()
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(where)],
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip() or r.returncode}")
    try:
        yield where
    finally:
        if subprocess.run(["umount", str(where)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(where)], capture_output=True)


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 256 KiB tmpfs inside tmp_path, unmounted at teardown."""
    with mounted_tmpfs(tmp_path / "fs", "256k") as fs:
        yield fs


def fill(fs: Path) -> None:
    """Fill the filesystem completely with one file."""
    with open(fs / "filler", "wb", buffering=0) as f:
        with contextlib.suppress(OSError):
            while True:
                f.write(b"\0" * 4096)
        with contextlib.suppress(OSError):
            while True:
                f.write(b"\0")


def test_full_disk_spills_the_rest_and_recover_completes_out(
    tmp_path: Path, small_fs: Path, zotsink
) -> None:
    out = small_fs / "out.txt"
    spill_dir = tmp_path / "spill"
    spill_dir.mkdir()
    (tmp_path / "tmp").mkdir()
    records = make_records(6000)  # 384,000 bytes for 256 KiB: read and written in batches
    env = {"ZOTSINK_SPILL_DIR": str(spill_dir), "TMPDIR": str(tmp_path / "tmp")}
    r = zotsink(out, "--batch-bytes", "65536", input=b"".join(records), env=env)
    err = r.stderr.decode()
    assert r.returncode == 74, err
    assert "No space left on device" in err and "Traceback" not in err
    m = SPILLED.search(err)
    assert m, err
    spill = Path(m.group(2))
    # The full tmpfs cannot take the spill file: it went to $ZOTSINK_SPILL_DIR, not $TMPDIR.
    assert spill.parent == spill_dir and not list(small_fs.glob("out.txt.spill.*"))
    assert spill.name.startswith(f"out.txt.spill.{os.uname().nodename}.")
    assert not list((tmp_path / "tmp").iterdir())
    written, saved = check_split(out, spill, records)
    assert written and int(m.group(1)) == len(saved)
    assert m.group(3) == f"zotsink recover {out} {spill}"

    # Space comes back (a bigger quota, or files removed): recover folds the spill in.
    subprocess.run(["mount", "-o", "remount,size=2m", str(small_fs)], check=True)
    r = zotsink("recover", out, spill)
    assert r.returncode == 0, r.stderr
    assert sorted(out.read_bytes().splitlines(keepends=True)) == sorted(records)
    assert not spill.exists()


@pytest.mark.parametrize(
    ("spill_dir", "tmpdir", "expect"),
    [
        ("spill", "tmp", "spill"),
        (None, "tmp", "tmp"),
        ("missing", "tmp", "tmp"),
        ("missing", "missing-too", "/tmp"),
    ],
    ids=["ZOTSINK_SPILL_DIR", "TMPDIR", "missing-ZOTSINK_SPILL_DIR", "slash-tmp"],
)
def test_spill_goes_to_the_first_place_that_takes_it(
    tmp_path: Path,
    small_fs: Path,
    zotsink,
    spill_dir: str | None,
    tmpdir: str,
    expect: str,
) -> None:
    (tmp_path / "spill").mkdir()
    (tmp_path / "tmp").mkdir()
    fill(small_fs)
    out = small_fs / "out.txt"
    env: dict[str, str | None] = {
        "ZOTSINK_SPILL_DIR": str(tmp_path / spill_dir) if spill_dir else None,
        "TMPDIR": str(tmp_path / tmpdir),
    }
    r = zotsink(out, "only record", env=env)
    err = r.stderr.decode()
    m = SPILLED.search(err)
    assert r.returncode == 74 and m, err
    spill = Path(m.group(2))
    try:
        assert spill.parent == (Path("/tmp") if expect == "/tmp" else tmp_path / expect)
        assert spill.read_bytes() == b"only record\n"
        # Outside OUT's directory the spill file is for its owner's eyes only.
        assert spill.stat().st_mode & 0o777 == 0o600
    finally:
        if expect == "/tmp":
            spill.unlink()
    assert out.read_bytes() == b""


@pytest.mark.parametrize(
    ("err", "op", "message"),
    [
        ("EDQUOT", "write", "Disk quota exceeded"),
        ("EIO", "write", "Input/output error"),
        ("EIO", "fsync", "Input/output error"),
        ("ENOSPC", "write", "No space left on device"),
    ],
    ids=["EDQUOT", "EIO", "EIO-on-fsync", "ENOSPC"],
)
def test_injected_io_errors_take_the_same_path(
    tmp_path: Path, zotsink, child_env, err: str, op: str, message: str
) -> None:
    out = tmp_path / "out.txt"
    records = make_records(6000)
    budget = 200_000  # mid-way: earlier batches land, one is cut short, later ones fail
    shim = [sys.executable, "-c", SHIM, str(out), err, str(budget), op]
    r = subprocess.run(
        [*shim, "--sync", "fsync", "--batch-bytes", "65536", str(out)],  # several batches
        input=b"".join(records),
        capture_output=True,
        env=child_env(),
        timeout=60,
    )
    stderr = r.stderr.decode()
    assert r.returncode == 74, stderr
    assert f"cannot append to {out}: {message}" in stderr and "Traceback" not in stderr
    m = SPILLED.search(stderr)
    assert m, stderr
    spill = Path(m.group(2))
    assert spill.parent == tmp_path  # beside OUT: that disk is not full
    assert m.group(3) == f"zotsink recover {out}"
    written, saved = check_split(out, spill, records)
    if op == "write":
        assert 0 < len(written) * 64 <= budget  # the cut-short batch was cut back whole
    else:
        assert written == []  # no fsync succeeded: every batch was cut back
    assert int(m.group(1)) == len(saved)
    r = zotsink("recover", out)
    assert r.returncode == 0, r.stderr
    assert sorted(out.read_bytes().splitlines(keepends=True)) == sorted(records)
    assert not list(tmp_path.glob("out.txt.spill.*"))


def test_run_on_a_full_disk_names_the_recover_that_finds_its_spill(
    tmp_path: Path, small_fs: Path, zotsink
) -> None:
    # run's own advice used to be `zotsink recover OUT`, which finds no spill file when the
    # full disk sent it elsewhere: it must name the spill file, as append's does
    out = small_fs / "out.txt"
    spill_dir = tmp_path / "spill"
    spill_dir.mkdir()
    (tmp_path / "tasks.txt").write_text("echo one\necho two\n")
    fill(small_fs)
    env = {"ZOTSINK_SPILL_DIR": str(spill_dir)}
    # the ledger and the log live on a disk with room; OUT on the full one
    r = zotsink(
        "run",
        "tasks.txt",
        out,
        "--shell",
        "-q",
        "--ledger",
        "out.ledger",
        "--log",
        "out.log",
        env=env,
    )
    err = r.stderr.decode()
    assert r.returncode == 74, err
    m = SPILLED.search(err)
    assert m, err
    spill = Path(m.group(2))
    assert spill.parent == spill_dir and sorted(spill.read_bytes().splitlines()) == [b"one", b"two"]
    assert m.group(3) == f"zotsink recover {out} {spill}"
    (small_fs / "filler").unlink()
    r = zotsink(*m.group(3).split()[1:])  # the command as advised
    assert r.returncode == 0, r.stderr.decode()
    assert sorted(out.read_bytes().splitlines()) == [b"one", b"two"]


# A task's output held until it ends, in a child process whose $TMPDIR is a full tmpfs
# (argv: OUT SIZE): what Held gives back, or the HoldError's message.
HOLD = r"""
import hashlib, sys
from zotsink import errors
from zotsink._core.blocks import Held
HoldError = getattr(errors, "HoldError", errors.ZotsinkError)  # a release before it: none
out, size = sys.argv[1], int(sys.argv[2])
data = b"".join(b"%07d-" % i + b"x" * 56 + b"\n" for i in range(size // 64))
try:
    held = Held(limit=1 << 16, out=out)
except TypeError:  # a release whose Held knew no OUT: $TMPDIR only
    held = Held(limit=1 << 16)
try:
    for i in range(0, len(data), 65536):
        held.add(data[i : i + 65536], 1)
except HoldError as e:
    print("HoldError:", e)
    sys.exit(3)
back = b"".join(held.chunks())
held.close()
print(back == data, held.size == len(data))
"""


def test_held_output_moves_beside_out_when_tmpdir_is_full(tmp_path: Path, small_fs: Path) -> None:
    # A task's output over the memory limit goes to $TMPDIR; one that fills it used to kill
    # the whole run. Its bytes now move beside OUT, whole and in order. (The tmpfs has room
    # when the file is made: tempfile itself skips a $TMPDIR that is full already.)
    out = tmp_path / "out.tsv"
    env = {**os.environ, "TMPDIR": str(small_fs)}
    r = subprocess.run(
        [sys.executable, "-c", HOLD, str(out), str(2 << 20)], capture_output=True, env=env
    )
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout == b"True True\n"


def test_held_output_with_no_room_anywhere_is_one_clear_error(
    tmp_path: Path, small_fs: Path
) -> None:
    # $TMPDIR fills up and OUT's filesystem is full: one HoldError that names both places
    # and says the lines are not in OUT, never a bare OSError from deep inside.
    with mounted_tmpfs(tmp_path / "fs2", "256k") as full:
        fill(full)
        out = full / "out.tsv"
        env = {**os.environ, "TMPDIR": str(small_fs)}
        r = subprocess.run(
            [sys.executable, "-c", HOLD, str(out), str(1 << 20)], capture_output=True, env=env
        )
    msg = r.stdout.decode()
    assert r.returncode == 3, (msg, r.stderr.decode())
    assert msg.startswith("HoldError: a task's output (")
    assert f"$TMPDIR ({small_fs}): No space left on device" in msg
    assert f"beside OUT ({full}): No space left on device" in msg
    assert "These lines are not in OUT" in msg


def test_a_long_line_moves_to_tmpdir_when_out_is_full(
    tmp_path: Path, small_fs: Path, zotsink
) -> None:
    # The twin: a line over the limit is kept beside OUT first; when OUT's disk is full it
    # moves to $TMPDIR, and the stream's other lines are appended.
    out = small_fs / "out.txt"
    out.write_bytes(b"")
    fill(small_fs)
    (tmp_path / "tmp").mkdir()
    (tmp_path / "spill").mkdir()
    long = b"y" * (17 << 20) + b"\n"
    env = {"TMPDIR": str(tmp_path / "tmp"), "ZOTSINK_SPILL_DIR": str(tmp_path / "spill")}
    r = zotsink(out, input=long, env=env, timeout=120)
    err = r.stderr.decode()
    assert "Traceback" not in err and "could not be kept" not in err, err
    # the rejects file cannot be written on the full disk either: it is spilled whole
    spills = list((tmp_path / "spill").iterdir())
    assert len(spills) == 1, err
    assert spills[0].stat().st_size == len(long) + len(
        b"byte 1: over the 16777216-byte line limit\t"
    )


def test_run_goes_on_when_a_tasks_held_output_fills_tmpdir(
    tmp_path: Path, small_fs: Path, zotsink
) -> None:
    # One task prints more than is held in memory while $TMPDIR is full: its output moves
    # beside OUT; the run and its siblings go on, every task ends ok with its end row.
    # 80,000 lines of 62 bytes: about 5 MiB, over what is held in memory
    (tmp_path / "tasks.txt").write_text(f"echo a\nyes {'y' * 60} | head -n 80000\necho b\n")
    r = zotsink(
        "run", "tasks.txt", "out.txt", "--shell", "-q", env={"TMPDIR": str(small_fs)}, timeout=120
    )
    err = r.stderr.decode()
    assert r.returncode == 0, err
    lines = (tmp_path / "out.txt").read_bytes().splitlines()
    assert len(lines) == 80002 and b"a" in lines and b"b" in lines
    r = zotsink("status", "tasks.txt", "out.txt")
    assert r.returncode == 0, r.stderr.decode()
