"""A node lost, and a node frozen, in the middle of a ``zotsink run --pull`` array over the
three nodes of the test cluster under Slurm.

Killed: every process of the node at once (``slurm.sh kill``: its PID 1 SIGKILLed, so its
slurmd, the element's run and tasks and its FUSE clients die together, and its mounts go
with them), then Slurm told the node is DOWN, which ends its element as NODE_FAIL (the
array is submitted with ``--no-requeue``: Slurm's default would run it again). The runs on
the other nodes take the dead element's claimed tasks over only once Slurm no longer lists
it, each task is committed once, and ``zotsink status`` counts the dead element's attempts
lost. The node is revived in the teardown, so later tests see three nodes.

Frozen: every process of the node (slurmd and its FUSE clients too) SIGSTOPped for a
minute, less than Slurm's SlurmdTimeout, so Slurm keeps listing the element: the others
ask, hear it runs, and leave its tasks alone; resumed, it finishes them and nothing has
run twice.

The tasks are the witness of test_run_pull_cluster.py (a lock per task on this host's
disk, events to wait on).
"""

from __future__ import annotations

import collections
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_run_pull_cluster import (
    ZOTSINK,
    Witness,
    begun_by,
    check_each_task_once,
    job_settings,
    ran_by,
    squeue_wrapper,
    stop_each,
    submit_pull_array,
    taken_from,
    wait_for,
)

from tests.ledgers import ledger_rows

pytestmark = [pytest.mark.cluster, pytest.mark.xdist_group("cluster")]

# a node frozen this long; Slurm's SlurmdTimeout (slurm.sh) is longer
FREEZE = 60.0


@pytest.fixture
def killed_nodes(slurm_cluster) -> Iterator[list[str]]:
    """The nodes a test killed (it appends them); revived in its teardown."""
    killed: list[str] = []
    yield killed
    for name in killed:
        slurm_cluster.revive_node(name)


def array_env(slurm_cluster, job_dir: Path, tmp_path: Path, witness: Witness) -> tuple[dict, Path]:
    """The jobs' environment (squeue noted: see squeue_wrapper) and the squeue log."""
    bin_dir, asked = squeue_wrapper(slurm_cluster, tmp_path)
    env = {k: v for k, v in slurm_cluster.env.items() if not k.startswith("ZOTSINK_")}
    env.update(job_settings(tmp_path, job_dir, witness))
    env["PATH"] = f"{bin_dir}:{env.get('PATH', '')}"
    return env, asked


def answers(asked: Path, element: str) -> list[tuple[str, str]]:
    """Slurm's answers about ``element`` to the runs: (when, what squeue printed), in order;
    "" when it no longer listed the element."""
    out = []
    for line in asked.read_text().splitlines():
        when, args, code, said = line.split("\t")
        if f"-j {element} " in args + " " and code == "0":
            out.append((when, said))
    return out


def heard_it_runs(ledger: Path, asked: Path, element: str, others: int) -> bool:
    """The other elements ran their ``others`` tasks, and then asked Slurm about
    ``element`` and heard it runs."""
    rows = ledger_rows(ledger, lock=False)  # a frozen run may hold the lock
    oks = [r["time"] for r in rows if r["event"] == "end" and r["status"] == "ok"]
    if len(oks) < others:
        return False
    return any(what and when > max(oks) for when, what in answers(asked, element))


def array_done(slurm_cluster, job: str) -> bool:
    q = slurm_cluster.run("squeue", "-h", "-j", job, "-o", "%i", check=False)
    return q.returncode != 0 or not q.stdout.strip()


