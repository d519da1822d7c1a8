"""``zotsink.Executor`` on the test cluster: its elements an array job of Slurm (GlusterFS and
CephFS) or Grid Engine (GlusterFS) over the three nodes, its client a process on this host
(the login node).

The client is SIGKILLed halfway through its calls; the elements go on (they are the
scheduler's), and ``Executor.attach`` from a new process gives every call's result once,
no call begun twice, the calls spread over the nodes. ``cancel_futures`` cancels the
elements still queued (Slurm: ``scancel --state=PENDING``), the running ones finish their
calls and end, and the calls not begun are cancelled. Under Grid Engine, ``map`` over an
array of three ``qsub -t`` elements gives each result once, in order.

Every call holds a witness lock (an ``fcntl`` lock on a file named by its call's id,
``ZOTSINK_CALL_ID``, on this host's local disk, which the nodes share) and notes each
beginning with its key, host and array element; calls wait for a file the test creates
(events, not sleeps).
"""

from __future__ import annotations

import collections
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cluster.test_run_pull_cluster import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.xdist_group("cluster")]

REPO = str(Path(__file__).resolve().parents[2])

# The calls' module, written where the nodes see it (this host's local disk); the client's
# import path, which the elements get, holds its directory.
CALLS = r"""
import fcntl, os, socket, time


def witness(key, base, free):
    who = socket.gethostname() + " " + (
        os.environ.get("SLURM_ARRAY_TASK_ID") or os.environ.get("SGE_TASK_ID", "")
    )
    call = os.environ["ZOTSINK_CALL_ID"]  # the call's id: its future's
    fd = os.open(os.path.join(base, "witness", call), os.O_RDWR | os.O_CREAT | os.O_APPEND)
    try:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            open(os.path.join(base, "double", f"{key}.{os.getpid()}"), "w").close()
            raise
        os.write(fd, f"began {key} {who}\n".encode())
        if key >= free:
            while not os.path.exists(os.path.join(base, "go")):
                time.sleep(0.05)
        return key * key
    finally:
        os.close(fd)


def square(x):
    return x * x
"""

CLIENT = """
import concurrent.futures, sys
sys.path[:0] = [{repo!r}, {calls!r}]
from zotsink import Executor
from executor_calls import witness
d, base, n, scheduler, elements, args = sys.argv[1:7]
n = int(n)
ex = Executor(d, scheduler=scheduler, elements=int(elements), jobs=2, idle=120,
              submit_args=args.split() if args else [])
futures = [ex.submit(witness, i, base, n // 2) for i in range(n)]
print("submitted", flush=True)
done = 0
for f in concurrent.futures.as_completed(futures):
    f.result()
    done += 1
    if done == n // 2:
        print("half", flush=True)  # the second half waits for base/go: so does this client
"""

ATTACH = """
import json, sys
sys.path[:0] = [{repo!r}, {calls!r}]
from zotsink import Executor
ex = Executor.attach(sys.argv[1])
futures = ex.futures()
print(json.dumps([[f.id, f.task, f.result(600)] for f in futures]))
ex.shutdown()
"""

MAP = """
import json, sys
sys.path[:0] = [{repo!r}, {calls!r}]
from zotsink import Executor
from executor_calls import square
d, scheduler, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
with Executor(d, scheduler=scheduler, elements=3, jobs=2, idle=60) as ex:
    print(json.dumps(list(ex.map(square, range(n), chunksize=3))))
"""


class Calls:
    """The calls' module and the witness's directories on local disk, and what they say."""

    def __init__(self, base: Path) -> None:
        self.base = base
        for d in ("witness", "double", "module"):
            (base / d).mkdir(parents=True)
        (base / "module" / "executor_calls.py").write_text(CALLS)

    @property
    def module_dir(self) -> str:
        return str(self.base / "module")

    def began(self) -> dict[str, list[tuple[int, str]]]:
        """Each call's beginnings, by its id: its key, and who (host and array element)."""
        out = {}
        for p in (self.base / "witness").iterdir():
            lines = [ln.split(" ", 2) for ln in p.read_text().splitlines()]
            out[p.name] = [(int(key), who) for _began, key, who in lines]
        return out

    def doubles(self) -> list[str]:
        return sorted(os.listdir(self.base / "double"))

    def release(self) -> None:
        (self.base / "go").touch()


