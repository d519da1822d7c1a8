"""Ledgers of zotsink 0.1 (format 1) and this release's (format 2), each met by the other.

``tests/fixtures/zotsink-0.1.pyz`` is release 0.1 as one file: ``scripts/build-pyz
--no-compile`` at commit 3531397 (sources only, click and filelock inside; it runs with any
Python from 3.9). With it the tests write real format 1 ledgers, and show what 0.1 does
with a format 2 one.

- A format 1 ledger is read by ``status`` as it is, and resumed by a run of this release,
  which migrates it first: the ledger becomes format 2, the old file stays as
  ``LEDGER.v1`` (the same inode, a hard link made before the rename), and each task ends
  ok once.
- While a run of 0.1 still holds tasks of its ledger, this release refuses to migrate it,
  naming that run, and leaves the ledger as it is.
- Release 0.1 refuses a format 2 ledger (its header check: the first line is not the
  header it writes) and never appends to it, nor to OUT.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.behaviour.waiting import wait_for

ZOTSINK = [sys.executable, "-m", "zotsink"]
OLD = [sys.executable, str(Path(__file__).resolve().parents[1] / "fixtures" / "zotsink-0.1.pyz")]
# the task: fails while a file fail-LINE exists, waits while hold-LINE exists (noting
# held-LINE), notes each start in ran/, prints its line
COMMAND = (
    "sh",
    "-c",
    'mkdir -p ran; touch "ran/$1.$$"; [ -e "fail-$1" ] && exit 3; '
    'while [ -e "hold-$1" ]; do touch "held-$1"; sleep 0.02; done; echo "$1"',
    "sh",
)
LINES = [f"t{n}" for n in range(1, 21)]


def env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("ZOTSINK_", "SLURM_"))}


def zotsink(d: Path, *args: str, old: bool = False) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*(OLD if old else ZOTSINK), *args],
        cwd=d,
        env=env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def run(d: Path, *args: str, old: bool = False) -> subprocess.CompletedProcess[str]:
    return zotsink(d, "run", "tasks.txt", "out.txt", *args, "--", *COMMAND, old=old)


def committed(d: Path) -> list[str]:
    r = zotsink(d, "cat", "out.txt")
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()


def ran(d: Path) -> Counter[str]:
    return Counter(p.name.rsplit(".", 1)[0] for p in (d / "ran").iterdir())


@pytest.fixture
def d(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / "tasks.txt").write_text("".join(f"{x}\n" for x in LINES))
    yield tmp_path
    for hold in tmp_path.glob("hold-*"):
        hold.unlink()


@pytest.mark.parametrize("mode", ["chunk", "pull"])
def test_a_format_1_ledger_is_read_then_resumed_once_migrated(d: Path, mode: str) -> None:
    # release 0.1 ran the first chunk: 9 ok, t5 failed, t11-t20 never began
    (d / "fail-t5").touch()
    old = run(d, "--index", "1", "--chunk", "10", old=True)
    assert old.returncode == 1, old.stderr
    (d / "fail-t5").unlink()
    ledger = d / "out.txt.ledger"
    v1 = ledger.read_bytes()
    assert v1.startswith(b"event\ttime\ttasknum\t")  # format 1: a header of column names
    inode = ledger.stat().st_ino

    # read as it is: status counts it, and changes nothing
    st = zotsink(d, "status", "tasks.txt", "out.txt", "--json")
    counts = json.loads(st.stdout)["counts"]
    assert (counts["ok"], counts["failed"], counts["never"]) == (9, 1, 10), counts
    assert "9 ok, 1 failed, 10 never" in zotsink(d, "status", "tasks.txt", "out.txt").stderr
    assert ledger.read_bytes() == v1 and not (d / "out.txt.ledger.v1").exists()

    # resumed: migrated first, the old file kept as it was under LEDGER.v1
    if mode == "pull":
        again = [run(d, "--pull")]
    else:
        again = [run(d, "--index", str(i), "--chunk", "10") for i in (1, 2)]
    for r in again:
        assert r.returncode == 0, r.stderr
    assert ledger.read_bytes().startswith(b"zotsink-ledger\t2\t")
    kept = d / "out.txt.ledger.v1"
    assert kept.read_bytes() == v1
    assert kept.stat().st_ino == inode, "LEDGER.v1 is not the old file itself"
    assert sorted(committed(d)) == sorted(LINES)  # each task once
    assert ran(d) == Counter(LINES) + Counter(["t5"])  # t5 again, nothing else
    counts = json.loads(zotsink(d, "status", "tasks.txt", "out.txt", "--json").stdout)["counts"]
    assert counts["ok"] == 20, counts
    # a finished list run again runs nothing
    r = run(d, "--pull")
    assert r.returncode == 0 and "20 already ok" in r.stderr, r.stderr
    assert ran(d) == Counter(LINES) + Counter(["t5"])


def test_a_live_run_of_0_1_holding_tasks_stops_the_migration(d: Path) -> None:
    (d / "hold-t1").touch()
    old = subprocess.Popen(
        [*OLD, "run", "tasks.txt", "out.txt", "--", *COMMAND],
        cwd=d,
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: (d / "held-t1").exists(), old, "held t1")
        before = (d / "out.txt.ledger").read_bytes()
        r = run(d, "--pull")
        assert r.returncode == 2, r.stderr
        assert "is a ledger of zotsink 0.1 and a run of that release still holds tasks" in r.stderr
        assert f"pid {old.pid}" in r.stderr, r.stderr
        assert (d / "out.txt.ledger").read_bytes()[: len(before)] == before
        assert (d / "out.txt.ledger").read_bytes().startswith(b"event\t")
        assert not (d / "out.txt.ledger.v1").exists()
        assert ran(d)["t1"] == 1
    finally:
        (d / "hold-t1").unlink()
        _out, err = old.communicate(timeout=120)
    assert old.returncode == 0, err
    # the old run is done: now the ledger is migrated, and nothing runs again
    r = run(d, "--pull")
    assert r.returncode == 0, r.stderr
    assert "20 already ok" in r.stderr
    assert (d / "out.txt.ledger.v1").exists()
    assert ran(d) == Counter(LINES)
    assert sorted(committed(d)) == sorted(LINES)


@pytest.mark.parametrize(
    "args",
    [
        ("run", "tasks.txt", "out.txt", "--", "echo"),
        ("run", "tasks.txt", "out.txt", "--rerun", "--", "echo"),
        ("run", "tasks.txt", "out.txt", "--index", "2", "--chunk", "5", "--", "echo"),
        ("status", "tasks.txt", "out.txt"),
        ("missing", "tasks.txt", "--ledger", "out.txt.ledger", "--array"),
    ],
    ids=["run", "rerun", "chunk", "status", "missing"],
)
def test_release_0_1_refuses_a_format_2_ledger_and_never_appends_to_it(
    d: Path, args: tuple[str, ...]
) -> None:
    r = zotsink(d, "run", "tasks.txt", "out.txt", "--index", "1", "--chunk", "5", "--", "echo")
    assert r.returncode == 0, r.stderr
    ledger, out = d / "out.txt.ledger", d / "out.txt"
    assert ledger.read_bytes().startswith(b"zotsink-ledger\t2\t")
    before = {p.name: p.read_bytes() for p in (ledger, out)}
    old = zotsink(d, *args, old=True)
    assert old.returncode not in (0, -signal.SIGKILL), old.stderr
    assert "is not a zotsink ledger" in old.stderr, old.stderr
    assert {p.name: p.read_bytes() for p in (ledger, out)} == before
    # and this release reads it on
    assert sorted(committed(d)) == sorted(LINES[:5])
