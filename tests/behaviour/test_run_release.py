"""``zotsink release``: a run that died on a host nobody here can ask (another host, no
scheduler job) holds its tasks for ever; ``status`` says so and names the command that
frees them, ``status --waiting`` says why nothing waits, and once released the next run
takes them, each once."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

from tests.ledgers import Book

Run = Callable[..., subprocess.CompletedProcess[bytes]]


def planted(tmp_path: Path) -> str:
    """tasks.txt of a, b, c; task 1 ok by a run here; task 2 claimed and task 3 begun by a
    run of host gone-node (no job: no scheduler to ask). The gone run's id."""
    (tmp_path / "tasks.txt").write_text("a\nb\nc\n")
    ledger = tmp_path / "out.txt.ledger"
    (tmp_path / "out.txt").write_text("a\n")
    Book(ledger).claim(1, line="a").begin(1).end(1, size_at=(0, 2), records=1).write()
    gone = Book(ledger, host="gone-node", hostid="1.1", pid=4242, start="99")
    gone.claim(2, line="b").claim(3, line="c").begin(3, pid=4243).write()
    return gone.run


def test_a_run_nothing_can_tell_of_is_named_and_released(tmp_path: Path, zotsink: Run) -> None:
    run_id = planted(tmp_path)
    r = zotsink("status", "tasks.txt", "out.txt")
    said = r.stderr.decode()
    assert (
        f"run {run_id} (gone-node pid 4242 job -): 1 task running, 1 claimed, and nothing "
        "here can tell whether it lives (ask its scheduler); if it is gone: zotsink release "
        f"tasks.txt out.txt --run {run_id}"
    ) in said, said
    w = zotsink("status", "tasks.txt", "out.txt", "--waiting")
    assert w.returncode == 1 and w.stdout == b""
    assert w.stderr.decode() == (
        "zotsink: 2 tasks held by runs whose life nothing here can tell: `zotsink status "
        "tasks.txt out.txt` names them and how to release a run that is gone\n"
    )
    # a pull run leaves them to their run, and says so
    r = zotsink("run", "--pull", "tasks.txt", "out.txt", "--", "echo")
    assert r.returncode == 0, r.stderr
    assert b"left running in runs whose life nothing here can tell" in r.stderr
    assert (tmp_path / "out.txt").read_text() == "a\n"
    # the user's word: that run is gone
    r = zotsink("release", "tasks.txt", "out.txt", "--run", run_id)
    assert r.returncode == 0, r.stderr
    assert r.stderr.decode() == (
        f"zotsink: run {run_id} (gone-node pid 4242) released: 1 claimed and 1 running "
        "tasks of it are free for the next runs\n"
    )
    d = json.loads(zotsink("status", "tasks.txt", "out.txt", "--json").stdout)
    assert d["counts"]["never"] == 1 and d["counts"]["lost"] == 1 and d["to_run"] == 2
    assert zotsink("status", "tasks.txt", "out.txt", "--waiting").returncode == 0
    r = zotsink("run", "--pull", "tasks.txt", "out.txt", "--", "echo")
    assert r.returncode == 0, r.stderr
    assert sorted(zotsink("cat", "out.txt").stdout.decode().split()) == ["a", "b", "c"]
    # by HOST:PID too; a run that holds nothing now is refused
    r = zotsink("release", "tasks.txt", "out.txt", "--run", "gone-node:4242")
    assert r.returncode == 2 and b"holds no task" in r.stderr


def test_release_refuses_a_live_run_and_a_name_of_no_run(tmp_path: Path, zotsink: Run) -> None:
    planted(tmp_path)
    # a run of this very process, on this host, holding task 2 again: alive
    here = Book(tmp_path / "out.txt.ledger")
    here.claim(2, line="b", attempt=2).write()
    r = zotsink("release", "tasks.txt", "out.txt", "--run", here.run)
    assert r.returncode == 2, r.stderr
    assert b"is alive: stop it" in r.stderr
    r = zotsink("release", "tasks.txt", "out.txt", "--run", "nosuch")
    assert r.returncode == 2
    assert b"no run of out.txt.ledger is named nosuch" in r.stderr
    before = (tmp_path / "out.txt.ledger").read_bytes()
    r = zotsink("release", "tasks.txt", "out.txt")
    assert r.returncode == 2 and b"--run" in r.stderr  # required
    assert (tmp_path / "out.txt.ledger").read_bytes() == before
