"""``zotsink.Executor`` with the local scheduler: real element processes, real workers.

Every result comes once, in ``map``'s order; a client SIGKILLed halfway leaves the elements
working and ``Executor.attach`` from a new process gives every result once, no call begun
twice (each call holds a witness lock and notes each beginning: executor_funcs.witness);
an exception reaches exactly its future with its traceback's tail; ``cancel_futures``
stops the elements; and each error a user meets says what and what to do, at once where it
can (``submit``), with nothing lost. Waits are on files and processes, never on time.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import zotsink
from tests.behaviour import executor_funcs as funcs
from zotsink import (
    CallError,
    Executor,
    ExecutorBroken,
    GivenUp,
    ResultError,
    UsageError,
    read_control,
    read_records,
)

REPO = str(Path(__file__).resolve().parents[2])
#: The files of an Executor's directory, whatever it ran.
FILES = {"calls.jsonl", "executor.jsonl", "results.jsonl", "results.jsonl.ledger"}


def wait_until(cond: Callable[[], bool], what: str, limit: float = 240.0) -> None:
    """Poll ``cond`` (a file, a process) until it holds; fail saying ``what`` after
    ``limit`` seconds (a bound for a stuck test, not a timing)."""
    import time

    end = time.monotonic() + limit
    while not cond():
        if time.monotonic() > end:
            pytest.fail(f"not within {limit:.0f} s: {what}")
        time.sleep(0.01)


def events(d: Path) -> list[dict]:
    lines = (d / "executor.jsonl").read_text().splitlines()[1:]
    return [json.loads(line) for line in lines]


def element_pids(d: Path) -> list[int]:
    """The pids of the elements the settings file says were started on this host."""
    if not (d / "executor.jsonl").exists():
        return []
    return [p for e in events(d) if e["event"] == "elements" for p, _start in e["pids"]]


def _living(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def processes_of(d: Path) -> list[int]:
    """The element processes of ``d`` that live, and the processes their runs started
    (their workers carry the run's mark, ``ZOTSINK_RUN=PID:...``)."""
    pids = element_pids(d)
    found = [p for p in pids if _living(p)]
    marks = [f"ZOTSINK_RUN={p}:".encode() for p in pids]
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            env = Path(f"/proc/{name}/environ").read_bytes()
        except OSError:
            continue
        if any(b"\0" + m in env or env.startswith(m) for m in marks) and _living(int(name)):
            found.append(int(name))
    return found


@pytest.fixture
def d(tmp_path: Path) -> Iterator[Path]:
    """The Executor's directory; at teardown no process of its elements is left."""
    path = tmp_path / "ex"
    yield path
    for pid in element_pids(path):
        if _living(pid):  # an element is the leader of its own session
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)


def gone(d: Path) -> None:
    wait_until(lambda: not processes_of(d), f"the elements of {d} and their workers ended")


def committed(d: Path) -> list[dict]:
    return [json.loads(line) for (line,) in read_records(d / "results.jsonl")]


def ok_ends(d: Path) -> int:
    """The ok ends the ledger records, each attempt's once."""
    events = zotsink.read_ledger(d / "results.jsonl.ledger")
    return sum(1 for e in events if e.event == "end" and e.status == "ok")


def local(d: Path, **options: object) -> Executor:
    settings: dict[str, object] = {"scheduler": "local", "elements": 2, "jobs": 1, "idle": 120}
    settings.update(options)
    return Executor(d, **settings)  # type: ignore[arg-type]


