"""scripts/jobs/resubmit-run.sh refuses while the job that ran the ledger's tasks still has
elements queued or running, and ``--force`` overrides.

The ledger is written by real ``zotsink run`` processes under a Slurm (or SGE) job id; the
scheduler's query and submit commands are stand-ins on PATH that answer from files in the
job directory (``queued.<id>``: the scheduler still has that job) and record their calls.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

JOBS = Path(__file__).resolve().parents[2] / "scripts" / "jobs"
ZOTSINK = shlex.join([sys.executable, "-m", "zotsink"])

#: Each stand-in records its argv in ``calls``; the queries answer as their scheduler does.
STANDINS = {
    "sbatch": 'echo "sbatch $*" >> calls\n',
    "qsub": 'echo "qsub $*" >> calls\n',
    "squeue": """echo "squeue $*" >> calls
[ -e down ] && { echo "slurm_load_jobs error: Unable to contact slurm controller" >&2; exit 1; }
[ -e "queued.$3" ] && { echo "$3_[4-6]"; exit 0; }
echo "slurm_load_jobs error: Invalid job id specified" >&2
exit 1
""",
    "qstat": """echo "qstat $*" >> calls
[ -e "queued.$2" ] && { echo "job_number: $2"; exit 0; }
printf 'Following jobs do not exist:\\n%s\\n' "$2" >&2
exit 1
""",
}


@pytest.fixture
def job_dir(tmp_path: Path, child_env: Callable[..., dict[str, str]]) -> Path:
    """Chunks 1 and 2 of a 4-chunk job 4711 ran (chunks 3 and 4 are not ok yet)."""
    (tmp_path / "tasks.txt").write_text("".join(f"f{i:02d}\n" for i in range(1, 13)))
    for index in ("1", "2"):
        env = {"SLURM_ARRAY_JOB_ID": "4711", "SLURM_ARRAY_TASK_ID": index, "JOB_ID": "4711"}
        r = subprocess.run(
            [
                *shlex.split(ZOTSINK),
                "run",
                "tasks.txt",
                "results.tsv",
                "--chunk",
                "3",
                "--",
                "echo",
            ],
            cwd=tmp_path,
            env=child_env(env),
            capture_output=True,
            timeout=60,
        )
        assert r.returncode == 0, r.stderr
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in STANDINS.items():
        (bin_dir / name).write_text("#!/bin/sh\n" + body)
        (bin_dir / name).chmod(0o755)
    return tmp_path


def resubmit(
    job_dir: Path, child_env: Callable[..., dict[str, str]], *args: str, **env: str
) -> subprocess.CompletedProcess[bytes]:
    settings = {
        "PATH": f"{job_dir / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "ZOTSINK": ZOTSINK,
        "CHUNK": "3",
        "MAX_ARRAY": "1001",
        "SLURM_ARRAY_JOB_ID": None,
        "SLURM_ARRAY_TASK_ID": None,
        **env,
    }
    return subprocess.run(
        ["bash", str(JOBS / "resubmit-run.sh"), *args],
        cwd=job_dir,
        env=child_env(settings),
        capture_output=True,
        timeout=60,
    )


def calls(job_dir: Path) -> list[str]:
    path = job_dir / "calls"
    return path.read_text().splitlines() if path.exists() else []


@pytest.mark.parametrize(
    ("scheduler", "query"), [("slurm", "squeue -h -j 4711 -o %i"), ("sge", "qstat -j 4711")]
)
def test_a_job_still_queued_or_running_is_not_resubmitted(
    job_dir: Path, child_env: Callable[..., dict[str, str]], scheduler: str, query: str
) -> None:
    (job_dir / "queued.4711").touch()
    r = resubmit(job_dir, child_env, "--wait", SCHEDULER=scheduler)
    assert r.returncode == 3, r.stderr
    assert r.stderr == (
        b"resubmit-run.sh: job 4711 still has elements queued or running; their tasks would "
        b"run twice: run this when it has ended, or give --force to resubmit anyway\n"
    )
    assert calls(job_dir) == [query]  # asked, and nothing submitted


def test_an_ended_job_is_resubmitted(
    job_dir: Path, child_env: Callable[..., dict[str, str]]
) -> None:
    r = resubmit(job_dir, child_env, "--wait")
    assert r.returncode == 0, r.stderr
    job = JOBS / "zotsink-run.sbatch"
    assert calls(job_dir) == [
        "squeue -h -j 4711 -o %i",
        f"sbatch --wait --array=3-4 --export=ALL,ZOTSINK_BASE=1 {job}",
    ]


def test_force_resubmits_without_asking(
    job_dir: Path, child_env: Callable[..., dict[str, str]]
) -> None:
    (job_dir / "queued.4711").touch()
    r = resubmit(job_dir, child_env, "--wait", "--force")
    assert r.returncode == 0, r.stderr
    job = JOBS / "zotsink-run.sbatch"
    assert calls(job_dir) == [f"sbatch --wait --array=3-4 --export=ALL,ZOTSINK_BASE=1 {job}"]


def test_a_job_named_in_jobid_counts_too(
    job_dir: Path, child_env: Callable[..., dict[str, str]]
) -> None:
    """An array whose elements are all still queued has written no ledger row."""
    (job_dir / "queued.4800").touch()
    r = resubmit(job_dir, child_env, JOBID="4800")
    assert r.returncode == 3 and b"job 4800 still has elements queued" in r.stderr
    assert calls(job_dir) == ["squeue -h -j 4711 -o %i", "squeue -h -j 4800 -o %i"]


def test_when_the_scheduler_cannot_answer_it_says_so_and_goes_on(
    job_dir: Path, child_env: Callable[..., dict[str, str]]
) -> None:
    (job_dir / "down").touch()
    r = resubmit(job_dir, child_env)
    assert r.returncode == 0, r.stderr
    assert (
        b"resubmit-run.sh: warning: cannot ask slurm whether job 4711 still runs "
        b"(slurm_load_jobs error: Unable to contact slurm controller); going on as if it "
        b"did not\n"
    ) in r.stderr
    assert calls(job_dir)[-1].startswith("sbatch --array=3-4 ")
