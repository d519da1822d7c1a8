"""The relay on the test cluster's three nodes (``zotsink run --pull --relay N``, ``zotsink
add --relay SCRIPT``): a chain of pull elements that keeps itself allocated, on GlusterFS
and CephFS under Slurm, and under Grid Engine; the dropbox with producers on two nodes and
no cron; the cron fallback, bounded; requeued elements (``scontrol requeue``) whose
results stay once.

ONE submission by the test starts a chain; every element after it is submitted by an
element before it (the template's own script again, from the compute node). A sampler
asks Slurm every 0.2 s how many elements of the chain are queued or running (every state
squeue lists, COMPLETING included) and folds the ledger's relay rows as often: neither
ever exceeds N. Elements run 30 s (``--deadline 30``: Slurm's time limits are whole
minutes). Every task holds a witness lock (an flock of a file on this host's disk, which
the nodes share) while it runs: a second holder at once is a task run twice at once.
Waits are on events (rows, squeue's answers), polled with a deadline.

Scale: the full acceptance (2,000 tasks of about 1 s, 30 s elements, N = 3, an element
scancelled, one SIGKILLed, an sbatch that fails three times) runs on GlusterFS; on CephFS
the same chain with 900 tasks and 15 s elements, no disruption (the chain still turns over
several times), and under Grid Engine 240 tasks with N = 2: the property each proves
(never more than N, every task once, the chain alive until the list is done) does not grow
with the count, the time does.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import random
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from zotsink._ledger.read import Snapshot
from zotsink._ledger.relay import Chain

pytestmark = [pytest.mark.cluster, pytest.mark.xdist_group("cluster")]

JOBS = Path(__file__).resolve().parents[2] / "scripts" / "jobs"
PULL_SBATCH = JOBS / "zotsink-pull.sbatch"
PULL_SGE = JOBS / "zotsink-pull.sge"
RUNNER = JOBS / "dropbox" / "runner.sbatch"
SUBMIT_RUNNER = JOBS / "dropbox" / "submit-runner.sh"
ZOTSINK = [sys.executable, "-m", "zotsink"]

# argv[1]: the task line. Holds the line's witness lock while it runs (a second holder at
# once notes itself in double/ and exits 9), sleeps, prints the line.
WITNESS = r"""
import fcntl, os, sys, time
line, base, seconds = sys.argv[1], {base!r}, {seconds!r}
fd = os.open(os.path.join(base, "witness", line), os.O_RDWR | os.O_CREAT, 0o644)
try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
except OSError:
    open(os.path.join(base, "double", f"{{line}}.{{os.getpid()}}"), "w").close()
    sys.exit(9)
time.sleep(seconds)
print(line, flush=True)
"""

# An sbatch first on the jobs' PATH: fails while the file `fail` holds a number above 0
# (counting it down, noting each failure's time), else runs the real one.
SBATCH = r"""#!{python}
import fcntl, os, sys, time
state = {state!r}
with open(os.path.join(state, "lock"), "a") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
        left = int(open(os.path.join(state, "fail")).read().strip() or 0)
    except (OSError, ValueError):
        left = 0
    if left > 0:
        open(os.path.join(state, "fail"), "w").write(str(left - 1))
        with open(os.path.join(state, "failed"), "a") as f:
            f.write(f"{{time.time()}}\n")
        print("sbatch: error: Batch job submission failed: the wrapper says no", file=sys.stderr)
        sys.exit(1)
with open(os.path.join(state, "calls"), "a") as f:
    f.write(f"{{time.time()}}\n")
