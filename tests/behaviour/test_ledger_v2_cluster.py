"""A job of another cluster: a site with several clusters has several jobs of one number, so
a ledger row's job names its cluster (``CLUSTER:JOB``), and this cluster's scheduler never
judges it. Its run's tasks are taken over only on the word of its own cluster
(``squeue -M CLUSTER``) that its element is no longer there.

The ledger is planted: a run on another host, of job ``othercluster:123`` element 4, that
claimed tasks 1 to 3 and began task 1. The run under test is an element of this cluster
(``thiscluster``), with a ``squeue`` on PATH that answers for this cluster only (job 123
is unknown here, as a job of another cluster is) and, asked with ``-M othercluster``,
either cannot reach that cluster or says the element is not there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.ledgers import Book

ZOTSINK = [sys.executable, "-m", "zotsink"]
LINES = [f"line{n}" for n in range(1, 7)]

# Logs each question; answers for this cluster's jobs (900: its own, running; any other:
# "Invalid job id", as Slurm says of a job it does not know); asked about another cluster
# with -M, does what $SQUEUE_OTHER says: "unreachable", or "gone" (the cluster's header
# line and no job: the element is not there).
SQUEUE = r"""#!/bin/sh
echo "$*" >> "{log}"
if [ "$1" = "-M" ]; then
    if [ "$SQUEUE_OTHER" = gone ]; then echo "CLUSTER: $2"; exit 0; fi
    echo "squeue: error: Problem talking to the database" >&2; exit 1
fi
case "$*" in
    *"-j 900 -o %e"*) echo "N/A"; exit 0 ;;
    *"-j 900"*) echo "RUNNING"; exit 0 ;;
esac
echo "slurm_load_jobs error: Invalid job id specified" >&2
exit 1
"""


@pytest.fixture
def d(tmp_path: Path) -> Path:
    (tmp_path / "bin").mkdir()
    script = tmp_path / "bin" / "squeue"
    script.write_text(SQUEUE.format(log=tmp_path / "asked"))
    script.chmod(0o755)
    (tmp_path / "tasks.txt").write_text("".join(f"{x}\n" for x in LINES))
    book = Book(
        tmp_path / "out.txt.ledger",
        host="far-node",
        hostid="0123456789ab.4026531999",
        pid=4242,
        start="777",
        job="othercluster:123",
        element="4",
    )
    for n in (1, 2, 3):
        book.claim(n, line=f"line{n}")
    book.begin(1, pid=4243, start="778").write()
    return tmp_path


def env(d: Path, other: str) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith(("ZOTSINK_", "SLURM_"))}
    e.update(
        PATH=f"{d / 'bin'}{os.pathsep}{os.environ['PATH']}",
        SLURM_JOB_ID="900",
        SLURM_CLUSTER_NAME="thiscluster",
        SQUEUE_OTHER=other,
    )
    return e


def run(d: Path, other: str, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [*ZOTSINK, "run", "tasks.txt", "out.txt", *args, "--", "echo"]
    return subprocess.run(
        argv, cwd=d, env=env(d, other), capture_output=True, text=True, timeout=120
    )


def committed(d: Path) -> list[str]:
    r = subprocess.run(
        [*ZOTSINK, "cat", "out.txt"], cwd=d, env=env(d, "gone"), capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()


def status(d: Path, other: str) -> dict[str, object]:
    r = subprocess.run(
        [*ZOTSINK, "status", "tasks.txt", "out.txt", "--json"],
        cwd=d,
        env=env(d, other),
        capture_output=True,
        text=True,
        timeout=120,
    )
    return json.loads(r.stdout)  # type: ignore[no-any-return]


@pytest.mark.parametrize("mode", [(), ("--pull",)], ids=["chunk", "pull"])
def test_a_job_of_another_cluster_is_never_judged_dead_by_this_one(
    d: Path, mode: tuple[str, ...]
) -> None:
    r = run(d, "unreachable", *mode)
    # its tasks stay with it: nothing here can tell whether it lives
    assert committed(d) == LINES[3:], r.stderr
    assert "3 tasks left running in runs whose life nothing here can tell" in r.stderr
    asked = (d / "asked").read_text().splitlines()
    assert "-M othercluster -h -j 123_4 -O State,RestartCnt" in asked  # its state and restarts
    assert not any(q.startswith("-h -j 123") for q in asked), "asked this cluster of its job"
    st = status(d, "unreachable")
    assert st["counts"]["running"] == 1 and st["counts"]["claimed"] == 2, st["counts"]  # type: ignore[index]
    assert st["unknown"] == "1-3"


@pytest.mark.parametrize("mode", [(), ("--pull",)], ids=["chunk", "pull"])
def test_a_job_its_own_cluster_says_is_gone_is_taken_over(d: Path, mode: tuple[str, ...]) -> None:
    r = run(d, "gone", *mode)
    assert r.returncode == 0, r.stderr
    assert sorted(committed(d)) == LINES
    assert "3 tasks of runs that died were run here" in r.stderr
    st = status(d, "gone")
    assert st["counts"]["ok"] == 6, st["counts"]  # type: ignore[index]
