"""``zotsink run --pull`` arrays over the three nodes of the test cluster, on GlusterFS and
MooseFS: one element ends mid-run (cancelled by the scheduler, or killed with every
process of its job) while it holds claimed tasks, and the other elements finish every
task, each task's records once in the table and one ``ok`` row per task in the ledger, no
resubmission; a dead element's tasks are taken over only once the scheduler says it ended.

Every task holds a witness lock (an flock of a file on this host's local disk, which the
nodes share) while it runs: a second holder of one task's witness at once is a task run
twice at once. Tasks wait for a file the test creates (events, not sleeps), so the test
knows which element holds which tasks when it ends one.
"""

from __future__ import annotations

import collections
import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.cluster, pytest.mark.xdist_group("cluster")]

JOBS = Path(__file__).resolve().parents[2] / "scripts" / "jobs"
PULL_SBATCH = JOBS / "zotsink-pull.sbatch"
PULL_SGE = JOBS / "zotsink-pull.sge"
ZOTSINK = [sys.executable, "-m", "zotsink"]

# argv[1]: the task line. Holds the line's witness lock (a second holder: double/), notes
# each start in ran/ (who ran it: host and array element), and unless released/ has the
# line or "all" waits for that, noting in held/ that it holds the line; then prints the line.
WITNESS = r"""
import fcntl, os, socket, sys, time
line, base = sys.argv[1], {base!r}
host = socket.gethostname()
who = host + " " + (os.environ.get("SLURM_ARRAY_TASK_ID") or os.environ.get("SGE_TASK_ID", ""))
me = f"{{line}}.{{host}}.{{os.getpid()}}"
fd = os.open(f"{{base}}/witness/{{line}}", os.O_RDWR | os.O_CREAT, 0o644)
try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
except OSError:
    open(f"{{base}}/double/{{me}}", "w").close()
    sys.exit(9)
with open(f"{{base}}/ran/{{me}}", "w") as f:
    f.write(who)
def released():
    return any(os.path.exists(f"{{base}}/released/{{n}}") for n in (line, "all"))
if not released():
    with open(f"{{base}}/held/{{me}}", "w") as f:
        f.write(who)
    while not released():
        time.sleep(0.05)
print(line, flush=True)
"""

# A squeue that notes every question and its answer (with the time it answered, before
# the caller gets it) and passes the real one's output on.
SQUEUE = r"""#!{python}
import subprocess, sys
from datetime import datetime, timezone
got = subprocess.run([{real!r}, *sys.argv[1:]], capture_output=True)
now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
answer = got.stdout.decode().split()
with open({log!r}, "a") as f:
    f.write("\t".join([now, " ".join(sys.argv[1:]), str(got.returncode), ",".join(answer)]) + "\n")
sys.stdout.buffer.write(got.stdout)
sys.stderr.buffer.write(got.stderr)
sys.exit(got.returncode)
"""


class Witness:
    """The witness's directories on local disk, and what they say."""

    def __init__(self, base: Path) -> None:
        self.base = base
        for d in ("witness", "ran", "double", "held", "released"):
            (base / d).mkdir(parents=True)
        self.script = base / "witness.py"
        self.script.write_text(WITNESS.format(base=str(base)))

    def held(self) -> dict[str, str]:
        """Each line a task holds now or held, and who (``host element``)."""
        return {p.name.split(".")[0]: p.read_text() for p in (self.base / "held").iterdir()}

    def ran(self) -> collections.Counter[str]:
        return collections.Counter(p.name.split(".")[0] for p in (self.base / "ran").iterdir())

    def doubles(self) -> list[str]:
        return sorted(os.listdir(self.base / "double"))

    def release(self, line: str = "all") -> None:
        (self.base / "released" / line).touch()


