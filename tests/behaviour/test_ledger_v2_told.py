"""What the ledger says is what happened: a task claimed ahead is ``claimed``, not
``running``; a halted run's claimed rest never began and says so (``never``, not
``interrupted``), in ``status`` and in the run's own summary alike; ``--deadline`` is
judged when a task begins, so that tasks claimed ahead before it do not begin after it.

Only the CLI is used (and, for a premise that only a format 2 ledger can show, its rows),
so that these tests run against any release.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from tests.behaviour.waiting import wait_for

ZOTSINK = [sys.executable, "-m", "zotsink"]

# argv[1]: the task line. "slow..." waits for the file "release"; "fail..." says why on
# stderr and exits 1, alike; any other line sleeps argv[2] seconds (0.05 unless given).
# Each notes when its process began (from the kernel's start time, not from when Python
# got going) in began/LINE.PID, then prints its line.
TASK = r"""
import os, sys, time
line = sys.argv[1]
os.makedirs("began", exist_ok=True)
with open("/proc/self/stat", "rb") as f:
    ticks = int(f.read().rsplit(b")", 1)[1].split()[19])
with open("/proc/uptime") as f:
    up = float(f.read().split()[0])
began = time.time() - (up - ticks / os.sysconf("SC_CLK_TCK"))
with open(f"began/{line}.{os.getpid()}", "w") as f:
    f.write(repr(began))
if line.startswith("slow"):
    while not os.path.exists("release"):
        time.sleep(0.01)
elif line.startswith("fail"):
    sys.stderr.write("no such file: the input is missing\n")
    sys.exit(1)
else:
    time.sleep(float(sys.argv[2]) if len(sys.argv) > 2 else 0.05)
