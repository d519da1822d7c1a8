"""``zotsink run --call FILE.py:FUNC`` and ``run_tasks(function=...)``: a Python function per
task, called in long-lived worker processes, with the ledger, the log, resume and the
committed view of commands.

The functions note what happened in files of the test's own (``calls/``, ``imports``), so
that the tests can count calls and imports per process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

import zotsink as zs
from tests.ledgers import ledger_rows

Run = Callable[..., subprocess.CompletedProcess[bytes]]

ZOTSINK = [sys.executable, "-m", "zotsink"]

# One module of functions for every test: each notes its import (pid) and its calls.
FUNCS = r"""
import os, sys, time

with open("imports", "a") as f:
    f.write(f"{os.getpid()}\n")


def _note(line):
    os.makedirs("calls", exist_ok=True)
    with open(f"calls/{line}.{os.getpid()}.{os.environ['ZOTSINK_ATTEMPT']}", "w") as f:
        f.write(os.environ["ZOTSINK_TASKNUM"])


def kinds(line):
    _note(line)
    kind, _, n = line.partition(" ")
    if kind == "none":
        return None
    if kind == "str":
        return f"{n}\ta\n{n}\tb"  # two lines, the last without its newline
    if kind == "bytes":
        return f"{n}\tc\n".encode()
    if kind == "dict":
        return {"n": int(n), "what": "d"}
    if kind == "list":
        return [{"n": n, "what": "e"}, f"{n}\tf", None]
    if kind == "gen":
        return ({"n": n, "what": w} for w in "gh")
    raise AssertionError(line)


def chatty(line):
    _note(line)
    print("out says", line)
    print("err says", line, file=sys.stderr)
    sys.stdout.write("no newline " + line)
    return {"item": line}


def raises(line):
    _note(line)
    if line == "bad":
        print("before the error", file=sys.stderr)
        raise ValueError(f"cannot measure {line}")
    return {"item": line}


def dies(line):
    _note(line)
    if line == "exit":
        os._exit(3)
    if line == "segv":
        import ctypes
        ctypes.string_at(0)
    return {"item": line, "pid": os.getpid()}


def slow(line):
    _note(line)
    if line.startswith("sleep"):
        time.sleep(float(line.split()[1]))
    return {"item": line}


def quick(line):
    print("note", line, file=sys.stderr)
    return f"rec {line}"


def stamped(line):
    return {"item": line, "seen": os.environ["ZOTSINK_TASKNUM"]}
