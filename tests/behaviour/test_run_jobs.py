"""The ``zotsink run`` job templates for Grid Engine and PBS, and resubmit-run.sh.

There is no SGE or PBS here: the templates run as those schedulers would start them, with
their environment variables set by the test; ``qsub`` and ``sbatch`` are stand-ins that
record how they were called. (The Slurm template runs on a real cluster in
tests/cluster/test_run_slurm.py.)
"""

from __future__ import annotations

import csv
import os
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

JOBS = Path(__file__).resolve().parents[2] / "scripts" / "jobs"
PROCESS = """#!/bin/sh
[ -e "fail.$1" ] && { echo "no luck with $1" >&2; exit 4; }
echo "item:$1 size:${#1}"
"""


def ledger_rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))


@pytest.fixture
def job_dir(tmp_path: Path) -> Path:
    (tmp_path / "tasks.txt").write_text("".join(f"f{i:02d}\n" for i in range(1, 11)))
    proc = tmp_path / "process-item"
    proc.write_text(PROCESS)
    proc.chmod(0o755)
    return tmp_path


def run_job(
    script: str, cwd: Path, child_env: Callable[..., dict[str, str]], **env: str
) -> subprocess.CompletedProcess[bytes]:
    settings = {
        "ZOTSINK": shlex.join([sys.executable, "-m", "zotsink"]),
        "KV": ":",
        "CHUNK": "3",
        "SLURM_ARRAY_TASK_ID": None,
        **env,
    }
    return subprocess.run(
        ["bash", str(JOBS / script)],
        cwd=cwd,
        env=child_env(settings),
        capture_output=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("script", "env", "job"),
    [
        ("zotsink-run.sge", {"SGE_TASK_ID": "2", "JOB_ID": "4711"}, "4711"),
        ("zotsink-run.pbs", {"PBS_ARRAY_INDEX": "2", "PBS_JOBID": "815[2].pbs01"}, "815"),
        ("zotsink-run.pbs", {"PBS_ARRAYID": "2", "PBS_JOBID": "815[].torque"}, "815"),
    ],
)
def test_template_runs_its_chunk_into_one_table(
    job_dir: Path, child_env: Callable[..., dict[str, str]], script: str, env: dict[str, str],
    job: str,
) -> None:  # fmt: skip
    r = run_job(script, job_dir, child_env, **env)
    assert r.returncode == 0, r.stderr
    # --jobs auto runs the chunk's tasks side by side: they end, and append, in any order
    head, *rows = (job_dir / "results.tsv").read_text().splitlines(keepends=True)
    assert head == "job\ttasknum\titem\tsize\n"
    assert sorted(rows) == [f"{job}\t4\tf04\t3\n", f"{job}\t5\tf05\t3\n", f"{job}\t6\tf06\t3\n"]
    ends = [r for r in ledger_rows(job_dir / "results.tsv.ledger") if r["event"] == "end"]
    ends.sort(key=lambda e: int(e["tasknum"]))
    assert [(e["tasknum"], e["status"], e["job"], e["array_task"]) for e in ends] == [
        (str(n), "ok", job, "2") for n in (4, 5, 6)
    ]
    # Nothing else in the job's directory: no file per task or per array element.
    assert sorted(os.listdir(job_dir)) == [
        "process-item", "results.tsv", "results.tsv.ledger", "tasks.txt",
    ]  # fmt: skip


def test_template_outside_an_array_says_how_to_submit(
    job_dir: Path, child_env: Callable[..., dict[str, str]]
) -> None:
    r = run_job("zotsink-run.sge", job_dir, child_env, SGE_TASK_ID="undefined")
    assert r.returncode == 2
    assert b"qsub -t 1-N" in r.stderr


STUB = """#!/bin/sh
printf '%s' "$(basename "$0")" >> "{log}"
for a in "$@"; do printf ' %s' "$a" >> "{log}"; done
printf ' ZOTSINK_BASE=%s\\n' "$ZOTSINK_BASE" >> "{log}"
"""


@pytest.mark.parametrize("scheduler", ["slurm", "sge", "pbs"])
def test_resubmit_sends_only_chunks_not_ok(
    job_dir: Path, child_env: Callable[..., dict[str, str]], scheduler: str
) -> None:
    # Every chunk of 3 ran once; f05 (chunk 2) and f10 (chunk 4) failed.
    (job_dir / "fail.f05").touch()
    (job_dir / "fail.f10").touch()
    for index in ("1", "2", "3", "4"):
        run_job("zotsink-run.sge", job_dir, child_env, SGE_TASK_ID=index, JOB_ID="1")
    bin_dir = job_dir / "bin"
    bin_dir.mkdir()
    log = job_dir / "submitted"
    for name in ("sbatch", "qsub"):
        stub = bin_dir / name
        stub.write_text(STUB.format(log=log))
        stub.chmod(0o755)
    env = child_env(
        {
            "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            "ZOTSINK": shlex.join([sys.executable, "-m", "zotsink"]),
            "CHUNK": "3",
            "SCHEDULER": scheduler,
            "MAX_ARRAY": "1001",
        }
    )
    r = subprocess.run(
        ["bash", str(JOBS / "resubmit-run.sh"), "--wait"],
        cwd=job_dir, env=env, capture_output=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    suffix = {"slurm": "sbatch", "sge": "sge", "pbs": "pbs"}[scheduler]
    job = str(JOBS / f"zotsink-run.{suffix}")
    want = {
        "slurm": [f"sbatch --wait --array=2,4 --export=ALL,ZOTSINK_BASE=1 {job} ZOTSINK_BASE="],
        "sge": [
            f"qsub --wait -t 2-2 {job} ZOTSINK_BASE=1",
            f"qsub --wait -t 4-4 {job} ZOTSINK_BASE=1",
        ],
        "pbs": [
            f"qsub --wait -v TASK_INDEX=2,ZOTSINK_BASE=1 {job} ZOTSINK_BASE=",
            f"qsub --wait -v TASK_INDEX=4,ZOTSINK_BASE=1 {job} ZOTSINK_BASE=",
        ],
    }[scheduler]
    assert log.read_text().splitlines() == want

    # Once they are fixed and rerun, there is nothing left to send.
    (job_dir / "fail.f05").unlink()
    (job_dir / "fail.f10").unlink()
    for index in ("2", "4"):
        assert run_job("zotsink-run.sge", job_dir, child_env, SGE_TASK_ID=index).returncode == 0
    log.unlink()
    r = subprocess.run(
        ["bash", str(JOBS / "resubmit-run.sh")], cwd=job_dir, env=env, capture_output=True,
        timeout=60,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert b"every task of tasks.txt is ok" in r.stderr
    assert not log.exists()
