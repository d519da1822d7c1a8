"""The shipped Grid Engine templates on a real Son of Grid Engine (scripts/cluster/sge.sh):
``qsub -t`` arrays over the three nodes writing to the GlusterFS volume, chunks of
``zotsink run``, resubmission from the ledger with resubmit-run.sh, and ``qdel`` and
``qmod -sj`` while tasks run, whose ``-notify`` warnings (SIGUSR2, SIGUSR1) zotsink
takes as a stop: what the tasks printed stays, they are marked interrupted."""

from __future__ import annotations

import collections
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.ledgers import ledger_rows
from zotsink import ZotsinkError

pytestmark = [pytest.mark.cluster, pytest.mark.xdist_group("cluster")]

JOBS = Path(__file__).resolve().parents[2] / "scripts" / "jobs"
RUN_SGE = JOBS / "zotsink-run.sge"
ARRAY_SGE = JOBS / "zotsink-array.sge"
RESUBMIT = JOBS / "resubmit-run.sh"
ZOTSINK = [sys.executable, "-m", "zotsink"]

# One key:value record per task, or exit 3 when told to fail; with a marker directory it
# says it has printed (a file named after the task) and then works "forever".
PROCESS = """
import os, sys, time
name, fail, started = sys.argv[1], {fail!r}, {started!r}
if os.path.exists(os.path.join(fail, name)):
    sys.exit(f"failing on purpose: {{name}}")
print(f"image:{{name}} pixels:{{len(name) * 1000}}", flush=True)
if started:
    open(os.path.join(started, name), "w").close()
    time.sleep(600)
"""


def settings(tmp_path: Path, job_dir: Path, *, started: str = "", **more: str) -> dict:
    """The job's environment (`-V` passes it on): zotsink, the template's settings."""
    fail = tmp_path / "fail"
    fail.mkdir(exist_ok=True)
    proc = tmp_path / "measure.py"
    proc.write_text(PROCESS.format(fail=str(fail), started=started))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ZOTSINK_", "SLURM_"))}
    env.update(
        ZOTSINK=shlex.join(ZOTSINK),
        TASKS=str(job_dir / "tasks.txt"),
        RESULTS=str(job_dir / "results.tsv"),
        PROCESS=f"{sys.executable} {proc}",
        KV=":",
        STAMP="job,tasknum",
        GRACE="1",
    )
    env.update(more)
    return env


def zotsink(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*ZOTSINK, *args], capture_output=True, text=True, timeout=120)


def ledger_ends(path: Path) -> list[dict[str, str]]:
    """The ledger's end rows (none while this mount cannot read it yet)."""
    try:
        return [r for r in ledger_rows(path) if r["event"] == "end"]
    except ZotsinkError:  # its header not yet seen through this client
        return []