"""


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("ZOTSINK_")}


def _run(d: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [*ZOTSINK, *args], cwd=d, capture_output=True, env=_env(), timeout=timeout, check=False
    )


def ends(d: Path, out: str = "out.tsv") -> dict[str, list[dict[str, str]]]:
    rows: dict[str, list[dict[str, str]]] = {}
    for r in ledger_rows(d / f"{out}.ledger"):
        if r["event"] == "end":
            rows.setdefault(r["key"], []).append(r)
    return rows


def calls(d: Path) -> Counter[str]:
    return Counter(p.name.rsplit(".", 2)[0] for p in (d / "calls").iterdir())  # LINE.PID.ATTEMPT


@pytest.fixture
def job(tmp_path: Path) -> Path:
    (tmp_path / "funcs.py").write_text(FUNCS)
    return tmp_path


def tasks(d: Path, *lines: str) -> None:
    (d / "tasks.txt").write_text("".join(f"{ln}\n" for ln in lines))


def test_every_kind_of_return_value_becomes_records(job: Path) -> None:
    tasks(job, "none 1", "str 2", "bytes 3", "dict 4", "list 5", "gen 6")
    r = _run(job, "run", "tasks.txt", "out.tsv", "--columns", "n,what", "--call", "funcs.py:kinds")
    assert r.returncode == 0, r.stderr.decode()
    lines = (job / "out.tsv").read_bytes().splitlines(keepends=True)
    assert lines[0] == b"n\twhat\n"
    assert sorted(lines[1:]) == sorted(
        b"%s\n" % x
        for x in (b"2\ta", b"2\tb", b"3\tc", b"4\td", b"5\te", b"5\tf", b"6\tg", b"6\th")
    )
    assert {k: v[0]["records"] for k, v in ends(job).items()} == {
        "none 1": "0", "str 2": "2", "bytes 3": "1", "dict 4": "1", "list 5": "2", "gen 6": "2",
    }  # fmt: skip
    assert all(v[0]["status"] == "ok" for v in ends(job).values())


def test_a_mapping_names_the_header_of_a_new_table(job: Path) -> None:
    tasks(job, "dict 1", "dict 2")
    r = _run(job, "run", "tasks.txt", "out.tsv", "--call", "funcs.py:kinds", "--jobs", "2")
    assert r.returncode == 0, r.stderr.decode()
    header, *rows = (job / "out.tsv").read_bytes().splitlines(keepends=True)
    assert header == b"n\twhat\n"
    assert sorted(rows) == [b"1\td\n", b"2\td\n"]


def test_workers_import_the_module_once_and_call_it_per_task(job: Path) -> None:
    tasks(job, *(f"dict {i}" for i in range(40)))
    r = _run(job, "run", "tasks.txt", "out.tsv", "--call", "funcs.py:kinds", "--jobs", "2")
    assert r.returncode == 0, r.stderr.decode()
    imports = (job / "imports").read_text().split()
    assert len(imports) <= 2  # one per worker (one alone may have taken every task)
    by_pid = Counter(p.name.rsplit(".", 2)[1] for p in (job / "calls").iterdir())
    assert sum(by_pid.values()) == 40
    assert set(by_pid) <= set(imports)  # every call in a worker that imported the module once
    assert len((job / "out.tsv").read_bytes().splitlines()) == 41


def test_prints_go_to_the_log_under_the_task_number_not_to_out(job: Path) -> None:
    tasks(job, "p", "q")
    r = _run(job, "run", "tasks.txt", "out.tsv", "--call", "funcs.py:chatty")
    assert r.returncode == 0, r.stderr.decode()
    assert sorted((job / "out.tsv").read_bytes().splitlines()) == [b"item", b"p", b"q"]
    log = (job / "out.tsv.log").read_text().splitlines()
    for num, line in (("1.1", "p"), ("2.1", "q")):  # TASKNUM.ATTEMPT
        mine = [x.split("\t", 1)[1] for x in log if x.split("\t", 1)[0] == num]
        assert sorted(mine) == sorted(
            [f"out says {line}", f"err says {line}", f"no newline {line}"]
        )


def test_an_exception_fails_the_task_with_its_traceback_in_the_log(job: Path) -> None:
    tasks(job, "good", "bad", "fine")
    r = _run(job, "run", "tasks.txt", "out.tsv", "--call", "funcs.py:raises")
    assert r.returncode == 1, r.stderr.decode()
    assert "1 failed" in r.stderr.decode()
    rows = ends(job)
    assert rows["bad"][0]["status"] == "failed" and rows["bad"][0]["exit"] == "1"
    assert "ValueError: cannot measure bad" in rows["bad"][0]["note"]
    assert rows["good"][0]["status"] == rows["fine"][0]["status"] == "ok"
    log = [x.split("\t", 1) for x in (job / "out.tsv.log").read_text().splitlines()]
    mine = [text for num, text in log if num == "2.1"]
    assert mine[0] == "before the error"
    assert mine[1] == "Traceback (most recent call last):"
    assert mine[-1] == "ValueError: cannot measure bad"
    assert any('funcs.py", line' in x and "in raises" in x for x in mine)
    assert not any("worker.py" in x for x in mine)  # the function's frames only
    assert sorted(zs.read_records(job / "out.tsv", header=True), key=str) == [
        {"item": "fine"}, {"item": "good"},
    ]  # fmt: skip


@pytest.mark.parametrize(("line", "status", "exit_", "sig"), [
    ("exit", "killed", "3", ""),
    ("segv", "killed", "", "SIGSEGV"),
])  # fmt: skip
def test_a_worker_that_dies_kills_its_task_and_is_replaced(
    job: Path, line: str, status: str, exit_: str, sig: str
) -> None:
    tasks(job, "a", line, "b", "c", "d")
    r = _run(job, "run", "tasks.txt", "out.tsv", "--call", "funcs.py:dies", "--columns", "item,pid")
    assert r.returncode == 1, r.stderr.decode()
    rows = ends(job)
    died = rows[line][0]
    assert (died["status"], died["exit"], died["signal"]) == (status, exit_, sig)
    assert "its worker died" in died["note"]
    assert [rows[x][0]["status"] for x in "abcd"] == ["ok"] * 4
    pids = {rec["item"]: rec["pid"] for rec in zs.read_records(job / "out.tsv", header=True)}
    assert pids["a"] != pids["d"]  # one worker (--jobs 1): d ran in its replacement
    assert len((job / "imports").read_text().split()) == 2


def test_retries_run_a_killed_task_again_in_a_new_worker(job: Path) -> None:
    tasks(job, "exit", "a")
    r = _run(
        job, "run", "tasks.txt", "out.tsv", "--call", "funcs.py:dies", "--retries", "1",
        "--columns", "item,pid",
    )  # fmt: skip
    assert r.returncode == 1  # it dies every time
    assert [x["status"] for x in ends(job)["exit"]] == ["killed", "killed"]
    assert [x["attempt"] for x in ends(job)["exit"]] == ["1", "2"]


@pytest.mark.parametrize(
    ("lines", "follow"),
    [(("exit",), ()), (("a", "exit"), ()), (("a", "exit"), ("--follow", "--idle", "1"))],
)
def test_retries_of_the_last_task_run_when_its_worker_was_the_last(
    job: Path, lines: tuple[str, ...], follow: tuple[str, ...]
) -> None:
    # the worker that died was the run's only one, and nothing else was left to run: the
    # retry needs a new worker all the same (it once ended the run, or waited forever)
    tasks(job, *lines)
    r = _run(
        job, "run", "tasks.txt", "out.tsv", "--call", "funcs.py:dies", "--retries", "2",
        "--columns", "item,pid", *follow,
    )  # fmt: skip
    assert r.returncode == 1, r.stderr.decode()
    assert [x["attempt"] for x in ends(job)["exit"]] == ["1", "2", "3"]
    assert {x["status"] for x in ends(job)["exit"]} == {"killed"}


def test_task_timeout_ends_the_worker_and_a_new_one_takes_the_rest(job: Path) -> None:
    tasks(job, "sleep 60", "after")
    t0 = time.monotonic()
    r = _run(job, "run", "tasks.txt", "out.tsv", "--call", "funcs.py:slow", "--task-timeout", "1")
    assert time.monotonic() - t0 < 30
    assert r.returncode == 1, r.stderr.decode()
    rows = ends(job)
    assert rows["sleep 60"][0]["status"] == "timeout"
    assert rows["after"][0]["status"] == "ok"
    assert list(zs.read_records(job / "out.tsv", header=True)) == [{"item": "after"}]


def _wait_for_calls(d: Path, n: int, p: subprocess.Popen[bytes]) -> None:
    end = time.monotonic() + 60
    while not (d / "calls").exists() or len(list((d / "calls").iterdir())) < n:
        assert time.monotonic() < end and p.poll() is None, "the calls did not start"
        time.sleep(0.01)


def test_usr2_lets_a_call_finish_within_the_grace(job: Path) -> None:
    tasks(job, "sleep 1.5", "never")
    cmd = [*ZOTSINK, "run", "tasks.txt", "out.tsv", "--call", "funcs.py:slow", "--grace", "30"]
    p = subprocess.Popen(cmd, cwd=job, env=_env(), stderr=subprocess.PIPE)
    _wait_for_calls(job, 1, p)
    p.send_signal(signal.SIGUSR2)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 128 + signal.SIGUSR2, err.decode()
    rows = ends(job)
    assert rows["sleep 1.5"][0]["status"] == "ok"  # the call ended within the grace
    assert "never" not in rows  # nothing new started after the signal
    assert list(zs.read_records(job / "out.tsv", header=True)) == [{"item": "sleep 1.5"}]


def test_usr2_then_the_grace_interrupts_a_call_and_a_resubmission_finishes(job: Path) -> None:
    tasks(job, "sleep 60", "sleep 60 ", "x")
    cmd = [*ZOTSINK, "run", "tasks.txt", "out.tsv", "--call", "funcs.py:slow", "--jobs", "2"]
    cmd += ["--grace", "0.5"]
    p = subprocess.Popen(cmd, cwd=job, env=_env(), stderr=subprocess.PIPE)
    _wait_for_calls(job, 2, p)
    t0 = time.monotonic()
    p.send_signal(signal.SIGUSR2)
    _, err = p.communicate(timeout=60)
    assert time.monotonic() - t0 < 20  # the grace, then SIGTERM: not the minute of sleep
    assert p.returncode == 128 + signal.SIGUSR2, err.decode()
    rows = ends(job)
    assert [rows[k][0]["status"] for k in ("sleep 60", "sleep 60 ")] == ["interrupted"] * 2
    assert not (job / "out.tsv").exists()  # no record of an interrupted call
    # the resubmission, with calls that finish
    tasks(job, "sleep 0", "sleep 0 ", "x")  # edited lines: the old rows no longer count
    (job / "out.tsv.ledger").unlink()
    r = _run(job, "run", "tasks.txt", "out.tsv", "--call", "funcs.py:slow", "--jobs", "2")
    assert r.returncode == 0, r.stderr.decode()
    got = sorted(rec["item"] for rec in zs.read_records(job / "out.tsv", header=True))
    assert got == ["sleep 0", "sleep 0 ", "x"]


def test_a_resubmission_calls_only_the_tasks_not_ok(job: Path) -> None:
    tasks(job, "good", "bad", "fine")
    assert _run(job, "run", "tasks.txt", "out.tsv", "--call", "funcs.py:raises").returncode == 1
    assert calls(job) == Counter({"good": 1, "bad": 1, "fine": 1})
    (job / "funcs.py").write_text(FUNCS.replace('if line == "bad":', 'if line == "never":'))
    r = _run(job, "run", "tasks.txt", "out.tsv", "--call", "funcs.py:raises")
    assert r.returncode == 0, r.stderr.decode()
    assert "2 already ok" in r.stderr.decode()
    assert calls(job) == Counter({"good": 1, "bad": 2, "fine": 1})
    assert sorted(x.decode() for x in _run(job, "cat", "out.tsv").stdout.splitlines()) == [
        "bad", "fine", "good", "item",
    ]  # fmt: skip


def test_chunks_of_an_array_and_stamps(job: Path) -> None:
    tasks(job, *(f"t{i}" for i in range(1, 11)))
    for index in ("1", "2"):
        r = _run(
            job, "run", "tasks.txt", "out.tsv", "--call", "funcs.py:stamped", "--index", index,
            "--chunk", "5", "--stamp", "tasknum,attempt", "--jobs", "3",
        )  # fmt: skip
        assert r.returncode == 0, r.stderr.decode()
    recs = list(zs.read_records(job / "out.tsv", header=True))
    assert sorted((r["tasknum"], r["attempt"], r["item"], r["seen"]) for r in recs) == sorted(
        (str(i), "1", f"t{i}", str(i)) for i in range(1, 11)
    )


def test_a_python_function_from_run_tasks(job: Path) -> None:
    (job / "driver.py").write_text(
        textwrap.dedent(
            """
            import sys
            import zotsink

            def measure(line):
                return {"line": line, "length": len(line)}

            if __name__ == "__main__":
                report = zotsink.run_tasks("tasks.txt", "out.tsv", function=measure, jobs=2)
                print(report.states)
                sys.exit(0 if set(report.states.values()) == {"ok"} else 1)
            """
        )
    )
    tasks(job, "a", "bbb", "cc")
    r = subprocess.run(
        [sys.executable, "driver.py"], cwd=job, capture_output=True, env=_env(), timeout=120
    )
    assert r.returncode == 0, r.stderr.decode()
    got = sorted((x["line"], x["length"]) for x in zs.read_records(job / "out.tsv", header=True))
    assert got == [("a", "1"), ("bbb", "3"), ("cc", "2")]


def test_a_function_without_a_name_to_import_is_refused(job: Path) -> None:
    tasks(job, "a")
    with pytest.raises(zs.UsageError, match="top level of a module or script"):
        zs.run_tasks(job / "tasks.txt", job / "out.tsv", function=lambda line: line)
    assert not (job / "out.tsv.ledger").exists()


@pytest.mark.parametrize(("spec", "words"), [
    ("funcs.py", "--call takes FILE.py:FUNC or package.module:FUNC, not 'funcs.py'"),
    ("nofile.py:f", "--call nofile.py:f: nofile.py is not a file"),
    ("funcs.py:not-a-name", "--call takes FILE.py:FUNC"),
])  # fmt: skip
def test_a_mistyped_call_is_a_usage_error(job: Path, spec: str, words: str) -> None:
    tasks(job, "a")
    r = _run(job, "run", "tasks.txt", "out.tsv", "--call", spec)
    assert r.returncode == 2
    assert words in r.stderr.decode()
    assert not (job / "out.tsv.ledger").exists()


def test_call_and_a_command_together_are_refused(job: Path) -> None:
    tasks(job, "a")
    r = _run(job, "run", "tasks.txt", "out.tsv", "--call", "funcs.py:kinds", "--", "echo")
    assert r.returncode == 2
    assert "give no CMD and no --shell with it" in r.stderr.decode()


@pytest.mark.parametrize(("spec", "why"), [
    ("funcs.py:missing", "AttributeError: module 'funcs' has no attribute 'missing'"),
    ("broken.py:f", "ModuleNotFoundError: No module named 'no_such_module_here'"),
])  # fmt: skip
def test_a_function_that_cannot_be_loaded_stops_the_run_before_any_task(
    job: Path, spec: str, why: str
) -> None:
    (job / "broken.py").write_text("import no_such_module_here\ndef f(line):\n    return line\n")
    tasks(job, "a", "b", "c")
    r = _run(job, "run", "tasks.txt", "out.tsv", "--call", spec, "--jobs", "2")
    err = r.stderr.decode()
    assert r.returncode == 1, err
    assert f"cannot load --call {spec}: {why}; nothing was started" in err
    assert not (job / "out.tsv.ledger").exists()  # no task claimed
    assert why in (job / "out.tsv.log").read_text()


def test_a_package_module_function(job: Path) -> None:
    pkg = job / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "steps.py").write_text("def upper(line):\n    return {'up': line.upper()}\n")
    tasks(job, "a", "b")
    r = _run(job, "run", "tasks.txt", "out.tsv", "--call", "mypkg.steps:upper")
    assert r.returncode == 0, r.stderr.decode()
    assert sorted(x["up"] for x in zs.read_records(job / "out.tsv", header=True)) == ["A", "B"]


def test_a_record_the_table_cannot_take_is_refused_into_the_rejects_file(job: Path) -> None:
    tasks(job, "dict 1", "dict 2")
    r = _run(job, "run", "tasks.txt", "out.tsv", "--columns", "n", "--call", "funcs.py:kinds")
    assert r.returncode == 1
    rejects = (job / "out.tsv.rejects").read_text().splitlines()
    assert len(rejects) == 2
    assert all("unknown column 'what'" in x for x in rejects)
    assert all("refused" in x["note"] for v in ends(job).values() for x in v)


# Counts the exclusive flock calls of the whole run (OUT, the log and the ledger) in the run's
# own process: workers and commands take no lock.
COUNT_LOCKS = r"""
import atexit, fcntl, runpy, sys
n = 0
real = fcntl.flock
def flock(fd, op):
    global n
    if op & fcntl.LOCK_EX:
        n += 1
    return real(fd, op)
