"""Whether a start row's run lives: the scheduler is asked about the array element (through
``zotsink._run.scheduler``), and its answers expire; a run whose process is gone lives on in
the processes it started."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from zotsink._run import alive, scheduler

SQUEUE = """#!/bin/sh
echo "$@" >> "{log}"
if [ -e "{state}/$3" ]; then echo RUNNING; exit 0; fi
echo "slurm_load_jobs error: Invalid job id specified" >&2
exit 1
"""


@pytest.fixture
def squeue(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    bin_dir, state = tmp_path / "bin", tmp_path / "state"
    bin_dir.mkdir()
    state.mkdir()
    script = bin_dir / "squeue"
    script.write_text(SQUEUE.format(log=tmp_path / "asked", state=state))
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    for var in ("SLURM_JOB_ID", "JOB_ID", "SGE_TASK_ID", "PBS_JOBID", "SGE_ROOT"):
        monkeypatch.delenv(var, raising=False)
    scheduler.reset()  # this process chose its scheduler from another PATH, or none
    yield state
    scheduler.reset()


def test_another_hosts_run_is_judged_by_its_array_element(squeue: Path) -> None:
    (squeue / "77_3").touch()  # element 3 of array job 77 runs; element 4 ended
    assert alive.run_alive("far", "1", "", "77", "here", "3") is True
    assert alive.run_alive("far", "1", "", "77", "here", "4") is False
    asked = (squeue.parent / "asked").read_text().split("\n")
    assert asked[:2] == ["-h -j 77_3 -o %T", "-h -j 77_4 -o %T"]
    # a start row of another cluster's job: asked of that cluster, never judged here
    assert alive.run_alive("far", "1", "", "other:77", "here", "4") is None
    last = (squeue.parent / "asked").read_text().splitlines()[-1]
    assert last == "-M other -h -j 77_4 -o %T"


def test_the_schedulers_answer_expires(squeue: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (squeue / "77_3").touch()
    assert alive.job_alive("77_3") is True
    (squeue / "77_3").unlink()  # the element ended
    assert alive.job_alive("77_3") is True  # the answer still serves
    monkeypatch.setattr(scheduler, "ANSWER_TTL", 0.0)
    assert alive.job_alive("77_3") is False  # asked again


def test_a_gone_run_lives_while_a_process_it_started_does(tmp_path: Path) -> None:
    # a process that carries a (gone) run's mark, as a task that outlived its run would
    mark = alive.run_mark(999999999, "12345")
    env = {**os.environ, alive.RUN_VAR: mark}
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE, env=env
    )
    try:
        # the child's environment is what /proc shows once it runs its program
        deadline = time.monotonic() + 30
        while mark.encode() not in Path(f"/proc/{child.pid}/environ").read_bytes():
            assert time.monotonic() < deadline, "the child never showed its environment"
            time.sleep(0.01)
        alive._survivors.clear()
        assert alive.process_alive("999999999", alive.PROC_START + "12345") is True
    finally:
        child.communicate(b"")
    alive._survivors.clear()
    assert alive.process_alive("999999999", alive.PROC_START + "12345") is False
    assert alive.process_alive("999999999", "") is False  # no start time: no mark to find


def test_a_gone_runs_survivors_speak_for_their_own_task_only() -> None:
    # a task begun in the moment before its begin row, and a helper daemon task 3 left
    # behind: each carries the run's mark and its own task number
    mark = alive.run_mark(999999998, "12345")
    children = []
    for num in ("7", "3"):
        env = {**os.environ, alive.RUN_VAR: mark, "ZOTSINK_TASKNUM": num}
        children.append(
            subprocess.Popen(
                [sys.executable, "-c", "import sys; sys.stdin.read()"],
                stdin=subprocess.PIPE,
                env=env,
            )
        )
    try:
        deadline = time.monotonic() + 30
        for child in children:
            while mark.encode() not in Path(f"/proc/{child.pid}/environ").read_bytes():
                assert time.monotonic() < deadline, "the child never showed its environment"
                time.sleep(0.01)
        alive._survivors.clear()
        assert alive.survivor_tasks(mark) == {"7", "3"}
        run = SimpleNamespace(pid="999999998", start="12345", workers=(), hostid="")
        judge = alive.Judge()
        run.hostid, run.host = judge.hostid, judge.host
        assert judge.claim_held(run, 7) and judge.claim_held(run, 3)
        assert not judge.claim_held(run, 4)  # no process of task 4's: it is free
        assert not judge.workers_alive(run)
    finally:
        for child in children:
            child.communicate(b"")
    alive._survivors.clear()
    assert alive.survivor_tasks(mark) == frozenset()


def test_the_jobs_end_comes_from_squeue(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "squeue"
    script.write_text('#!/bin/sh\n[ "$3" = 42 ] && echo 2030-01-02T03:04:05 || echo N/A\n')
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    from datetime import datetime

    want = datetime(2030, 1, 2, 3, 4, 5).timestamp()  # local time, as squeue prints it
    assert alive.job_end({"SLURM_JOB_ID": "42"}) == want
    assert alive.job_end({"SLURM_JOB_ID": "43"}) is None  # no limit known
    assert alive.job_end({}) is None


def test_a_zombie_is_no_live_process() -> None:
    """A worker whose run was killed is a zombie until init reaps it: it holds nothing."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    start = alive.proc_start(child.pid)
    assert start is not None
    # not reaped: wait until the kernel shows it as a zombie (it exited, nobody waited)
    deadline = time.monotonic() + 30
    while alive._stat(child.pid) is not None and alive._stat(child.pid)[0] != "Z":  # type: ignore[index]
        assert time.monotonic() < deadline, "the child never exited"
        time.sleep(0.01)
    try:
        assert alive._exact_alive(child.pid, start) is False
        assert alive.process_alive(str(child.pid), alive.PROC_START + start) is False
    finally:
        child.wait()
