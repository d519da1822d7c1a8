"""How a run was called, recorded in its ledger: ``missing``/``status`` use the recorded chunk
and base, and a resubmission called otherwise is refused before anything runs."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.ledgers import ledger_rows, rewrite_rows
from zotsink._ledger.format import Row
from zotsink._ledger.v1 import COLUMNS as V1_COLUMNS

Run = Callable[..., subprocess.CompletedProcess[bytes]]


@pytest.fixture
def chunked(tmp_path: Path, zotsink: Run) -> Path:
    """300 tasks, chunk 20: element 2 ran (tasks 21-40), the other 14 chunks never did."""
    tasks = tmp_path / "tasks.txt"
    tasks.write_text("".join(f"item{i}\n" for i in range(1, 301)))
    r = zotsink("run", tasks, "out.tsv", "--index", "2", "--chunk", "20", "--", "echo")
    assert r.returncode == 0, r.stderr
    return tasks


def test_the_ledger_records_how_the_run_was_called(tmp_path: Path, zotsink: Run) -> None:
    tasks = tmp_path / "tasks.txt"
    tasks.write_text("a\nb\n")
    r = zotsink(
        "run", tasks, "out.tsv", "--index", "1", "--chunk", "2", "--base", "1",
        "--stamp", "tasknum,attempt", "--", "printf", "%s\\n",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    rows = ledger_rows(tmp_path / "out.tsv.ledger")
    run = [row for row in rows if row["event"] == "run"]
    assert len(run) == 1 and run[0]["tasknum"] == "0" and run[0]["key"] == ""
    s = zotsink("status", tasks, "out.tsv", "--json")
    assert json.loads(s.stdout)["settings"] == {
        "tasks": str(tasks), "chunk": "2", "base": "1", "format": "tsv", "columns": "",
        "kv": "", "stamp": "tasknum,attempt", "command": "printf '%s\\n'", "max_attempts": "",
        "out": "out.tsv", "list": "tasks.txt",
    }  # fmt: skip
    # the same settings again: nothing new to record
    r = zotsink(
        "run", tasks, "out.tsv", "--index", "1", "--chunk", "2", "--rerun", "--jobs", "2",
        "--retries", "1", "--stamp", "tasknum,attempt", "--", "printf", "%s\\n",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert sum(row["event"] == "run" for row in ledger_rows(tmp_path / "out.tsv.ledger")) == 1
    # readers of the tasks never see the run row
    assert (tmp_path / "out.tsv").read_text().count("\n") == 4  # --rerun: twice
    s = zotsink("status", tasks, "out.tsv")
    assert s.returncode == 0, s.stderr
    assert s.stderr.decode().startswith("zotsink: 2 tasks: 2 ok\n")
    c = zotsink("cat", "out.tsv")  # in OUT's order: two at once end in either order
    assert sorted(c.stdout.splitlines()) == [b"1\t2\ta", b"2\t2\tb"]


def test_missing_array_gives_the_recorded_chunks(chunked: Path, zotsink: Run) -> None:
    r = zotsink("missing", chunked, "--ledger", "out.tsv.ledger", "--array")
    assert r.returncode == 0, r.stderr
    assert r.stdout == b"1,3-15\n"  # indices of chunks of 20, not task numbers
    r = zotsink("missing", chunked, "--ledger", "out.tsv.ledger", "--array", "--chunk", "100")
    assert r.stdout == b"1-3\n"  # given: it wins
    s = zotsink("status", chunked, "out.tsv", "--json")
    assert s.returncode == 1
    d = json.loads(s.stdout)
    assert (d["chunk"], d["base"], d["resubmit"]) == (20, 1, "1,3-15")
    assert "to run again: array indices 1,3-15 (--chunk 20 --base 1)" in s.stderr.decode()


def test_a_run_without_index_keeps_the_recorded_chunk(chunked: Path, zotsink: Run) -> None:
    env = {"SLURM_ARRAY_TASK_ID": None, "SGE_TASK_ID": None, "PBS_ARRAY_INDEX": None}
    # (--halt-after 0: every task fails alike, which would halt the run by default)
    r = zotsink(
        "run", chunked, "out.tsv", "--new-settings", "--halt-after", "0", "--", "false", env=env
    )
    assert r.returncode == 1  # every other task failed
    assert "300 tasks: 280 failed, 20 already ok" in r.stderr.decode()
    r = zotsink("missing", chunked, "--ledger", "out.tsv.ledger", "--array")
    assert r.stdout == b"1,3-15\n"


@pytest.mark.parametrize(
    ("args", "old", "new"),
    [
        (["--chunk", "10", "--", "echo"], "--chunk 20", "--chunk 10"),
        (["--chunk", "20", "--", "echo", "-n"], "-- echo", "-- echo -n"),
        (["--chunk", "20", "--stamp", "job", "--", "echo"], "no --stamp", "--stamp job"),
        (["--chunk", "20", "--kv", "--", "echo"], "no --kv", "--kv :"),
        (["--chunk", "20", "-f", "csv", "--", "echo"], "--format tsv", "--format csv"),
    ],
)
def test_a_resubmission_called_otherwise_is_refused_before_anything_runs(
    chunked: Path, zotsink: Run, tmp_path: Path, args: list[str], old: str, new: str
) -> None:
    before = {p: (tmp_path / p).read_bytes() for p in ("out.tsv", "out.tsv.ledger")}
    r = zotsink("run", chunked, "out.tsv", "--index", "3", *args)
    assert r.returncode == 2
    assert r.stderr.decode() == (
        f"zotsink: error: out.tsv.ledger: tasks ended ok under {old}, and this run has {new}: "
        "run as recorded, or add --new-settings\n"
    )
    assert {p: (tmp_path / p).read_bytes() for p in before} == before  # nothing ran
    assert not (tmp_path / "out.tsv.log").exists()


def test_another_base_runs_the_same_chunks_and_keeps_the_recorded_one(
    chunked: Path, zotsink: Run, tmp_path: Path
) -> None:
    # a part of a resubmission split under MaxArraySize: index 1 under base -1 is chunk 3
    r = zotsink("run", chunked, "out.tsv", "--index", "1", "--chunk", "20", "--base", "-1",
                "--", "echo")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "out.tsv").read_text().splitlines()[20:] == [
        f"item{i}" for i in range(41, 61)
    ]
    r = zotsink("missing", chunked, "--ledger", "out.tsv.ledger", "--array")
    assert r.stdout == b"1,4-15\n"  # in the recorded base, 1


def test_new_settings_records_them_and_goes_on(chunked: Path, zotsink: Run, tmp_path: Path) -> None:
    r = zotsink("run", chunked, "out.tsv", "--index", "1", "--chunk", "100", "--new-settings",
                "--", "echo")  # fmt: skip
    assert r.returncode == 0, r.stderr
    # tasks 21-40 were ok already: only the other 80 of the first 100 ran
    assert "100 tasks: 80 ok, 20 already ok" in r.stderr.decode()
    runs = [row for row in ledger_rows(tmp_path / "out.tsv.ledger") if row["event"] == "run"]
    assert [json.loads(row["note"])["chunk"] for row in runs] == ["20", "100"]
    r = zotsink("missing", chunked, "--ledger", "out.tsv.ledger", "--array")
    assert r.stdout == b"2-3\n"
    r = zotsink("run", chunked, "out.tsv", "--index", "2", "--chunk", "20", "--", "echo")
    assert r.returncode == 2  # the latest settings count


def test_a_ledger_of_an_older_release_has_no_settings_and_takes_any(
    tmp_path: Path, zotsink: Run
) -> None:
    tasks = tmp_path / "tasks.txt"
    tasks.write_text("a\nb\nc\n")
    (tmp_path / "out.tsv").write_text("a\n")
    ledger = tmp_path / "out.tsv.ledger"
    # zotsink 0.1's first ledgers (format 1): task 1 ran as element 1, no run row
    task = ["1", "a", "1", "", "1", os.uname().nodename, "1"]
    ledger.write_text("".join("\t".join(row) + "\n" for row in (
        V1_COLUMNS[:16],
        ["start", "2026-11-24T10:00:00.000000Z", *task, *[""] * 7],
        ["end", "2026-11-24T10:00:01.000000Z", *task, "ok", "0", "", "0.1", "1", "2", ""],
    )))  # fmt: skip
    r = zotsink("missing", tasks, "--ledger", ledger, "--array")
    assert r.stdout == b"2-3\n"
    r = zotsink("run", tasks, "out.tsv", "--index", "2", "--chunk", "2", "--", "echo", "x")
    assert r.returncode == 0, r.stderr
    assert ledger.with_name("out.tsv.ledger.v1").exists()  # migrated to this release's format
    assert zotsink("missing", tasks, "--ledger", ledger, "--array").stdout == b"1\n"


@pytest.mark.parametrize("value", ["0", "x", "-2"])
def test_a_recorded_chunk_that_is_no_chunk_is_refused(
    chunked: Path, zotsink: Run, value: str
) -> None:
    """A run row whose chunk makes no sense (edited, or damaged) must not turn into a
    traceback, nor into indices counted in chunks of 1: the ledger is named, and the way on."""
    ledger = chunked.parent / "out.tsv.ledger"
    assert ledger.read_text().count('"chunk": "20"') == 1

    def edited(row: Row) -> Row:
        if row.kind != "run":
            return row
        settings = row.fields["settings"].replace('"chunk": "20"', f'"chunk": "{value}"')
        return row._replace(fields={**row.fields, "settings": settings})

    rewrite_rows(ledger, edited)
    for args in (
        ("status", chunked, "out.tsv"),
        ("missing", chunked, "--ledger", "out.tsv.ledger", "--array"),
    ):
        r = zotsink(*args)
        assert r.returncode == 1, r.stderr
        assert r.stdout == b""
        err = r.stderr.decode()
        assert "Traceback" not in err
        assert (
            f"the ledger out.tsv.ledger records chunk '{value}', which is not a whole number "
            ">= 1: give --chunk as the job script runs the array, or record it again with "
            "`zotsink run ... --chunk N --new-settings`"
        ) in " ".join(err.split())
    r = zotsink("missing", chunked, "--ledger", "out.tsv.ledger", "--array", "--chunk", "20")
    assert (r.returncode, r.stdout) == (0, b"1,3-15\n"), r.stderr


def test_settings_under_which_no_task_ended_ok_bind_nobody(tmp_path: Path, zotsink: Run) -> None:
    """A typo on the first run (every task failed) is recorded, and the corrected run goes
    on with its own settings, saying so; once a task ended ok under them they bind, and the
    refusal names a --call run as --call."""
    (tmp_path / "measure.py").write_text("def measure(line):\n    return {'item': line}\n")
    (tmp_path / "tasks.txt").write_text("a\nb\nc\n")
    r = zotsink("run", "tasks.txt", "out.tsv", "--", "./mesure.py")  # no such command
    assert r.returncode == 1, r.stderr
    r = zotsink("run", "tasks.txt", "out.tsv", "--call", "measure.py:measure")
    assert r.returncode == 0, r.stderr
    assert r.stderr.decode().splitlines() == [
        "zotsink: warning: out.tsv.ledger records -- ./mesure.py, under which no task ended "
        "ok: this run records its own (--call measure.py:measure)",
        "zotsink: 3 tasks: 3 ok; 3 records into out.tsv",
    ]
    runs = [json.loads(row["note"]) for row in ledger_rows(tmp_path / "out.tsv.ledger")
            if row["event"] == "run"]  # fmt: skip
    assert [x["command"] for x in runs] == ["./mesure.py", ""]
    assert runs[1]["call"] == f"{os.path.realpath(tmp_path / 'measure.py')}:measure"
    (tmp_path / "tasks.txt").write_text("a\nb\nc\nd\n")
    r = zotsink("run", "tasks.txt", "out.tsv", "--", "echo")
    assert r.returncode == 2
    assert r.stderr.decode() == (
        "zotsink: error: out.tsv.ledger: tasks ended ok under --call measure.py:measure, and "
        "this run has -- echo: run as recorded, or add --new-settings\n"
    )
    assert zotsink("cat", "out.tsv").stdout == b"item\na\nb\nc\n"  # nothing ran


def test_a_run_begun_under_older_settings_does_not_make_newer_ones_bind(
    tmp_path: Path, zotsink: Run
) -> None:
    """Only ends of runs that began under the latest settings count: here a run of the
    older settings ends its tasks ok after a --new-settings run recorded its own."""
    from tests.ledgers import Book
    from zotsink._ledger.read import Snapshot
    from zotsink._ledger.view import LedgerView
    from zotsink._run.settings import ended_ok_since_settings, run_settings

    def settings(command: str) -> dict[str, str]:
        return run_settings(
            "t", [command], shell=False, array=False, chunk=1, base=1, format="tsv",
            columns=None, kv=None, stamp=(), max_attempts=None,
        )  # fmt: skip

    def bind() -> bool:
        view = LedgerView()
        with Snapshot(path) as snap:
            view.feed(snap.rows())
        return ended_ok_since_settings(view)

    path = tmp_path / "l"
    old = Book(path, pid=101, job="1", settings=settings("echo"))
    new = Book(path, pid=102, job="2", settings=settings("true"))
    old.claim(1, line="a").begin(1).write()
    assert not bind()  # a task runs, none ended
    old.end(1).write()
    assert bind()
    new.claim(2, line="b").begin(2).write()
    old.claim(3, line="c").begin(3).end(3).write()
    assert not bind()  # ok, but under the older settings
    new.end(2, status="failed", code="1").write()
    assert not bind()
    newer = Book(path, pid=103, job="3", settings=settings("true"))
    newer.claim(4, line="d").begin(4).write()
    newer.end(4).write()
    assert bind()  # the same settings again: one line of them


def test_a_function_given_as_the_command_asks_for_call(tmp_path: Path, zotsink: Run) -> None:
    (tmp_path / "measure.py").write_text(MEASURE)
    (tmp_path / "tasks.txt").write_text("a\n")
    for spec in ("measure.py:measure", "./measure.py:measure", "pkg.mod:measure"):
        r = zotsink("run", "tasks.txt", "out.tsv", "--", spec)
        assert r.returncode == 2, r.stderr
        assert r.stderr.decode() == (
            f"zotsink: error: CMD {spec} is a Python function's name, not a command: did you "
            f"mean --call {spec}?\n"
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["measure.py", "tasks.txt"]
    # not the shape: a missing file, more arguments, no function name after the colon
    for cmd in (["other.py:measure"], ["measure.py:measure", "x"], ["measure.py:"]):
        r = zotsink("run", "tasks.txt", f"out{len(cmd)}.tsv", "--", *cmd)
        assert r.returncode == 1, r.stderr  # it ran, as a command that cannot start
        assert b"did you mean" not in r.stderr


MEASURE = "def measure(line):\n    return {'item': line}\n"


def test_a_call_is_one_file_however_its_path_is_written(tmp_path: Path, zotsink: Run) -> None:
    (tmp_path / "measure.py").write_text(MEASURE)
    (tmp_path / "other.py").write_text(MEASURE)
    (tmp_path / "jobs").mkdir()
    (tmp_path / "tasks.txt").write_text("a\nb\nc\n")
    env = {"SLURM_ARRAY_TASK_ID": None, "SGE_TASK_ID": None, "PBS_ARRAY_INDEX": None}
    jobs = tmp_path / "jobs"
    call = ("--call", "../measure.py:measure", "--index", "1")
    r = zotsink("run", "../tasks.txt", "../out.tsv", *call, env=env, cwd=jobs)
    assert r.returncode == 0, r.stderr
    rows = ledger_rows(tmp_path / "out.tsv.ledger")
    [run] = [json.loads(row["note"]) for row in rows if row["event"] == "run"]
    assert run["call"] == f"{os.path.realpath(tmp_path / 'measure.py')}:measure"
    # from the file's own directory, named as it is there: the same function
    r = zotsink("run", "tasks.txt", "out.tsv", "--call", "measure.py:measure", "--index", "2")
    assert r.returncode == 0, r.stderr
    runs = [
        json.loads(r["note"])
        for r in ledger_rows(tmp_path / "out.tsv.ledger")
        if r["event"] == "run"
    ]
    assert [x["call"] for x in runs] == [run["call"]] * len(runs)  # (tasks: recorded anew)
    # another file is another function: refused
    r = zotsink("run", "tasks.txt", "out.tsv", "--call", "other.py:measure", "--index", "3")
    assert r.returncode == 2
    assert r.stderr.decode() == (
        "zotsink: error: out.tsv.ledger: tasks ended ok under --call measure.py:measure, and "
        "this run has --call other.py:measure: run as recorded, or add --new-settings\n"
    )


def test_elements_of_one_array_job_run_whatever_value_of_their_own_cmd_carries(
    tmp_path: Path, zotsink: Run
) -> None:
    (tmp_path / "tasks.txt").write_text("a\nb\nc\nd\n")

    def element(job: str, index: int, *extra: str) -> subprocess.CompletedProcess[bytes]:
        env = {"SLURM_ARRAY_JOB_ID": job, "SLURM_ARRAY_TASK_ID": str(index)}
        return zotsink(
            "run", "tasks.txt", "out.tsv", *extra, "--", "echo", "--seed", str(index), env=env
        )

    for index in (1, 2):  # one submission: `--seed $SLURM_ARRAY_TASK_ID`
        r = element("77", index)
        assert r.returncode == 0, r.stderr
    rows = ledger_rows(tmp_path / "out.tsv.ledger")
    runs = [json.loads(r["note"]) for r in rows if r["event"] == "run"]
    assert [(x["array_job"], x["command"]) for x in runs] == [
        ("77", "echo --seed 1"),
        ("77", "echo --seed 2"),
    ]
    # a later submission called otherwise is refused, as ever
    r = element("78", 3)
    assert r.returncode == 2
    assert "tasks ended ok under -- echo --seed 2, and this run has" in r.stderr.decode()
    # with --new-settings it records its own, and its other elements run too
    r = element("78", 3, "--new-settings")
    assert r.returncode == 0, r.stderr
    r = element("78", 4)
    assert r.returncode == 0, r.stderr
    assert sorted((tmp_path / "out.tsv").read_text().split()) == sorted(
        ["--seed", "1", "a", "--seed", "2", "b", "--seed", "3", "c", "--seed", "4", "d"]
    )