fcntl.flock = flock
atexit.register(lambda: open("locks", "w").write(str(n)))
sys.argv = ["zotsink", *sys.argv[1:]]
runpy.run_module("zotsink", run_name="__main__")
"""


@pytest.mark.parametrize("way", ["command", "function"])
def test_group_commit_takes_at_most_half_a_lock_per_task(job: Path, way: str) -> None:
    """400 quick tasks, each one record and one stderr line, --jobs 4: OUT, the log and the
    ledger together take at most 200 exclusive locks."""
    (job / "count.py").write_text(COUNT_LOCKS)
    if way == "command":
        tasks(job, *(f"echo rec {i}; echo note {i} >&2" for i in range(400)))
        how = ["--shell"]
    else:
        tasks(job, *(str(i) for i in range(400)))
        how = ["--call", "funcs.py:quick"]
    r = subprocess.run(
        [sys.executable, "count.py", "run", "tasks.txt", "out.txt", "--jobs", "4", "--lock",
         "flock", *how],
        cwd=job, capture_output=True, env=_env(), timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr.decode()
    assert len((job / "out.txt").read_bytes().splitlines()) == 400
    assert len((job / "out.txt.log").read_bytes().splitlines()) == 400
    oks = [row for row in ledger_rows(job / "out.txt.ledger") if row["status"] == "ok"]
    assert len(oks) == 400
    locks = int((job / "locks").read_text())
    assert 3 <= locks <= 200, locks


def _stderr_on_a_terminal(d: Path, *args: str) -> tuple[int, bytes]:
    import pty

    master, slave = pty.openpty()
    p = subprocess.Popen(
        [*ZOTSINK, *args], cwd=d, env=_env(), stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=slave,
    )  # fmt: skip
    os.close(slave)
    got = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the terminal's last writer is gone
            break
        if not chunk:
            break
        got += chunk
    os.close(master)
    return p.wait(timeout=120), got


def test_a_terminal_shows_one_progress_line_and_a_log_file_none(job: Path) -> None:
    # 20 calls of at least 0.1 s, two at a time: a second or more, two progress lines or more
    tasks(job, *(f"sleep 0.1 {'x' * i}" for i in range(20)))
    code, err = _stderr_on_a_terminal(
        job, "run", "tasks.txt", "out.tsv", "--call", "funcs.py:slow", "--jobs", "2"
    )
    assert code == 0, err
    shown = [x for x in err.split(b"\r") if x.startswith(b"\x1b[Kzotsink run: ")]
    assert len(shown) >= 2, err
    assert all(b"/20 done, " in x and b" running, 0 not ok, " in x for x in shown)
    assert b"20 tasks: 20 ok; 20 records into out.tsv" in err  # then the summary, as ever
    (job / "out.tsv.ledger").unlink()
    (job / "out.tsv").unlink()
    r = _run(job, "run", "tasks.txt", "out.tsv", "--call", "funcs.py:slow", "--jobs", "2")
    assert r.returncode == 0
    assert b"\r" not in r.stderr and b"done, " not in r.stderr  # not a terminal: no progress
    assert r.stderr.decode().splitlines() == ["zotsink: 20 tasks: 20 ok; 20 records into out.tsv"]


IN_CI = os.environ.get("CI", "").lower() not in ("", "0", "false")


def test_the_readme_seed_walk_through_runs(job: Path) -> None:
    """The README's first run example: the seed's image step as a function, with --call."""
    try:
        from PIL import Image
    except ImportError as e:
        if IN_CI:  # in CI every README example must run (Pillow is in the test extra)
            pytest.fail(f"could not import PIL ({e})", pytrace=False)
        pytest.skip(f"could not import PIL ({e})")
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    block = readme.split("```python\n# measure.py\n", 1)[1].split("```", 1)[0]
    (job / "measure.py").write_text(block)
    paths = []
    for i, (colour, size) in enumerate([((10, 200, 30), (8, 8)), ((250, 250, 250), (5, 3))]):
        img = Image.new("RGB", size, colour)
        img.putpixel((0, 0), (i * 40, 0, 255))
        path = job / f"img{i}.png"
        img.save(path)
        paths.append(path)
    (job / "images.txt").write_text("".join(f"{p}\n" for p in paths))
    r = _run(job, "run", "images.txt", "results.tsv", "--call", "measure.py:measure", "-j", "2")
    assert r.returncode == 0, r.stderr.decode()
    got = {x["filename"]: x for x in zs.read_records(job / "results.tsv", header=True)}
    for path in paths:
        grey = list(Image.open(path).convert("L").tobytes())  # one byte a pixel
        rec = got[str(path)]
        assert (int(rec["min"]), int(rec["max"])) == (min(grey), max(grey))
        assert abs(float(rec["mean"]) - sum(grey) / len(grey)) < 1e-9
    assert sorted(p.name for p in job.iterdir() if p.name.startswith("results")) == [
        "results.tsv", "results.tsv.ledger",
    ]  # fmt: skip


def test_lines_over_the_limit_are_refused_or_cut_never_held_whole_in_the_log(job: Path) -> None:
    (job / "big.py").write_text(
        "import sys\n"
        "def big(line):\n"
        "    if line == 'return':\n"
        "        return 'x' * (20 << 20)\n"
        "    sys.stdout.write('y' * (20 << 20))\n"
        "    print(' and the end')\n"
        "    return {'k': line}\n"
    )
    tasks(job, "return", "print")
    r = _run(job, "run", "tasks.txt", "out.tsv", "--call", "big.py:big", "--columns", "k")
    assert r.returncode == 1, r.stderr.decode()  # a record refused
    assert (job / "out.tsv").read_bytes() == b"k\nprint\n"
    rejects = (job / "out.tsv.rejects").read_bytes()
    assert rejects.startswith(b"task 1 line 1: line of 20971520 bytes is over the 16777216-byte")
    assert len(rejects) < (20 << 20) + 200  # the line itself, once
    log = (job / "out.tsv.log").read_bytes().splitlines()
    assert [len(x) for x in log] == [len("2.1\t") + 1024, len(log[1])]
    assert log[1].endswith(b"zotsink: the line above was 20971532 bytes long, cut to 1024")


def test_two_runs_at_once_call_each_task_once(job: Path) -> None:
    tasks(job, *(f"sleep 0.05 {i}" for i in range(60)))
    cmd = [*ZOTSINK, "run", "tasks.txt", "out.tsv", "--call", "funcs.py:slow", "--jobs", "2"]
    runs = [subprocess.Popen(cmd, cwd=job, env=_env(), stderr=subprocess.PIPE) for _ in "ab"]
    for p in runs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err.decode()
    assert set(calls(job).values()) == {1} and len(calls(job)) == 60
    got = sorted(x.decode() for x in _run(job, "cat", "out.tsv").stdout.splitlines()[1:])
    assert got == sorted(f"sleep 0.05 {i}" for i in range(60))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is gone for the purpose: it runs nothing
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


def test_sigkill_of_the_run_ends_its_workers_and_a_resubmission_finishes(job: Path) -> None:
    tasks(job, *(f"sleep {0.05 if i % 5 else 60} {i}" for i in range(20)))
    cmd = [*ZOTSINK, "run", "tasks.txt", "out.tsv", "--call", "funcs.py:slow", "--jobs", "2"]
    p = subprocess.Popen(cmd, cwd=job, env=_env(), stderr=subprocess.PIPE)
    _wait_for_calls(job, 2, p)  # task 1 (a minute long) and another are being called
    workers = [int(x) for x in (job / "imports").read_text().split()]
    p.kill()
    p.communicate(timeout=60)
    end = time.monotonic() + 30
    while any(_alive(w) for w in workers):  # they end with the run, not a minute later
        assert time.monotonic() < end, "a worker outlived its run by 30 s"
        time.sleep(0.05)
    fast = FUNCS.replace("time.sleep(float(line.split()[1]))", "pass")
    (job / "funcs.py").write_text(fast)
    r = _run(job, "run", "tasks.txt", "out.tsv", "--call", "funcs.py:slow", "--jobs", "2")
    assert r.returncode == 0, r.stderr.decode()
    got = sorted(x.decode() for x in _run(job, "cat", "out.tsv").stdout.splitlines()[1:])
    assert got == sorted(f"sleep {0.05 if i % 5 else 60} {i}" for i in range(20))
    oks = Counter(x["key"] for x in ledger_rows(job / "out.tsv.ledger") if x["status"] == "ok")
    assert set(oks.values()) == {1} and len(oks) == 20
