"""``zotsink status TASKS OUT --advise``: what to ask the scheduler for next time.

A ledger of this release records no peak or CPU: the advice says they were not measured
and asks only for time; the directives go to stdout (a job script's lines), how they were
reached to stderr. The figures' rules are tested in tests/unit/test_advise.py.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

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


def test_advice_on_a_ledger_without_figures(tmp_path: Path, zotsink: Run) -> None:
    chunked_run(tmp_path, zotsink)
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
    chunked_run(tmp_path, zotsink)
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


def test_advice_options_need_advise(tmp_path: Path, zotsink: Run) -> None:
    chunked_run(tmp_path, zotsink)
    r = zotsink("status", "tasks.txt", "out.tsv", "--jobs", "3")
    assert r.returncode == 2
    assert b"--jobs and --tasks-per-element size the advice: give --advise" in r.stderr
    r = zotsink("status", "tasks.txt", "out.tsv", "--refresh", "5")
    assert r.returncode == 2
    assert b"--refresh S rewrites the --html FILE page: give --html FILE too" in r.stderr
