"""``zotsink status --watch`` ends on its own once nothing runs and nothing can start: the
runs are dead and no job of the ledger is queued or running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from waiting import wait_for

from zotsink._ledgerfile import LEDGER_COLUMNS
from zotsink._run.ledger import Ledger

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
    """A start row of a run on another host: its job is asked about at every redraw."""
    (tmp_path / "tasks.txt").write_text("a\nb\n")
    book = Ledger(tmp_path / "out.txt.ledger", env={"SLURM_ARRAY_JOB_ID": "4711"})
    start = book.start_row(1, "a", 1).split(b"\t")
    start[LEDGER_COLUMNS.index("host")] = b"another-node"
    book.append([b"\t".join(start)])
    book.close()
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
