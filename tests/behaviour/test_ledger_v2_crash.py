"""A run SIGKILLed, then the same command again at once: nothing it claimed is stranded.

A dead run's claimed tasks that never began are free at once; a begun task whose own
process lives on (an orphan, in its own session) is waited for, and only that task; a
helper daemon that an ended task left behind (it carries the run's environment) holds
nothing. The re-run either ends with every task ok in the committed view, each once, or
exits non-zero naming the tasks it left. Chunked (the whole list, no index) and ``--pull``
alike.

Every task holds a witness lock (an flock of its own file) while it runs: a second holder
at once is a task run twice at once, and fails the test. Tasks that must outlast a moment
wait on files the test creates (events, not sleeps). Only the CLI is used, so that these
tests run against any release.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.behaviour.waiting import wait_for

ZOTSINK = [sys.executable, "-m", "zotsink"]

# argv[1]: the task line. Holds the line's witness lock (a second holder at once: double/),
# notes each start in ran/. "slow..." notes held/LINE and waits for the file "release";
# "helper..." starts a daemon in a session of its own that inherits the task's environment
# and lives until "release" exists, then ends at once. Every task prints its line.
WITNESS = r"""
import fcntl, os, subprocess, sys, time
line = sys.argv[1]
for d in ("witness", "ran", "double", "held", "pids"):
    os.makedirs(d, exist_ok=True)
fd = os.open(f"witness/{line}", os.O_RDWR | os.O_CREAT, 0o644)
try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
except OSError:
    open(f"double/{line}.{os.getpid()}", "w").close()
    sys.exit(9)
open(f"ran/{line}.{os.getpid()}", "w").close()
if line.startswith("slow"):
    open(f"held/{line}", "w").close()
    while not os.path.exists("release"):
        time.sleep(0.01)
