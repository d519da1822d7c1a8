"""``zotsink run --follow`` arrays over the three nodes of the test cluster: one runner on
each node (Slurm: an array of three elements, each asking for a whole node; Grid Engine:
one job per node's queue), on GlusterFS, MooseFS and CephFS, while two producers on this
host ``zotsink add`` lines through mounts of their own, and finally ``zotsink close`` the
list. Every line added is run once and committed once, the first lines spread over the
three nodes, and each runner ends on the close.

The tasks are the witness of test_run_pull_cluster.py (a lock per task on this host's
disk): the first six lines wait until released, so the test sees each runner hold two.
"""

from __future__ import annotations

import collections
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest
from test_run_pull_cluster import (
    PULL_SGE,
    ZOTSINK,
    Witness,
    check_each_task_once,
    job_settings,
    ok_counts,
    sge_job,
    submit_pull_array,
    wait_for,
)

from tests.ledgers import ledger_rows

pytestmark = [pytest.mark.cluster, pytest.mark.xdist_group("cluster")]

PRODUCED = 9  # lines each producer adds after the first six, one `zotsink add` each


def add(tasks: Path, *lines: str) -> None:
    got = subprocess.run(
        [*ZOTSINK, "add", str(tasks), *lines], capture_output=True, text=True, timeout=120
    )
    assert got.returncode == 0, got.stderr


def feed(tasks: Path, via: list[Path], witness: Witness, ledger: Path, runners_done) -> list[str]:
    """The producers' part: six lines that the runners hold two by two (one runner per
    node), then two producers adding at once through two other mounts, then the close.
    Every line added, in order of the calls."""
    first = [f"first{i}" for i in range(1, 7)]
    add(via[0] / tasks.name, *first)
    wait_for(lambda: len(witness.held()) == 6, "three runners holding two lines each")
    hosts = {who.split()[0] for who in witness.held().values()}
    assert len(hosts) == 3, witness.held()  # the list's lines went to every node
    witness.release()
    errors: list[BaseException] = []

    def produce(mount: Path, prefix: str) -> None:
        try:
            for i in range(1, PRODUCED + 1):
                add(mount / tasks.name, f"{prefix}{i:02d}")
        except BaseException as exc:  # the test's thread reports it
            errors.append(exc)

    producers = [
        threading.Thread(target=produce, args=(mount, prefix))
        for mount, prefix in zip(via[1:], "ab")
    ]
    for p in producers:
        p.start()
    for p in producers:
        p.join(timeout=300)
    assert not errors, errors
    total = 6 + 2 * PRODUCED
    wait_for(lambda: len(ok_counts(ledger)) == total, f"all {total} lines run")
    assert not runners_done()  # still following the open list
    closed = subprocess.run(
        [*ZOTSINK, "close", str(tasks), str(ledger.with_suffix(""))],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert closed.returncode == 0, closed.stderr
    wait_for(runners_done, "the runners ended on close", timeout=240, poll=0.5)
    return first + [f"{p}{i:02d}" for p in "ab" for i in range(1, PRODUCED + 1)]


def check(job_dir: Path, added: list[str], witness: Witness) -> list[dict]:
    lines = (job_dir / "tasks.txt").read_text().splitlines()
    assert sorted(lines) == sorted(added)
    rows = check_each_task_once(job_dir, lines, witness)
    assert witness.ran() == collections.Counter(lines)  # each started once
    return rows


@pytest.mark.parametrize("fs", ["gluster", "moosefs", "ceph"])
def test_slurm_follow_array_over_three_nodes_runs_each_added_line_once(
    fs: str, slurm_cluster, tmp_path: Path, request, cluster_report
) -> None:
    t0 = time.monotonic()
    dirs = request.getfixturevalue(f"{fs}_dirs")
    job_dir = dirs.node1
    tasks, ledger = job_dir / "tasks.txt", job_dir / "results.tsv.ledger"
    tasks.touch()
    witness = Witness(tmp_path / "w")
    env = {k: v for k, v in slurm_cluster.env.items() if not k.startswith("ZOTSINK_")}
    env.update(job_settings(tmp_path, job_dir, witness), ZOTSINK_ARGS="--jobs 2 --follow")
    job = submit_pull_array(slurm_cluster, job_dir, tmp_path, env)

    def runners_done() -> bool:
        q = slurm_cluster.run("squeue", "-h", "-j", job, "-o", "%i", check=False)
        return q.returncode != 0 or not q.stdout.strip()

    # the producers add through the other mounts of this host (MooseFS has two)
    via = [*dirs, dirs[-1]][:3]
    try:
        added = feed(tasks, via, witness, ledger, runners_done)
    finally:
        witness.release()
        slurm_cluster.run("scancel", job, check=False)
    rows = check(job_dir, added, witness)
    assert {r["array_task"] for r in rows if r["event"] == "start"} == {"1", "2", "3"}
    for i in (1, 2, 3):  # each runner ended by itself, exit 0
        shown = slurm_cluster.run("scontrol", "show", "job", f"{job}_{i}").stdout
        out = tmp_path / f"slurm-{i}.out"
        said = out.read_text(errors="replace")[-4000:] if out.exists() else "(no output)"
        assert "JobState=COMPLETED" in shown, f"{shown}\nelement {i} said:\n{said}"
    cluster_report(f"{fs}: 3 runners, {len(added)} lines added: {time.monotonic() - t0:.1f} s")


def test_sge_follow_runners_on_three_nodes_run_each_added_line_once(
    gluster_dirs, sge_cluster, tmp_path: Path, cluster_report
) -> None:
    t0 = time.monotonic()
    job_dir = gluster_dirs.node1
    tasks, ledger = job_dir / "tasks.txt", job_dir / "results.tsv.ledger"
    tasks.touch()
    witness = Witness(tmp_path / "w")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ZOTSINK_", "SLURM_"))}
    env.update(job_settings(tmp_path, job_dir, witness), ZOTSINK_ARGS="--jobs 2 --follow")
    jobs = []
    for node in sge_cluster.nodes:
        got = sge_cluster.run(
            "qsub", "-t", "1-1", "-q", f"all.q@{node}", str(PULL_SGE), env=env, cwd=tmp_path
        )
        jobs.append(sge_job(got.stdout + got.stderr))

    def runners_done() -> bool:
        listed = sge_cluster.run("qstat", "-u", "*").stdout.splitlines()[2:]
        return not {ln.split()[0] for ln in listed if ln.strip()} & set(jobs)

    try:
        added = feed(tasks, list(gluster_dirs), witness, ledger, runners_done)
    finally:
        witness.release()
        sge_cluster.run("qdel", "-f", *jobs)
    rows = check(job_dir, added, witness)
    # the ledger names a job as CLUSTER:JOB where the scheduler names its cluster
    assert {r["job"].rpartition(":")[2] for r in rows if r["event"] == "start"} == set(jobs)
    ended = [r for r in ledger_rows(ledger) if r["event"] == "end"]
    assert {r["status"] for r in ended} == {"ok"}
    cluster_report(f"3 runners, {len(added)} lines added: {time.monotonic() - t0:.1f} s")
