"""``zotsink status --watch`` ends on its own once nothing runs and nothing can start: the
runs are dead and no job of the ledger is queued or running."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from waiting import wait_for

from tests.ledgers import Book, begins

ZOTSINK = [sys.executable, "-m", "zotsink"]
NO_ARRAY = {
    v: None
    for v in ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_JOB_ID", "SLURM_JOB_ID", "SGE_TASK_ID",
              "JOB_ID", "PBS_ARRAY_INDEX", "PBS_JOBID", "LSB_JOBID")
}  # fmt: skip


def watch(tmp_path: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [*ZOTSINK, "status", "tasks.txt", "out.txt", "--watch", "--interval", "0.1"],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip


def test_watch_ends_after_the_run_is_killed(
    tmp_path: Path, child_env: Callable[..., dict[str, str]], reap
) -> None:
    (tmp_path / "tasks.txt").write_text("a\nb\nc\n")
    env = child_env(NO_ARRAY)
    task = 'echo $$ > "pid.$0"; exec sleep 600'
    run = reap(
        subprocess.Popen(
            [*ZOTSINK, "run", "tasks.txt", "out.txt", "--", "sh", "-c", task],
            cwd=tmp_path,
            env=env,
            stderr=subprocess.PIPE,
        )
    )
    pid = tmp_path / "pid.a"
    wait_for(lambda: pid.exists() and pid.read_text().endswith("\n"), run, "started task a")
    wait_for(lambda: bool(begins(tmp_path / "out.txt.ledger")), run, "wrote a's begin row")
    w = reap(watch(tmp_path, env))
    assert w.stderr is not None
    first = w.stderr.readline()
    assert b"0/3 ok" in first and b"1 running" in first, first
    second = w.stderr.readline()  # a redraw: task a still runs, the watch goes on
    assert b"1 running" in second and w.poll() is None
    run.send_signal(signal.SIGKILL)
    run.wait()
    os.kill(int(pid.read_text()), signal.SIGKILL)  # the orphaned task
    _, rest = w.communicate(timeout=60)  # the watch exits on its own
    assert w.returncode == 1  # not every task is ok
    assert b"zotsink: 3 tasks: 1 lost, 2 never\n" in rest, rest


def test_watch_ends_when_the_scheduler_no_longer_has_the_job(
    tmp_path: Path, child_env: Callable[..., dict[str, str]], reap
) -> None:
    """A task begun by a run on another host: its job is asked about at every redraw."""
    (tmp_path / "tasks.txt").write_text("a\nb\n")
    book = Book(tmp_path / "out.txt.ledger", host="another-node", hostid="x.1", job="4711")
    book.claim(1, 1, "a").begin(1, 1, pid=1, start="1").write()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # squeue lists job 4711 while the file `queued` exists
    (bin_dir / "squeue").write_text(
        "#!/bin/sh\ntouch asked\n[ -e queued ] && echo RUNNING\nexit 0\n"
    )
    (bin_dir / "squeue").chmod(0o755)
    (tmp_path / "queued").touch()
    env = child_env({**NO_ARRAY, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"})
    w = reap(watch(tmp_path, env))
    assert w.stderr is not None
    assert b"1 running" in w.stderr.readline()
    assert b"1 running" in w.stderr.readline() and w.poll() is None
    (tmp_path / "queued").unlink()  # the job was cancelled
    _, rest = w.communicate(timeout=60)
    assert w.returncode == 1
    assert b"zotsink: 2 tasks: 1 lost, 1 never\n" in rest, rest


#: An squeue that hangs (a login node whose controller does not answer) until the file
#: `release` exists; it notes its pid first.
HANGING_SQUEUE = """#!/bin/sh
echo $$ >> asked
while [ ! -e release ]; do sleep 0.05; done
echo RUNNING
"""


def hanging_scheduler(tmp_path: Path, child_env: Callable[..., dict[str, str]]) -> dict[str, str]:
    (tmp_path / "tasks.txt").write_text("a\n")
    book = Book(tmp_path / "out.txt.ledger", host="another-node", hostid="x.1", job="4711")
    book.claim(1, 1, "a").begin(1, 1, pid=1, start="1").write()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "squeue").write_text(HANGING_SQUEUE)
    (bin_dir / "squeue").chmod(0o755)
    return child_env({**NO_ARRAY, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"})


def frame(w: subprocess.Popen[bytes]) -> bytes:
    """The next frame of a watch; a frozen watch fails the test instead of hanging it."""
    assert w.stderr is not None
    ready, _, _ = select.select([w.stderr], [], [], 20)
    assert ready, "no frame in 20 s: the watch froze"
    return w.stderr.readline()


def test_watch_redraws_while_the_scheduler_hangs_and_ends(
    tmp_path: Path, child_env: Callable[..., dict[str, str]], reap
) -> None:
    env = hanging_scheduler(tmp_path, child_env)
    w = reap(watch(tmp_path, env))
    try:
        for _ in range(4):  # frame after frame while squeue still has not answered
            line = frame(w)
            assert b"0/1 ok" in line and b"1 running" in line, line
            assert b"scheduler: no answer in" in line, line
        assert not (tmp_path / "release").exists() and w.poll() is None
        # the task ends: the next frame shows it, whatever squeue does, and the watch ends
        book = Book(tmp_path / "out.txt.ledger", host="another-node", hostid="x.1", job="4711")
        book.end(1, 1, status="ok", seconds=1.0).write()
        _, rest = w.communicate(timeout=60)
    finally:
        (tmp_path / "release").touch()
    assert w.returncode == 0, rest
    assert b"zotsink: 1 task: 1 ok\n" in rest, rest
    # the squeue it asked was ended with it (killed: the file `release` came only now)
    for pid in (tmp_path / "asked").read_text().split():
        end = time.monotonic() + 10  # a killed process is gone at once; allow for load
        while alive(int(pid)) and time.monotonic() < end:
            time.sleep(0.01)
        assert not alive(int(pid)), f"squeue {pid} was left running"


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_status_waits_for_a_hanging_scheduler_a_few_seconds_and_says_so(
    tmp_path: Path, child_env: Callable[..., dict[str, str]]
) -> None:
    env = hanging_scheduler(tmp_path, child_env)
    try:
        r = subprocess.run(
            [*ZOTSINK, "status", "tasks.txt", "out.txt"], cwd=tmp_path, env=env,
            capture_output=True, timeout=20,
        )  # fmt: skip
    finally:
        (tmp_path / "release").touch()
    assert r.returncode == 1
    assert b"1 running" in r.stderr  # begun, its job's state not known
    assert b"zotsink: scheduler: no answer in 3 s;" in r.stderr, r.stderr