def wait_for(predicate, what: str, timeout: float = 180.0, poll: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {timeout:.0f} s: {what}")
        time.sleep(poll)


def ledger_rows(path: Path) -> list[dict[str, str]]:
    rows = path.read_text().splitlines()
    cols = rows[0].split("\t")
    return [dict(zip(cols, ln.split("\t"))) for ln in rows[1:]]


def ok_counts(ledger: Path) -> collections.Counter[int]:
    if not ledger.exists():
        return collections.Counter()
    return collections.Counter(
        int(r["tasknum"])
        for r in ledger_rows(ledger)
        if r["event"] == "end" and r["status"] == "ok"
    )


def committed(table: Path) -> list[str]:
    got = subprocess.run([*ZOTSINK, "cat", str(table)], capture_output=True, text=True, timeout=120)
    assert got.returncode == 0, got.stderr
    return got.stdout.splitlines()


def processes_of(**env: str) -> list[int]:
    """The pids (in this host's namespace) whose environment holds every ``VAR=value``."""
    want = {f"{var}={value}".encode() for var, value in env.items()}
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            env = Path(f"/proc/{name}/environ").read_bytes()
        except OSError:
            continue
        if want <= set(env.split(b"\0")):
            found.append(int(name))
    return found


def kill_all(**env: str) -> None:
    """SIGKILL every process whose environment holds ``env`` (the run, its tasks) until
    none is left: a job's crash, which its scheduler learns only when its shell dies."""
    while pids := processes_of(**env):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def job_settings(tmp_path: Path, job_dir: Path, witness: Witness) -> dict[str, str]:
    """The pull template's settings: the witness per task, two at once, one line per row."""
    return {
        "ZOTSINK": shlex.join(ZOTSINK),
        "TASKS": str(job_dir / "tasks.txt"),
        "RESULTS": str(job_dir / "results.tsv"),
        "PROCESS": f"{sys.executable} {witness.script}",
        "FIELDS": "line",
        "STAMP": "tasknum",
        "GRACE": "3",
        "ZOTSINK_ARGS": "--jobs 2",
    }


def check_each_task_once(job_dir: Path, lines: list[str], witness: Witness) -> list[dict]:
    """The committed view holds each line once, the ledger one ok row per task, and no
    task ran twice at once; the ledger's rows."""
    ledger = job_dir / "results.tsv.ledger"
    assert witness.doubles() == [], ledger.read_text()
    rows = committed(job_dir / "results.tsv")
    assert rows[0] == "tasknum\tline"
    assert sorted(rows[1:]) == sorted(f"{i}\t{line}" for i, line in enumerate(lines, 1))
    oks = ok_counts(job_dir / "results.tsv.ledger")
    assert oks == collections.Counter(range(1, len(lines) + 1))
    return ledger_rows(job_dir / "results.tsv.ledger")


@pytest.mark.parametrize("how", ["scancel", "sigkill"])
@pytest.mark.parametrize("fs", ["gluster", "moosefs"])
def test_pull_array_finishes_the_tasks_of_a_cancelled_element(
    fs: str, how: str, slurm_cluster, tmp_path: Path, request, cluster_report
) -> None:
    t0 = time.monotonic()
    job_dir = request.getfixturevalue(f"{fs}_dirs").node1
    witness = Witness(tmp_path / "w")
    lines = [f"t{i:02d}" for i in range(1, 41)]
    (job_dir / "tasks.txt").write_text("".join(f"{ln}\n" for ln in lines))
    # every question the runs ask Slurm, and its answer
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    asked = tmp_path / "squeue.log"
    asked.touch()
    real = shutil.which("squeue", path=slurm_cluster.env.get("PATH"))
    assert real, "squeue not found"
    wrapper = bin_dir / "squeue"
    wrapper.write_text(SQUEUE.format(python=sys.executable, real=real, log=str(asked)))
    wrapper.chmod(0o755)
    env = {k: v for k, v in slurm_cluster.env.items() if not k.startswith("ZOTSINK_")}
    env.update(job_settings(tmp_path, job_dir, witness))
    env["PATH"] = f"{bin_dir}:{env.get('PATH', '')}"

    # three elements, one on each node (each asks for a whole node's CPUs)
    sub = subprocess.run(
        ["sbatch", "--parsable", f"--chdir={job_dir}", "--array=1-3",
         f"--cpus-per-task={slurm_cluster.cpus // len(slurm_cluster.nodes)}",
         f"--output={tmp_path}/slurm-%a.out", str(PULL_SBATCH)],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert sub.returncode == 0, sub.stderr
    job = sub.stdout.strip().split(";")[0]
    try:
        # each element runs two tasks, which wait
        wait_for(lambda: len(witness.held()) == 6, "three elements holding two tasks each")
        held = witness.held()
        by_element = collections.defaultdict(list)
        for line, who in held.items():
            by_element[who].append(line)
        assert sorted(len(v) for v in by_element.values()) == [2, 2, 2], held
        hosts = {who.split()[0] for who in by_element}
        assert len(hosts) == 3, held  # one element per node
        gone_who = next(who for who in by_element if who.endswith(" 2"))
        gone_lines = sorted(by_element[gone_who])
        element = f"{job}_2"

        if how == "scancel":
            slurm_cluster.run("scancel", element)
        else:  # every process of the element ends at once, as in a crash
            kill_all(SLURM_ARRAY_JOB_ID=job, SLURM_ARRAY_TASK_ID="2")
        cancelled = time.monotonic()
        witness.release()

        def array_done() -> bool:
            q = slurm_cluster.run("squeue", "-h", "-j", job, "-o", "%i", check=False)
            return q.returncode != 0 or not q.stdout.strip()

        wait_for(array_done, "the other elements finished", timeout=240, poll=0.5)
        took = time.monotonic() - cancelled
    finally:
        witness.release()
        slurm_cluster.run("scancel", job, check=False)

    rows = check_each_task_once(job_dir, lines, witness)
    starts = [r for r in rows if r["event"] == "start"]
    ends = [r for r in rows if r["event"] == "end"]
    gone = [r for r in starts if r["array_task"] == "2"]
    gone_nums = {lines.index(ln) + 1 for ln in gone_lines}
    # the cancelled element ran only the tasks it held, and none of them to its end
    assert {int(r["tasknum"]) for r in gone} == gone_nums, gone
    assert not [r for r in ends if r["array_task"] == "2" and r["status"] == "ok"]
    # the others ran every task, the cancelled element's once more (each one at a time)
    others = collections.Counter(int(r["tasknum"]) for r in starts if r["array_task"] != "2")
    assert others == collections.Counter(range(1, len(lines) + 1)), others
    assert witness.ran() == collections.Counter(
        {**dict.fromkeys(lines, 1), **dict.fromkeys(gone_lines, 2)}
    )

    if how == "scancel":
        # Slurm's SIGTERM reached the run: it ended its tasks and said so
        assert sorted(int(r["tasknum"]) for r in ends if r["array_task"] == "2") == sorted(
            gone_nums
        )
        assert {r["status"] for r in ends if r["array_task"] == "2"} == {"interrupted"}
    else:
        # killed with its run: no end rows; taken over only after Slurm said the element
        # had ended (the first empty answer about it came before any start row of another)
        assert not [r for r in ends if r["array_task"] == "2"]
        said_gone = [
            ln.split("\t")[0]
            for ln in asked.read_text().splitlines()
            if f"-j {element} " in ln + " " and ln.split("\t")[2] == "0" and not ln.split("\t")[3]
        ]
        assert said_gone, asked.read_text()
        taken = [
            r["time"] for r in starts if r["array_task"] != "2" and int(r["tasknum"]) in gone_nums
        ]
        assert min(taken) > min(said_gone), (taken, said_gone)
        alive_said = [
            ln.split("\t")[0]
            for ln in asked.read_text().splitlines()
            if f"-j {element} " in ln + " " and ln.split("\t")[3]
        ]
        assert all(t < min(said_gone) for t in alive_said)
    cluster_report(
        f"{fs}, {how}: 3 elements x 2 at once, 40 tasks; all done {took:.1f} s after"
        f" the cancel; {time.monotonic() - t0:.1f} s in all"
    )