print(line, flush=True)
"""


def env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("ZOTSINK_", "SLURM_"))}


def start(d: Path, *args: str, cmd: tuple[str, ...] = ()) -> subprocess.Popen[str]:
    argv = [*ZOTSINK, "run", "tasks.txt", "out.txt", *args, "--"]
    argv += list(cmd) or [sys.executable, "task.py"]
    return subprocess.Popen(
        argv, cwd=d, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def status(d: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ZOTSINK, "status", "tasks.txt", "out.txt", *args],
        cwd=d,
        env=env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def status_json(d: Path) -> dict[str, Any]:
    r = status(d, "--json")
    assert r.stdout, r.stderr
    return json.loads(r.stdout)  # type: ignore[no-any-return]


def released(d: Path) -> int | None:
    """How many tasks the ledger's rows say a run gave back, never begun (None: a ledger of
    another format, which does not say)."""
    path = d / "out.txt.ledger"
    if not path.read_bytes().startswith(b"zotsink-ledger\t"):
        return None
    from tests.ledgers import ledger_rows

    return sum(1 for r in ledger_rows(path, d / "tasks.txt", every=True) if r["event"] == "release")


@pytest.fixture
def d(tmp_path: Path) -> Path:
    (tmp_path / "task.py").write_text(TASK)
    return tmp_path


@pytest.fixture
def procs() -> Any:
    started: list[subprocess.Popen[str]] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
        p.communicate()


def test_status_counts_claimed_ahead_tasks_as_claimed(d: Path, procs: list) -> None:
    # one slot holds a slow task (begun), the other runs quick tasks and claims ahead of them
    items = ["slowA"] + [f"q{n}" for n in range(1, 801)]
    (d / "tasks.txt").write_text("".join(f"{i}\n" for i in items))
    run = start(d, "--pull", "--jobs", "2")
    procs.append(run)
    wait_for(lambda: status_json(d)["counts"]["running"] >= 1, run, "showed slowA running")
    claimed_seen = 0
    for _ in range(40):
        st = status_json(d)
        c = st["counts"]
        # never more running than the run has slots; every task counted once
        assert 1 <= c["running"] <= 2, c
        assert sum(c.values()) == len(items), c
        (live,) = st["runs"]["live"]
        # the live run's line agrees with the counts: its running, its claimed
        assert live["running"] == c["running"], (live, c)
        assert live["claimed"] == c["claimed"], (live, c)
        claimed_seen = max(claimed_seen, c["claimed"])
        text = status(d).stderr
        counts_line = text.splitlines()[0]
        assert "running or claimed" not in counts_line, counts_line
        running = int(re.search(r"(\d+) running\b", counts_line).group(1))  # type: ignore[union-attr]
        assert running <= 2, counts_line
        live_line = re.search(r"pid \d+: \d+ done, (\d+) running", text)
        assert live_line is not None and int(live_line.group(1)) == running, text
        if claimed_seen and _ >= 3:
            break
    assert claimed_seen > 0, "no snapshot showed a task claimed ahead: the test proves nothing"
    (d / "release").touch()
    _out, err = run.communicate(timeout=300)
    assert run.returncode == 0, err


@pytest.mark.parametrize("mode", [(), ("--pull",)], ids=["chunk", "pull"])
def test_a_halts_claimed_rest_is_never_started_not_interrupted(
    d: Path, procs: list, mode: tuple[str, ...]
) -> None:
    items = [f"fail{n}" for n in range(1, 201)]
    (d / "tasks.txt").write_text("".join(f"{i}\n" for i in items))
    run = start(d, *mode, "--jobs", "2", "--halt-after", "3")
    procs.append(run)
    _out, err = run.communicate(timeout=120)
    assert run.returncode == 1, err
    assert "halted: 3 tasks failed" in err
    c = status_json(d)["counts"]
    failed = c["failed"]
    assert failed >= 3
    # the rest never began: never, as if no run had claimed it
    assert c["interrupted"] == 0, c
    assert c["never"] == len(items) - failed, c
    assert c["claimed"] == c["running"] == 0, c
    assert f"{failed} failed, {len(items) - failed} never" in status(d).stderr
    # and the run's summary says the same of the tasks it was to run (a pull run: those it
    # claimed): they were not started, and no other run has them
    said = re.search(r"(\d+) tasks: (\d+) failed, (\d+) not started \(they stay to resubmit\)", err)
    assert said is not None, err
    share, not_ok, not_started = map(int, said.groups())
    assert not_ok == failed and share == failed + not_started, err
    assert share == len(items) or mode, err
    assert "another run" not in err, err
    gave_back = released(d)
    assert gave_back is None or gave_back > 0, "no task was claimed ahead: the test proves nothing"


def test_the_deadline_is_judged_when_a_task_begins(d: Path, procs: list) -> None:
    # tasks of 1 s, expected (--task-time) to take 0.1 s: a claim made before the deadline
    # takes tasks ahead that would begin well after it, were they begun as claimed
    items = [f"t{n}" for n in range(1, 101)]
    (d / "tasks.txt").write_text("".join(f"{i}\n" for i in items))
    deadline = time.time() + 4.0
    stamp = datetime.fromtimestamp(deadline, timezone.utc).isoformat()
    cmd = (sys.executable, "task.py", "{}", "1.0")
    run = start(d, "--pull", "--jobs", "2", "--deadline", stamp, "--task-time", "0.1", cmd=cmd)
    procs.append(run)
    _out, err = run.communicate(timeout=120)
    assert run.returncode == 0, err
    assert "they would not end before this job's deadline" in err
    began = [float(p.read_text()) for p in (d / "began").iterdir()]
    assert began, err
    # each began when it was expected to end before the deadline (when its process was
    # forked, to the kernel's tick): none after the deadline
    late = sorted(round(t - deadline, 3) for t in began if t > deadline)
    assert not late, f"tasks began {late} s after the deadline"
    st = status_json(d)["counts"]
    assert st["ok"] == len(began) and st["never"] == len(items) - len(began), st


@pytest.mark.parametrize("mode", [(), ("--pull",)], ids=["chunk", "pull"])
def test_a_lone_run_takes_back_what_it_gave_back_behind_a_slow_task(
    d: Path, procs: list, mode: tuple[str, ...]
) -> None:
    # a quick task sets the pace, so the run's next claim takes the slow one and the last
    # line of the list behind it (a claim ahead: the free slot and at least one more);
    # sitting behind it, with no line left past the cursor, the claimed task is given back
    # for another run to take. There is no other run: once the slow task ends, this one runs
    # it itself, and ends with the list done
    items = ["q1", "slow2", "q3"]
    (d / "tasks.txt").write_text("".join(f"{i}\n" for i in items))
    run = start(d, *mode, "--jobs", "1")
    procs.append(run)
    wait_for(lambda: any((d / "began").glob("slow2.*")), run, "began slow2")
    if mode:
        # the task claimed behind slow2 is given back (a format 2 ledger says so)
        wait_for(lambda: released(d) != 0, run, "gave back the task claimed behind slow2")
    (d / "release").touch()
    _out, err = run.communicate(timeout=120)
    assert run.returncode == 0, err
    got = subprocess.run(
        [*ZOTSINK, "cat", "out.txt"], cwd=d, env=env(), capture_output=True, text=True
    ).stdout.splitlines()
    assert sorted(got) == sorted(items), err
