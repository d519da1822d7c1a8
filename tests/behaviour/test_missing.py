"""zotsink missing: which task lines have no record yet, and the Slurm --array spec."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zotsink import UsageError, array_spec, missing, missing_lines

Run = Callable[..., subprocess.CompletedProcess]

NAMES = [f"img{i:02d}.jpg" for i in range(1, 21)]
GONE = [3, 7, 8, 9, 15]  # 1-based task numbers with no record


def _table(out: Path, names: list[str], header: bool = True) -> None:
    rows = "".join(f"{n}\t{len(n)}\n" for n in names)
    out.write_text(("name\tsize\n" if header else "") + rows)


def _setup(tmp_path: Path) -> tuple[Path, Path]:
    tasks = tmp_path / "tasks.txt"
    tasks.write_text("".join(n + "\n" for n in NAMES))
    out = tmp_path / "out.tsv"
    done = [n for i, n in enumerate(NAMES, 1) if i not in GONE]
    _table(out, list(reversed(done)))  # record order does not matter
    return tasks, out


# -- 20 tasks, 15 records --------------------------------------------------------------------


def test_prints_the_missing_task_lines_in_input_order(tmp_path: Path, zotsink: Run) -> None:
    tasks, out = _setup(tmp_path)
    r = zotsink("missing", tasks, out, "--key", "name")
    assert r.returncode == 0 and r.stderr == b""
    assert r.stdout.decode().splitlines() == [
        "img03.jpg",
        "img07.jpg",
        "img08.jpg",
        "img09.jpg",
        "img15.jpg",
    ]


def test_array_prints_a_compact_slurm_spec(tmp_path: Path, zotsink: Run) -> None:
    tasks, out = _setup(tmp_path)
    r = zotsink("missing", tasks, out, "--key", "name", "--array")
    assert r.returncode == 0 and r.stdout == b"3,7-9,15\n" and r.stderr == b""
    r = zotsink("missing", tasks, out, "--key", "name", "--array", "-v")
    assert b"5 tasks of" in r.stderr


def test_nothing_missing_prints_nothing(tmp_path: Path, zotsink: Run) -> None:
    tasks = tmp_path / "tasks.txt"
    tasks.write_text("".join(n + "\n" for n in NAMES))
    out = tmp_path / "out.tsv"
    _table(out, NAMES)
    for extra in ([], ["--array"]):
        r = zotsink("missing", tasks, out, "--key", "name", *extra)
        assert (r.returncode, r.stdout, r.stderr) == (0, b"", b"")


# -- what matches ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("match", "recorded", "expected"),
    [
        ("exact", ["a.jpg", "b.jpg"], ["data/a.jpg", "data/c.png"]),
        ("basename", ["/scratch/run1/a.jpg", "b.jpg"], ["data/c.png"]),
        ("stem", ["a.tif", "out/b.png"], ["data/c.png"]),
    ],
)
def test_match_modes(tmp_path: Path, match: str, recorded: list[str], expected: list[str]) -> None:
    tasks = tmp_path / "tasks.txt"
    tasks.write_text("data/a.jpg\nb.jpg\ndata/c.png\n")
    out = tmp_path / "out.tsv"
    _table(out, recorded)
    assert list(missing(tasks, out, "name", match=match)) == expected


def test_headerless_out_with_a_column_number(tmp_path: Path, zotsink: Run) -> None:
    tasks, _ = _setup(tmp_path)
    out = tmp_path / "plain.tsv"
    _table(out, [n for i, n in enumerate(NAMES, 1) if i not in GONE], header=False)
    r = zotsink("missing", tasks, out, "--key", "1", "--array")
    assert r.returncode == 0 and r.stdout == b"3,7-9,15\n"
    lines = tmp_path / "done.txt"  # lines format: the whole line is column 1
    lines.write_text("".join(f"{n}\n" for n in NAMES[1:]))
    assert list(missing(tasks, lines, 1)) == ["img01.jpg"]


def test_csv_out_and_a_column_named_like_a_number(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.txt"
    tasks.write_text('a,1\nb\n"c"\n')
    out = tmp_path / "out.csv"
    out.write_text('2,id\nx,"a,1"\ny,b\n')  # the header names a column "2"
    assert list(missing(tasks, out, "id")) == ['"c"']
    assert list(missing(tasks, out, "2")) == ["a,1", "b", '"c"']  # the name, not column 2


def test_blank_task_lines_count_but_are_never_missing(tmp_path: Path, zotsink: Run) -> None:
    tasks = tmp_path / "tasks.txt"
    tasks.write_bytes(b"a\n\nb\n   \nc\r\nd")  # CRLF and a last line without newline
    out = tmp_path / "out.tsv"
    _table(out, ["a"])
    assert list(missing_lines(tasks, out, "name")) == [(3, "b"), (5, "c"), (6, "d")]
    r = zotsink("missing", "-", out, "--key", "name", "--array", input=tasks.read_bytes())
    assert r.stdout == b"3,5-6\n"


def test_a_torn_final_record_is_not_a_done_task(tmp_path: Path) -> None:
    out = tmp_path / "out.tsv"
    out.write_bytes(b"name\tsize\na\t1\nb\t")
    assert list(missing(["a", "b"], out, "name")) == ["b"]


def test_undecodable_bytes_round_trip(tmp_path: Path, zotsink: Run) -> None:
    tasks = tmp_path / "tasks.txt"
    tasks.write_bytes(b"caf\xe9.jpg\nok.jpg\n")
    out = tmp_path / "out.txt"
    out.write_bytes(b"ok.jpg\n")
    r = zotsink("missing", tasks, out, "--key", "1")
    assert r.returncode == 0 and r.stdout == b"caf\xe9.jpg\n"


# -- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (
            ["tasks.txt", "out.tsv", "--key", "nmae"],
            2,
            "out.tsv has no column 'nmae'; its columns are: name, size",
        ),
        (["tasks.txt", "out.tsv", "--key", "0"], 2, "column numbers start at 1"),
        (["nope.txt", "out.tsv", "--key", "name"], 1, "the task list nope.txt does not exist"),
        (["tasks.txt", "gone.tsv", "--key", "name"], 1, "gone.tsv does not exist"),
        (["tasks.txt", ".", "--key", "name"], 1, ". is a directory"),
        ([".", "out.tsv", "--key", "name"], 1, "the task list . is a directory"),
        (["tasks.txt", "done.txt", "--key", "2"], 2, "lines format"),
        (["tasks.txt", "out.tsv"], 2, "Missing option '-k' / '--key'"),
    ],
)
def test_clear_errors(
    tmp_path: Path, zotsink: Run, args: list[str], code: int, message: str
) -> None:
    _setup(tmp_path)
    (tmp_path / "done.txt").write_text("x\n")
    r = zotsink("missing", *args)
    assert r.returncode == code, r.stderr
    assert message.encode() in r.stderr and r.stdout == b""
    assert b"Traceback" not in r.stderr


def test_unknown_column_from_the_api(tmp_path: Path) -> None:
    tasks, out = _setup(tmp_path)
    with pytest.raises(UsageError, match="its columns are: name, size"):
        list(missing(tasks, out, "nmae"))


def test_empty_out_means_every_task_is_missing(tmp_path: Path) -> None:
    out = tmp_path / "out.tsv"
    out.write_bytes(b"")
    assert list(missing(["a", "b"], out, "name")) == ["a", "b"]


# -- array_spec --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("numbers", "spec"),
    [
        ([], ""),
        ([4], "4"),
        ([1, 2], "1-2"),
        ([3, 7, 8, 9, 15], "3,7-9,15"),
        ([15, 3, 9, 8, 7, 8], "3,7-9,15"),
        ([1, 2, 3, 5, 6, 1000], "1-3,5-6,1000"),
    ],
)
def test_array_spec(numbers: list[int], spec: str) -> None:
    assert array_spec(numbers) == spec


def expand(spec: str) -> list[int]:
    """What Slurm runs for an --array spec of single numbers and ranges."""
    out: list[int] = []
    for part in filter(None, spec.split(",")):
        lo, _, hi = part.partition("-")
        out += range(int(lo), int(hi or lo) + 1)
    return out


@given(st.sets(st.integers(1, 5000), max_size=200))
def test_array_spec_round_trips(numbers: set[int]) -> None:
    spec = array_spec(numbers)
    assert expand(spec) == sorted(numbers)
    # compact: one part per run of consecutive numbers
    assert len(spec.split(",")) == len(_runs(sorted(numbers))) or not numbers


def _runs(numbers: list[int]) -> list[list[int]]:
    runs: list[list[int]] = []
    for n in numbers:
        if runs and n == runs[-1][-1] + 1:
            runs[-1].append(n)
        else:
            runs.append([n])
    return runs


# -- the worked example of the README --------------------------------------------------------

JOB = """#!/bin/bash
#SBATCH --array=1-1000
set -euo pipefail
item=$(awk -v n="$SLURM_ARRAY_TASK_ID" 'NR == n' tasks.txt)
./analyse "$item" | zotsink --columns item,size results.tsv
"""
ANALYSE = """#!/bin/sh
printf '%s\\t%s\\n' "$1" "${#1}"
"""
# The first wave of 1,000 tasks, two processes sharing them out; a failing task writes nothing.
FIRST_WAVE = r"""
import os, sys
from zotsink import append_record
tasks = open("tasks.txt").read().split("\n")
failed = {int(n) for n in sys.argv[3].split(",")}
for task in range(int(sys.argv[1]), 1001, int(sys.argv[2])):
    if task in failed:
        continue  # this task died before writing its record
    item = tasks[task - 1]  # what awk NR==$SLURM_ARRAY_TASK_ID prints
    append_record("results.tsv", [item, len(item)], columns=["item", "size"])
