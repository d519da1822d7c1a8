"""Side files in a group's project directory under ``umask 002`` (usual there): OUT keeps the
group's write, but the ledger, the log, rejects, spills and a pack index are created without
write for group or others; and a ledger that group or others may write is refused, because a
member's forged ``ok`` row would make the owner's next run skip that task.

Real users: a victim and an attacker made with ``useradd``, both members of one group, each
running as itself (``setpriv``) in the victim's ``2770`` directory of that group.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from realusers import User, child_env, group_dir, make_users, needs_root, remove_tree

from tests.ledgers import Book

pytestmark = needs_root

#: Holds an exclusive flock on OUT until its stdin closes: a writer that holds the lock.
HOLDER = r"""
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def project() -> Iterator[Path]:
    d = group_dir()
    yield Path(d)
    remove_tree(d)


def sh(user: User, cwd: Path, script: str, input: bytes = b"", umask: str = "002") -> bytes:
    r = subprocess.run(
        user.argv(["sh", "-c", script], umask), cwd=cwd, env=child_env(), input=input,
        capture_output=True,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    return r.stdout


def forged_ok(tmp_path: Path, ledger: Path, tasknum: int, line: str) -> bytes:
    """The rows that say a task nobody ran ended ok, stamped to follow ``ledger``'s last
    row as a group member who reads it could make them."""
    before = ledger.read_bytes()
    copy = tmp_path / "copy.ledger"
    copy.write_bytes(before)
    Book(copy).claim(tasknum, line=line).end(tasknum).write()
    return copy.read_bytes()[len(before) :]


def perm(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_side_files_are_written_by_their_owner_only_whatever_the_umask(project: Path) -> None:
    victim, _ = make_users()
    sh(victim, project, "printf 'a\\nb\\n' > tasks.txt")
    # a task that says something on stderr (the log) and prints a NUL line (rejects)
    task = "echo \"$0\"; echo note >&2; printf 'nul\\0\\n'"
    r = victim.run(
        "run", "tasks.txt", "out.txt", "--", "sh", "-c", task, cwd=str(project), umask="002"
    )
    assert r.returncode == 1, r.stderr  # refused lines
    (project / "blob").write_bytes(b"bytes")
    os.chown(project / "blob", victim.uid, victim.gid)
    r = victim.run("pack", "arch.tar", "blob", cwd=str(project), umask="002")
    assert r.returncode == 0, r.stderr
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(project / "out.txt")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
        r = victim.run("--timeout", "0", "out.txt", cwd=str(project), input=b"late\n", umask="002")
        assert r.returncode == 75, r.stderr  # spilled beside OUT
    finally:
        holder.communicate(b"", timeout=30)
    (spill,) = project.glob("out.txt.spill.*")
    assert perm(project / "out.txt") == 0o664  # the user's data: the umask decides
    assert perm(project / "arch.tar") == 0o664
    for side in ("out.txt.ledger", "out.txt.log", "out.txt.rejects", spill.name, "arch.tar.idx"):
        assert perm(project / side) == 0o644, side
        assert (project / side).stat().st_uid == victim.uid


def test_a_group_member_cannot_forge_a_done_task(project: Path, tmp_path: Path) -> None:
    victim, attacker = make_users()
    sh(victim, project, "printf 'a\\nb\\n' > tasks.txt")
    r = victim.run("run", "tasks.txt", "out.txt", "--index", "1", "--", "echo",
                   cwd=str(project), umask="002")  # fmt: skip
    assert r.returncode == 0, r.stderr
    # the group member tries to append "task 2 is done"; the ledger is not theirs to write
    forge = subprocess.run(
        attacker.argv(["sh", "-c", "cat >> out.txt.ledger"]), cwd=project, env=child_env(),
        input=forged_ok(tmp_path, project / "out.txt.ledger", 2, "b"), capture_output=True,
    )  # fmt: skip
    assert forge.returncode != 0 and b"Permission denied" in forge.stderr
    r = victim.run("run", "tasks.txt", "out.txt", "--", "echo", cwd=str(project), umask="002")
    assert r.returncode == 0, r.stderr
    assert (project / "out.txt").read_bytes() == b"a\nb\n"  # task 2 ran


@pytest.mark.parametrize("writable_by", ["group", "others"])
def test_a_ledger_others_may_write_is_refused(
    project: Path, tmp_path: Path, writable_by: str
) -> None:
    victim, attacker = make_users()
    sh(victim, project, "printf 'a\\nb\\n' > tasks.txt")
    r = victim.run("run", "tasks.txt", "out.txt", "--index", "1", "--", "echo",
                   cwd=str(project), umask="002")  # fmt: skip
    assert r.returncode == 0, r.stderr
    # a ledger made so by an older release, or by a chmod: the group member forges a row
    sh(victim, project, f"chmod {'664' if writable_by == 'group' else '646'} out.txt.ledger")
    if writable_by == "group":
        sh(
            attacker,
            project,
            "cat >> out.txt.ledger",
            input=forged_ok(tmp_path, project / "out.txt.ledger", 2, "b"),
        )
    before = (project / "out.txt.ledger").read_bytes()
    mode = "0664" if writable_by == "group" else "0646"
    want = (
        f"the ledger out.txt.ledger is not to be trusted: {writable_by} may write it (mode "
        f"{mode}), and a row anyone appends decides which tasks run"
    )
    fix = "chmod go-w out.txt.ledger"
    for args in (("run", "tasks.txt", "out.txt", "--", "echo"), ("status", "tasks.txt", "out.txt")):
        r = victim.run(*args, cwd=str(project))
        assert r.returncode == 2, r.stderr
        err = r.stderr.decode()
        assert want in err and fix in err, err
    assert (project / "out.txt").read_bytes() == b"a\n"  # nothing ran, nothing was skipped
    assert (project / "out.txt.ledger").read_bytes() == before
    sh(victim, project, fix)
    r = victim.run("status", "tasks.txt", "out.txt", cwd=str(project))
    assert r.returncode in (0, 1), r.stderr  # trusted again: the owner's word