def status(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*ZOTSINK, "status", *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("fs", ["gluster", "moosefs"])
def test_pull_array_takes_over_a_dead_nodes_tasks_once_slurm_says_its_element_ended(
    fs: str, slurm_cluster, killed_nodes: list[str], tmp_path: Path, request, cluster_report
) -> None:
    t0 = time.monotonic()
    job_dir = request.getfixturevalue(f"{fs}_dirs").node1
    witness = Witness(tmp_path / "w")
    lines = [f"t{i:02d}" for i in range(1, 25)]
    tasks, results = job_dir / "tasks.txt", job_dir / "results.tsv"
    ledger = job_dir / "results.tsv.ledger"
    tasks.write_text("".join(f"{ln}\n" for ln in lines))
    env, asked = array_env(slurm_cluster, job_dir, tmp_path, witness)
    job = submit_pull_array(slurm_cluster, job_dir, tmp_path, env, "--no-requeue")
    element = f"{job}_2"
    try:
        # each element runs two tasks, which wait
        wait_for(lambda: len(witness.held()) == 6, "three elements holding two tasks each")
        by_element = collections.defaultdict(list)
        for line, who in witness.held().items():
            by_element[who].append(line)
        assert sorted(len(v) for v in by_element.values()) == [2, 2, 2], by_element
        assert len({who.split()[0] for who in by_element}) == 3, by_element  # one per node
        gone_who = next(who for who in by_element if who.endswith(" 2"))
        gone_lines = sorted(by_element[gone_who])
        node = gone_who.split()[0]
        wait_for(lambda: begun_by(ledger, "2") == set(gone_lines), "element 2's begin rows")

        # The others run every other task, then ask Slurm about element 2 and hear it
        # runs; only then does its node die.
        for line in lines:
            if line not in gone_lines:
                witness.release(line)
        wait_for(lambda: heard_it_runs(ledger, asked, element, len(lines) - 2), "the others asking")
        killed_nodes.append(node)
        slurm_cluster.kill_node(node)
        killed = time.monotonic()
        for line in gone_lines:
            witness.release(line)
        wait_for(lambda: array_done(slurm_cluster, job), "the other elements ended", 240, 0.5)
        took = time.monotonic() - killed
    finally:
        witness.release()
        slurm_cluster.run("scancel", job, check=False)

    # Slurm ended the element as NODE_FAIL and did not run it again
    shown = slurm_cluster.run("scontrol", "show", "job", element).stdout
    assert "JobState=NODE_FAIL" in shown and "Restarts=0" in shown, shown

    rows = check_each_task_once(job_dir, lines, witness)
    gone_nums = {lines.index(ln) + 1 for ln in gone_lines}
    # the dead element started only the tasks it held, and ended none
    assert ran_by(rows, lambda e: e == "2") == collections.Counter(gone_nums)
    assert not [r for r in rows if r["event"] == "end" and r["array_task"] == "2"]
    # the others started every task once, the dead element's too
    others = ran_by(rows, lambda e: e != "2")
    assert others == collections.Counter(range(1, len(lines) + 1)), others
    assert witness.ran() == collections.Counter(
        {**dict.fromkeys(lines, 1), **dict.fromkeys(gone_lines, 2)}
    )
    # taken over only after Slurm said the element had ended, never while it listed it
    said = answers(asked, element)
    said_gone = [when for when, what in said if not what]
    assert said_gone, asked.read_text()
    taken = [r["time"] for r in taken_from(rows, "2", gone_nums)]
    assert min(taken) > min(said_gone), (taken, said)
    said_alive = [when for when, what in said if what]
    assert said_alive and max(said_alive) < min(said_gone), said

    # what the runs and status say: two tasks of a run that died run again elsewhere,
    # the dead element's two attempts lost (not running), every task ok
    said_runs = "".join((tmp_path / f"slurm-{i}.out").read_text() for i in (1, 3))
    taken_over = sum(
        int(line.split("zotsink: ")[1].split()[0])
        for line in said_runs.splitlines()
        if line.endswith("tasks of runs that died were run here")
    )
    assert taken_over == 2, said_runs
    st = status(str(tasks), str(results))
    assert st.returncode == 0, st.stderr
    assert f"zotsink: {len(lines)} tasks: {len(lines)} ok\n" in st.stderr, st.stderr
    by = status(str(tasks), str(results), "--by", "element")
    table = {ln.split()[0]: ln.split()[1:5] for ln in by.stdout.splitlines()[1:]}
    # attempts, ok, not ok (lost), running
    assert table[f"{job}[2]"] == ["2", "0", "2", "0"], by.stdout
    assert sum(int(table[f"{job}[{i}]"][1]) for i in (1, 3)) == len(lines), by.stdout
    cluster_report(
        f"{fs}: {node} killed holding 2 of 24 tasks; all done {took:.1f} s later;"
        f" {time.monotonic() - t0:.1f} s in all"
    )


def stop_node(slurm_cluster, node: str) -> list[int]:
    """SIGSTOP every process of ``node`` until all are stopped: the node froze. Their pids."""
    return stop_each(lambda: slurm_cluster.node_pids(node))


def resume(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


def test_pull_array_leaves_a_frozen_node_alone_and_nothing_runs_twice(
    gluster_dirs, slurm_cluster, tmp_path: Path, cluster_report
) -> None:
    t0 = time.monotonic()
    job_dir = gluster_dirs.node1
    witness = Witness(tmp_path / "w")
    lines = [f"t{i:02d}" for i in range(1, 25)]
    (job_dir / "tasks.txt").write_text("".join(f"{ln}\n" for ln in lines))
    ledger = job_dir / "results.tsv.ledger"
    env, asked = array_env(slurm_cluster, job_dir, tmp_path, witness)
    job = submit_pull_array(slurm_cluster, job_dir, tmp_path, env, "--no-requeue")
    element = f"{job}_2"
    stopped: list[int] = []
    try:
        wait_for(lambda: len(witness.held()) == 6, "three elements holding two tasks each")
        frozen = sorted(line for line, who in witness.held().items() if who.endswith(" 2"))
        assert len(frozen) == 2, witness.held()
        node = witness.held()[frozen[0]].split()[0]
        stopped = stop_node(slurm_cluster, node)
        frozen_at = time.monotonic()
        witness.release()

        # The others finish the rest and ask Slurm about element 2 within the minute,
        # unless they wait on a ledger lock the frozen run holds (then they go on after
        # the thaw); either way the frozen element's tasks stay its own.
        heard = False
        while time.monotonic() - frozen_at < FREEZE:
            heard = heard or heard_it_runs(ledger, asked, element, len(lines) - 2)
            time.sleep(0.5)
        # not taken: claimed by element 2, by no other after it, begun by no other
        rows = ledger_rows(ledger, every=True, lock=False)
        frozen_nums = {int(r["tasknum"]) for r in rows if r["key"] in frozen}
        assert len(frozen_nums) == 2 and taken_from(rows, "2", frozen_nums) == [], rows
        assert not set(ran_by(rows, lambda e: e != "2")) & frozen_nums, rows
        shown = slurm_cluster.run("squeue", "-h", "-j", element, "-o", "%T").stdout.split()
        assert shown == ["RUNNING"], shown  # Slurm never gave up on the node
        resume(stopped)
        stopped = []
        wait_for(lambda: array_done(slurm_cluster, job), "every element finished", 240, 0.5)
    finally:
        resume(stopped)
        witness.release()
        slurm_cluster.run("scancel", job, check=False)

    rows = check_each_task_once(job_dir, lines, witness)
    assert witness.ran() == collections.Counter(lines)  # each once: nothing ran twice
    assert (
        sorted(r["key"] for r in rows if r["event"] == "end" and r["array_task"] == "2") == frozen
    )  # element 2 finished its own
    shown = slurm_cluster.run("scontrol", "show", "job", element).stdout
    assert "JobState=COMPLETED" in shown, shown
    cluster_report(
        f"{node} frozen {FREEZE:.0f} s, left alone ("
        + ("the others heard Slurm list it" if heard else "the others waited on its lock")
        + f"); {time.monotonic() - t0:.1f} s in all"
    )
