"""Files zotsink writes whole for the user (``status --html``, ``cat -o``) in a group's project
directory, where another member may plant a symbolic link at the name zotsink writes to
first, or at the file's own name: neither is ever written through, and the user's own files
stay as they were. Also: a directory the user may not write to is named as such, and a task
list whose name (or a line) is not UTF-8 still gives a page.

Real users: a victim and an attacker made with ``useradd``, both members of one group, each
running as itself (``setpriv``) in the victim's ``2770`` directory of that group.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from realusers import (
    User,
    child_env,
    group_dir,
    make_users,
    needs_root,
    remove_tree,
    zotsink_command,
)
from waiting import wait_for

Run = Callable[..., subprocess.CompletedProcess[bytes]]

#: The victim's command, started so that its pid is known before zotsink runs (exec keeps
#: it): it notes the pid, waits at the FIFO `gate`, then becomes zotsink.
GATED = 'echo $$ > pid.tmp && mv pid.tmp pid && read go < gate && exec "$@"'
PRECIOUS = b"the victim's own results\n"

#: Each command that writes a file whole, and the name of the file it writes.
WRITERS = {
    "status --html": (["status", "tasks.txt", "out.txt", "--html", "report.html"], "report.html"),
    "cat -o": (["cat", "out.txt", "-o", "table.jsonl", "--force"], "table.jsonl"),
}


@pytest.fixture
def project() -> Iterator[Path]:
    d = group_dir()
    yield Path(d)
    remove_tree(d)


def as_user(user: User, cwd: Path, *cmd: str) -> None:
    r = subprocess.run(user.argv(cmd), cwd=cwd, env=child_env(), capture_output=True)
    assert r.returncode == 0, r.stderr


@needs_root
@pytest.mark.parametrize("where", ["temporary name", "target"])
@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_a_link_planted_by_a_group_member_is_never_written_through(
    project: Path, writer: str, where: str
) -> None:
    victim, attacker = make_users()
    as_user(victim, project, "sh", "-c", "printf 'a\\nb\\n' > tasks.txt")
    r = victim.run("run", "tasks.txt", "out.txt", "--", "echo", cwd=str(project))
    assert r.returncode == 0, r.stderr
    as_user(victim, project, "sh", "-c", f"printf %s {PRECIOUS.decode()!r} > precious")
    precious = project / "precious"
    before = precious.read_bytes()
    os.mkfifo(project / "gate")
    os.chmod(project / "gate", 0o666)
    args, name = WRITERS[writer]
    p = subprocess.Popen(
        victim.argv(["sh", "-c", GATED, "sh", *zotsink_command(*args)]),
        cwd=project,
        env=child_env(),
        stderr=subprocess.PIPE,
    )
    try:
        wait_for(lambda: (project / "pid").exists(), p, "noted its pid")
        pid = (project / "pid").read_text().strip()
        # the names zotsink used to write first (OUT.part.PID, OUT.tmp.PID), and the target
        planted = (
            [f"{name}.part.{pid}", f"{name}.tmp.{pid}"] if where == "temporary name" else [name]
        )
        for link in planted:
            as_user(attacker, project, "ln", "-s", "precious", link)
        with open(project / "gate", "w") as gate:
            gate.write("go\n")
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, err
    assert precious.read_bytes() == before  # never truncated, never written to
    written = project / name
    assert not written.is_symlink() and written.stat().st_uid == victim.uid
    data = written.read_bytes()
    assert data.startswith(b"<!DOCTYPE html>" if name.endswith(".html") else b'{"line":')
    for link in planted:
        if where == "temporary name":  # the planted links are left alone, not used
            assert os.readlink(project / link) == "precious"
    leftovers = [n for n in os.listdir(project) if ".part." in n and not n.endswith(pid)]
    assert leftovers == []


@needs_root
def test_a_directory_the_user_may_not_write_is_named(project: Path) -> None:
    victim, _ = make_users()
    as_user(victim, project, "sh", "-c", "printf 'a\\n' > tasks.txt")
    r = victim.run("run", "tasks.txt", "out.txt", "--", "echo", cwd=str(project))
    assert r.returncode == 0, r.stderr
    locked = project / "locked"
    locked.mkdir(mode=0o755)  # root's: the victim may look, not write
    r = victim.run(
        "status", "tasks.txt", "out.txt", "--html", "locked/report.html", cwd=str(project)
    )
    assert r.returncode == 74, r.stderr
    assert (
        f"cannot write locked/report.html: the directory {locked} is not writable for you"
        in r.stderr.decode()
    ), r.stderr
    assert os.listdir(locked) == []


def test_the_target_must_be_a_file(tmp_path: Path, zotsink: Run) -> None:
    (tmp_path / "tasks.txt").write_text("a\n")
    assert zotsink("run", "tasks.txt", "out.txt", "--", "echo").returncode == 0
    os.mkfifo(tmp_path / "fifo.html")
    r = zotsink("status", "tasks.txt", "out.txt", "--html", "fifo.html", timeout=30)
    assert r.returncode == 2, r.stderr
    assert b"fifo.html is a FIFO, not a file zotsink may replace: name a file" in r.stderr
    assert sorted(os.listdir(tmp_path)) == ["fifo.html", "out.txt", "out.txt.ledger", "tasks.txt"]


def test_a_task_list_named_in_latin_1_gives_a_page(tmp_path: Path, zotsink: Run) -> None:
    """File names are bytes: one in Latin-1 (and a task line too) shows its bytes as
    replacement characters, never an internal error."""
    name = os.fsdecode(b"t\xe2ches-\xe9t\xe9.txt")  # "tâches-été.txt" in Latin-1
    (tmp_path / name).write_bytes(b"caf\xe9\nplain\n")
    r = zotsink("run", name, "out.txt", "--", "echo")
    assert r.returncode == 0, r.stderr
    r = zotsink("status", name, "out.txt", "--html", "report.html")
    assert r.returncode == 0, r.stderr
    page = (tmp_path / "report.html").read_bytes().decode("utf-8")  # valid UTF-8, whole
    assert "<title>zotsink status t\ufffdches-\ufffdt\ufffd.txt</title>" in page
    assert page.rstrip().endswith("</html>")
    assert sorted(os.listdir(tmp_path)) == sorted(
        [name, "out.txt", "out.txt.ledger", "report.html"]
    )
