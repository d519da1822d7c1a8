"""Each task's records exactly once across two nodes, on GlusterFS and on CephFS (whose
metadata server grants the locks, as Lustre's does): two ``zotsink run`` on ONE
task list (no --index/--chunk split, so both compete for every task), node1 and node2 each
writing OUT, its ledger and its log through its own FUSE client; node2's run SIGKILLed
mid-run; then a resubmission on node3 through a third client. Some tasks fail once (and
are retried with --retries), some always fail.

Afterwards ``zotsink cat OUT`` holds each ok task's records exactly once and nothing of any
other attempt, the ledger holds exactly one ok end row per task, attempt numbers are unique,
and no task ever ran in two places at once (each task holds an flock on a file of this
host's disk while it runs, which the nodes share: a second holder would be refused).
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.ledgers import ledger_rows
from zotsink import ZotsinkError

pytestmark = [pytest.mark.cluster, pytest.mark.xdist_group("cluster")]

# A task: waits for the gate (so that both runs are claiming before any task ends), holds
# its task's witness lock, prints three records naming its attempt and node, and fails when
# told to. ZOTSINK_ATTEMPT is the attempt `run` claimed for it in the ledger.
TASK = r"""
import fcntl, os, socket, sys, time
witness, line = sys.argv[1], sys.argv[2]
attempt, host = os.environ["ZOTSINK_ATTEMPT"], socket.gethostname()
fd = os.open(os.path.join(witness, line + ".lock"), os.O_CREAT | os.O_RDWR, 0o644)
try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
except BlockingIOError:
    open(os.path.join(witness, f"TWICE-{line}-{attempt}-{host}"), "w").close()
open(os.path.join(witness, f"started-{host}-{line}-{attempt}"), "w").close()
while not os.path.exists(os.path.join(witness, "go")):
    time.sleep(0.02)
for i in range(3):
    print(f"{line}\t{attempt}\t{host}\t{i}", flush=True)
    time.sleep(0.1)
if line.endswith("-always") or (line.endswith("-once") and attempt == "1"):
    print(f"{line}: failing on purpose", file=sys.stderr)
    sys.exit(3)
