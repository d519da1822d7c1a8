"""``zotsink run``'s processes and their identity: a function's forked child never answers for
its worker, a worker's death is seen whatever holds its pipes, a stop is a stop whichever
process was reaped first, a task's own start error fails that task only, workers stop
together, a second stop signal ends the grace, and a function's load is bounded.

Real processes throughout; waits are on files the tasks write and on processes gone."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from waiting import wait_for

import zotsink as zs
from tests.ledgers import ledger_rows

ZOTSINK = [sys.executable, "-m", "zotsink"]

FUNCS = r"""
import os, sys, threading, time


def forks(line):
    # the child returns (or exits) from the call: it must never answer for the worker
    if os.fork() == 0:
        if line.endswith("exit"):
            sys.exit(0)
        return {"item": "child of " + line}
    return {"item": line}


def threads(line):
    def late():
        with open("gate") as g:  # opened by the test once the call's end is in the ledger
            g.read()
        print("late from", line, flush=True)

    threading.Thread(target=late).start()
    print("in the call", line)
    return {"item": line}


_go = threading.Event()  # set by the call of t2: the thread t1 left may print now
_printed = threading.Event()  # set by that thread once it printed


def outlives(line):
    # t1 leaves a thread that prints while the call of t2 runs, and only then
    if line == "t1":
        def late():
            _go.wait()
            print("late from t1", flush=True)
            _printed.set()

        threading.Thread(target=late).start()
    elif line == "t2":
        _go.set()
        if not _printed.wait(60):
            raise RuntimeError("the thread of t1 never printed")
    elif line == "t3":
        # a thread of this call that prints during it: this call's line
        helper = threading.Thread(target=print, args=("helper of", line))
        helper.start()
        helper.join()
    print("in the call", line)
    return {"item": line}


def helper(line):
    # a background helper in a session of its own inherits what the worker does not close
    os.system(f"setsid sleep 1000 >/dev/null 2>&1 & echo $! > helper.{line}")
    if line == "die":
        os._exit(3)
    if line == "hang":
        time.sleep(1000)
    return {"item": line}
"""


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("ZOTSINK_")}


def _run(d: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [*ZOTSINK, *args], cwd=d, capture_output=True, env=_env(), timeout=timeout, check=False
    )


def _popen(d: Path, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [*ZOTSINK, *args], cwd=d, env=_env(), stderr=subprocess.PIPE, start_new_session=True
    )


def ends(d: Path, out: str = "out.tsv") -> dict[str, list[dict[str, str]]]:
    rows = ledger_rows(d / f"{out}.ledger")
    got: dict[str, list[dict[str, str]]] = {}
    for r in rows:
        if r["event"] == "end":
            got.setdefault(r["key"], []).append(r)
    return got


def tasks(d: Path, *lines: str) -> None:
    (d / "tasks.txt").write_text("".join(f"{ln}\n" for ln in lines))


def _gone(pid: int) -> bool:
    return not os.path.exists(f"/proc/{pid}")


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)


@pytest.fixture
def job(tmp_path: Path) -> Path:
    (tmp_path / "funcs.py").write_text(FUNCS)
    return tmp_path


@pytest.mark.parametrize("how", ["return", "exit"])
def test_a_forked_child_never_answers_for_its_worker(job: Path, how: str) -> None:
    lines = [f"t{i}" + ("" if how == "return" else " exit") for i in range(1, 7)]
    tasks(job, *lines)
    r = _run(job, "run", "tasks.txt", "out.tsv", "--call", "funcs.py:forks", "--jobs", "2")
    assert r.returncode == 0, r.stderr.decode()
    got = sorted(rec["item"] for rec in zs.read_records(job / "out.tsv", header=True))
    assert got == sorted(lines)  # each task's own record, once; no child's
    rows = ends(job)
    assert sorted(rows) == sorted(lines)
    assert all(len(v) == 1 and v[0]["status"] == "ok" for v in rows.values())


def test_refused_frames_name_why() -> None:
    from types import SimpleNamespace

    from zotsink._run.worker import Worker

    w = SimpleNamespace(pid=100, sent=(3, 1))
    assert Worker.refusal(w, ("done", 100, 3, 1, [], None)) is None  # type: ignore[arg-type]
    assert "from process 101" in Worker.refusal(w, ("done", 101, 3, 1, [], None))  # type: ignore
    assert "task 4.1, not 3.1" in Worker.refusal(w, ("raised", 100, 4, 1, "", 1, None))  # type: ignore
    assert "no known kind" in Worker.refusal(w, ("done", 100))  # type: ignore[arg-type]
    idle = SimpleNamespace(pid=100, sent=None)
    assert "while it ran none" in Worker.refusal(idle, ("done", 100, 3, 1, [], None))  # type: ignore


def test_prints_of_a_thread_after_its_call_are_the_runs_with_a_note(job: Path) -> None:
    os.mkfifo(job / "gate")
    tasks(job, "t1")
    p = _popen(job, "run", "tasks.txt", "out.tsv", "--call", "funcs.py:threads")
    try:
        wait_for(lambda: (job / "out.tsv.ledger").exists() and "t1" in ends(job), p, "ended t1")
        fd = os.open(job / "gate", os.O_WRONLY)  # the thread goes on now
        os.close(fd)
        _, err = p.communicate(timeout=60)
    finally:
        p.kill()
    assert p.returncode == 0, err.decode()
    log = (job / "out.tsv.log").read_text().splitlines()
    assert "1.1\tin the call t1" in log
    at = log.index(
        "0.0\tzotsink: printed by the worker after the call of task 1.1 returned "
        "(by a thread it started?):"
    )
    assert log[at + 1] == "0.0\tlate from t1"


def test_a_threads_late_prints_never_go_under_the_call_then_running(job: Path) -> None:
    """A thread task 1's call left running prints while task 2's call runs (batches of
    several tasks, one worker): its line goes under task 0 after a line naming call 1.1."""
    tasks(job, *(f"t{i}" for i in range(1, 7)))
    r = _run(job, "run", "tasks.txt", "out.tsv", "--call", "funcs.py:outlives")
    assert r.returncode == 0, r.stderr.decode()
    log = (job / "out.tsv.log").read_text().splitlines()
    assert [ln for ln in log if "late from t1" in ln] == ["0.0\tlate from t1"], log
    at = log.index("0.0\tlate from t1")
    assert log[at - 1] == (
        "0.0\tzotsink: printed by the worker after the call of task 1.1 returned "
        "(by a thread it started?):"
    ), log
    assert "2.1\tin the call t2" in log and "3.1\thelper of t3" in log, log
    assert all(f"{i}.1\tin the call t{i}" in log for i in range(1, 7)), log


LOAD_THREAD = r"""
import threading