def events(d: Path) -> list[dict]:
    return [json.loads(ln) for ln in (d / "executor.jsonl").read_text().splitlines()[1:]]


def jobs_of(d: Path) -> list[str]:
    return [e["job"] for e in events(d) if e["event"] == "elements"]


def committed(d: Path) -> list[dict]:
    got = subprocess.run(
        [sys.executable, "-m", "zotsink", "cat", str(d / "results.jsonl")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert got.returncode == 0, got.stderr
    return [json.loads(line) for line in got.stdout.splitlines()]


def client_env(slurm_cluster) -> dict[str, str]:
    return {k: v for k, v in slurm_cluster.env.items() if not k.startswith("ZOTSINK_")}


@pytest.mark.parametrize("fs", ["gluster", "ceph"])
def test_slurm_client_killed_halfway_attach_gives_every_result_once(
    fs: str, slurm_cluster, tmp_path: Path, request, cluster_report
) -> None:
    t0 = time.monotonic()
    d = request.getfixturevalue(f"{fs}_dirs").node1 / "ex"
    calls = Calls(tmp_path / "w")
    env = client_env(slurm_cluster)
    cpus = slurm_cluster.cpus // len(slurm_cluster.nodes)
    n = 60
    client = subprocess.Popen(
        [
            sys.executable, "-c", CLIENT.format(repo=REPO, calls=calls.module_dir),
            str(d), str(calls.base), str(n), "slurm", "3", f"--cpus-per-task={cpus}",
        ],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert client.stdout is not None
        assert client.stdout.readline() == "submitted\n", client.stderr.read()  # type: ignore[union-attr]
        assert client.stdout.readline() == "half\n", client.stderr.read()  # type: ignore[union-attr]
        wait_for(lambda: len(calls.began()) > n // 2, "calls of the second half began")
    finally:
        client.send_signal(signal.SIGKILL)
        client.wait()
    (job,) = jobs_of(d)
    listed = slurm_cluster.run("squeue", "-h", "-j", job, "-o", "%i").stdout.split()
    assert listed, "the client's death ended the elements"
    calls.release()
    try:
        got = subprocess.run(
            [sys.executable, "-c", ATTACH.format(repo=REPO, calls=calls.module_dir), str(d)],
            env=env, capture_output=True, text=True, timeout=900,
        )  # fmt: skip
        assert got.returncode == 0, got.stderr

        def array_done() -> bool:
            q = slurm_cluster.run("squeue", "-h", "-j", job, "-o", "%i", check=False)
            return q.returncode != 0 or not q.stdout.strip()

        wait_for(array_done, "the elements ended once the list was closed", timeout=240)
    finally:
        calls.release()
        slurm_cluster.run("scancel", job, check=False)
    futures = json.loads(got.stdout)
    assert sorted(value for _id, _task, value in futures) == sorted(i * i for i in range(n))
    assert len({call_id for call_id, _task, _value in futures}) == n
    began = calls.began()
    # every call began once, none twice, each as the call its future names
    assert {call: [key for key, _who in b] for call, b in began.items()} == {
        call_id: [math.isqrt(value)] for call_id, _task, value in futures
    }
    assert calls.doubles() == []
    # the nodes the calls ran on: one element that started first may have claimed every
    # call (they were all listed before the elements began, and the first half is quick)
    # and holds the second half queued in its workers behind the calls that wait
    hosts = {b[0][1].split()[0] for b in began.values()}
    records = committed(d)
    assert len(records) == n and len({r["id"] for r in records}) == n
    assert set(os.listdir(d)) == {
        "calls.jsonl", "executor.jsonl", "results.jsonl", "results.jsonl.ledger",
    }  # fmt: skip
    cluster_report(f"{fs}: {n} calls, 3 elements x 2, client killed halfway: "
                   f"{time.monotonic() - t0:.1f} s, calls ran on {sorted(hosts)}")  # fmt: skip


def test_slurm_cancel_futures_cancels_the_queued_elements(
    gluster_dirs, slurm_cluster, tmp_path: Path, cluster_report
) -> None:
    t0 = time.monotonic()
    d = gluster_dirs.node1 / "ex"
    calls = Calls(tmp_path / "w")
    env = client_env(slurm_cluster)
    cpus = slurm_cluster.cpus // len(slurm_cluster.nodes)
    code = f"""
import concurrent.futures, json, sys
sys.path[:0] = [{REPO!r}, {calls.module_dir!r}]
from zotsink import Executor
from executor_calls import witness
# five elements of a whole node each on three nodes: two stay queued
ex = Executor({str(d)!r}, scheduler="slurm", elements=5, jobs=1, idle=120,
              submit_args=["--cpus-per-task={cpus}"])
futures = [ex.submit(witness, i, {str(calls.base)!r}, 0) for i in range(30)]
print("submitted", flush=True)
sys.stdin.readline()  # the test: three calls began
ex.shutdown(wait=False, cancel_futures=True)
print("cancelled", flush=True)
sys.stdin.readline()  # the test: released
concurrent.futures.wait(futures, timeout=600)
print(json.dumps([[f.cancelled(), None if f.cancelled() else f.result()] for f in futures]))
"""
    client = subprocess.Popen(
        [sys.executable, "-c", code], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    job = ""
    try:
        assert client.stdout is not None and client.stdin is not None
        assert client.stdout.readline() == "submitted\n"
        wait_for(lambda: len(calls.began()) == 3, "three elements began a call each")
        (job,) = jobs_of(d)
        pending = slurm_cluster.run("squeue", "-h", "-j", job, "-t", "PD", "-o", "%i").stdout
        assert pending.split(), "two elements should wait in the queue"
        client.stdin.write("\n")
        client.stdin.flush()
        assert client.stdout.readline() == "cancelled\n"
        wait_for(
            lambda: (
                not slurm_cluster.run(
                    "squeue", "-h", "-j", job, "-t", "PD", "-o", "%i"
                ).stdout.split()
            ),
            "the queued elements cancelled",
        )
        calls.release()
        client.stdin.write("\n")
        client.stdin.flush()
        out, err = client.communicate(timeout=900)
        assert client.returncode == 0, err
    finally:
        calls.release()
        if client.poll() is None:
            client.kill()
        if job:
            slurm_cluster.run("scancel", job, check=False)
    outcomes = json.loads(out.splitlines()[-1])
    began = {b[0][0] for b in calls.began().values()}
    assert len(began) == 3
    for key, (cancelled, value) in enumerate(outcomes):
        assert (cancelled, value) == ((False, key * key) if key in began else (True, None))
    ledger = (d / "results.jsonl.ledger").read_text().splitlines()
    assert any(row.startswith("stop\t") for row in ledger)  # the ledger says stopped
    cluster_report(f"5 elements, 2 queued and cancelled, 30 calls: {time.monotonic() - t0:.1f} s")


def test_sge_map_gives_each_result_once_in_order(
    gluster_dirs, sge_cluster, tmp_path: Path, cluster_report
) -> None:
    t0 = time.monotonic()
    d = gluster_dirs.node1 / "ex"
    calls = Calls(tmp_path / "w")
    n = 300
    got = sge_cluster.run(
        sys.executable, "-c", MAP.format(repo=REPO, calls=calls.module_dir), str(d), "sge",
        str(n), timeout=900, cwd=tmp_path,
    )  # fmt: skip
    try:
        assert got.returncode == 0, got.stderr
        assert json.loads(got.stdout) == [i * i for i in range(n)]
        records = committed(d)
        assert len(records) == n and len({r["id"] for r in records}) == n
        (job,) = jobs_of(d)
        wait_for(
            lambda: job not in sge_cluster.run("qstat", "-u", "*").stdout,
            "the elements ended once the list was closed",
            timeout=240,
        )
        hosts = {e["host"] for e in events(d) if e.get("state") == "began"}
        assert len(hosts) > 1  # the array's elements began on several nodes
    finally:
        for job in jobs_of(d) if (d / "executor.jsonl").exists() else []:
            sge_cluster.run("qdel", "-f", job)
    counts = collections.Counter(r["task"] for r in committed(d))
    assert set(counts.values()) == {3}  # chunks of three calls: each task's records once
    cluster_report(f"sge: map over {n} calls, 3 elements x 2: {time.monotonic() - t0:.1f} s")
