"""``zotsink run`` told to stop (walltime warning, scancel) and killed outright.

The tasks announce themselves by creating a file once they have printed their first line;
the test waits for those files (events), never for a fixed time.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.ledgers import begins, ledger_rows

# Prints its first line, says so with a file, then works until stopped. Task "stubborn"
# ignores SIGUSR2 (and so must be escalated to SIGTERM).
TASK = """
import os, signal, sys, time
item = sys.argv[1]
if item == "stubborn":
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)
print(f"{item} begun", flush=True)
with open(f"ready.{item}.{os.getpid()}", "w"):
    pass
deadline = time.monotonic() + 120
while time.monotonic() < deadline:
    time.sleep(0.05)
print(f"{item} finished", flush=True)
"""


def wait_for_files(directory: Path, prefix: str, n: int, proc: subprocess.Popen) -> list[Path]:
    """The ``n`` files named ``prefix*``; fails early, with stderr, if the run dies."""
    end = time.monotonic() + 60
    while time.monotonic() < end:
        found = sorted(directory.glob(prefix + "*"))
        if len(found) >= n:
            return found
        if proc.poll() is not None:
            pytest.fail(f"run ended early ({proc.returncode}): {proc.stderr.read().decode()}")
        time.sleep(0.01)
    pytest.fail(f"only {len(list(directory.glob(prefix + '*')))} of {n} tasks started")


@pytest.fixture
def tasks(tmp_path: Path) -> Path:
    (tmp_path / "task.py").write_text(TASK)
    path = tmp_path / "tasks.txt"
    path.write_text("a\nb\nstubborn\nd\ne\nf\n")
    return path


def test_usr2_stops_forwards_keeps_output_and_resumes(
    tmp_path: Path,
    tasks: Path,
    zotsink_cmd: list[str],
    child_env: Callable[..., dict[str, str]],
    reap: Callable[[subprocess.Popen], subprocess.Popen],
) -> None:
    grace = 2.0
    cmd = [
        *zotsink_cmd,
        "run",
        str(tasks),
        "out.txt",
        "--jobs",
        "3",
        "--grace",
        str(grace),
        "--",
        "python3",
        "task.py",
    ]
    run = reap(subprocess.Popen(cmd, cwd=tmp_path, env=child_env(), stderr=subprocess.PIPE))
    ready = wait_for_files(tmp_path, "ready.", 3, run)
    t0 = time.monotonic()
    run.send_signal(signal.SIGUSR2)
    _, err = run.communicate(timeout=60)
    took = time.monotonic() - t0
    assert run.returncode == 128 + signal.SIGUSR2, err
    assert took < grace + 5, took
    assert b"stopped by SIGUSR2" in err
    # the summary names what the stop left: interrupted, and not started (to resubmit)
    assert b"6 tasks: 3 interrupted, 3 not started (they stay to resubmit)" in err
    for f in ready:  # every task is gone, the stubborn one too
        pid = int(f.name.rsplit(".", 1)[1])
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert sorted((tmp_path / "out.txt").read_text().splitlines()) == [
        "a begun",
        "b begun",
        "stubborn begun",
    ]
    ends = {r["key"]: r for r in ledger_rows(tmp_path / "out.txt.ledger") if r["event"] == "end"}
    assert {k: (v["status"], v["signal"]) for k, v in ends.items()} == {
        "a": ("interrupted", "SIGUSR2"),
        "b": ("interrupted", "SIGUSR2"),
        "stubborn": ("interrupted", "SIGTERM"),
    }
    # Re-running finishes the rest (the tasks now end at once).
    (tmp_path / "task.py").write_text('import sys\nprint(sys.argv[1], "quick")\n')
    again = subprocess.run(cmd, cwd=tmp_path, env=child_env(), capture_output=True, timeout=60)
    assert again.returncode == 0, again.stderr
    lines = (tmp_path / "out.txt").read_text().splitlines()
    assert sorted(lines[3:]) == sorted(f"{k} quick" for k in ("a", "b", "stubborn", "d", "e", "f"))


def test_sigkill_of_run_leaves_lost_tasks_that_missing_resubmits(
    tmp_path: Path,
    tasks: Path,
    zotsink_cmd: list[str],
    child_env: Callable[..., dict[str, str]],
    reap: Callable[[subprocess.Popen], subprocess.Popen],
    zotsink: Callable[..., subprocess.CompletedProcess[bytes]],
) -> None:
    cmd = [
        *zotsink_cmd,
        "run",
        str(tasks),
        "out.txt",
        "--chunk",
        "2",
        "--jobs",
        "2",
        "--",
        "python3",
        "task.py",
    ]
    env = child_env({"SLURM_ARRAY_TASK_ID": "2"})  # tasks 3 and 4
    run = reap(subprocess.Popen(cmd, cwd=tmp_path, env=env, stderr=subprocess.PIPE))
    ready = wait_for_files(tmp_path, "ready.", 2, run)
    try:
        # the begin rows name the tasks' own processes (written once they have run a moment)
        deadline = time.monotonic() + 60
        while len(begins(tmp_path / "out.txt.ledger")) < 2:
            assert time.monotonic() < deadline, "no begin rows"
            time.sleep(0.01)
        run.kill()
        run.wait()
        # Its tasks live on in their own sessions: while their processes do, they count as
        # running (never started twice). Once they are gone too, as a node's death would
        # take them, they are lost.
        st = zotsink("status", tasks, "out.txt")
        assert b"2 running, 4 never" in st.stderr, st.stderr
        for f in ready:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(int(f.name.rsplit(".", 1)[1]), signal.SIGKILL)
        deadline = time.monotonic() + 60
        for f in ready:
            while os.path.exists(f"/proc/{int(f.name.rsplit('.', 1)[1])}"):
                assert time.monotonic() < deadline, "the orphaned tasks did not end"
                time.sleep(0.01)
        st = zotsink("status", tasks, "out.txt", "--json")
        assert st.returncode == 1
        assert b"2 lost, 4 never" in st.stderr
        import json

        report = json.loads(st.stdout)
        assert report["counts"]["lost"] == 2
        assert report["not_ok"] == "1-6"
        miss = zotsink(
            "missing",
            tasks,
            "--ledger",
            "out.txt.ledger",
            "--state",
            "lost",
            "--chunk",
            "2",
            "--array",
        )
        assert miss.returncode == 0, miss.stderr
        assert miss.stdout == b"2\n"
        miss = zotsink("missing", tasks, "--ledger", "out.txt.ledger", "--chunk", "2", "--array")
        assert miss.stdout == b"1-3\n"
    finally:
        for f in ready:  # the orphaned tasks run in their own sessions: end them
            pid = int(f.name.rsplit(".", 1)[1])
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