if line.startswith("helper"):
    daemon = subprocess.Popen(
        [sys.executable, "-c", DAEMON],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    open(f"pids/{daemon.pid}", "w").close()
    while not os.path.exists("daemon.up"):
        time.sleep(0.005)
print(line, flush=True)
"""
DAEMON = r"""
import os, time
open("daemon.up", "w").close()
while not os.path.exists("release"):
    time.sleep(0.02)
"""


def env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("ZOTSINK_", "SLURM_"))}


def start(d: Path, mode: str) -> subprocess.Popen[str]:
    """``zotsink run`` over the whole list, two at a time: chunked (no index: every task is
    this run's) or pulled."""
    argv = [*ZOTSINK, "run", "tasks.txt", "out.txt", "--jobs", "2"]
    argv += ["--pull"] if mode == "pull" else []
    argv += ["--", sys.executable, "witness.py"]
    return subprocess.Popen(
        argv, cwd=d, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def committed(d: Path) -> list[str]:
    """The committed view of OUT: each task's latest ok attempt's records."""
    if not (d / "out.txt").exists():
        return []
    r = subprocess.run(
        [*ZOTSINK, "cat", "out.txt"], cwd=d, capture_output=True, env=env(), text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()


def ran(d: Path) -> Counter[str]:
    if not (d / "ran").exists():
        return Counter()
    return Counter(p.name.rsplit(".", 1)[0] for p in (d / "ran").iterdir())


def doubles(d: Path) -> list[str]:
    return sorted(os.listdir(d / "double")) if (d / "double").exists() else []


def claimed_not_begun(d: Path, pid: int) -> set[str] | None:
    """The tasks the run of ``pid`` claimed and neither began, ended nor gave back, by its
    ledger's rows (None: a ledger of another format, which these tests do not read)."""
    path = d / "out.txt.ledger"
    if not path.read_bytes().startswith(b"zotsink-ledger\t"):
        return None
    from tests.ledgers import ledger_rows

    rows = [r for r in ledger_rows(path, d / "tasks.txt", every=True) if r["pid"] == str(pid)]
    claimed = {r["tasknum"] for r in rows if r["event"] == "start"}
    return claimed - {r["tasknum"] for r in rows if r["event"] in ("begin", "end", "release")}


def until(cond: Callable[[], bool], what: str, limit: float = 120.0) -> None:
    """Poll ``cond`` until it holds; fail naming ``what`` after ``limit`` seconds."""
    end = time.monotonic() + limit
    while not cond():
        if time.monotonic() > end:
            pytest.fail(f"never {what} (in {limit:g} s)")
        time.sleep(0.02)


def named_left(err: str) -> set[int]:
    """The task numbers a run's last words name as left waiting (``3 tasks (3,7-8) left
    waiting for a run``)."""
    got: set[int] = set()
    for spec in re.findall(r"\(([0-9,\-]+)(?:,\.\.\.)?\) left waiting", err):
        for part in spec.split(","):
            first, _, last = part.partition("-")
            got.update(range(int(first), int(last or first) + 1))
    return got


@pytest.fixture
def d(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / "witness.py").write_text(WITNESS.replace("DAEMON", repr(DAEMON)))
    yield tmp_path
    # whatever a dead run left behind ends now: its orphans and helpers wait for this file
    (tmp_path / "release").touch()
    for pid in _ours(tmp_path):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _ours(d: Path) -> list[int]:
    """The processes the tasks of this test started (noted by pid), still running in ``d``."""
    pids = (
        [int(p.name.rsplit(".", 1)[1]) for p in (d / "ran").iterdir()]
        if (d / "ran").exists()
        else []
    )
    pids += [int(p.name) for p in (d / "pids").iterdir()] if (d / "pids").exists() else []
    out = []
    for pid in pids:
        try:
            if os.readlink(f"/proc/{pid}/cwd") == str(d):
                out.append(pid)
        except OSError:
            continue
    return out


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
        p.communicate()


def _verdict(d: Path, items: list[str], rerun: subprocess.Popen[str], err: str) -> None:
    """Every task ok in the committed view, each once; or a non-zero exit that names each
    task left out of it."""
    final = committed(d)
    assert max(Counter(final).values(), default=1) == 1, final  # no task's records twice
    assert doubles(d) == [], "a task ran twice at once"
    missing = {n for n, line in enumerate(items, 1) if line not in final}
    if rerun.returncode == 0:
        assert not missing, f"exit 0 with tasks {sorted(missing)} not ok: {err}"
        assert sorted(final) == sorted(items)
    else:
        assert missing, f"exit {rerun.returncode} with every task ok: {err}"
        assert missing <= named_left(err), f"tasks {sorted(missing)} left unnamed: {err}"


@pytest.mark.parametrize("mode", ["chunk", "pull"])
def test_a_sigkilled_run_with_an_orphan_then_an_immediate_rerun(
    d: Path, procs: list[subprocess.Popen[str]], mode: str
) -> None:
    # quick tasks, and one that takes longer than the others: its process (in its own
    # session, as every task's) outlives the run
    items = [f"t{n}" for n in range(1, 61)]
    items[2] = "slow3"
    (d / "tasks.txt").write_text("".join(f"{i}\n" for i in items))
    doomed = start(d, mode)
    procs.append(doomed)
    wait_for(
        lambda: (d / "held" / "slow3").exists() and sum(ran(d).values()) >= 12,
        doomed,
        "ran slow3 and a dozen quick tasks",
    )
    doomed.send_signal(signal.SIGKILL)
    doomed.wait()
    again = start(d, mode)
    procs.append(again)
    ahead = claimed_not_begun(d, doomed.pid)
    assert ahead is None or len(ahead) > 2, "the run had claimed no task ahead"
    # the dead run's claimed tasks are free at once: while its orphan still runs slow3,
    # the re-run does every other task (or ends, naming what it left)
    others = set(items) - {"slow3"}
    until(
        lambda: others <= set(committed(d)) or again.poll() is not None,
        "ran the other tasks while the orphan lived",
    )
    assert ran(d)["slow3"] == 1, "slow3 started again while its orphan ran it"
    (d / "release").touch()  # the orphan ends; its records have nowhere to go
    _out, err = again.communicate(timeout=120)
    _verdict(d, items, again, err)


@pytest.mark.parametrize("mode", ["chunk", "pull"])
def test_a_helper_daemon_a_task_left_pins_nothing(
    d: Path, procs: list[subprocess.Popen[str]], mode: str
) -> None:
    # task 1 leaves a daemon behind (gpg-agent, a build server) and ends ok; the run is
    # SIGKILLed while it holds claimed tasks; the daemon lives on with the run's
    # environment, and must keep none of them from running
    items = ["helper1"] + [f"t{n}" for n in range(2, 301)]
    (d / "tasks.txt").write_text("".join(f"{i}\n" for i in items))
    doomed = start(d, mode)
    procs.append(doomed)
    wait_for(lambda: "helper1" in committed(d), doomed, "committed helper1")
    assert (d / "daemon.up").exists()
    seen = sum(ran(d).values())
    wait_for(lambda: sum(ran(d).values()) >= seen + 4, doomed, "went on")
    doomed.send_signal(signal.SIGKILL)
    doomed.wait()
    assert doomed.returncode == -signal.SIGKILL, "the run ended before it was killed"
    again = start(d, mode)
    procs.append(again)
    ahead = claimed_not_begun(d, doomed.pid)
    assert ahead is None or len(ahead) > 2, "the run had claimed no task ahead"
    # the whole list is done while the daemon still lives: nothing waited for it
    _out, err = again.communicate(timeout=180)
    assert not (d / "release").exists()
    assert _ours(d), "the daemon is gone: the test proves nothing"
    assert again.returncode == 0, err
    _verdict(d, items, again, err)
