"""``zotsink run`` through the shipped Slurm template on the one-host Slurm cluster, writing
to the GlusterFS volume: 30 array elements x 10 tasks into one table, one log, one ledger,
no file per task; the failing 5 % resubmitted from the ledger until ``status`` says all ok."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.ledgers import ledger_rows

pytestmark = [pytest.mark.cluster, pytest.mark.xdist_group("cluster")]

JOBS = Path(__file__).resolve().parents[2] / "scripts" / "jobs"
SBATCH = JOBS / "zotsink-run.sbatch"
RESUBMIT = JOBS / "resubmit-run.sh"

# A Python processor: one key:value record per task, or exit 3 when told to fail.
PROCESS = """
import os, sys
name = sys.argv[1]
if os.path.exists(os.path.join({fail!r}, name)):
    sys.exit(f"failing on purpose: {{name}}")
print(f"image:{{name}} pixels:{{len(name) * 1000}}")
"""


def test_chunked_array_and_resubmission_from_the_ledger(gluster_dirs, slurm_cluster, tmp_path):
    job_dir = gluster_dirs.node1  # the job's directory: tasks, results, log, ledger
    names = [f"img_{i:03d}.jpg" for i in range(1, 301)]
    (job_dir / "tasks.txt").write_text("".join(f"{n}\n" for n in names))
    fail = tmp_path / "fail"  # outside the job's directory
    fail.mkdir()
    failing = list(range(7, 301, 20))  # 15 tasks: 5 %
    for t in failing:
        (fail / names[t - 1]).touch()
    proc = tmp_path / "measure.py"
    proc.write_text(PROCESS.format(fail=str(fail)))
    zotsink = [sys.executable, "-m", "zotsink"]
    env = {k: v for k, v in slurm_cluster.env.items() if not k.startswith("ZOTSINK_")}
    env.update(
        ZOTSINK=shlex.join(zotsink),
        TASKS="tasks.txt",
        RESULTS="results.tsv",
        PROCESS=f"{sys.executable} {proc}",
        CHUNK="10",
        KV=":",
        STAMP="job,tasknum",
        GRACE="20",
    )

    first = subprocess.run(
        ["sbatch", "--parsable", "--wait", f"--chdir={job_dir}", "--array=1-30", str(SBATCH)],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert first.returncode == 1, first.stderr  # the highest exit: run's 1 for failed tasks
    job1 = first.stdout.strip().split(";")[0]

    reader = gluster_dirs.reader
    status = subprocess.run(
        [*zotsink, "status", str(reader / "tasks.txt"), str(reader / "results.tsv"), "--json"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert status.returncode == 1
    assert '"failed": 15' in status.stdout and '"ok": 285' in status.stdout, status.stdout

    miss = subprocess.run(
        [*zotsink, "missing", str(reader / "tasks.txt"), "--ledger",
         str(reader / "results.tsv.ledger"), "--chunk", "10", "--array", "--max-array", "1001"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    chunks = sorted({(t - 1) // 10 + 1 for t in failing})
    assert miss.stdout.split() == [",".join(map(str, chunks)), "1"], miss.stderr

    for p in fail.iterdir():
        p.unlink()
    again = subprocess.run(
        ["bash", str(RESUBMIT), "--wait", f"--chdir={job_dir}"],
        env=env, cwd=job_dir, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert again.returncode == 0, again.stdout + again.stderr

    status = subprocess.run(
        [*zotsink, "status", str(reader / "tasks.txt"), str(reader / "results.tsv")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert status.returncode == 0, status.stderr

    lines = (reader / "results.tsv").read_text().splitlines()
    assert lines[0] == "job\ttasknum\timage\tpixels"
    rows = [ln.split("\t") for ln in lines[1:]]
    assert len(rows) == 300
    assert sorted(int(r[1]) for r in rows) == list(range(1, 301))
    for job, tasknum, image, pixels in rows:
        assert image == names[int(tasknum) - 1] and pixels == "11000"
        assert (job == job1) == (int(tasknum) not in failing)
    rows = ledger_rows(reader / "results.tsv.ledger")
    ok = [r for r in rows if r["event"] == "end" and r["status"] == "ok"]
    assert len(ok) == 300
    # No file per task or per array element anywhere in the job's directory.
    assert sorted(os.listdir(reader)) == [
        "results.tsv", "results.tsv.ledger", "results.tsv.log", "tasks.txt",
    ]  # fmt: skip
    log = (reader / "results.tsv.log").read_text().splitlines()
    assert len(log) == 15 and all("failing on purpose" in line for line in log)
