"""``zotsink status TASKS OUT --advise``: what to ask the scheduler for next time.

A run of this release records each task's CPU and, where it can tell it from its own size,
its peak memory (a ``--call`` task's always where the kernel lets the worker reset its
peak); a ledger whose ends carry no figures (one of zotsink 0.1) gets advice on time alone,
saying the rest was not measured. The directives go to stdout (a job script's lines), how
they were reached to stderr. The figures' rules are tested in tests/unit/test_advise.py.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

from zotsink import iter_attempts

Run = Callable[..., subprocess.CompletedProcess[bytes]]

SLEEPS = """
import sys, time
time.sleep(0.2)
print(sys.argv[1])
"""


def chunked_run(tmp_path: Path, zotsink: Run) -> None:
    """12 tasks in two array elements of six, three at a time."""
    (tmp_path / "tasks.txt").write_text("".join(f"t{n}\n" for n in range(1, 13)))
    (tmp_path / "task.py").write_text(SLEEPS)
    for index in ("1", "2"):
        env = {"SLURM_ARRAY_JOB_ID": "77", "SLURM_ARRAY_TASK_ID": index, "SLURM_JOB_ID": "7"}
        r = zotsink(
            "run",
            "tasks.txt",
            "out.tsv",
            "--chunk",
            "6",
            "--jobs",
            "3",
            "--",
            "python3",
            "task.py",
            env=env,
        )
        assert r.returncode == 0, r.stderr


def figureless(tmp_path: Path) -> None:
    """The ledger of :func:`chunked_run` as a release that measured nothing left it: 12
    tasks of 0.2 s in two elements of six, three at a time, no peak or CPU."""
    from tests.ledgers import Book
    from zotsink._run.settings import run_settings

    (tmp_path / "tasks.txt").write_text("".join(f"t{n}\n" for n in range(1, 13)))
    settings = run_settings(
        "tasks.txt", ["python3", "task.py"], shell=False, array=True, chunk=6, base=1,
        format="tsv", columns=None, kv=None, stamp=(), max_attempts=None,
    )  # fmt: skip
    for element in (1, 2):
        times = iter([100.0 * element + 0.01 * k for k in range(100)])
        book = Book(
            tmp_path / "out.tsv.ledger", pid=900 + element, job="77", element=str(element),
            settings=settings, clock=times,
        )  # fmt: skip
        nums = range(6 * element - 5, 6 * element + 1)
        for n in nums:
            book.claim(n, line=f"t{n}")
        for n in nums:
            book.begin(n).end(n, seconds=0.2)
        book.write()


def test_advice_on_a_ledger_without_figures(tmp_path: Path, zotsink: Run) -> None:
    figureless(tmp_path)
    r = zotsink("status", "tasks.txt", "out.tsv", "--advise", "--jobs", "3")
    assert r.returncode == 0, r.stderr
    (line,) = r.stdout.decode().splitlines()  # only the time: nothing else was measured
    assert re.fullmatch(r"#SBATCH --time=\d\d:\d\d:00", line)
    err = r.stderr.decode()
    assert (
        "zotsink: advice from 12 ended attempts, each figure by the 95th percentile of the "
        "attempts (not the largest), for elements of --jobs 3 and 6 tasks" in err
    )  # the recorded --chunk is the tasks per element
    assert (
        "zotsink: memory: not measured (no peak is known for any of the 12 attempts): no "
        "--mem advised" in err
    )
    assert "zotsink: CPU: not measured: no CPUs advised" in err
    assert re.search(
        r"zotsink: time per element: 6 tasks, 3 at a time: 1 turn at the mean [\d.]+ s, the "
        r"last at the 95th percentile [\d.]+ s; x 1.25 margin, up to a whole minute: \d",
        err,
    )


def test_advice_forms_and_json(tmp_path: Path, zotsink: Run) -> None:
    figureless(tmp_path)
    r = zotsink(
        "status",
        "tasks.txt",
        "out.tsv",
        "--advise",
        "--scheduler",
        "pbs",
        "--tasks-per-element",
        "600",
        "--jobs",
        "3",
    )
    assert r.returncode == 0, r.stderr
    (line,) = r.stdout.decode().splitlines()
    assert line.startswith("#PBS -l walltime=00:")
    r = zotsink("status", "tasks.txt", "out.tsv", "--advise", "--scheduler", "sge", "--json")
    advice = json.loads(r.stdout)["advice"]
    assert advice["tasks"] == 12 and advice["peak_measured"] == 0
    assert advice["memory_kib"] is None and advice["per_element"] == 6
    assert advice["directives"]["sge"] == [f"#$ -l h_rt={advice['directives']['slurm'][0][-8:]}"]


def test_a_run_of_this_release_records_what_its_tasks_used(tmp_path: Path, zotsink: Run) -> None:
    chunked_run(tmp_path, zotsink)
    r = zotsink("status", "tasks.txt", "out.tsv", "--advise", "--json")
    advice = json.loads(r.stdout)["advice"]
    assert advice["tasks"] == 12 and advice["cpu_per_task"] is not None
    assert advice["cpus"] >= 3  # three at a time, a part of a CPU each counts as one
    (tmp_path / "f.py").write_text(
        "import time\ndef f(line):\n    big = b'x' * 30_000_000\n"
        "    time.sleep(0.005)\n    return line + str(len(big))\n"
    )
    r = zotsink("run", "tasks.txt", "big.tsv", "--jobs", "2", "--call", "f.py:f")
    assert r.returncode == 0, r.stderr
    r = zotsink("status", "tasks.txt", "big.tsv", "--advise")
    assert r.returncode == 0, r.stderr
    said = r.stdout.decode().splitlines()
    assert said[0].startswith("#SBATCH --mem=") and "--cpus-per-task=" in said[1], said
    # each call made 30 MB (and took over LONG_CALL: every peak read): its peak says so,
    # whatever the worker held before
    peaks = [a.peak_kib for a in iter_attempts(tmp_path / "tasks.txt", tmp_path / "big.tsv.ledger")]
    assert len(peaks) == 12 and all(p is not None and p > 29_000 for p in peaks), peaks


def test_advice_options_need_advise(tmp_path: Path, zotsink: Run) -> None:
    chunked_run(tmp_path, zotsink)
    r = zotsink("status", "tasks.txt", "out.tsv", "--jobs", "3")
    assert r.returncode == 2
    assert b"--jobs and --tasks-per-element size the advice: give --advise" in r.stderr
    r = zotsink("status", "tasks.txt", "out.tsv", "--refresh", "5")
    assert r.returncode == 2
    assert b"--refresh S rewrites the --html FILE page: give --html FILE too" in r.stderr