def wait_for(predicate, timeout: float = 120.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_run_template_chunks_over_the_nodes_and_resubmits_from_the_ledger(
    gluster_dirs, sge_cluster, tmp_path, cluster_report
):
    job_dir, reader = gluster_dirs.node1, gluster_dirs.reader
    names = [f"img_{i:03d}.jpg" for i in range(1, 121)]
    (job_dir / "tasks.txt").write_text("".join(f"{n}\n" for n in names))
    failing = list(range(7, 121, 20))  # 6 tasks, in chunks 1, 3, 5, 7, 9, 11
    env = settings(tmp_path, job_dir, CHUNK="10")
    for t in failing:
        (tmp_path / "fail" / names[t - 1]).touch()

    t0 = time.monotonic()
    first = sge_cluster.run(
        "qsub", "-sync", "y", "-t", "1-12", str(RUN_SGE),
        env=env, cwd=tmp_path, timeout=600,
    )  # fmt: skip
    took = time.monotonic() - t0
    assert "has been submitted" in first.stdout, first.stdout + first.stderr
    job1 = first.stdout.split("job-array ")[1].split(".")[0]
    status = zotsink("status", str(reader / "tasks.txt"), str(reader / "results.tsv"), "--json")
    assert '"failed": 6' in status.stdout and '"ok": 114' in status.stdout, status.stdout

    # resubmit-run.sh: one qsub per range of chunks that holds a task not ok yet
    for p in (tmp_path / "fail").iterdir():
        p.unlink()
    again = sge_cluster.run(
        "bash", str(RESUBMIT), "-sync", "y",
        env={**env, "SCHEDULER": "sge", "CHUNK": "10"}, cwd=tmp_path, timeout=600,
    )  # fmt: skip
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stderr.count("resubmitting array indices") == 1, again.stderr
    assert "resubmitting array indices 1,3,5,7,9,11 (base 1)" in again.stderr, again.stderr
    status = zotsink("status", str(reader / "tasks.txt"), str(reader / "results.tsv"))
    assert status.returncode == 0, status.stdout + status.stderr

    lines = (reader / "results.tsv").read_text().splitlines()
    assert lines[0] == "job\ttasknum\timage\tpixels"
    rows = [ln.split("\t") for ln in lines[1:]]
    assert sorted(int(r[1]) for r in rows) == list(range(1, 121))
    for job, tasknum, image, pixels in rows:
        assert image == names[int(tasknum) - 1] and pixels == "11000"
        assert (job == job1) == (int(tasknum) not in failing)
    ends = ledger_ends(reader / "results.tsv.ledger")
    assert len([e for e in ends if e["status"] == "ok"]) == 120
    hosts = collections.Counter(e["host"] for e in ends if e["status"] == "ok")
    assert set(hosts) <= set(sge_cluster.nodes) and len(hosts) >= 2, hosts
    assert sorted(os.listdir(reader)) == [
        "results.tsv", "results.tsv.ledger", "results.tsv.log", "tasks.txt",
    ]  # fmt: skip
    log = (reader / "results.tsv.log").read_text().splitlines()
    assert len(log) == 6 and all("failing on purpose" in line for line in log)
    cluster_report(f"SGE: 12 x 10 tasks over {dict(sorted(hosts.items()))} in {took:.1f} s")


def test_array_template_one_task_per_element(gluster_dirs, sge_cluster, tmp_path):
    job_dir, reader = gluster_dirs.node1, gluster_dirs.reader
    items = [f"item{i:02d}" for i in range(1, 31)]
    (job_dir / "tasks.txt").write_text("".join(f"{n}\n" for n in items))
    proc = tmp_path / "process-item"
    proc.write_text('#!/bin/sh\nprintf \'%s\\t%s\\n\' "$1" "${#1}"\n')
    proc.chmod(0o755)
    env = settings(tmp_path, job_dir, FIELDS="item,result", STAMP="job,task")
    env["PROCESS"] = str(proc)
    res = sge_cluster.run(
        "qsub", "-sync", "y", "-t", "1-30", str(ARRAY_SGE), env=env, cwd=tmp_path, timeout=600
    )
    assert "has been submitted" in res.stdout, res.stdout + res.stderr
    job = res.stdout.split("job-array ")[1].split(".")[0]
    lines = (reader / "results.tsv").read_text().splitlines()
    assert lines[0] == "job\ttask\titem\tresult"
    rows = sorted(ln.split("\t") for ln in lines[1:])
    assert rows == sorted([job, str(i), f"item{i:02d}", "6"] for i in range(1, 31))


@pytest.mark.parametrize(
    "stop, signal_name",
    [(("qdel",), "SIGUSR2"), (("qmod", "-sj"), "SIGUSR1")],
    ids=["qdel", "qmod-suspend"],
)
def test_notify_warning_stops_run_and_keeps_what_tasks_printed(
    gluster_dirs, sge_cluster, tmp_path, stop, signal_name
):
    job_dir, reader = gluster_dirs.node1, gluster_dirs.reader
    names = [f"img_{i}.jpg" for i in range(1, 4)]
    (job_dir / "tasks.txt").write_text("".join(f"{n}\n" for n in names))
    started = tmp_path / "started"
    started.mkdir()
    env = settings(tmp_path, job_dir, started=str(started), CHUNK="1")
    sub = sge_cluster.run("qsub", "-t", "1-3", str(RUN_SGE), env=env, cwd=tmp_path)
    assert "has been submitted" in sub.stdout, sub.stdout + sub.stderr
    job = sub.stdout.split("job-array ")[1].split(".")[0]
    try:
        # every task has printed its record and works on: now the scheduler stops the job
        assert wait_for(lambda: len(os.listdir(started)) == 3), os.listdir(started)
        res = sge_cluster.run(*stop, job)
        assert res.returncode == 0, res.stdout + res.stderr

        def settled() -> bool:
            path = reader / "results.tsv.ledger"
            return path.exists() and len(ledger_ends(path)) == 3

        assert wait_for(settled), ledger_rows(reader / "results.tsv.ledger", every=True)
    finally:
        sge_cluster.run("qdel", "-f", job)
    ends = ledger_ends(reader / "results.tsv.ledger")
    assert sorted(e["status"] for e in ends) == ["interrupted"] * 3, ends
    # the warning itself ended them: zotsink passed it on to each task
    assert {e["signal"] for e in ends} <= {signal_name, signal_name[3:]}, ends
    # the warning reached zotsink run, which ended its tasks, before any SIGKILL: the
    # records they printed are in the table, whole
    lines = (reader / "results.tsv").read_text().splitlines()
    assert sorted(lines[1:]) == sorted(f"{job}\t{i}\timg_{i}.jpg\t9000" for i in range(1, 4))
    # and they are resubmitted from the ledger like any task that is not ok
    miss = zotsink(
        "missing", str(reader / "tasks.txt"), "--ledger", str(reader / "results.tsv.ledger"),
        "--chunk", "1", "--array", "--max-array", "75001",
    )  # fmt: skip
    assert miss.stdout.split() == ["1-3", "1"], miss.stdout + miss.stderr