"""
FAILED = [3, 7, 8, 9, 15, 100, 101, 250, 500, 998, 999, 1000]


def _slurm_task(tmp_path: Path, env: dict[str, str], task: int) -> subprocess.Popen:
    return subprocess.Popen(
        ["./job.sh"], cwd=tmp_path, env={**env, "SLURM_ARRAY_TASK_ID": str(task)}
    )


@pytest.mark.parametrize(
    "first_wave",
    [
        "api",
        pytest.param(
            "script",
            # the README's job script run 1,000 times: a minute of CPU, so a workstation
            # opts in; CI (CI set, as CI services do) always runs it
            marks=pytest.mark.skipif(
                not (os.environ.get("ZOTSINK_SLOW_TESTS") or os.environ.get("CI")),
                reason="1,000 job-script runs take a minute; set ZOTSINK_SLOW_TESTS=1 (CI runs it)",
            ),
        ),
    ],
)
def test_worked_example_resubmits_exactly_the_failed_tasks(
    tmp_path: Path, child_env: Callable[..., dict[str, str]], first_wave: str
) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    # `zotsink` on PATH is this checkout, run by this interpreter
    wrapper = f'#!/bin/sh\nexec "{sys.executable}" -m zotsink "$@"\n'
    for path, text in (
        (bindir / "zotsink", wrapper),
        (tmp_path / "job.sh", JOB),
        (tmp_path / "analyse", ANALYSE),
    ):
        path.write_text(text)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    env = child_env({"PATH": f"{bindir}:{os.environ['PATH']}"})
    items = [f"sample_{i:04d}.fastq" for i in range(1, 1001)]
    (tmp_path / "tasks.txt").write_text("".join(i + "\n" for i in items))

    # 1. the array runs; 12 tasks fail
    failed = ",".join(map(str, FAILED))
    if first_wave == "api":
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", FIRST_WAVE, str(k), "2", failed], cwd=tmp_path, env=env
            )
            for k in (1, 2)
        ]
        assert [p.wait(120) for p in procs] == [0, 0]
    else:
        broken = tmp_path / "analyse.ok"
        (tmp_path / "analyse").rename(broken)  # the tool is broken for the failing tasks
        (tmp_path / "analyse").write_text(
            f'#!/bin/sh\ncase ",{failed}," in *",$SLURM_ARRAY_TASK_ID,"*) exit 1;; esac\n'
            f'exec "{broken}" "$@"\n'
        )
        (tmp_path / "analyse").chmod(0o755)
        for start in range(1, 1001, 50):
            batch = [_slurm_task(tmp_path, env, t) for t in range(start, start + 50)]
            codes = [p.wait(120) for p in batch]
            assert sum(c != 0 for c in codes) == sum(t in FAILED for t in range(start, start + 50))
        broken.rename(tmp_path / "analyse")  # fixed for the resubmission

    # 2. which tasks to resubmit
    r = subprocess.run(
        ["zotsink", "missing", "tasks.txt", "results.tsv", "--key", "item", "--array"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    spec = r.stdout.decode().strip()
    assert spec == "3,7-9,15,100-101,250,500,998-1000"

    # 3. the resubmission: sbatch --array="$spec" job.sh, run here as Slurm would
    resubmitted = [_slurm_task(tmp_path, env, t) for t in expand(spec)]
    assert [p.wait(120) for p in resubmitted] == [0] * 12

    # 4. the table is complete: nothing missing, each item exactly once, verify is clean
    r = subprocess.run(
        ["zotsink", "missing", "tasks.txt", "results.tsv", "--key", "item", "--array"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        timeout=60,
    )
    assert (r.returncode, r.stdout) == (0, b"")
    lines = (tmp_path / "results.tsv").read_text().splitlines()
    assert lines[0] == "item\tsize"
    assert sorted(lines[1:]) == [f"{i}\t{len(i)}" for i in items]
    r = subprocess.run(
        ["zotsink", "verify", "results.tsv"], cwd=tmp_path, env=env, capture_output=True, timeout=60
    )
    assert r.returncode == 0 and b"1001 lines, 1000 records, no problems" in r.stderr