def _map_once_in_order(d: Path, n: int, monkeypatch: pytest.MonkeyPatch) -> None:
    appends = []
    add_tasks = zotsink.add_tasks

    def counted(*args: object, **kwargs: object) -> range:
        appends.append(1)
        return add_tasks(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(zotsink, "add_tasks", counted)
    with local(d) as ex:
        got = list(ex.map(funcs.square, range(n)))
    assert got == [i * i for i in range(n)]
    records = committed(d)
    assert len(records) == n and len({r["id"] for r in records}) == n
    assert sorted(r["value"] for r in records) == sorted(i * i for i in range(n))
    assert ok_ends(d) == n  # no call ran twice
    assert len(appends) <= n // 5000 + 2  # in batches, not one append per item
    assert set(os.listdir(d)) == FILES  # no file per call
    gone(d)


def test_map_over_10000_items_gives_each_result_once_in_order(
    d: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _map_once_in_order(d, 10_000, monkeypatch)


def test_map_over_100000_items_gives_each_result_once_in_order(
    d: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _map_once_in_order(d, 100_000, monkeypatch)


def test_chunks_share_lines_and_keep_the_order(d: Path) -> None:
    with local(d, elements=1) as ex:
        assert list(ex.map(funcs.square, range(100), chunksize=7)) == [i * i for i in range(100)]
        assert ex.submit(funcs.echo, 1, "a", k=[None]).result() == [[1, "a"], {"k": [None]}]
    assert len((d / "calls.jsonl").read_text().splitlines()) == 16  # 15 chunks, 1 submit
    assert len(committed(d)) == 101
    gone(d)


def test_as_completed_gives_each_future_once(d: Path) -> None:
    with local(d) as ex:
        futures = [ex.submit(funcs.square, i) for i in range(300)]
        seen = list(concurrent.futures.as_completed(futures, timeout=240))
    assert len(seen) == 300 and set(seen) == set(futures)
    assert sorted(f.result() for f in seen) == sorted(i * i for i in range(300))
    assert all(f.task is not None for f in futures)
    gone(d)


def test_an_exception_in_one_of_1000_calls_reaches_exactly_that_future(d: Path) -> None:
    with local(d) as ex:
        futures = [ex.submit(funcs.boom, i, 637) for i in range(1000)]
        concurrent.futures.wait(futures, timeout=240)
        mapped = ex.map(funcs.boom, range(1000), [637] * 1000)
        yielded = []
        with pytest.raises(CallError):
            for value in mapped:
                yielded.append(value)
    assert yielded == list(range(637))  # map raises when the bad item's turn comes
    for i, f in enumerate(futures):
        if i != 637:
            assert f.result() == i
    e = futures[637].exception()
    assert isinstance(e, CallError)
    assert e.call_id == futures[637].id
    assert (e.remote_type, e.remote_message) == ("ValueError", "item 637 is bad")
    tail = e.remote_traceback
    assert tail.startswith("Traceback (most recent call last):")
    assert "executor_funcs.py" in tail and 'raise ValueError(f"item {i} is bad")' in tail
    assert tail.splitlines()[-1] == "ValueError: item 637 is bad"
    assert str(e).startswith("ValueError: item 637 is bad (call ")
    gone(d)


CLIENT = """
import concurrent.futures, sys
sys.path[:0] = [{repo!r}]
from zotsink import Executor
from tests.behaviour.executor_funcs import witness
d, base, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
ex = Executor(d, scheduler="local", elements=2, jobs=2, idle=240)
futures = [ex.submit(witness, i, base, n // 2) for i in range(n)]
done = 0
for f in concurrent.futures.as_completed(futures):
    f.result()
    done += 1
    if done == n // 2:
        print("half", flush=True)  # the other half waits for base/go: so does this client
"""

ATTACH = """
import json, sys
sys.path[:0] = [{repo!r}]
from zotsink import Executor
ex = Executor.attach(sys.argv[1])
futures = ex.futures()
print(json.dumps([[f.id, f.task, f.result(240)] for f in futures]))
ex.shutdown()
"""


def _witness_base(tmp_path: Path) -> Path:
    base = tmp_path / "w"
    for sub in ("witness", "double"):
        (base / sub).mkdir(parents=True)
    return base


def began(base: Path) -> dict[str, list[int]]:
    """The keys each witnessed call (by its id) began with, once per beginning."""
    return {
        p.name: [int(line.split()[1]) for line in p.read_text().splitlines()]
        for p in (base / "witness").iterdir()
    }


def test_a_client_killed_halfway_attach_gives_every_result_once(d: Path, tmp_path: Path) -> None:
    n = 200
    base = _witness_base(tmp_path)
    client = subprocess.Popen(
        [sys.executable, "-c", CLIENT.format(repo=REPO), str(d), str(base), str(n)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert client.stdout is not None
        line = client.stdout.readline()
        assert line == "half\n", client.stderr.read() if client.stderr else ""
        wait_until(lambda: len(began(base)) > n // 2, "calls of the second half began")
    finally:
        client.send_signal(signal.SIGKILL)
        client.wait()
    elements = element_pids(d)
    assert elements and all(_living(p) for p in elements)  # the client's death ended none
    (base / "go").touch()
    got = subprocess.run(
        [sys.executable, "-c", ATTACH.format(repo=REPO), str(d)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert got.returncode == 0, got.stderr
    futures = json.loads(got.stdout)
    assert len(futures) == n
    assert len({call_id for call_id, _task, _value in futures}) == n
    assert sorted(value for _id, _task, value in futures) == sorted(i * i for i in range(n))
    assert sorted(task for _id, task, _value in futures) == list(range(1, n + 1))
    # every call began once, none twice, each as the call its future names
    assert began(base) == {call_id: [math.isqrt(value)] for call_id, _task, value in futures}
    assert os.listdir(base / "double") == []
    records = committed(d)
    assert len(records) == n and len({r["id"] for r in records}) == n
    gone(d)


def test_cancel_futures_stops_the_elements(d: Path, tmp_path: Path) -> None:
    base = _witness_base(tmp_path)
    ex = local(d, elements=1, jobs=2)
    futures = [ex.submit(funcs.witness, i, str(base)) for i in range(40)]
    wait_until(lambda: len(began(base)) == 2, "two calls began")
    ex.shutdown(wait=False, cancel_futures=True)
    control, _size = read_control(d / "results.jsonl.ledger")
    assert control.stop_at >= 0 and control.closed  # the ledger says stopped
    assert [e["through"] for e in events(d) if e["event"] == "cancel"] == [40]
    (base / "go").touch()  # the two calls under way may end: they were begun
    concurrent.futures.wait(futures, timeout=240)
    ran = {keys[0] for keys in began(base).values()}
    assert sorted(ran) == [0, 1]
    assert set(began(base)) == {futures[0].id, futures[1].id}
    for i, f in enumerate(futures):
        if i in ran:
            assert f.result() == i * i
        else:
            assert f.cancelled()
    gone(d)
    ends = [e for e in events(d) if e.get("state") == "ended"]
    assert ends and not any(e["halted"] for e in ends)
    # a client attached later sees the same: the calls not begun are cancelled
    later = Executor.attach(d)
    again = later.futures()
    concurrent.futures.wait(again, timeout=240)
    assert [f.cancelled() for f in again] == [i not in ran for i in range(40)]
    assert processes_of(d) == []


def test_a_script_run_as_main_is_loaded_by_its_path(d: Path, tmp_path: Path) -> None:
    script = tmp_path / "triple.py"
    script.write_text(
        "import sys\n"
        f"sys.path[:0] = [{REPO!r}]\n"
        "from zotsink import Executor\n"
        "def triple(x):\n    return 3 * x\n"
        'if __name__ == "__main__":\n'
        "    with Executor(sys.argv[1], scheduler='local', elements=1, jobs=1) as ex:\n"
        "        print(list(ex.map(triple, range(5))))\n"
    )
    got = subprocess.run(
        [sys.executable, str(script), str(d)], capture_output=True, text=True, timeout=300
    )
    assert got.returncode == 0, got.stderr
    assert got.stdout == "[0, 3, 6, 9, 12]\n"
    assert json.loads((d / "calls.jsonl").read_text().splitlines()[0])["fn"] == (f"{script}:triple")
    gone(d)


# -- the errors a user meets --------------------------------------------------------------
def test_a_lambda_is_refused_at_submit(d: Path) -> None:
    ex = local(d)
    with pytest.raises(UsageError, match="a lambda or a nested function has none"):
        ex.submit(lambda x: x, 1)
    with pytest.raises(UsageError, match="a lambda or a nested function has none"):
        ex.map(lambda x: x, [1])
    ex.shutdown()
    assert not (d / "calls.jsonl").exists() and element_pids(d) == []


def test_an_argument_json_cannot_carry_is_refused_at_submit(d: Path) -> None:
    ex = local(d)
    with pytest.raises(UsageError) as e:
        ex.submit(funcs.echo, 1, {"when": {1, 2}})
    assert "cannot submit echo: argument 2['when'] is a set, which JSON cannot carry" in str(
        e.value
    )
    with pytest.raises(UsageError, match="keyword argument k has the key 3"):
        ex.submit(funcs.echo, k={3: "x"})
    ex.shutdown()
    assert not (d / "calls.jsonl").exists()


def test_a_result_that_cannot_come_back_says_why(d: Path) -> None:
    with local(d, elements=1) as ex:
        large = ex.submit(funcs.big, 17 << 20)
        a_set = ex.submit(funcs.a_set)
        fine = ex.submit(funcs.square, 3)
        with pytest.raises(
            ResultError,
            match=r"it ran, but the value it returned makes a record of 17,8[\d,]+ bytes as JSON",
        ):
            large.result(240)
        with pytest.raises(ResultError, match="the value it returned is a set"):
            a_set.result(240)
        assert fine.result(240) == 9
    assert "zotsink.append_member" in str(large.exception())
    gone(d)


def test_a_module_the_elements_cannot_import_is_one_error(
    d: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "gone"
    home.mkdir()
    (home / "vanishing_module.py").write_text("def f(x):\n    return x\n")
    monkeypatch.syspath_prepend(str(home))
    import vanishing_module  # type: ignore[import-not-found]

    shutil.rmtree(home)  # the client has it; the elements will not
    ex = local(d, elements=1)
    futures = [ex.submit(vanishing_module.f, i) for i in range(30)]
    errors = set()
    for f in futures:
        e = f.exception(240)
        assert isinstance(e, ExecutorBroken)
        errors.add(str(e))
    assert len(errors) == 1  # one error, said once
    (said,) = errors
    assert "cannot load vanishing_module:f: ModuleNotFoundError" in said
    assert "make its module importable where the elements run" in said
    assert "Executor.attach(directory) runs the calls left" in said
    with pytest.raises(ExecutorBroken):
        ex.submit(vanishing_module.f, 1)
    log = (d / "results.jsonl.log").read_text()
    assert 0 < log.count("Traceback") < 30  # the run halted: not one per call
    gone(d)


def test_a_call_whose_worker_keeps_dying_is_given_up(d: Path) -> None:
    with local(d, elements=1, max_attempts=2) as ex:
        dead = ex.submit(funcs.dies, 1)
        fine = ex.submit(funcs.square, 4)
        e = dead.exception(240)
        assert fine.result(240) == 16
    assert isinstance(e, GivenUp)
    assert "given up after 2 attempts, the last killed (its worker died (exit 3))" in str(e)
    gone(d)


def test_a_missing_scheduler_is_refused(
    d: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    for name, command in (("slurm", "sbatch"), ("sge", "qsub"), ("pbs", "qsub")):
        with pytest.raises(UsageError, match=f"scheduler '{name}': {command} is not on PATH"):
            Executor(d, scheduler=name)
    assert not d.exists()
    with pytest.raises(UsageError, match="scheduler 'lsf': choose auto, local, slurm"):
        Executor(d, scheduler="lsf")
    ex = Executor(d)  # auto: no submit command here, so this machine
    assert ex.settings.scheduler == "local"


def test_options_are_checked_at_once(d: Path) -> None:
    for bad, said in (
        ({"elements": 0}, "elements must be a whole number"),
        ({"jobs": "all"}, "jobs must be a whole number, 1 or more, or 'auto'"),
        ({"submit_args": "--time=1:00:00"}, "submit_args is a list"),
        ({"relay": 2}, "relay: elements that submit their own successors"),
        ({"idle": 0}, "idle must be a number of seconds above 0"),
        ({"max_attempts": 0}, "max_attempts must be a whole number"),
    ):
        with pytest.raises(UsageError, match=said):
            Executor(d, scheduler="local", **bad)  # type: ignore[arg-type]
    assert not d.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory to another user needs root")
def test_a_directory_of_another_user_is_refused(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, 65534, 65534)
    with pytest.raises(
        UsageError,
        match=r"is not yours \(it belongs to .*, not to you\): .* a directory of your own",
    ):
        Executor(theirs, scheduler="local")
    with pytest.raises(UsageError, match="not to you"):
        Executor.attach(theirs)
    assert os.listdir(theirs) == []


def test_a_directory_of_another_executor_is_refused(d: Path) -> None:
    Executor(d, scheduler="local")
    with pytest.raises(UsageError) as e:
        Executor(d, scheduler="local")
    assert (
        "holds an Executor already (executor.jsonl): take it up with zotsink.Executor.attach("
        in (str(e.value))
    )
    run = d.parent / "run"
    run.mkdir()
    (run / "results.jsonl").write_text("x\n")
    with pytest.raises(UsageError, match=r"holds results\.jsonl but no executor\.jsonl"):
        Executor(run, scheduler="local")
    with pytest.raises(UsageError, match="holds no Executor"):
        Executor.attach(run)


def test_no_call_after_shutdown(d: Path) -> None:
    ex = local(d)
    ex.shutdown()
    with pytest.raises(RuntimeError, match="after shutdown"):
        ex.submit(funcs.square, 1)