"""

N = 40
# tasks 5, 10, ... fail their first attempt; 7 and 23 fail every attempt
ONCE = {t for t in range(5, N + 1, 5)}
ALWAYS = {7, 23}
RETRIES = 1
TIMEOUT = 90  # seconds for the whole scenario: a test here must stay under two minutes


def task_line(t: int) -> str:
    kind = "always" if t in ALWAYS else "once" if t in ONCE else "ok"
    return f"t{t:02d}-{kind}"


def wait_for(what: str, predicate, deadline: float, interval: float = 0.1) -> None:
    """Poll ``predicate`` until it holds; fail naming ``what`` at ``deadline``."""
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(interval)


def queued(slurm_cluster, *jobs: str) -> bool:
    res = slurm_cluster.run("squeue", "-h", "-o", "%i", "-j", ",".join(jobs), check=False)
    # squeue -j of a job that has left the queue may exit 1 ("Invalid job id")
    return bool(res.stdout.split())


def kill_run(job: str) -> int:
    """SIGKILL the ``zotsink run`` of Slurm job ``job`` and every process under it at once,
    as a node's crash or the OOM killer would: nothing of theirs gets to run again. (Slurm's
    ``scancel --signal=KILL`` cancels with SIGTERM first, which run handles.) How many
    processes were killed."""
    mark = f"SLURM_JOB_ID={job}".encode()
    parents: dict[int, int] = {}
    runs = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
            environ = (proc / "environ").read_bytes().split(b"\0")
        except OSError:  # ended meanwhile
            continue
        parents[int(proc.name)] = int(stat[stat.rindex(")") + 2 :].split()[1])
        if mark in environ and b"zotsink" in cmdline and b"run" in cmdline:
            runs.append(int(proc.name))
    assert len(runs) == 1, f"job {job}: zotsink run processes {runs}"
    tree, grew = set(runs), True
    while grew:
        below = {pid for pid, ppid in parents.items() if ppid in tree} - tree
        tree |= below
        grew = bool(below)
    # stopped first, so that none of them sees another die and reacts
    for sig in (signal.SIGSTOP, signal.SIGKILL):
        for pid in tree:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
    return len(tree)


@pytest.mark.parametrize("fs", ["gluster", "ceph"])
def test_two_nodes_one_task_list_a_kill_and_a_resubmission(
    fs_dirs, slurm_cluster, zotsink_cmd, tmp_path
):
    lines = [task_line(t) for t in range(1, N + 1)]
    (fs_dirs.node1 / "tasks.txt").write_text("".join(f"{ln}\n" for ln in lines))
    witness = tmp_path / "witness"  # this host's disk, seen by every node
    witness.mkdir()
    said = tmp_path / "said"
    said.mkdir()
    task = tmp_path / "task.py"
    task.write_text(TASK)
    env = {k: v for k, v in slurm_cluster.env.items() if not k.startswith("ZOTSINK_")}
    zotsink = " ".join(zotsink_cmd)

    def submit(node: str, where: Path, *extra: str) -> subprocess.CompletedProcess:
        job = (
            f"{zotsink} run {where}/tasks.txt {where}/out.tsv --jobs 2 --retries {RETRIES}"
            f" --columns task,attempt,host,i -- {sys.executable} {task} {witness} {{}}"
        )
        return subprocess.run(
            [
                "sbatch",
                "--parsable",
                f"--nodelist={node}",
                f"--chdir={tmp_path}",
                f"--output={said}/{node}-%j.out",
                *extra,
                f"--wrap={job}",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )

    def started(host: str) -> list[str]:
        return [p.name for p in witness.glob(f"started-{host}-*")]

    deadline = time.monotonic() + TIMEOUT
    jobs = {}
    for node, where in (("node1", fs_dirs.node1), ("node2", fs_dirs.node2)):
        res = submit(node, where)
        assert res.returncode == 0, res.stderr
        jobs[node] = res.stdout.strip().split(";")[0]
    # Both runs are claiming tasks before any task can end: they compete for the list.
    wait_for("a task started on each node", lambda: started("node1") and started("node2"), deadline)
    (witness / "go").touch()
    # node2's run dies mid-run, its tasks with it, with no chance to write anything.
    wait_for("4 tasks started on node2", lambda: len(started("node2")) >= 4, deadline)
    kill_run(jobs["node2"])
    wait_for(
        "both jobs to leave the queue", lambda: not queued(slurm_cluster, *jobs.values()), deadline
    )

    # The resubmission: the same job on a third node through a third client.
    res = submit("node3", fs_dirs.reader, "--wait")
    assert res.returncode == 1, res.stderr  # run's 1: the tasks that always fail

    ledger_path, out = fs_dirs.reader / "out.tsv.ledger", fs_dirs.reader / "out.tsv"

    def ledger_complete() -> bool:
        # Another client's appends reach this mount's view within about a second.
        try:
            rows = ledger_rows(ledger_path, every=True)
        except (OSError, ZotsinkError):
            return False
        done = {(r["tasknum"], r["attempt"]) for r in rows if r["event"] in ("end", "release")}
        ok = {r["tasknum"] for r in rows if r["event"] == "end" and r["status"] == "ok"}
        node3 = {
            (r["tasknum"], r["attempt"])
            for r in rows
            if r["host"] == "node3" and r["event"] == "start"  # not its run row (task 0)
        }
        return len(ok) == N - len(ALWAYS) and node3 <= done

    wait_for("node3's rows through the reader's mount", ledger_complete, deadline)
    rows = ledger_rows(ledger_path, every=True)
    starts = [r for r in rows if r["event"] == "start"]
    ends = [r for r in rows if r["event"] == "end"]
    given_back = {(r["tasknum"], r["attempt"]) for r in rows if r["event"] == "release"}

    # Both runs competed for the list, and the resubmission found work left.
    hosts = collections.Counter(r["host"] for r in starts)
    assert {"node1", "node2", "node3"} <= set(hosts), hosts
    # Attempt numbers are unique per task (1, 2, ... in the order they were claimed), and
    # no task ran on two nodes at once.
    attempts = collections.defaultdict(list)
    for r in starts:
        attempts[int(r["tasknum"])].append(int(r["attempt"]))
    assert sorted(attempts) == list(range(1, N + 1))
    for t, seen in attempts.items():
        assert seen == list(range(1, len(seen) + 1)), (t, seen)
    assert not list(witness.glob("TWICE-*")), sorted(p.name for p in witness.glob("TWICE-*"))

    # node2's run was killed with tasks of its own under way (claims neither ended nor given
    # back: a run gives back what it claimed ahead and could not start soon).
    ended = {(r["tasknum"], r["attempt"]) for r in ends} | given_back
    orphans = [r for r in starts if (r["tasknum"], r["attempt"]) not in ended]
    node2 = [" ".join(r.values()) for r in rows if r["host"] == "node2"]
    assert orphans and {r["host"] for r in orphans} == {"node2"}, "\n".join(node2)

    # Exactly one ok end row per task that can succeed, none for the others.
    ok = collections.Counter(int(r["tasknum"]) for r in ends if r["status"] == "ok")
    assert ok == {t: 1 for t in range(1, N + 1) if t not in ALWAYS}
    for t in ALWAYS:  # at least the resubmission's attempt and its retry, all failed
        statuses = [r["status"] for r in ends if int(r["tasknum"]) == t]
        assert len(statuses) >= 1 + RETRIES and set(statuses) == {"failed"}, (t, statuses)
    for t in ONCE:
        first = [r for r in ends if int(r["tasknum"]) == t and r["attempt"] == "1"]
        assert [r["status"] for r in first] in ([], ["failed"]), first

    # OUT's committed view: each ok task's three records, of its ok attempt, once.
    ok_attempt = {r["tasknum"]: r["attempt"] for r in ends if r["status"] == "ok"}
    size = max(int(r["out_offset"]) + int(r["bytes"]) for r in ends if r["out_offset"])
    wait_for("OUT's bytes through the reader's mount", lambda: out.stat().st_size >= size, deadline)
    cat = subprocess.run(
        [*zotsink_cmd, "cat", str(out)], capture_output=True, text=True, timeout=60
    )
    assert cat.returncode == 0, cat.stderr
    header, *records = cat.stdout.splitlines()
    assert header == "task\tattempt\thost\ti"
    got = collections.Counter((f[0], f[1], f[3]) for f in (r.split("\t") for r in records))
    want = collections.Counter(
        (task_line(int(t)), a, str(i)) for t, a in ok_attempt.items() for i in range(3)
    )
    assert got == want
    # ... while OUT itself also holds the failed attempts' lines, which the view leaves out.
    every = subprocess.run(
        [*zotsink_cmd, "cat", "--all", str(out)], capture_output=True, text=True, timeout=60
    )
    assert every.returncode == 0, every.stderr
    # Every attempt that ended appended its three lines; the killed ones appended nothing.
    assert len(every.stdout.splitlines()) - 1 == 3 * len(ends)
    assert len(ends) > len(ok_attempt)

    status = subprocess.run(
        [*zotsink_cmd, "status", str(fs_dirs.reader / "tasks.txt"), str(out), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert status.returncode == 1
    counts = json.loads(status.stdout)["counts"]
    assert {k: v for k, v in counts.items() if v} == {"ok": N - len(ALWAYS), "failed": len(ALWAYS)}