os.execv({real!r}, [{real!r}, *sys.argv[1:]])
"""


class Witness:
    """The witness's directories on this host's disk, and its task script."""

    def __init__(self, base: Path, seconds: float) -> None:
        self.base = base
        for d in ("witness", "double"):
            (base / d).mkdir(parents=True)
        self.script = base / "witness.py"
        self.script.write_text(WITNESS.format(base=str(base), seconds=seconds))

    def doubles(self) -> list[str]:
        return sorted(os.listdir(self.base / "double"))


def wait_for(
    cond: Callable[[], bool],
    what: str,
    timeout: float = 300.0,
    poll: float = 0.2,
    said: Callable[[], str] | None = None,
) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            more = f"\n{said()}" if said is not None else ""
            pytest.fail(f"not within {timeout:.0f} s: {what}{more}")
        time.sleep(poll)


def chain_of(ledger: Path) -> Chain:
    """The relay rows of the ledger, folded."""
    chain = Chain()
    if ledger.exists():
        with Snapshot(ledger) as snap:
            chain.feed(snap.rows())
    return chain


def relay_rows(ledger: Path) -> list[dict[str, Any]]:
    out = []
    if ledger.exists():
        with Snapshot(ledger) as snap:
            for at, row in snap.rows():
                if row.kind in ("relay", "stop"):
                    out.append(
                        {"kind": row.kind, "at": at, "time": row.time, "run": row.run, **row.fields}
                    )
    return out


def ok_counts(ledger: Path) -> collections.Counter[int]:
    """Each task's ok ends, read through the row view."""
    from zotsink._ledger.format import parse_end_items

    got: collections.Counter[int] = collections.Counter()
    if ledger.exists():
        with Snapshot(ledger) as snap:
            for _at, row in snap.rows():
                if row.kind == "end":
                    got.update(
                        it.num for it in parse_end_items(row.fields["items"]) if it.status == "ok"
                    )
    return got


def committed(table: Path) -> list[str]:
    got = subprocess.run([*ZOTSINK, "cat", str(table)], capture_output=True, text=True, timeout=300)
    assert got.returncode == 0, got.stderr
    return got.stdout.splitlines()


