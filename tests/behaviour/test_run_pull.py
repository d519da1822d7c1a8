"""``zotsink run --pull``: runs take the next tasks of the whole list, whatever their array
index, and finish what a dead run left; each task once, never two at once.

Every task holds a witness lock (an flock of its own file) while it runs: a second holder
of one task's witness at once is a task run twice at once, and fails the test. Tasks that
must outlast a moment wait on files the test creates (events, not sleeps).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.behaviour.waiting import wait_for
from tests.ledgers import begins
from zotsink._run import alive

ZOTSINK = [sys.executable, "-m", "zotsink"]

# argv[1]: the task line. Holds the witness lock of the line (a second holder: "double/"),
# notes each start in ran/, waits for wait/LINE's release file when the line says so
# ("slow..." waits for "release"), then prints the line as its record.
WITNESS = r"""
import fcntl, os, sys, time
line = sys.argv[1]
for d in ("witness", "ran", "double", "held"):
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
    # until the test releases it; a test that ended without (failed, or its directory
    # removed) leaves no poller behind
    end = time.monotonic() + 300
    while not os.path.exists("release") and os.stat(".").st_nlink and time.monotonic() < end:
        time.sleep(0.01)
print(line, flush=True)
"""


def env(extra: dict[str, str] | None = None) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith(("ZOTSINK_", "SLURM_"))}
    e.update(extra or {})
    return e


def start(d: Path, *args: str, index: int | None = None, cmd: tuple[str, ...] = ()) -> Any:
    extra = {} if index is None else {"SLURM_ARRAY_TASK_ID": str(index), "SLURM_ARRAY_JOB_ID": ""}
    argv = [*ZOTSINK, "run", "tasks.txt", "out.txt", *args, "--", *cmd]
    if not cmd:
        argv += [sys.executable, "witness.py"]
    return subprocess.Popen(
        argv, cwd=d, env=env(extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def committed(d: Path) -> list[str]:
    if not (d / "out.txt").exists():
        return []
    r = subprocess.run(
        [*ZOTSINK, "cat", "out.txt"], cwd=d, capture_output=True, env=env(), text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()


def ran(d: Path) -> Counter[str]:
    return Counter(p.name.rsplit(".", 1)[0] for p in (d / "ran").iterdir())


@pytest.fixture
def d(tmp_path: Path) -> Path:
    (tmp_path / "witness.py").write_text(WITNESS)
    return tmp_path


@pytest.fixture
def procs() -> Any:
    started: list[subprocess.Popen[str]] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
        p.wait()


def no_double(d: Path) -> None:
    assert not (d / "double").exists() or not list((d / "double").iterdir())


def test_pull_runs_together_with_array_indices_share_the_whole_list(d: Path, procs: list) -> None:
    items = [f"t{n}" for n in range(1, 61)]
    (d / "tasks.txt").write_text("".join(f"{i}\n" for i in items))
    procs += [start(d, "--pull", "--jobs", "2", index=i) for i in (1, 2, 3)]
    for p in procs:
        _out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        assert "60 tasks:" in err
    assert sorted(committed(d)) == sorted(items)  # each task once, the index ignored
    assert ran(d) == Counter(items)  # each started once
    no_double(d)
    settings = subprocess.run(
        [*ZOTSINK, "status", "tasks.txt", "out.txt", "--json"],
        cwd=d,
        capture_output=True,
        env=env(),
        text=True,
        timeout=60,
    )
    assert '"pull": "yes"' in settings.stdout


def test_a_pull_run_started_later_finds_nothing_and_exits_ok(d: Path, procs: list) -> None:
    (d / "tasks.txt").write_text("a\nb\nc\n")
    first = start(d, "--pull", index=7)
    procs.append(first)
    assert first.wait(timeout=60) == 0
    later = start(d, "--pull", index=2)
    procs.append(later)
    _out, err = later.communicate(timeout=60)
    assert later.returncode == 0, err
    assert "3 already ok" in err
    assert sorted(committed(d)) == ["a", "b", "c"]
    assert ran(d) == Counter(["a", "b", "c"])


def test_stragglers_do_not_hold_back_the_rest_of_the_list(d: Path, procs: list) -> None:
    # four slow tasks first: chunked, they share one element with the six fast tasks after
    # them, which wait; pulled, every other task is done while the slow ones still run
    items = [f"slow{n}" for n in range(1, 5)] + [f"fast{n}" for n in range(1, 37)]
    (d / "tasks.txt").write_text("".join(f"{i}\n" for i in items))
    procs += [start(d, "--pull", "--jobs", "2", index=i) for i in (1, 2, 3, 4)]
    wait_for(lambda: len(committed(d)) == 36, procs[0], "committed the fast tasks", 120)
    assert sorted(committed(d)) == sorted(items[4:])  # every fast task, none slow yet
    (d / "release").touch()
    for p in procs:
        _out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    assert sorted(committed(d)) == sorted(items)
    no_double(d)


def test_stragglers_hold_back_their_chunk(d: Path, procs: list) -> None:
    # the same list in chunks of 10: element 1's fast tasks wait behind its slow ones
    items = [f"slow{n}" for n in range(1, 5)] + [f"fast{n}" for n in range(1, 37)]
    (d / "tasks.txt").write_text("".join(f"{i}\n" for i in items))
    procs += [start(d, "--chunk", "10", "--jobs", "2", index=i) for i in (1, 2, 3, 4)]
    for p in procs[1:]:
        assert p.wait(timeout=120) == 0
    assert len(committed(d)) == 30  # six fast tasks of element 1 still wait
    (d / "release").touch()
    assert procs[0].wait(timeout=120) == 0
    assert sorted(committed(d)) == sorted(items)


def test_a_sigkilled_runs_tasks_are_finished_by_a_live_pull_run(d: Path, procs: list) -> None:
    # the dead run's task outlives it (a process its shell started): nobody may start it
    # again before it ends; then the live run takes it over, no resubmission
    items = ["slow1"] + [f"t{n}" for n in range(2, 11)]
    (d / "tasks.txt").write_text("".join(f"{i}\n" for i in items))
    shell = ("sh", "-c", f'"{sys.executable}" witness.py "$1" & wait', "sh")
    doomed = start(d, "--pull", index=1, cmd=shell)
    procs.append(doomed)
    wait_for(lambda: (d / "held" / "slow1").exists(), doomed, "started slow1")
    live = start(d, "--pull", "--jobs", "2", index=2, cmd=shell)
    procs.append(live)
    wait_for(lambda: len(committed(d)) == 9, live, "ran the other tasks", 120)

    def slow1() -> list[dict[str, str]]:
        return [e for e in begins(d / "out.txt.ledger") if e["key"] == "slow1"]

    wait_for(lambda: bool(slow1()), doomed, "wrote slow1's begin row")
    (begin,) = slow1()
    doomed.send_signal(signal.SIGKILL)
    doomed.wait()
    # the run is gone, its task is not: the task's own process lives, so it counts as running
    pid, started = begin["process"].split(":")
    assert alive.process_alive(pid, alive.PROC_START + started) is True
    st = json.loads(
        subprocess.run(
            [*ZOTSINK, "status", "tasks.txt", "out.txt", "--json"],
            cwd=d,
            env=env(),
            capture_output=True,
        ).stdout
    )
    assert st["counts"]["running"] == 1
    assert live.poll() is None
    (d / "release").touch()  # the orphan ends; then the live run runs slow1 again
    _out, err = live.communicate(timeout=120)
    assert live.returncode == 0, err
    assert "1 tasks of runs that died were run here" in err
    assert alive.process_alive(pid, alive.PROC_START + started) is False
    assert sorted(committed(d)) == sorted(items)  # each once, slow1 from the live run
    assert ran(d)["slow1"] == 2
    no_double(d)


def test_a_sigkilled_runs_command_task_is_not_started_again_while_it_lives(
    d: Path, procs: list
) -> None:
    # a command task in its own session outlives its SIGKILLed run: it carries the run's
    # mark (ZOTSINK_RUN), so the run counts as alive until it ends; then it is taken over
    (d / "tasks.txt").write_text("slow1\nt1\n")
    doomed = start(d, "--pull")
    procs.append(doomed)
    wait_for(lambda: (d / "held" / "slow1").exists(), doomed, "started slow1")
    doomed.send_signal(signal.SIGKILL)
    doomed.wait()
    again = start(d, "--pull")
    procs.append(again)
    # t1 committed: the second run has claimed past slow1, which its orphan still runs
    wait_for(lambda: committed(d) == ["t1"], again, "ran t1")
    assert ran(d)["slow1"] == 1  # not started again while the orphan holds it
    (d / "release").touch()  # the orphan ends; its records have nowhere to go
    wait_for(lambda: ran(d)["slow1"] == 2, again, "took slow1 over once the orphan ended")
    _out, err = again.communicate(timeout=60)
    assert again.returncode == 0, err
    assert sorted(committed(d)) == ["slow1", "t1"]
    no_double(d)


def test_chunked_and_pull_runs_share_one_ledger(d: Path, procs: list) -> None:
    items = [f"t{n}" for n in range(1, 31)]
    (d / "tasks.txt").write_text("".join(f"{i}\n" for i in items))
    procs += [start(d, "--chunk", "10", index=i) for i in (1, 2)]
    procs += [start(d, "--pull", "--jobs", "2", index=i) for i in (5, 6)]
    for p in procs:
        _out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    assert sorted(committed(d)) == sorted(items)
    assert ran(d) == Counter(items)
    no_double(d)


def test_pull_with_call_retries_and_a_deadline(d: Path, procs: list) -> None:
    (d / "f.py").write_text(
        "import os\n"
        "def f(line):\n"
        "    if line == 'bad' and os.environ['ZOTSINK_ATTEMPT'] == '1':\n"
        "        raise ValueError(line)\n"
        "    return line\n"
    )
    (d / "tasks.txt").write_text("a\nbad\nc\n")
    r = subprocess.run(
        [
            *ZOTSINK,
            "run",
            "tasks.txt",
            "out.txt",
            "--pull",
            "--call",
            "f.py:f",
            "--retries",
            "1",
            "--jobs",
            "2",
        ],
        cwd=d,
        env=env({"SLURM_ARRAY_TASK_ID": "4"}),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert sorted(committed(d)) == ["a", "bad", "c"]
    # a deadline already passed: nothing is started, the run says why and exits 0
    (d / "tasks.txt").write_text("a\nbad\nc\nd\n")
    late = subprocess.run(
        [
            *ZOTSINK,
            "run",
            "tasks.txt",
            "out.txt",
            "--pull",
            "--call",
            "f.py:f",
            "--deadline",
            "0",
            "--task-time",
            "5",
        ],
        cwd=d,
        env=env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert late.returncode == 0, late.stderr
    assert "deadline" in late.stderr
    assert sorted(committed(d)) == ["a", "bad", "c"]


def test_pull_refuses_an_index_and_idle_without_follow(d: Path) -> None:
    (d / "tasks.txt").write_text("a\n")
    chunk = (
        "zotsink: error: --pull takes the tasks of the whole list a block at a time, each "
        "block sized by the run's own rate: give no --chunk (nor --base)\n"
    )
    for extra, said in (
        (["--pull", "--index", "2"], "give no --index"),
        (["--idle", "3"], "give --follow"),
        (["--deadline", "60"], "give --pull"),
        (["--pull", "--chunk", "100"], chunk),
        (["--follow", "--chunk", "5"], chunk),
        (["--pull", "--base", "0"], chunk),
    ):
        r = subprocess.run(
            [*ZOTSINK, "run", "tasks.txt", "out.txt", *extra, "--", "echo"],
            cwd=d,
            env=env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 2, (extra, r.stderr)
        if said.endswith("\n"):
            assert r.stderr == said
        else:
            assert said in r.stderr, r.stderr
    assert sorted(p.name for p in d.iterdir()) == ["tasks.txt", "witness.py"]  # nothing ran


def test_status_and_missing_of_a_pull_ledger_speak_of_tasks_left(d: Path) -> None:
    (d / "tasks.txt").write_text("".join(f"t{n}\n" for n in range(1, 7)))
    r = subprocess.run(
        [
            *ZOTSINK,
            "run",
            "tasks.txt",
            "out.txt",
            "--pull",
            "--",
            "sh",
            "-c",
            'case "$0" in t[12]) echo "$0";; *) exit 1;; esac',
        ],
        cwd=d,
        env=env({"SLURM_ARRAY_TASK_ID": "9"}),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 1, r.stderr
    status = subprocess.run(
        [*ZOTSINK, "status", "tasks.txt", "out.txt"],
        cwd=d,
        env=env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert status.stderr.splitlines()[-1] == (
        "zotsink: to run again: 4 tasks left; submit up to 1 more element of the --pull job "
        "(any element takes any task)"
    )
    assert "array indices" not in status.stderr
    missing = subprocess.run(
        [*ZOTSINK, "missing", "tasks.txt", "--ledger", "out.txt.ledger", "--array"],
        cwd=d,
        env=env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode == 0, missing.stderr
    assert missing.stdout == "1\n"
    assert "4 tasks left of a --pull run" in missing.stderr
