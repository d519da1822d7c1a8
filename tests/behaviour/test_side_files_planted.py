"""Files another user plants in a shared sticky directory at the names zotsink uses: the
ledger, the log, OUT itself and a pack index. One check refuses them all (a regular file;
a side file of your own; a shared file not planted by another user), and nothing is ever
appended to a planted file.

Real users: a victim and an attacker made with ``useradd``, each running as itself
(``setpriv``) in a ``1777`` directory under ``/tmp``.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from realusers import User, make_users, needs_root, remove_tree, sticky_dir

from zotsink._ledger.v1 import COLUMNS as V1_COLUMNS

pytestmark = needs_root

PLANT = r"""
import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
os.fchmod(fd, 0o666)
os.write(fd, sys.stdin.buffer.read())
os.close(fd)
"""


@pytest.fixture
def users() -> tuple[User, User]:
    return make_users()


@pytest.fixture
def shared() -> Iterator[str]:
    d = sticky_dir()
    yield d
    remove_tree(d)


def plant(attacker: User, shared: str, name: str, data: bytes) -> Path:
    r = attacker.python(PLANT, name, cwd=shared, input=data)
    assert r.returncode == 0, r.stderr
    path = Path(shared, name)
    assert path.stat().st_uid == attacker.uid
    return path


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_tasks(victim: User, shared: str, lines: str) -> None:
    r = victim.python(
        "import sys; open('tasks.txt', 'w').write(sys.stdin.read())",
        cwd=shared,
        input=lines.encode(),
    )
    assert r.returncode == 0, r.stderr


def test_a_planted_ledger_with_forged_ok_rows_is_refused(users, shared: str) -> None:
    victim, attacker = users
    write_tasks(victim, shared, "a\nb\nc\n")
    head = "\t".join(V1_COLUMNS[:16]) + "\n"  # a ledger of zotsink 0.1: read all the same
    forged = "".join(
        f"end\t2026-11-24T10:00:00.000000Z\t{n}\t{k}\t1\t\t\th\t1\tok\t0\t\t0.1\t1\t2\t\n"
        for n, k in ((1, "a"), (2, "b"), (3, "c"))
    )
    ledger = plant(attacker, shared, "out.tsv.ledger", (head + forged).encode())
    before = digest(ledger)
    r = victim.run("run", "tasks.txt", "out.tsv", "--", "echo", cwd=shared)
    assert r.returncode == 2, r.stderr
    err = r.stderr.decode()
    assert "out.tsv.ledger" in err and f"belongs to {attacker.name}" in err, err
    assert "give --ledger a path of your own" in err, err
    assert "Traceback" not in err
    assert not Path(shared, "out.tsv").exists()  # nothing ran, nothing was skipped as ok
    assert digest(ledger) == before
    # status and missing trust it no more than run does
    r = victim.run("status", "tasks.txt", "out.tsv", cwd=shared)
    assert r.returncode == 2 and b"out.tsv.ledger" in r.stderr, r.stderr
    r = victim.run("missing", "tasks.txt", "--ledger", "out.tsv.ledger", cwd=shared)
    assert (r.returncode, r.stdout) == (2, b""), r.stderr
    # with a ledger of its own, the same run does every task
    r = victim.run(
        "run", "tasks.txt", "out.tsv", "--ledger", "mine.ledger", "--", "echo", cwd=shared
    )
    assert r.returncode == 0, r.stderr
    assert Path(shared, "out.tsv").read_text() == "a\nb\nc\n"


def test_a_planted_world_writable_log_gets_no_stderr(users, shared: str) -> None:
    victim, attacker = users
    write_tasks(victim, shared, "echo SECRET-$((6*7)) >&2; echo rec\n")
    log = plant(attacker, shared, "out.tsv.log", b"")
    r = victim.run("run", "tasks.txt", "out.tsv", "--shell", cwd=shared)
    err = r.stderr.decode()
    assert r.returncode == 74, err
    assert "out.tsv.log" in err and f"belongs to {attacker.name}" in err, err
    assert log.read_bytes() == b""  # nothing appended to the planted file
    assert Path(shared, "out.tsv").read_text() == "rec\n"
    # the stderr line is not lost: it is in a spill file of the victim's, named on stderr
    spills = [p for p in Path(shared).glob("out.tsv.log.spill.*") if p.stat().st_uid == victim.uid]
    assert len(spills) == 1 and str(spills[0].name) in err, err
    assert b"SECRET-42" in spills[0].read_bytes()


def test_a_planted_out_is_not_written_and_the_records_are_spilled(users, shared: str) -> None:
    victim, attacker = users
    out = plant(attacker, shared, "out.txt", b"")
    r = victim.run("out.txt", cwd=shared, input=b"r1\nr2\n")
    err = r.stderr.decode()
    assert r.returncode == 74, err
    assert f"belongs to {attacker.name}" in err and "shared sticky directory" in err, err
    assert out.read_bytes() == b""
    spills = list(Path(shared).glob("out.txt.spill.*"))
    assert len(spills) == 1 and spills[0].stat().st_uid == victim.uid
    assert spills[0].read_bytes() == b"r1\nr2\n"


def test_a_planted_pack_index_is_not_written(users, shared: str) -> None:
    victim, attacker = users
    idx = plant(attacker, shared, "a.tar.idx", b"")
    r = victim.python("open('f.bin', 'wb').write(b'x' * 10)", cwd=shared)
    assert r.returncode == 0, r.stderr
    r = victim.run("pack", "a.tar", "f.bin", cwd=shared)
    err = r.stderr.decode()
    assert r.returncode == 74, err
    assert "a.tar.idx" in err and f"belongs to {attacker.name}" in err, err
    assert idx.read_bytes() == b""
    spills = list(Path(shared).glob("a.tar.spill.*"))
    assert len(spills) == 1 and spills[0].stat().st_uid == victim.uid


def test_the_same_files_of_the_directorys_owner_are_used(users, tmp_path: Path) -> None:
    """Not every file of another user is planted: in a sticky directory of a colleague's,
    the colleague's OUT is appended to (shared output, as the kernel allows)."""
    victim, colleague = users
    d = tmp_path / "project"
    d.mkdir()
    os.chown(d, colleague.uid, colleague.gid)
    d.chmod(0o1777)
    tmp_path.chmod(0o755)
    out = plant(colleague, str(d), "out.txt", b"c1\n")
    r = victim.run("out.txt", cwd=str(d), input=b"v1\n")
    assert r.returncode == 0, r.stderr
    assert out.read_bytes() == b"c1\nv1\n"