class Sampler:
    """Every ``every`` seconds: how many of the chain's jobs (by name) squeue lists, and how
    many elements the relay rows say are queued or running (submissions under way
    included); the most of each, and the jobs seen."""

    def __init__(self, count_queue: Callable[[], list[str]], ledger: Path, every: float = 0.2):
        self.count_queue = count_queue
        self.ledger = ledger
        self.every = every
        self.most_queue = self.most_rows = 0
        self.samples = 0
        self.jobs: set[str] = set()
        self.over: list[tuple[float, list[str]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            queued = self.count_queue()
            self.jobs.update(queued)
            self.most_queue = max(self.most_queue, len(queued))
            chain = chain_of(self.ledger)
            live = [e for e in chain.open().values() if e.state != "exited"]
            rows = len(live) + len(chain.tickets)
            self.most_rows = max(self.most_rows, rows)
            if len(queued) > 3:
                self.over.append((time.time(), queued))
            self.samples += 1
            self._stop.wait(self.every)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


def processes_of(**env: str) -> list[int]:
    want = {f"{var}={value}".encode() for var, value in env.items()}
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            data = Path(f"/proc/{name}/environ").read_bytes()
        except OSError:
            continue
        if want <= set(data.split(b"\0")):
            found.append(int(name))
    return found


def kill_all(**env: str) -> None:
    """SIGKILL every process whose environment holds ``env`` until none is left."""
    while pids := processes_of(**env):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def runs_here(job_dir: Path) -> list[int]:
    """zotsink runs of ``job_dir``'s list in this host's own pid namespace (the "login"
    side), not a node's."""
    mine = os.readlink("/proc/self/ns/pid")
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{name}/ns/pid") != mine:
                continue
            cmd = Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"zotsink" in cmd and b"run" in cmd and any(str(job_dir).encode() in c for c in cmd):
            found.append(int(name))
    return found


def sbatch_wrapper(slurm_cluster, tmp_path: Path) -> tuple[Path, Path]:
    """The failing sbatch (see SBATCH) in a directory of its own: (the directory, its state)."""
    bin_dir, state = tmp_path / "bin", tmp_path / "sbatch-state"
    bin_dir.mkdir()
    state.mkdir()
    real = shutil.which("sbatch", path=slurm_cluster.env.get("PATH"))
    assert real, "sbatch not found"
    wrapper = bin_dir / "sbatch"
    wrapper.write_text(SBATCH.format(python=sys.executable, state=str(state), real=real))
    wrapper.chmod(0o755)
    return bin_dir, state


def end_chain(slurm_cluster, reader: Path, name: str) -> None:
    """Cleanup: ``zotsink stop`` (a chain hands its place on when an element is cancelled),
    then cancel whatever of it is still queued or running, until nothing is."""
    tasks, results = reader / "tasks.txt", reader / "results.tsv"
    if (reader / "results.tsv.ledger").exists():
        subprocess.run(
            [*ZOTSINK, "stop", str(tasks), str(results)], capture_output=True, timeout=120
        )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        jobs = slurm_cluster.run("squeue", "-h", "-n", name, "-o", "%i", check=False).stdout
        if not jobs.split():
            return
        slurm_cluster.run("scancel", "-n", name, check=False)
        time.sleep(1)


def slurm_env(slurm_cluster, job_dir: Path, witness: Witness, **more: str) -> dict[str, str]:
    env = {
        k: v for k, v in slurm_cluster.env.items() if not k.startswith(("ZOTSINK_", "SLURM_JOB"))
    }
    env.update(
        ZOTSINK=shlex.join(ZOTSINK),
        TASKS=str(job_dir / "tasks.txt"),
        RESULTS=str(job_dir / "results.tsv"),
        PROCESS=f"{sys.executable} {witness.script}",
        FIELDS="line",
        STAMP="",
        GRACE="3",
    )
    env.update(more)
    return env


# -- the chain under Slurm --------------------------------------------------------------------
#: tasks, each element's seconds, and whether elements are cancelled, killed and an sbatch
#: fails (see the module's docstring)
SCALE = {"gluster": (2000, 30, True), "ceph": (900, 15, False)}


@pytest.mark.parametrize("fs", ["gluster", "ceph"])
def test_a_chain_of_pull_elements_keeps_itself_allocated(
    fs: str, fs_dirs, slurm_cluster, tmp_path: Path, cluster_report
) -> None:
    count, seconds, disrupt = SCALE[fs]
    t0 = time.monotonic()
    job_dir, reader = fs_dirs.node1, fs_dirs.reader
    witness = Witness(tmp_path / "w", seconds=1.0)
    lines = [f"t{i:04d}" for i in range(1, count + 1)]
    (job_dir / "tasks.txt").write_text("".join(f"{ln}\n" for ln in lines))
    ledger = reader / "results.tsv.ledger"
    bin_dir, failing = sbatch_wrapper(slurm_cluster, tmp_path)
    name = f"relay-{uuid.uuid4().hex[:8]}"
    env = slurm_env(
        slurm_cluster, job_dir, witness, RELAY="3", ZOTSINK_ARGS=f"--jobs 8 --deadline {seconds}"
    )
    env["PATH"] = f"{bin_dir}:{env['PATH']}"  # the elements' sbatch: the wrapper
    real = shutil.which("sbatch", path=slurm_cluster.env.get("PATH"))

    def queue() -> list[str]:
        q = slurm_cluster.run("squeue", "-h", "-n", name, "-o", "%i", check=False)
        return q.stdout.split() if q.returncode == 0 else []

    def running_jobs() -> list[str]:
        """The chain's elements running now, by the rows (their job ids)."""
        chain = chain_of(ledger)
        return [e.job.rsplit(":", 1)[-1] for e in chain.open().values() if e.state == "running"]

    sub = subprocess.run(
        [
            real,
            "--parsable",
            "--array=1",
            f"--job-name={name}",
            "--cpus-per-task=4",
            "--output=/dev/null",
            f"--chdir={job_dir}",
            str(PULL_SBATCH),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert sub.returncode == 0, sub.stderr
    first = sub.stdout.strip().split(";")[0]
    notes: dict[str, Any] = {}
    try:
        with Sampler(queue, ledger) as sampler:
            wait_for(lambda: len(running_jobs()) == 3, "three elements running")
            assert runs_here(job_dir) == []  # no run on the login side: only the elements
            if disrupt:
                # a scancelled element: its run ends its tasks, says it exits, is replaced
                wait_for(lambda: len(ok_counts(ledger)) >= count // 8, "an eighth done")
                victim = running_jobs()[0]
                slurm_cluster.run("scancel", victim.split("_")[0])
                notes["scancel"] = victim
                wait_for(
                    lambda: _after(ledger, "exit", victim, "decide"), "the cancelled one replaced"
                )
                # a SIGKILLed element: no word from it; the scheduler says it is gone
                wait_for(lambda: len(ok_counts(ledger)) >= count // 3, "a third done")
                killed = ""

                def chosen() -> bool:
                    nonlocal killed
                    killed = _victim(ledger) or ""
                    return bool(killed)

                wait_for(chosen, "a successor running beside a younger element")
                kill_all(SLURM_JOB_ID=killed)
                notes["sigkill"] = killed
                wait_for(
                    lambda: _after(ledger, "gone", killed, "decide"),
                    "the killed one replaced",
                    said=lambda: _relay_tail(ledger, slurm_cluster, killed),
                )
                # an sbatch that fails three times: retried with growing pauses, recorded
                wait_for(lambda: len(ok_counts(ledger)) >= count // 2, "half done")
                (failing / "fail").write_text("3")
                wait_for(lambda: _fails_then_job(ledger) is not None, "three failures, then a job")
            wait_for(
                lambda: chain_of(ledger).ended is not None and not queue(),
                "the chain ended and nothing of it is queued",
                timeout=900,
            )
    finally:
        end_chain(slurm_cluster, reader, name)

    assert witness.doubles() == [], witness.doubles()
    rows = committed(reader / "results.tsv")
    # short of tasks: the relay rows say why the chain ended
    assert rows[0] == "line" and sorted(rows[1:]) == lines, relay_rows(ledger)[-8:]
    assert ok_counts(ledger) == collections.Counter(range(1, count + 1))
    chain = chain_of(ledger)
    assert chain.ended is not None and chain.ended.reason == "done", chain.ended
    assert sampler.most_queue <= 3 and sampler.most_rows <= 3, (sampler.over, sampler.most_rows)
    relays = relay_rows(ledger)
    submitted = [r["job"].rsplit(":", 1)[-1] for r in relays if r.get("what") == "job"]
    # ONE submission by the test: every other job the chain ever had, its rows submitted
    theirs = {j for j in sampler.jobs if j.split("_")[0] != first}  # the test's: first_1
    assert theirs <= set(submitted), (sampler.jobs, submitted)
    assert all(int(r["count"].split("/")[0]) < 3 for r in relays if r.get("what") == "decide")
    if disrupt:
        fails = [r for r in relays if r.get("what") == "fail"]
        assert len(fails) == 3 and all("the wrapper says no" in r["note"] for r in fails)
        tried = sorted(float(t) for t in (failing / "failed").read_text().split())
        after = [float(t) for t in (failing / "calls").read_text().split() if float(t) > tried[-1]]
        gaps = [b - a for a, b in zip([*tried, after[0]], [*tried[1:], after[0]])]
        assert gaps[0] >= 2.0 and gaps[1] >= 4.0 and gaps[2] >= 8.0, gaps  # never a storm
    status = subprocess.run(
        [*ZOTSINK, "status", str(reader / "tasks.txt"), str(reader / "results.tsv"), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    relay = json.loads(status.stdout)["relay"]
    assert relay["ended"]["reason"] == "done" and relay["n"] == 3
    cluster_report(
        f"{fs}: {count} tasks, --relay 3, {len(submitted)} successors; most queued or running "
        f"{sampler.most_queue} ({sampler.samples} samples); {time.monotonic() - t0:.0f} s"
    )


def _victim(ledger: Path, young: float = 8.0) -> str | None:
    """A running successor to SIGKILL while another running element joined within
    ``young`` seconds (most of its time ahead: it sees the victim gone and replaces it).
    The last running element killed within seconds after the others left leaves nobody to
    replace it, by design (docs/run.md, "Leave"): not what this test asks."""
    running = [e for e in chain_of(ledger).open().values() if e.state == "running"]
    now = time.time()
    for el in sorted(running, key=lambda e: e.time):
        job = el.job.rsplit(":", 1)[-1]
        if "_" not in job and any(o is not el and now - o.time < young for o in running):
            return job
    return None


def _relay_tail(ledger: Path, slurm_cluster, job: str) -> str:
    """For a failure: the relay rows from just before the first naming ``job`` (or the
    last 30), and what Slurm says of it; a copy of the ledger at ZOTSINK_KEEP_LEDGER."""
    rows = relay_rows(ledger)
    named = [i for i, r in enumerate(rows) if r.get("job", "").endswith(f":{job}")]
    start = max(0, (named[0] - 2) if named else len(rows) - 30)
    q = slurm_cluster.run("squeue", "-h", "-j", job, "-O", "State,RestartCnt", check=False)
    if os.environ.get("ZOTSINK_KEEP_LEDGER"):
        shutil.copyfile(ledger, os.environ["ZOTSINK_KEEP_LEDGER"])
    lines = "\n".join(str(r) for r in rows[start:][:60])
    return f"squeue -j {job}: {q.stdout.strip()!r} {q.stderr.strip()!r}\n{lines}"


def _after(ledger: Path, what: str, job: str, then: str) -> bool:
    """Whether a relay row ``what`` names job ``job`` and a ``then`` row follows it."""
    rows = relay_rows(ledger)
    at = next(
        (r["at"] for r in rows if r.get("what") == what and r["job"].endswith(f":{job}")), None
    )
    return at is not None and any(r.get("what") == then and r["at"] > at for r in rows)


def _fails_then_job(ledger: Path) -> int | None:
    """The offset of the first ``job`` row after three ``fail`` rows (None: not yet)."""
    fails = 0
    for r in relay_rows(ledger):
        if r.get("what") == "fail":
            fails += 1
        elif r.get("what") == "job" and fails >= 3:
            return int(r["at"])
    return None


def test_stop_ends_the_chain(gluster_dirs, slurm_cluster, tmp_path: Path) -> None:
    job_dir, reader = gluster_dirs.node1, gluster_dirs.reader
    witness = Witness(tmp_path / "w", seconds=1.0)
    (job_dir / "tasks.txt").write_text("".join(f"s{i:04d}\n" for i in range(1, 1001)))
    ledger = reader / "results.tsv.ledger"
    name = f"stop-{uuid.uuid4().hex[:8]}"
    env = slurm_env(slurm_cluster, job_dir, witness, RELAY="3", ZOTSINK_ARGS="--jobs 4")
    sub = subprocess.run(
        [
            "sbatch",
            "--parsable",
            "--array=1",
            f"--job-name={name}",
            "--output=/dev/null",
            f"--chdir={job_dir}",
            str(PULL_SBATCH),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert sub.returncode == 0, sub.stderr

    def queue() -> list[str]:
        return slurm_cluster.run("squeue", "-h", "-n", name, "-o", "%i").stdout.split()

    try:
        wait_for(
            lambda: sum(e.state == "running" for e in chain_of(ledger).open().values()) == 3,
            "three elements running",
        )
        stopped = subprocess.run(
            [*ZOTSINK, "stop", str(reader / "tasks.txt"), str(reader / "results.tsv")],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert stopped.returncode == 0, stopped.stderr
        wait_for(lambda: not queue(), "every element ended", timeout=240)
    finally:
        end_chain(slurm_cluster, reader, name)
    rows = relay_rows(ledger)
    stop = next(r["at"] for r in rows if r["kind"] == "stop")
    assert not [r for r in rows if r.get("what") == "decide" and r["at"] > stop]
    chain = chain_of(ledger)
    assert chain.ended is not None and chain.ended.reason == "stopped"
    assert len(ok_counts(ledger)) < 1000 and witness.doubles() == []
    said = subprocess.run(
        [*ZOTSINK, "status", str(reader / "tasks.txt"), str(reader / "results.tsv")],
        capture_output=True,
        text=True,
        timeout=120,
    ).stderr
    assert "`zotsink stop` ended the chain" in said


def test_a_list_whose_tasks_all_fail_ends_the_chain(
    gluster_dirs, slurm_cluster, tmp_path: Path
) -> None:
    job_dir, reader = gluster_dirs.node1, gluster_dirs.reader
    (job_dir / "tasks.txt").write_text("".join(f"f{i:03d}\n" for i in range(1, 201)))
    ledger = reader / "results.tsv.ledger"
    name = f"fail-{uuid.uuid4().hex[:8]}"
    env = slurm_env(
        slurm_cluster,
        job_dir,
        Witness(tmp_path / "w", 0.0),
        RELAY="3",
        PROCESS="false",
        ZOTSINK_ARGS="--jobs 4",
    )
    sub = subprocess.run(
        [
            "sbatch",
            "--parsable",
            "--array=1",
            f"--job-name={name}",
            "--output=/dev/null",
            f"--chdir={job_dir}",
            str(PULL_SBATCH),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert sub.returncode == 0, sub.stderr

    def queue() -> list[str]:
        return slurm_cluster.run("squeue", "-h", "-n", name, "-o", "%i").stdout.split()

    try:
        wait_for(lambda: chain_of(ledger).ended is not None and not queue(), "the chain ended")
    finally:
        end_chain(slurm_cluster, reader, name)
    chain = chain_of(ledger)
    assert chain.ended is not None and chain.ended.reason == "failing", chain.ended
    assert chain.submitted <= 3  # the chain's first fill, and nothing after the halt
    said = subprocess.run(
        [*ZOTSINK, "status", str(reader / "tasks.txt"), str(reader / "results.tsv")],
        capture_output=True,
        text=True,
        timeout=120,
    ).stderr
    assert ": failing: " in said and "relay chain ended at" in said


# -- the dropbox ----------------------------------------------------------------------------------
def test_the_dropbox_without_cron_producers_on_two_nodes(
    gluster_dirs, slurm_cluster, tmp_path: Path, cluster_report
) -> None:
    """The runner relays (RELAY=1, its settings in dropbox.env); producers on node2 and
    node3 ``zotsink add --relay``: the first add starts a runner, the others find it; the
    runner idles out between bursts and the next add starts another; every line once."""
    t0 = time.monotonic()
    job_dir, reader = gluster_dirs.node1, gluster_dirs.reader
    witness = Witness(tmp_path / "w", seconds=0.2)
    name = f"dropbox-{uuid.uuid4().hex[:8]}"
    tasks, ledger = job_dir / "tasks.txt", job_dir / "results.tsv.ledger"
    tasks.touch()
    (job_dir / "dropbox.env").write_text(
        f"ZOTSINK={shlex.quote(shlex.join(ZOTSINK))}\n"
        f"PROCESS={shlex.quote(f'{sys.executable} {witness.script}')}\n"
        "FIELDS=line\nSTAMP=\nGRACE=3\nIDLE=3\nRELAY=1\n"
    )
    runner = tmp_path / "runner.sbatch"
    runner.write_text(
        RUNNER.read_text().replace("--job-name=zotsink-dropbox", f"--job-name={name}")
    )
    env = {k: v for k, v in slurm_cluster.env.items() if not k.startswith("ZOTSINK_")}
    add = [*ZOTSINK, "add", str(tasks)]
    relay = ["--relay", str(runner), "--ledger", str(ledger)]

    def produce(node: str, prefix: str, burst: int) -> subprocess.Popen[str]:
        loop = " ; ".join(
            f"{shlex.join([*add, f'{prefix}{burst}-{i:02d}', *relay])} || exit 1"
            for i in range(1, 6)
        )
        return subprocess.Popen(
            [
                "sbatch",
                "--wait",
                f"--nodelist={node}",
                f"--output={tmp_path}/add-{prefix}{burst}.out",
                f"--chdir={tmp_path}",
                "--wrap",
                loop,
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def queue() -> list[str]:
        return slurm_cluster.run("squeue", "-h", "-n", name, "-o", "%i").stdout.split()

    added = 0
    try:
        for burst in (1, 2):
            producers = [produce("node2", "a", burst), produce("node3", "b", burst)]
            for p in producers:
                out, err = p.communicate(timeout=300)
                assert p.returncode == 0, out + err
            added += 10
            wait_for(lambda n=added: len(ok_counts(ledger)) == n, f"burst {burst} run", timeout=240)
            wait_for(lambda: not queue(), "the runner idled out", timeout=240)
    finally:
        end_chain(slurm_cluster, reader, name)
    lines = (reader / "tasks.txt").read_text().splitlines()
    assert len(lines) == 20 and witness.doubles() == []
    assert sorted(committed(reader / "results.tsv")[1:]) == sorted(lines)
    rows = relay_rows(reader / "results.tsv.ledger")
    adds = [r for r in rows if r.get("what") == "decide" and r["note"] == "add"]
    assert 2 <= len(adds) <= 4, rows  # a runner per burst (or a few: an idle-out between adds)
    ends = [r["note"] for r in rows if r.get("what") == "end"]
    assert ends and ends[-1].startswith("idle: ")
    cluster_report(
        f"dropbox, 2 bursts from 2 nodes, {len(adds)} runners: {time.monotonic() - t0:.0f} s"
    )


def test_the_cron_fallback_submits_a_bounded_number_of_runners(
    gluster_dirs, slurm_cluster, tmp_path: Path
) -> None:
    """A task that always fails: cron's ticks (the printed line, run with cron's bare
    environment) submit three runners, whose --max-attempts give it up; then none."""
    job_dir, reader = gluster_dirs.node1, gluster_dirs.reader
    (job_dir / "tasks.txt").write_text("always-fails\n")
    name = f"cron-{uuid.uuid4().hex[:8]}"
    env = {k: v for k, v in slurm_cluster.env.items() if not k.startswith("ZOTSINK_")}
    env.update(
        ZOTSINK=shlex.join(ZOTSINK),
        PROCESS="false",
        IDLE="2",
        GRACE="3",
        NAME=name,
        PYTHONPATH=str(Path(__file__).resolve().parents[2]),
    )
    got = subprocess.run(
        ["bash", str(SUBMIT_RUNNER), "--cron-line"],
        cwd=job_dir,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert got.returncode == 0, got.stderr
    command = got.stdout.strip().split(" ", 5)[5]

    def queue() -> list[str]:
        return slurm_cluster.run("squeue", "-h", "-n", name, "-o", "%i").stdout.split()

    submitted = 0
    try:
        for _tick in range(6):
            tick = subprocess.run(
                ["env", "-i", "HOME=/root", "/bin/sh", "-c", command],
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert tick.returncode == 0, tick.stderr
            if queue():
                submitted += 1
            wait_for(lambda: not queue(), "the runner ended", timeout=240)
    finally:
        end_chain(slurm_cluster, reader, name)
    log = job_dir / "results.tsv.cron.log"
    assert submitted == 3, log.read_text() if log.exists() else ""
    said = subprocess.run(
        [*ZOTSINK, "status", str(reader / "tasks.txt"), str(reader / "results.tsv")],
        capture_output=True,
        text=True,
        timeout=120,
    ).stderr
    assert "given up (failed 3 times)" in said


# -- Grid Engine ------------------------------------------------------------------------
def test_a_chain_under_grid_engine(
    gluster_dirs, sge_cluster, tmp_path: Path, cluster_report
) -> None:
    """The pull template under Grid Engine with RELAY=2: one qsub, the chain submits the
    rest (its spooled script again, its -t dropped); never more than 2 elements listed."""
    t0 = time.monotonic()
    job_dir, reader = gluster_dirs.node1, gluster_dirs.reader
    witness = Witness(tmp_path / "w", seconds=0.5)
    lines = [f"g{i:03d}" for i in range(1, 241)]
    (job_dir / "tasks.txt").write_text("".join(f"{ln}\n" for ln in lines))
    ledger = reader / "results.tsv.ledger"
    # the exec hosts submit: make them submit hosts, as a site that allows it has
    sge_cluster.run("qconf", "-as", ",".join(sge_cluster.nodes))
    name = f"sge{uuid.uuid4().hex[:8]}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ZOTSINK_", "SLURM_"))}
    env.update(
        ZOTSINK=shlex.join(ZOTSINK),
        TASKS=str(job_dir / "tasks.txt"),
        RESULTS=str(job_dir / "results.tsv"),
        PROCESS=f"{sys.executable} {witness.script}",
        FIELDS="line",
        STAMP="",
        GRACE="3",
        RELAY="2",
        ZOTSINK_ARGS="--jobs 3 --deadline 20",
    )

    def queue() -> list[str]:
        got = sge_cluster.run("qstat", "-u", "*")
        return [ln.split()[0] for ln in got.stdout.splitlines()[2:] if name in ln]

    got = sge_cluster.run(
        "qsub", "-t", "1-1", "-N", name, "-o", "/dev/null", str(PULL_SGE), env=env, cwd=job_dir
    )
    assert "has been submitted" in got.stdout, got.stdout + got.stderr
    try:
        with Sampler(queue, ledger) as sampler:
            wait_for(
                lambda: len(ok_counts(ledger)) == len(lines) and not queue(),
                "every task ok and the chain gone",
                timeout=600,
            )
    finally:
        for job in queue():
            sge_cluster.run("qdel", "-f", job)
    assert witness.doubles() == []
    assert sorted(committed(reader / "results.tsv")[1:]) == lines
    chain = chain_of(ledger)
    assert chain.submitted >= 1 and sampler.most_queue <= 2 and sampler.most_rows <= 2
    cluster_report(
        f"sge: {len(lines)} tasks, --relay 2, {chain.submitted} successors: "
        f"{time.monotonic() - t0:.0f} s"
    )


# -- requeue ------------------------------------------------------------------------------
def test_requeued_elements_keep_every_result_once(
    gluster_dirs, slurm_cluster, tmp_path: Path, cluster_report
) -> None:
    """30 random ``scontrol requeue`` of live pull elements during a 600-task run: each
    requeued element is the same job and index started again (its restart count one
    more); the run completes, each task ok once in ``cat``, no task begun twice at once,
    and the requeued elements' attempts are their own in ``status --by element``."""
    t0 = time.monotonic()
    job_dir, reader = gluster_dirs.node1, gluster_dirs.reader
    witness = Witness(tmp_path / "w", seconds=2.0)  # room for 30 requeues
    lines = [f"q{i:03d}" for i in range(1, 601)]
    (job_dir / "tasks.txt").write_text("".join(f"{ln}\n" for ln in lines))
    ledger = reader / "results.tsv.ledger"
    name = f"requeue-{uuid.uuid4().hex[:8]}"
    env = slurm_env(slurm_cluster, job_dir, witness, ZOTSINK_ARGS="--jobs 3")
    sub = subprocess.run(
        [
            "sbatch",
            "--parsable",
            "--array=1-4",
            f"--job-name={name}",
            "--output=/dev/null",
            f"--chdir={job_dir}",
            str(PULL_SBATCH),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert sub.returncode == 0, sub.stderr
    job = sub.stdout.strip().split(";")[0]

    def states() -> dict[str, str]:
        got = slurm_cluster.run("squeue", "-h", "-j", job, "-o", "%i %T", check=False)
        return dict(ln.split() for ln in got.stdout.splitlines() if ln.strip())

    requeued: collections.Counter[str] = collections.Counter()
    rng = random.Random(43)
    try:
        wait_for(
            lambda: list(states().values()).count("RUNNING") == 4 and ok_counts(ledger),
            "four elements running",
        )
        deadline = time.monotonic() + 600
        while sum(requeued.values()) < 30:
            live = sorted(e for e, s in states().items() if s == "RUNNING")
            if len(ok_counts(ledger)) > 560:
                pytest.fail(f"the run is almost done after {sum(requeued.values())} requeues")
            if not states() or time.monotonic() > deadline:
                pytest.fail(
                    f"no element queued or running after {sum(requeued.values())} requeues, "
                    f"{len(ok_counts(ledger))} of 600 tasks ok: "
                    + slurm_cluster.run("scontrol", "show", "job", job, check=False).stdout[-3000:]
                )
            if live:
                element = rng.choice(live)
                got = slurm_cluster.run("scontrol", "requeue", element, check=False)
                if got.returncode == 0:
                    requeued[element] += 1
                    # a site would start it again when a node is free: here at once
                    wait_for(
                        lambda e=element: states().get(e) in ("PENDING", None),
                        f"{element} requeued",
                        timeout=60,
                        poll=0.1,
                    )
                    # the node's cleanup of the earlier start may lag its PENDING state (a
                    # start at once then fails at launch, exit 1, and is not requeued)
                    time.sleep(2.0)
                    slurm_cluster.run(
                        "scontrol", "update", f"jobid={element}", "starttime=now", check=False
                    )
            time.sleep(rng.uniform(0.5, 1.5))
        wait_for(lambda: not states(), "the array finished", timeout=900, poll=0.5)
    finally:
        slurm_cluster.run("scancel", job, check=False)

    assert witness.doubles() == [], witness.doubles()
    assert sorted(committed(reader / "results.tsv")[1:]) == lines
    assert ok_counts(ledger) == collections.Counter(range(1, len(lines) + 1))
    by = subprocess.run(
        [
            *ZOTSINK,
            "status",
            str(reader / "tasks.txt"),
            str(reader / "results.tsv"),
            "--by",
            "element",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    table = {r["element"]: r for r in json.loads(by.stdout)["by"]}
    restarted = {n for n in table if " restart " in n}
    assert restarted, table
    # every restart an element ran tasks in is a row of its own, named by its restart count
    for n in restarted:
        index = n.split("[", 1)[1].split("]", 1)[0]
        assert requeued[f"{job}_{index}"] >= int(n.rsplit(" ", 1)[1]), (n, requeued)
    cluster_report(
        f"requeue: {sum(requeued.values())} requeues over {len(requeued)} elements, "
        f"{len(restarted)} restarts ran tasks: {time.monotonic() - t0:.0f} s"
    )
