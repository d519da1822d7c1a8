"""``zotsink recover`` decides what a spilled first line is from what OUT and the spill file
hold, never from OUT's name: a record equal to OUT's first line is kept, and a ledger's
spill gives up its header whatever the ledger is called.

Spill files are made the way users get them: a real writer whose lock wait timed out while
another process held OUT's lock.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

Run = Callable[..., subprocess.CompletedProcess[bytes]]


@contextmanager
def held(path: Path) -> Iterator[None]:
    """OUT's lock (flock, what ``--lock auto`` takes on a local disk) held by this process."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def spills(path: Path) -> list[Path]:
    return sorted(path.parent.glob(path.name + ".spill.*"))


def test_a_spilled_record_equal_to_a_headerless_outs_first_line_is_kept(
    tmp_path: Path, zotsink: Run
) -> None:
    out = tmp_path / "out.tsv"
    assert zotsink(out, input=b"x\t1\n").returncode == 0
    with held(out):
        r = zotsink(out, "--timeout", "1", input=b"x\t1\ny\t2\n")
    assert r.returncode == 75, r.stderr
    assert b"2 records" in r.stderr, r.stderr
    assert len(spills(out)) == 1
    r = zotsink("recover", out)
    assert r.returncode == 0, r.stderr
    assert out.read_bytes() == b"x\t1\nx\t1\ny\t2\n"
    assert spills(out) == []


def test_a_repeated_header_is_still_given_up(tmp_path: Path, zotsink: Run) -> None:
    out = tmp_path / "out.tsv"
    assert zotsink(out, "--columns", "name,n", input=b"a\t1\n").returncode == 0
    with held(out):
        r = zotsink(out, "--columns", "name,n", "--timeout", "1", input=b"b\t2\n")
    assert r.returncode == 75, r.stderr
    assert spills(out)[0].read_bytes() == b"name\tn\nb\t2\n"
    r = zotsink("recover", out)
    assert r.returncode == 0, r.stderr
    assert out.read_bytes() == b"name\tn\na\t1\nb\t2\n"


def test_a_ledger_spill_recovered_as_advised_keeps_the_ledger_readable(
    tmp_path: Path, zotsink: Run
) -> None:
    tasks = tmp_path / "tasks.txt"
    tasks.write_text("echo one\ntwo\n")
    # --shell in every run: a run called otherwise than the first is refused
    assert zotsink("run", tasks, "out.tsv", "--index", "1", "--shell").returncode == 0
    ledger = tmp_path / "out.tsv.ledger"
    for fifo in ("up", "go"):
        os.mkfifo(tmp_path / fifo)
    # Task 2 says it runs, then waits while this test takes the ledger's lock: its end row
    # cannot be written within --timeout and goes to a spill file of the ledger.
    tasks.write_text("echo one\necho up > up; read x < go; echo two\n")
    argv = ["run", tasks, "out.tsv", "--index", "2", "--shell", "--timeout", "1"]
    run = subprocess.Popen(
        [sys.executable, "-m", "zotsink", *argv],
        cwd=tmp_path,
        stderr=subprocess.PIPE,
    )
    try:
        assert (tmp_path / "up").read_text() == "up\n"
        with held(ledger):
            (tmp_path / "go").write_text("go\n")
            _, err = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert run.returncode == 75, err
    found = spills(ledger)
    assert len(found) == 1, err
    assert found[0].read_bytes().startswith(ledger.read_bytes().split(b"\n")[0] + b"\n")
    r = zotsink("recover", ledger)  # what the ledger's code advises
    assert r.returncode == 0, r.stderr
    assert spills(ledger) == []
    head = ledger.read_bytes().split(b"\n")[0]
    assert ledger.read_bytes().count(head) == 1
    r = zotsink("status", tasks, "out.tsv", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["counts"]["ok"] == 2
    r = zotsink("run", tasks, "out.tsv", "--shell")  # every task ok: nothing runs again
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "out.tsv").read_text() == "one\ntwo\n"
