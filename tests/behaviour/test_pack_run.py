"""``zotsink pack`` under ``zotsink run``: a retry appends its members again, and every
reader (``zotsink cat``, ``--list``, a plain ``tar xf``) gives the latest attempt's bytes.

The tasks are real processes started by ``zotsink run``: each writes an image whose bytes
name its attempt, packs it (with ``zotsink pack`` or ``append_member``), then fails on the
attempts the test chooses.
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.ledgers import ledger_rows

Run = Callable[..., subprocess.CompletedProcess[bytes]]

# argv: the task line, then the attempts that end ok (comma list). The image is packed
# before the task decides to fail, as a task that crashes after writing its output does.
CLI_TASK = r"""
set -e
printf '%s attempt %s' "$1" "$ZOTSINK_ATTEMPT" > "$1.img"
"$PY" -m zotsink pack arch.tar "$1.img" --name "$1.png"
case ",$OK_ATTEMPTS," in *",$ZOTSINK_ATTEMPT,"*) exit 0 ;; esac
exit 1
"""
API_TASK = r"""
import os, sys
import zotsink
line, attempt = sys.argv[1], os.environ["ZOTSINK_ATTEMPT"]
zotsink.append_member("arch.tar", f"{line}.png", f"{line} attempt {attempt}".encode())
sys.exit(0 if attempt in os.environ["OK_ATTEMPTS"].split(",") else 1)
"""


def _task(tmp_path: Path, kind: str) -> list[str]:
    if kind == "pack":
        (tmp_path / "task.sh").write_text(CLI_TASK)
        return ["sh", str(tmp_path / "task.sh")]
    (tmp_path / "task.py").write_text(API_TASK)
    return [sys.executable, str(tmp_path / "task.py")]


def _run(zotsink: Run, tmp_path: Path, kind: str, ok: str, *opts: str) -> None:
    r = zotsink(
        "run",
        "tasks.txt",
        "out.txt",
        *opts,
        "--",
        *_task(tmp_path, kind),
        env={"PY": sys.executable, "OK_ATTEMPTS": ok},
    )
    assert r.returncode in (0, 1), r.stderr


def _ends(tmp_path: Path) -> list[tuple[str, str, str]]:
    rows = ledger_rows(tmp_path / "out.txt.ledger")
    return [(r["key"], r["attempt"], r["status"]) for r in rows if r["event"] == "end"]


def _listing(zotsink: Run, *args: str) -> list[dict[str, str]]:
    r = zotsink("cat", "arch.tar", "--list", *args)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.decode().splitlines()
    return [dict(zip(lines[0].split("\t"), line.split("\t"))) for line in lines[1:]]


def _extracted(tmp_path: Path) -> dict[str, bytes]:
    dest = tmp_path / "x"
    dest.mkdir()
    subprocess.run(["tar", "xf", str(tmp_path / "arch.tar"), "-C", str(dest)], check=True)
    return {p.name: p.read_bytes() for p in dest.iterdir()}


@pytest.mark.parametrize("kind", ["pack", "append_member"])
def test_the_retry_of_a_failed_attempt_wins_everywhere(
    tmp_path: Path, zotsink: Run, kind: str
) -> None:
    (tmp_path / "tasks.txt").write_text("a\nb\n")
    _run(zotsink, tmp_path, kind, "2", "--retries", "1")
    assert sorted(_ends(tmp_path)) == [
        ("a", "1", "failed"),
        ("a", "2", "ok"),
        ("b", "1", "failed"),
        ("b", "2", "ok"),
    ]
    log = tmp_path / "out.txt.log"  # made by the first line of a task's stderr
    assert not log.exists() or b"Traceback" not in log.read_bytes(), log.read_text()
    for name in ("a", "b"):
        r = zotsink("cat", "arch.tar", f"{name}.png")
        assert (r.returncode, r.stdout) == (0, f"{name} attempt 2".encode()), r.stderr
    assert _extracted(tmp_path) == {"a.png": b"a attempt 2", "b.png": b"b attempt 2"}
    latest = _listing(zotsink)
    assert sorted((m["name"], m["tasknum"], m["attempt"]) for m in latest) == [
        ("a.png", "1", "2"),
        ("b.png", "2", "2"),
    ]
    every = _listing(zotsink, "--all")
    assert sorted((m["name"], m["tasknum"], m["attempt"]) for m in every) == [
        ("a.png", "1", "1"),
        ("a.png", "1", "2"),
        ("b.png", "2", "1"),
        ("b.png", "2", "2"),
    ]
    with tarfile.open(tmp_path / "arch.tar") as tf:  # the attempt is in each member's header
        said = [(m.name, m.pax_headers["comment"].split(" attempt=")[1]) for m in tf]
    assert sorted(said) == [("a.png", "1"), ("a.png", "2"), ("b.png", "1"), ("b.png", "2")]
    r = zotsink("verify", "arch.tar")
    assert r.returncode == 0, r.stderr


def test_with_the_ledger_the_latest_ok_attempt_wins_over_a_later_failed_one(
    tmp_path: Path, zotsink: Run
) -> None:
    (tmp_path / "tasks.txt").write_text("a\n")
    _run(zotsink, tmp_path, "pack", "2", "--retries", "1")  # attempt 1 fails, 2 is ok
    _run(zotsink, tmp_path, "pack", "2", "--rerun")  # attempt 3 packs, then fails
    assert _ends(tmp_path) == [("a", "1", "failed"), ("a", "2", "ok"), ("a", "3", "failed")]
    assert zotsink("cat", "arch.tar", "a.png").stdout == b"a attempt 3"  # the last, as tar
    assert _extracted(tmp_path) == {"a.png": b"a attempt 3"}
    r = zotsink("cat", "arch.tar", "a.png", "--ledger", "out.txt.ledger")
    assert (r.returncode, r.stdout) == (0, b"a attempt 2"), r.stderr
    latest = _listing(zotsink, "--ledger", "out.txt.ledger")
    assert [(m["name"], m["attempt"]) for m in latest] == [("a.png", "2")]
    assert [m["attempt"] for m in _listing(zotsink, "--all")] == ["1", "2", "3"]


def test_a_name_no_ok_attempt_wrote_is_an_error_with_the_ledger(
    tmp_path: Path, zotsink: Run
) -> None:
    (tmp_path / "tasks.txt").write_text("a\n")
    _run(zotsink, tmp_path, "pack", "9", "--retries", "1")  # both attempts fail
    r = zotsink("cat", "arch.tar", "a.png", "--ledger", "out.txt.ledger")
    assert r.returncode == 1 and r.stdout == b""
    assert (
        b"every member named 'a.png' was appended by an attempt that did not end ok in the "
        b"ledger (task 1 attempt 1, task 1 attempt 2)"
    ) in r.stderr
    r = zotsink("cat", "arch.tar", "--list", "--ledger", "out.txt.ledger")
    assert r.returncode == 0 and r.stdout.count(b"\n") == 1  # the header line only
    assert b"1 name(s) left out, appended only by attempts not ok in out.txt.ledger" in r.stderr


def test_two_tasks_packing_one_name_are_still_refused(tmp_path: Path, zotsink: Run) -> None:
    """A retry may rewrite its own names, not another task's: the second task is told."""
    (tmp_path / "tasks.txt").write_text("same\nsame\n")
    _run(zotsink, tmp_path, "pack", "1")
    assert sorted(s for _k, _a, s in _ends(tmp_path)) == ["failed", "ok"]
    log = (tmp_path / "out.txt.log").read_bytes()
    assert b"already has a member named 'same.png'" in log and b"run task 1" in log
    assert _extracted(tmp_path) == {"same.png": b"same attempt 1"}


def test_ratarmount_shows_the_latest_attempt(tmp_path: Path, zotsink: Run) -> None:
    factory = pytest.importorskip("ratarmountcore.mountsource.factory")
    (tmp_path / "tasks.txt").write_text("a\n")
    _run(zotsink, tmp_path, "append_member", "3", "--retries", "2")
    assert [a for _k, a, s in _ends(tmp_path) if s == "ok"] == ["3"]
    source = factory.open_mount_source(
        str(tmp_path / "arch.tar"), writeIndex=False, indexFilePath=":memory:"
    )
    assert list(source.list("/")) == ["a.png"]
    with source.open(source.lookup("/a.png")) as f:
        assert f.read() == b"a attempt 3"


def test_all_is_for_all_of_out_or_every_member_not_one_name(tmp_path: Path, zotsink: Run) -> None:
    r = zotsink("cat", "arch.tar", "x.png", "--all")
    why = b"--all is for all of OUT or, with --list, every member: not NAME"
    assert r.returncode == 2 and why in r.stderr and r.stdout == b""
