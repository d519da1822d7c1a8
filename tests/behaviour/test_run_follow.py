"""``zotsink run --follow``: lines appended to the task list while runs are live are new
tasks, each run once; a follow run ends on ``--idle`` or once the list is closed and all is
done. Every task holds a witness lock while it runs (see test_run_pull)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.behaviour.test_run_pull import WITNESS, committed, env, no_double, ran, start
from tests.behaviour.waiting import wait_for
from tests.ledgers import ledger_rows

ZOTSINK = [sys.executable, "-m", "zotsink"]


@pytest.fixture
def d(tmp_path: Path) -> Path:
    (tmp_path / "witness.py").write_text(WITNESS)
    (tmp_path / "tasks.txt").write_bytes(b"")
    return tmp_path


@pytest.fixture
def procs() -> Any:
    started: list[subprocess.Popen[str]] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
        p.wait()


def add(d: Path, data: str) -> None:
    with open(d / "tasks.txt", "a") as f:
        f.write(data)


def start_rows(d: Path) -> dict[str, str]:
    """Task line -> its task number, as the claims name them."""
    rows = ledger_rows(d / "out.txt.ledger")
    return {r["key"]: r["tasknum"] for r in rows if r["event"] == "start"}


def test_follow_takes_bursts_each_once_and_ends_on_idle(d: Path, procs: list) -> None:
    runs = [start(d, "--follow", "--idle", "2", "--jobs", "2", index=i) for i in (1, 2)]
    procs += runs
    add(d, "a1\na2\n\n# note\na3\na4\na5\n")
    wait_for(lambda: len(committed(d)) == 5, runs[0], "ran the first burst")
    add(d, "a6")  # a line being written: it waits for its newline
    add(d, "\nb1\nb2\nb3\n")
    wait_for(lambda: len(committed(d)) == 9, runs[0], "ran the second burst")
    add(d, "".join(f"c{n}\n" for n in range(1, 21)))
    for p in runs:
        _out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        assert "--idle" in err
    items = [f"a{n}" for n in range(1, 7)] + ["b1", "b2", "b3"] + [f"c{n}" for n in range(1, 21)]
    assert sorted(committed(d)) == sorted(items)
    assert ran(d) == Counter(items)
    no_double(d)
    numbers = start_rows(d)
    assert (numbers["a1"], numbers["a3"], numbers["a6"], numbers["b1"]) == ("1", "5", "8", "9")


def test_follow_ends_when_the_list_is_closed_and_all_is_done(d: Path, procs: list) -> None:
    runs = [start(d, "--follow", index=i) for i in (1, 2, 3)]
    procs += runs
    add(d, "".join(f"t{n}\n" for n in range(1, 11)))
    wait_for(lambda: len(committed(d)) == 10, runs[0], "ran the first lines")
    add(d, "".join(f"t{n}\n" for n in range(11, 16)))
    wait_for(lambda: len(committed(d)) == 15, runs[0], "ran the added lines")
    close = subprocess.run([*ZOTSINK, "close", "tasks.txt", "out.txt"], cwd=d, env=env())
    assert close.returncode == 0
    for p in runs:
        _out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    items = [f"t{n}" for n in range(1, 16)]
    assert sorted(committed(d)) == sorted(items)
    assert ran(d) == Counter(items)
    no_double(d)


def test_a_follow_run_of_a_closed_list_ends_when_all_is_done(d: Path, procs: list) -> None:
    add(d, "x\ny\n")
    first = start(d, "--follow", "--idle", "1")
    procs.append(first)
    assert first.wait(timeout=60) == 0
    close = subprocess.run([*ZOTSINK, "close", "tasks.txt", "out.txt"], cwd=d, env=env())
    assert close.returncode == 0
    add(d, "z\n")  # added after the close: a later run takes it, and ends without --idle
    later = start(d, "--follow")
    procs.append(later)
    _out, err = later.communicate(timeout=60)
    assert later.returncode == 0, err
    assert sorted(committed(d)) == ["x", "y", "z"]
    assert ran(d) == Counter(["x", "y", "z"])


def test_stop_drains_live_runs_and_a_later_run_does_the_rest(d: Path, procs: list) -> None:
    """`zotsink stop`: live runs finish the tasks they run, claim nothing more and exit 0;
    a run started after the stop proceeds and runs the rest, each task once."""
    items = ["slow1", "slow2", *(f"t{n}" for n in range(1, 21))]
    add(d, "".join(f"{i}\n" for i in items))
    runs = [start(d, "--pull", index=i) for i in (1, 2)]
    procs += runs
    wait_for(lambda: len(list((d / "held").glob("slow*"))) == 2, runs[0], "both slow tasks run")
    stop = subprocess.run([*ZOTSINK, "stop", "tasks.txt", "out.txt"], cwd=d, env=env())
    assert stop.returncode == 0
    (d / "release").touch()  # the running tasks end now; nothing more may be claimed
    for p in runs:
        _out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    assert sorted(committed(d)) == ["slow1", "slow2"]
    later = start(d, "--pull")
    procs.append(later)
    _out, err = later.communicate(timeout=120)
    assert later.returncode == 0, err
    assert sorted(committed(d)) == sorted(items)
    assert ran(d) == Counter(items)
    no_double(d)


def test_a_run_ended_by_stop_says_so_and_how_many_tasks_are_left(d: Path, procs: list) -> None:
    items = [f"slow{n}" for n in range(1, 31)]  # each waits for the release
    add(d, "".join(f"{i}\n" for i in items))
    run = start(d, "--pull")
    procs.append(run)
    wait_for(lambda: (d / "held").is_dir() and any((d / "held").iterdir()), run, "began a task")
    stop = subprocess.run([*ZOTSINK, "stop", "tasks.txt", "out.txt"], cwd=d, env=env())
    assert stop.returncode == 0
    (d / "release").touch()
    _out, err = run.communicate(timeout=120)
    assert run.returncode == 0, err
    status = subprocess.run(
        [*ZOTSINK, "status", "tasks.txt", "out.txt", "--json"],
        cwd=d,
        env=env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    left = json.loads(status.stdout)["to_run"]
    assert 0 < left < len(items)
    assert err.splitlines()[-1] == f"zotsink: stopped by `zotsink stop`: {left} tasks left to run"


def test_a_follow_run_calls_the_function_it_imported_until_stopped_and_submitted_again(
    d: Path, procs: list
) -> None:
    """docs/run.md: workers import FUNC once; a change to its file reaches the tasks of the
    runs started after it (`zotsink stop`, then submit again), never a live run's."""
    (d / "f.py").write_text("def f(line):\n    return line + ' v1'\n")

    def records() -> list[str]:
        out = d / "out.txt"
        return out.read_text().splitlines() if out.exists() else []

    def follow() -> subprocess.Popen[str]:
        argv = [*ZOTSINK, "run", "tasks.txt", "out.txt", "--follow", "--idle", "600"]
        run = subprocess.Popen(
            [*argv, "--call", "f.py:f"],
            cwd=d,
            env=env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        procs.append(run)
        return run

    first = follow()
    add(d, "a\n")
    wait_for(lambda: records() == ["a v1"], first, "ran task a")
    (d / "f.py").write_text("def f(line):\n    return line + ' v2'\n")
    add(d, "b\n")
    wait_for(lambda: len(records()) == 2, first, "ran task b")
    assert records() == ["a v1", "b v1"]  # the function it imported when it began
    stop = subprocess.run([*ZOTSINK, "stop", "tasks.txt", "out.txt"], cwd=d, env=env())
    assert stop.returncode == 0
    _out, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    second = follow()
    add(d, "c\n")
    wait_for(lambda: len(records()) == 3, second, "ran task c")
    assert records()[2] == "c v2"
    close = subprocess.run([*ZOTSINK, "close", "tasks.txt", "out.txt"], cwd=d, env=env())
    assert close.returncode == 0
    _out, err = second.communicate(timeout=120)
    assert second.returncode == 0, err