go, printed = threading.Event(), threading.Event()


def _meanwhile():
    go.wait()
    print("from the load's thread", flush=True)
    printed.set()


threading.Thread(target=_meanwhile, daemon=True).start()


def f(line):
    if line == "t2":
        go.set()
        if not printed.wait(60):
            raise RuntimeError("the load's thread never printed")
    print("in the call", line)
    return {"item": line}
"""


def test_a_thread_the_functions_load_started_prints_under_task_0(job: Path) -> None:
    (job / "loadthread.py").write_text(LOAD_THREAD)
    tasks(job, "t1", "t2", "t3")
    r = _run(job, "run", "tasks.txt", "out.tsv", "--call", "loadthread.py:f")
    assert r.returncode == 0, r.stderr.decode()
    log = (job / "out.tsv.log").read_text().splitlines()
    at = log.index("0.0\tfrom the load's thread")
    assert log[at - 1] == (
        "0.0\tzotsink: printed by a thread the worker started as it loaded the function:"
    ), log
    assert "2.1\tin the call t2" in log, log


def _helpers(d: Path) -> list[int]:
    return [int(p.read_text()) for p in d.glob("helper.*") if p.read_text().strip()]


def test_a_background_helper_does_not_hide_its_workers_death(job: Path) -> None:
    tasks(job, "die", "after")
    try:
        t0 = time.monotonic()
        r = _run(job, "run", "tasks.txt", "out.tsv", "--call", "funcs.py:helper")
        assert time.monotonic() - t0 < 30
        assert r.returncode == 1, r.stderr.decode()
        rows = ends(job)
        assert rows["die"][0]["status"] == "killed"
        assert "its worker died (exit 3)" in rows["die"][0]["note"]
        assert rows["after"][0]["status"] == "ok"
    finally:
        for pid in _helpers(job):
            _kill(pid)


def test_task_timeout_ends_a_call_whose_helper_holds_the_pipes(job: Path) -> None:
    tasks(job, "hang", "after")
    try:
        t0 = time.monotonic()
        r = _run(
            job, "run", "tasks.txt", "out.tsv", "--call", "funcs.py:helper", "--task-timeout", "2"
        )
        assert time.monotonic() - t0 < 30
        assert r.returncode == 1, r.stderr.decode()
        rows = ends(job)
        assert rows["hang"][0]["status"] == "timeout"
        assert rows["after"][0]["status"] == "ok"
    finally:
        for pid in _helpers(job):
            _kill(pid)


# A task that notes its pid, then waits; with the file `go` it ends at once.
SLEEPER = ["sh", "-c", 'test -e go && exit 0; echo $$ > "pids/$1"; exec sleep 60', "sh", "{}"]


def test_tasks_reaped_before_the_run_sees_scancel_are_interrupted(tmp_path: Path) -> None:
    (tmp_path / "pids").mkdir()
    tasks(tmp_path, "a", "b", "c")
    p = _popen(tmp_path, "run", "tasks.txt", "out.tsv", "--jobs", "3", "--", *SLEEPER)
    pids: list[int] = []
    try:
        wait_for(lambda: len(list((tmp_path / "pids").iterdir())) == 3, p, "started 3 tasks")
        wait_for(lambda: all((tmp_path / "pids" / n).read_text().strip() for n in "abc"), p, "pids")
        pids = [int((tmp_path / "pids" / n).read_text()) for n in "abc"]
        # scancel signals every process; here the tasks' end is seen first, as it may be
        for pid in pids:
            os.kill(pid, signal.SIGTERM)
        wait_for(lambda: all(_gone(pid) for pid in pids), p, "reaped its tasks")
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=60)
    finally:
        p.kill()
        for pid in pids:
            _kill(pid)
    assert p.returncode == 128 + signal.SIGTERM, err.decode()
    rows = ends(tmp_path)
    assert {k: [r["status"] for r in v] for k, v in rows.items()} == {
        "a": ["interrupted"],
        "b": ["interrupted"],
        "c": ["interrupted"],
    }
    # none of them counts as a failed attempt
    (tmp_path / "go").touch()
    r = _run(tmp_path, "run", "tasks.txt", "out.tsv", "--max-attempts", "1", "--", *SLEEPER)
    assert r.returncode == 0, r.stderr.decode()
    assert [v[-1]["status"] for v in ends(tmp_path).values()] == ["ok"] * 3


def test_a_task_killed_by_somebody_without_a_stop_is_killed(tmp_path: Path) -> None:
    (tmp_path / "pids").mkdir()
    tasks(tmp_path, "a")
    p = _popen(tmp_path, "run", "tasks.txt", "out.tsv", "--", *SLEEPER)
    try:
        wait_for(lambda: (tmp_path / "pids" / "a").exists(), p, "started the task")
        wait_for(lambda: bool((tmp_path / "pids" / "a").read_text().strip()), p, "its pid")
        os.kill(int((tmp_path / "pids" / "a").read_text()), signal.SIGTERM)
        _, err = p.communicate(timeout=60)
    finally:
        p.kill()
    assert p.returncode == 1, err.decode()
    assert ends(tmp_path)["a"][0]["status"] == "killed"


def test_a_too_long_task_line_fails_that_task_not_the_command(tmp_path: Path) -> None:
    long = ["x" * (200 << 10) + str(i) for i in range(3)]
    tasks(tmp_path, *long, "short", "fine")
    r = _run(tmp_path, "run", "tasks.txt", "out.tsv", "--", "/bin/echo", "{}")
    err = r.stderr.decode()
    assert r.returncode == 1, err
    assert "could not start" not in err
    rows = ends(tmp_path)
    assert [rows[k][0]["status"] for k in long] == ["failed"] * 3
    assert "Argument list too long" in rows[long[0]][0]["note"]
    assert rows["short"][0]["status"] == rows["fine"][0]["status"] == "ok"
    assert sorted(zs.read_records(tmp_path / "out.tsv")) == [["fine"], ["short"]]
    assert "zotsink: cannot start" in (tmp_path / "out.tsv.log").read_text()


def test_a_program_path_built_from_the_task_fails_that_task(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    ok = tmp_path / "bin" / "ok"
    ok.write_text("#!/bin/sh\necho done\n")
    ok.chmod(0o755)
    tasks(tmp_path, "nope1", "nope2", "nope3", "ok")
    r = _run(tmp_path, "run", "tasks.txt", "out.tsv", "--", "./bin/{}")
    assert r.returncode == 1, r.stderr.decode()
    rows = ends(tmp_path)
    assert [rows[f"nope{i}"][0]["status"] for i in (1, 2, 3)] == ["failed"] * 3
    assert rows["ok"][0]["status"] == "ok"


SLOW_IMPORT = r"""
import os, time
open(f"loading/{os.getpid()}", "w").close()
time.sleep(60)

