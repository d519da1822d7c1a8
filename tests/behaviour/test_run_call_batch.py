"""``run --call`` sends quick tasks to a worker several at a time: each call's result and
prints are still its own (named by task, not by place in a batch), a worker's death kills
only the call under way, a stop begins nothing more, and a slow call holds back no other
call's commit.

The functions note each call in ``calls/LINE.PID``; ``wait`` blocks until the test
creates ``go`` (a bound of a minute of its own), so that the test sees what the run did
while a call was under way.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter, deque
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.ledgers import ledger_rows

ZOTSINK = [sys.executable, "-m", "zotsink"]

FUNCS = r"""
import os, sys, time



def note(line):
    os.makedirs("calls", exist_ok=True)
    with open(f"calls/{line}.{os.getpid()}", "w"):
        pass
    if line == "die":
        os._exit(3)
    if line == "sleep":
        time.sleep(3)
    if line == "wait":
        end = time.monotonic() + 60
        while not os.path.exists("go") and time.monotonic() < end:
            time.sleep(0.01)
    print("printed by", line, file=sys.stderr if line.endswith("1") else sys.stdout)
    return line
"""


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("ZOTSINK_")}


@pytest.fixture
def job(tmp_path: Path) -> Path:
    (tmp_path / "funcs.py").write_text(FUNCS)
    return tmp_path


def tasks(d: Path, lines: list[str]) -> None:
    (d / "tasks.txt").write_text("".join(f"{ln}\n" for ln in lines))


def rows(d: Path) -> list[dict[str, str]]:
    return ledger_rows(d / "out.tsv.ledger")


def ends(d: Path) -> dict[str, list[dict[str, str]]]:
    out: dict[str, list[dict[str, str]]] = {}
    for r in rows(d):
        if r["event"] == "end" and r["status"]:  # a row being written has no status yet
            out.setdefault(r["key"], []).append(r)
    return out


def calls(d: Path) -> Counter[tuple[str, str]]:
    """(line, pid) of every call."""
    return Counter(tuple(p.name.rsplit(".", 1)) for p in (d / "calls").iterdir())  # type: ignore[misc]


def wait_for(what: str, cond: object, p: subprocess.Popen[bytes]) -> None:
    end = time.monotonic() + 60
    while not cond():  # type: ignore[operator]
        assert p.poll() is None, f"the run ended before {what}: {p.communicate()[1].decode()}"
        assert time.monotonic() < end, f"no {what} in a minute"
        time.sleep(0.01)


def test_a_worker_killed_mid_batch_kills_its_call_only(job: Path) -> None:
    quick = [f"q{i}" for i in range(600)]
    tasks(job, [*quick[:300], "die", *quick[300:]])
    r = subprocess.run(
        [*ZOTSINK, "run", "tasks.txt", "out.tsv", "--call", "funcs.py:note"],
        cwd=job, capture_output=True, env=_env(), timeout=300, check=False,
    )  # fmt: skip
    assert r.returncode == 1, r.stderr.decode()
    got = ends(job)
    assert [(x["status"], x["exit"]) for x in got["die"]] == [("killed", "3")]
    assert "its worker died" in got["die"][0]["note"]
    # every other task ran once, in its first attempt: none killed, none lost
    assert all([(x["status"], x["attempt"]) for x in got[q]] == [("ok", "1")] for q in quick)
    made = calls(job)
    assert Counter(line for line, _pid in made) == Counter([*quick, "die"])
    first = {pid for line, pid in made if line == "die"}
    after = {pid for line, pid in made if line in quick[300:]}
    assert len(first) == 1 and first.isdisjoint(after)  # the rest ran in its replacement
    records = sorted(x.decode() for x in (job / "out.tsv").read_bytes().splitlines())
    assert records == sorted(quick)


@pytest.mark.parametrize(("jobs", "before"), [(1, 200), (2, 0)])
def test_a_slow_call_holds_back_no_other_calls_commit(job: Path, jobs: int, before: int) -> None:
    """--jobs 1: the calls before a slow one, sent with it, are committed while it runs;
    --jobs 2: a slow first call holds back none of the quick ones in the other worker."""
    quick = [f"q{i}" for i in range(before + 200)]
    tasks(job, [*quick[:before], "wait", *quick[before:]])
    cmd = [*ZOTSINK, "run", "tasks.txt", "out.tsv", "--call", "funcs.py:note", "-j", str(jobs)]
    p = subprocess.Popen(cmd, cwd=job, env=_env(), stderr=subprocess.PIPE)
    try:
        done = before if jobs == 1 else len(quick)
        wait_for(f"{done} committed records", lambda: len(ends(job)) >= done, p)
        assert "wait" not in ends(job)  # still under way
        assert all(len(ends(job)[q]) == 1 for q in quick[:done])
        committed = (job / "out.tsv").read_bytes().splitlines()
        assert len(committed) >= done  # the records are in OUT before their rows
        (job / "go").touch()
        _, err = p.communicate(timeout=120)
    finally:
        p.kill()
    assert p.returncode == 0, err.decode()
    assert sorted(ends(job)) == sorted([*quick, "wait"])


def test_each_calls_prints_are_its_own_in_a_batch(job: Path) -> None:
    lines = [f"t{i}" for i in range(300)]
    tasks(job, lines)
    r = subprocess.run(
        [*ZOTSINK, "run", "tasks.txt", "out.tsv", "--call", "funcs.py:note", "-j", "2"],
        cwd=job, capture_output=True, env=_env(), timeout=300, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr.decode()
    num = {line: i for i, line in enumerate(lines, 1)}
    log = (job / "out.tsv.log").read_text().splitlines()
    assert sorted(log) == sorted(f"{num[x]}.1\tprinted by {x}" for x in lines)


@pytest.mark.parametrize(("slow", "grace", "status"), [
    ("sleep", "60", "ok"),  # the call under way ends within the grace
    ("wait", "0.5", "interrupted"),  # it does not: its worker is ended
])  # fmt: skip
def test_a_stop_begins_no_call_of_a_batch_and_a_resubmission_runs_the_rest(
    job: Path, slow: str, grace: str, status: str
) -> None:
    quick = [f"q{i}" for i in range(400)]
    tasks(job, [*quick[:200], slow, *quick[200:]])
    cmd = [*ZOTSINK, "run", "tasks.txt", "out.tsv", "--call", "funcs.py:note", "--grace", grace]
    p = subprocess.Popen(cmd, cwd=job, env=_env(), stderr=subprocess.PIPE)
    try:
        wait_for("the slow call", lambda: any((job / "calls").glob(f"{slow}.*")), p)
        p.send_signal(signal.SIGUSR2)
        _, err = p.communicate(timeout=120)
    finally:
        p.kill()
    assert p.returncode == 128 + signal.SIGUSR2, err.decode()
    got = ends(job)
    assert [x["status"] for x in got[slow]] == [status]
    made = Counter(line for line, _pid in calls(job))
    wrong = {q: (made[q], [x["status"] for x in got.get(q, [])]) for q in quick[:200]}
    wrong = {q: w for q, w in wrong.items() if w != (1, ["ok"])}
    assert wrong == {}, (wrong, err.decode())
    later = quick[200:]
    assert not any(made[q] for q in later)  # nothing begun after the stop
    told: dict[str, list[str]] = {}
    for r in ledger_rows(job / "out.tsv.ledger", every=True):
        told.setdefault(r["key"], []).append(r["event"])
    for q in later:  # those claimed, and sent, are given back never begun; the rest have no row
        assert told.get(q, []) in ([], ["start", "release"]), (q, told.get(q))
    (job / "go").touch()
    r = subprocess.run(
        [*ZOTSINK, "run", "tasks.txt", "out.tsv", "--call", "funcs.py:note"],
        cwd=job, capture_output=True, env=_env(), timeout=300, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr.decode()
    made = Counter(line for line, _pid in calls(job))
    assert made == Counter([*quick, slow] + ([slow] if status != "ok" else []))
    assert sorted(_cat(job)) == sorted([*quick, slow])


def _cat(d: Path) -> list[str]:
    r = subprocess.run(
        [*ZOTSINK, "cat", "out.tsv"], cwd=d, capture_output=True, env=_env(), timeout=60
    )
    return [x.decode() for x in r.stdout.splitlines()]


def test_results_and_prints_are_credited_by_task_not_by_place() -> None:
    from zotsink._run.worker import Worker, _Prints

    queued = deque([(3, 1), (4, 1), (5, 2)])
    w = SimpleNamespace(pid=100, sent=(3, 1), queued=queued)
    assert Worker.refusal(w, ("done", 100, 3, 1, [], None)) is None  # type: ignore[arg-type]
    # the second task of the batch while the first is under way: refused
    assert "task 4.1, not 3.1" in Worker.refusal(w, ("done", 100, 4, 1, [], None))  # type: ignore
    assert Worker.refusal(w, ("back", 100, [(3, 1), (4, 1)])) is None  # type: ignore
    assert "not those it holds" in Worker.refusal(w, ("back", 100, [(4, 1)]))  # type: ignore
    assert "not those it holds" in Worker.refusal(w, ("back", 100, [(3, 1), (5, 2)]))  # type: ignore

    got: list[tuple[int, int, bytes]] = []

    class Sink:
        def __init__(self, num: int, attempt: int) -> None:
            self.at = (num, attempt)

        def lines(self, block: bytes) -> None:
            got.extend((*self.at, x) for x in block.splitlines())

    times: list[tuple[tuple[int, int], float]] = []
    holder = SimpleNamespace(
        holds=lambda n, a: any((n, a) == q for q in queued),
        took=lambda call, seconds: times.append((call, seconds)),
    )
    mark = b"\0zotsink 0123456789abcdef "
    prints = _Prints(mark, Sink, holder)  # type: ignore[arg-type]
    prints.lines(
        b"loading\n" + mark + b"B3.1\n" + b"one\n" + b"half " + mark + b"N3.1 4.1 250\n"
        + b"two\n" + mark + b"N4.1 9.1\n" + b"not sent\n" + mark + b"B5.2\n" + b"three\n"
        + mark + b"E5.2 7\n" + b"after\n"
    )  # fmt: skip
    assert got == [
        (0, 0, b"loading"), (3, 1, b"one"), (3, 1, b"half "), (4, 1, b"two"),
        (0, 0, b"not sent"), (5, 2, b"three"), (0, 0, b"after"),
    ]  # fmt: skip
    assert times == [((3, 1), 0.00025), ((5, 2), 0.000007)]  # what the calls took
