"""A task list is a file people write by hand, and an OUT holds one list's records: a last
line without its newline, a line with a NUL byte, a list emptied and filled anew under a
live run, and a second list run into the same OUT. Each ends with every line either run
once or named in an error or warning, never run as a line nobody wrote."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.behaviour.waiting import wait_for

ZOTSINK = [sys.executable, "-m", "zotsink"]
Run = Callable[..., subprocess.CompletedProcess[bytes]]


def records(d: Path, out: str = "out.txt") -> list[str]:
    r = subprocess.run([*ZOTSINK, "cat", out], cwd=d, capture_output=True, check=True)
    return r.stdout.decode().splitlines()


def test_a_closed_list_s_last_line_without_its_newline_is_run_and_the_run_ends(
    tmp_path: Path, zotsink: Run
) -> None:
    # a producer's printf '%s' >> tasks.txt: the last line has no newline, then a close
    (tmp_path / "tasks.txt").write_bytes(b"a\nb\nc")
    assert zotsink("close", "tasks.txt", "out.txt").returncode == 0
    r = zotsink("run", "tasks.txt", "out.txt", "--follow", "--", "echo", timeout=60)
    assert r.returncode == 0, r.stderr
    assert sorted(records(tmp_path)) == ["a", "b", "c"]


def test_an_open_list_s_last_line_without_its_newline_waits_for_it(
    tmp_path: Path, zotsink: Run
) -> None:
    (tmp_path / "tasks.txt").write_bytes(b"a\nb\nhalf")  # being written
    r = zotsink("run", "tasks.txt", "out.txt", "--follow", "--idle", "1", "--", "echo")
    assert r.returncode == 0, r.stderr
    assert sorted(records(tmp_path)) == ["a", "b"]  # "half" was never a line to run
    with open(tmp_path / "tasks.txt", "ab") as f:
        f.write(b"-done\n")
    r = zotsink("run", "tasks.txt", "out.txt", "--follow", "--idle", "1", "--", "echo")
    assert r.returncode == 0, r.stderr
    assert sorted(records(tmp_path)) == ["a", "b", "half-done"]


def test_a_line_with_a_nul_byte_is_passed_by_named_and_the_rest_run(
    tmp_path: Path, zotsink: Run
) -> None:
    # a producer that wrote binary, or the zero bytes a crashed NFS client leaves
    (tmp_path / "tasks.txt").write_bytes(b"a\nb\x00x\n\x00\x00\x00\nc\n")
    r = zotsink("run", "tasks.txt", "out.txt", "--follow", "--idle", "1", "--", "echo")
    assert r.returncode == 1, r.stderr
    assert sorted(records(tmp_path)) == ["a", "c"]
    assert (
        b"zotsink: warning: 2 lines of tasks.txt with a NUL byte passed by, no task (line 2,3)"
        in r.stderr
    ), r.stderr
    # the queue lives on: a later run, and lines added later, are run
    r = zotsink("add", "tasks.txt", "d")
    assert (r.returncode, r.stdout) == (0, b"5\n"), r.stderr
    r = zotsink("run", "tasks.txt", "out.txt", "--follow", "--idle", "1", "--", "echo")
    assert r.returncode == 0, r.stderr
    assert sorted(records(tmp_path)) == ["a", "c", "d"]


def test_a_list_emptied_and_filled_anew_under_a_live_run_runs_no_line_nobody_wrote(
    tmp_path: Path,
    zotsink_cmd: list[str],
    child_env: Callable[..., dict[str, str]],
    reap: Callable[[subprocess.Popen[Any]], subprocess.Popen[Any]],
) -> None:
    tasks = tmp_path / "tasks.txt"
    tasks.write_text("a\nb\n")
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    task = f'if [ "$0" = a ]; then touch {tmp_path}/started; cat {gate} >/dev/null; fi; echo $0'
    run = reap(
        subprocess.Popen(
            [*zotsink_cmd, "run", "tasks.txt", "out.txt", "--follow", "--idle", "60",
             "--jobs", "1", "--", "sh", "-c", task],
            cwd=tmp_path, stderr=subprocess.PIPE,
            env=child_env({"SLURM_ARRAY_TASK_ID": None, "SLURM_JOB_ID": None}),
        )
    )  # fmt: skip
    wait_for((tmp_path / "started").exists, run, "started task a")
    # mv tasks.txt done.txt; a new list at the name, longer than the old one
    tasks.rename(tmp_path / "done.txt")
    tasks.write_text("QRSTUVWX.fastq\nnew1\nnew2\n")
    with open(gate, "w"):
        pass  # task a ends; the run claims again, from where the old list ended
    _, err = run.communicate(timeout=60)
    said = err.decode()
    assert run.returncode == 1, said
    assert "the task list tasks.txt changed under the runs" in said
    got = records(tmp_path)
    # the old list's lines claimed before the change, and nothing of the new one's
    assert "a" in got and set(got) <= {"a", "b"}, got
    assert not any("RSTUVWX" in line or "new" in line for line in got)


def test_a_second_list_into_the_same_out_is_refused_and_the_first_s_records_stay(
    tmp_path: Path, zotsink: Run
) -> None:
    (tmp_path / "batch1.txt").write_text("a\nb\n")
    (tmp_path / "batch2.txt").write_text("x\ny\nz\n")
    assert zotsink("run", "batch1.txt", "results.txt", "--", "echo").returncode == 0
    for pull in ([], ["--pull"]):
        r = zotsink("run", "batch2.txt", "results.txt", *pull, "--", "echo")
        assert r.returncode == 2, r.stderr
        assert (
            b"results.txt holds the records of the tasks of batch1.txt (its ledger "
            b"results.txt.ledger says so), and this run's task list is batch2.txt" in r.stderr
        ), r.stderr
        assert b"zotsink add batch1.txt < batch2.txt" in r.stderr
    assert records(tmp_path, "results.txt") == ["a", "b"]
    assert b"2 tasks: 2 ok" in zotsink("status", "batch1.txt", "results.txt").stderr
    # the same list by another path, or a copy of it byte for byte, is the same list
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "copy.txt").write_text("a\nb\n")
    for given in ("./batch1.txt", str(tmp_path / "batch1.txt"), "sub/copy.txt"):
        r = zotsink("run", given, "results.txt", "--", "echo")
        assert r.returncode == 0, r.stderr
        assert b"2 already ok" in r.stderr