def f(line):
    return line
"""


def test_workers_loading_a_slow_module_stop_together(tmp_path: Path) -> None:
    (tmp_path / "loading").mkdir()
    (tmp_path / "slow.py").write_text(SLOW_IMPORT)
    tasks(tmp_path, *(f"t{i}" for i in range(8)))
    p = _popen(tmp_path, "run", "tasks.txt", "out.tsv", "--call", "slow.py:f", "--jobs", "4")
    try:
        wait_for(lambda: len(list((tmp_path / "loading").iterdir())) == 4, p, "loaded 4")
        t0 = time.monotonic()
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=60)
        took = time.monotonic() - t0
    finally:
        p.kill()
    assert p.returncode == 128 + signal.SIGTERM, err.decode()
    assert took < 10  # not five seconds per worker, in turn
    for f in (tmp_path / "loading").iterdir():
        assert _gone(int(f.name))


def test_a_load_that_hangs_is_bounded_by_the_task_timeout(tmp_path: Path) -> None:
    (tmp_path / "loading").mkdir()
    (tmp_path / "slow.py").write_text(SLOW_IMPORT)
    tasks(tmp_path, "t1", "t2")
    t0 = time.monotonic()
    r = _run(tmp_path, "run", "tasks.txt", "out.tsv", "--call", "slow.py:f", "--task-timeout", "2")
    assert time.monotonic() - t0 < 30
    err = r.stderr.decode()
    assert r.returncode == 1, err
    assert "cannot load --call slow.py:f: loading it took over 2 seconds" in err
    assert not (tmp_path / "out.tsv").exists()


# A task deaf to the stop signals, that notes each SIGINT it gets.
DEAF = "trap 'echo int >> gotint' INT; trap '' TERM; echo $$ > started; "
DEAF += "while :; do sleep 60 & wait $!; done"


def test_a_second_ctrl_c_ends_the_grace(tmp_path: Path) -> None:
    tasks(tmp_path, DEAF)
    p = _popen(tmp_path, "run", "tasks.txt", "out.tsv", "--shell", "--grace", "120")
    group = 0
    try:
        wait_for(lambda: (tmp_path / "started").exists(), p, "started the task")
        wait_for(lambda: bool((tmp_path / "started").read_text().strip()), p, "its pid")
        group = int((tmp_path / "started").read_text())
        p.send_signal(signal.SIGINT)
        wait_for(lambda: (tmp_path / "gotint").exists(), p, "passed the first Ctrl-C on")
        t0 = time.monotonic()
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=30)
        assert time.monotonic() - t0 < 15
    finally:
        p.kill()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if group:
                os.killpg(group, signal.SIGKILL)
    assert p.returncode == 128 + signal.SIGINT, err.decode()
    assert ends(tmp_path)[DEAF][0]["status"] == "interrupted"


#: argv: a command; runs it, then prints its peak memory (KiB, the larger of the command
#: and the processes it waited for) and exits as it did.
PEAK = """
import os, subprocess, sys
child = subprocess.Popen(sys.argv[1:])
_, status, usage = os.wait4(child.pid, 0)
print(usage.ru_maxrss)
sys.exit(os.waitstatus_to_exitcode(status))
"""


def test_a_large_result_is_held_as_a_commands_output_not_copied_whole(tmp_path: Path) -> None:
    (tmp_path / "big.py").write_text(
        "def big(line):\n    return ('x' * 63 + '\\n') * (1 << 20)  # 64 MiB of lines\n"
    )
    tasks(tmp_path, "t1")
    # The run is started by a small Python of its own, which reports the run's peak: a
    # process started straight from this one (vfork) would count this test process's own
    # memory in its peak (Linux keeps the high-water mark of the memory a process had
    # before exec), which grows as the suite runs.
    p = subprocess.run(
        [
            sys.executable,
            "-c",
            PEAK,
            *ZOTSINK,
            "run",
            "tasks.txt",
            "out.txt",
            "--call",
            "big.py:big",
        ],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
    )
    assert p.returncode == 0, p.stderr.decode()
    assert (tmp_path / "out.txt").stat().st_size == 64 << 20
    # the larger of the run and its worker (which holds the function's own string and its
    # bytes): not the five copies of the whole result a frame of it cost (about 1,085 MiB
    # here before); about 80 MiB now
    peak = int(p.stdout)
    assert peak < 360 << 10, peak
