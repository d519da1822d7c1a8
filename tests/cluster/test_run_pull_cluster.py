"""``zotsink run --pull`` arrays over the three nodes of the test cluster, on GlusterFS,
MooseFS and CephFS: one element ends mid-run (cancelled by the scheduler, or killed with
every process of its job) while it holds claimed tasks, and the other elements finish every
task, each task's records once in the table and one ``ok`` row per task in the ledger, no
resubmission; a dead element's tasks are taken over only once the scheduler says it ended.
The dropbox recipe (scripts/jobs/dropbox) on Slurm: producers on two nodes ``zotsink add``
while the runner job follows the list; the cron check submits a runner only when tasks
wait and none is queued or running; the runner idles out, or ends on ``zotsink close``.
Under Grid Engine: an array task that ended is dead while its sibling lives, and the job's
end (start and ``h_rt``) is --deadline's default. A SIGSTOPped element (a frozen node) is
never robbed while Slurm shows it.

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
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.ledgers import begins, ledger_rows
from zotsink import ZotsinkError

pytestmark = [pytest.mark.cluster, pytest.mark.xdist_group("cluster")]

JOBS = Path(__file__).resolve().parents[2] / "scripts" / "jobs"
PULL_SBATCH = JOBS / "zotsink-pull.sbatch"
PULL_SGE = JOBS / "zotsink-pull.sge"
SUBMIT_RUNNER = JOBS / "dropbox" / "submit-runner.sh"
ZOTSINK = [sys.executable, "-m", "zotsink"]

# argv[1]: the task line. Holds the line's witness lock (a second holder: double/), notes
# each start in ran/ (who ran it: host and array element), and unless released/ has the
# line or "all" (not for a line hold...) waits for that, noting in held/ that it holds the
# line; then prints the line.
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
    # a line named hold... waits for its own release only
    names = (line,) if line.startswith("hold") else (line, "all")
    return any(os.path.exists(f"{{base}}/released/{{n}}") for n in names)
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


def ok_counts(ledger: Path) -> collections.Counter[int]:
    """How many ok ends each task has (none while this mount cannot read the ledger yet)."""
    try:
        rows = ledger_rows(ledger)
    except ZotsinkError:  # its header not yet seen through this client
        return collections.Counter()
    return collections.Counter(
        int(r["tasknum"]) for r in rows if r["event"] == "end" and r["status"] == "ok"
    )


def ran_by(rows: list[dict[str, str]], element: Callable[[str], bool]) -> collections.Counter[int]:
    """How many attempts of each task the array elements ``element`` picks began (a begin
    row, or an end row: a task that ended a moment after its start may have no begin row)."""
    began = {
        (int(r["tasknum"]), r["attempt"])
        for r in rows
        if r["event"] in ("begin", "end") and element(r["array_task"])
    }
    return collections.Counter(num for num, _attempt in began)


def taken_from(rows: list[dict[str, str]], element: str, nums: set[int]) -> list[dict[str, str]]:
    """The claims of tasks ``nums`` by other elements after array element ``element``
    claimed them (rows in the ledger's order): its tasks taken over."""
    claimed: set[int] = set()
    taken = []
    for r in rows:
        num = int(r["tasknum"])
        if r["event"] != "start" or num not in nums:
            continue
        if r["array_task"] == element:
            claimed.add(num)
        elif num in claimed:
            taken.append(r)
    return taken


def begun_by(ledger: Path, element: str) -> set[str]:
    """The lines whose begin row array element ``element`` wrote (its tasks' processes
    named: once they have run a moment)."""
    try:
        return {r["key"] for r in begins(ledger) if r["array_task"] == element}
    except ZotsinkError:
        return set()


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


def stop_all(**env: str) -> list[int]:
    """SIGSTOP every process whose environment holds ``env`` until all of them are
    stopped (none started one since): an element that froze. Their pids."""
    return stop_each(lambda: processes_of(**env))


def stop_each(pids_of: Callable[[], list[int]]) -> list[int]:
    """SIGSTOP every process ``pids_of`` lists until all of them are stopped (none started
    one since). Their pids."""
    while True:
        pids = pids_of()
        running = [pid for pid in pids if _state(pid) not in ("T", "")]
        if not running:
            return pids
        for pid in running:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)


def _state(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat[stat.rindex(")") + 2 :].split()[0]


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


def submit_pull_array(
    slurm_cluster, job_dir: Path, tmp_path: Path, env: dict[str, str], *opts: str
) -> str:
    """The pull template as an array of three elements, one on each node (each asks for a
    whole node's CPUs), with more sbatch ``opts``; the job id."""
    cpus = slurm_cluster.cpus // len(slurm_cluster.nodes)
    sub = subprocess.run(
        [
            *("sbatch", "--parsable", *opts, f"--chdir={job_dir}", "--array=1-3"),
            *(f"--cpus-per-task={cpus}", f"--output={tmp_path}/slurm-%a.out", str(PULL_SBATCH)),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert sub.returncode == 0, sub.stderr
    return sub.stdout.strip().split(";")[0]


def check_each_task_once(job_dir: Path, lines: list[str], witness: Witness) -> list[dict]:
    """The committed view holds each line once, the ledger one ok row per task, and no
    task ran twice at once; the ledger's rows."""
    ledger = job_dir / "results.tsv.ledger"
    assert witness.doubles() == [], ledger_rows(ledger, every=True)
    rows = committed(job_dir / "results.tsv")
    assert rows[0] == "tasknum\tline"
    assert sorted(rows[1:]) == sorted(f"{i}\t{line}" for i, line in enumerate(lines, 1))
    oks = ok_counts(job_dir / "results.tsv.ledger")
    assert oks == collections.Counter(range(1, len(lines) + 1))
    return ledger_rows(job_dir / "results.tsv.ledger", every=True)


@pytest.mark.parametrize("how", ["scancel", "sigkill"])
@pytest.mark.parametrize("fs", ["gluster", "moosefs", "ceph"])
def test_pull_array_finishes_the_tasks_of_a_cancelled_element(
    fs: str, how: str, slurm_cluster, tmp_path: Path, request, cluster_report
) -> None:
    t0 = time.monotonic()
    job_dir = request.getfixturevalue(f"{fs}_dirs").node1
    witness = Witness(tmp_path / "w")
    lines = [f"t{i:02d}" for i in range(1, 41)]
    (job_dir / "tasks.txt").write_text("".join(f"{ln}\n" for ln in lines))
    bin_dir, asked = squeue_wrapper(slurm_cluster, tmp_path)  # what the runs ask Slurm
    env = {k: v for k, v in slurm_cluster.env.items() if not k.startswith("ZOTSINK_")}
    env.update(job_settings(tmp_path, job_dir, witness))
    env["PATH"] = f"{bin_dir}:{env.get('PATH', '')}"

    job = submit_pull_array(slurm_cluster, job_dir, tmp_path, env)
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
        ledger = job_dir / "results.tsv.ledger"
        wait_for(lambda: begun_by(ledger, "2") == set(gone_lines), "element 2's begin rows")

        if how == "scancel":
            slurm_cluster.run("scancel", element)
            # scancel returns before Slurm's SIGTERM reaches the run: released at once, its
            # held tasks could end ok and the run claim more before the signal came
            wait_for(
                lambda: not processes_of(SLURM_ARRAY_JOB_ID=job, SLURM_ARRAY_TASK_ID="2"),
                "the cancelled element's run and tasks ended",
            )
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
    ends = [r for r in rows if r["event"] == "end"]
    gone_nums = {lines.index(ln) + 1 for ln in gone_lines}
    # the cancelled element ran only the tasks it held, and none of them to its end
    gone = ran_by(rows, lambda e: e == "2")
    assert gone == collections.Counter(gone_nums), gone
    assert not [r for r in ends if r["array_task"] == "2" and r["status"] == "ok"]
    # the others ran every task, the cancelled element's once more (each one at a time)
    others = ran_by(rows, lambda e: e != "2")
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
        # had ended (the first empty answer about it came before any claim of them by another)
        assert not [r for r in ends if r["array_task"] == "2"]
        said_gone = [
            ln.split("\t")[0]
            for ln in asked.read_text().splitlines()
            if f"-j {element} " in ln + " " and ln.split("\t")[2] == "0" and not ln.split("\t")[3]
        ]
        assert said_gone, asked.read_text()
        taken = [r["time"] for r in taken_from(rows, "2", gone_nums)]
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


def test_dropbox_producers_on_two_nodes_a_follow_runner_and_the_cron_check(
    gluster_dirs, slurm_cluster, tmp_path: Path, cluster_report
) -> None:
    t0 = time.monotonic()
    job_dir = gluster_dirs.node1
    tasks, results = job_dir / "tasks.txt", job_dir / "results.tsv"
    witness = Witness(tmp_path / "w")
    witness.release()  # every line runs at once, but hold... lines
    env = {k: v for k, v in slurm_cluster.env.items() if not k.startswith("ZOTSINK_")}
    env.update(job_settings(tmp_path, job_dir, witness))
    env.update(NAME=f"zotsink-dropbox-{tmp_path.name[-12:]}", IDLE="4")
    added: list[str] = []

    def add(*lines: str) -> None:
        got = subprocess.run([*ZOTSINK, "add", str(tasks), *lines], capture_output=True,
                             text=True, timeout=120)  # fmt: skip
        assert got.returncode == 0, got.stderr
        added.extend(lines)

    def cron(**more: str) -> str:
        """submit-runner.sh as cron runs it: what sbatch said, if it ran."""
        got = subprocess.run(
            ["bash", str(SUBMIT_RUNNER)], env={**env, **more}, cwd=job_dir,
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert got.returncode == 0, got.stdout + got.stderr
        return got.stdout

    def runners() -> list[str]:
        q = slurm_cluster.run("squeue", "-h", "-n", env["NAME"], "-o", "%i")
        return q.stdout.split()

    def produce(node: str, prefix: str) -> subprocess.Popen:
        """A producer job on ``node``: ten lines, one ``zotsink add`` each."""
        loop = (
            f"for i in $(seq -w 1 10); do {shlex.join(ZOTSINK)} add {shlex.quote(str(tasks))}"
            f" {prefix}$i || exit 1; done"
        )
        return subprocess.Popen(
            ["sbatch", "--wait", f"--nodelist={node}", f"--output={tmp_path}/add-{prefix}.out",
             f"--chdir={tmp_path}", "--wrap", loop],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip

    try:
        # nothing waits (no list yet, then an empty one): no runner
        tasks.touch()
        assert cron() == "" and runners() == []
        # the first task holds the runner busy while the producers add
        add("hold1", "first")
        assert "Submitted batch job" in cron()
        assert cron() == ""  # a runner is queued or running: nothing more is submitted
        assert len(runners()) == 1
        wait_for(lambda: "hold1" in witness.held(), "the runner holding its first task")
        producers = [produce("node2", "a"), produce("node3", "b")]
        for p in producers:
            out, err = p.communicate(timeout=300)
            assert p.returncode == 0, (
                out + err + "".join(f.read_text() for f in tmp_path.glob("add-*.out"))
            )
        added.extend(f"{prefix}{i:02d}" for prefix in "ab" for i in range(1, 11))
        # the runner is still live: tasks are running or waiting, so cron submits nothing
        assert cron() == "" and len(runners()) == 1
        witness.release("hold1")
        # the runner takes everything added, then idles out
        wait_for(lambda: not runners(), "the runner idled out", timeout=240, poll=0.5)
        assert ok_counts(results.with_name("results.tsv.ledger")) == collections.Counter(
            range(1, len(added) + 1)
        )
        assert cron() == ""  # nothing waits: no runner
        # more lines later: cron submits a runner again, which ends on close
        add(*(f"c{i:02d}" for i in range(1, 6)))
        assert "Submitted batch job" in cron(IDLE="600")
        assert cron(IDLE="600") == ""
        wait_for(
            lambda: len(ok_counts(results.with_name("results.tsv.ledger"))) == len(added),
            "the second runner ran the new lines",
        )
        closed = subprocess.run([*ZOTSINK, "close", str(tasks), str(results)],
                                capture_output=True, text=True, timeout=120)  # fmt: skip
        assert closed.returncode == 0, closed.stderr
        wait_for(lambda: not runners(), "the runner ended on close", timeout=240, poll=0.5)
    finally:
        witness.release("hold1")
        for job in runners():
            slurm_cluster.run("scancel", job, check=False)

    # each producer's numbers: ten, all different, none of another's
    numbers = [n for f in sorted(tmp_path.glob("add-*.out")) for n in f.read_text().split()]
    assert len(numbers) == 20 and len(set(numbers)) == 20, numbers
    lines = tasks.read_text().splitlines()
    assert sorted(lines) == sorted(added) and len(lines) == 27
    check_each_task_once(job_dir, lines, witness)
    assert witness.ran() == collections.Counter(lines)
    starts = [
        r for r in ledger_rows(results.with_name("results.tsv.ledger")) if r["event"] == "start"
    ]
    assert len({r["job"] for r in starts}) == 2  # two runners, one after the other
    cluster_report(f"27 lines from 3 places, 2 runners: {time.monotonic() - t0:.1f} s")


def sge_job(out: str) -> str:
    """The job number qsub printed."""
    assert "has been submitted" in out, out
    return out.split("job-array ")[1].split(".")[0] if "job-array" in out else out.split()[2]


@pytest.mark.parametrize("how", ["qdel", "sigkill"])
def test_sge_pull_array_one_task_ends_while_its_sibling_lives(
    gluster_dirs, sge_cluster, tmp_path: Path, how: str, cluster_report
) -> None:
    """Array J's two tasks on node2 and a third run on node1: J's task 2 ends (qdel, or
    every process of it SIGKILLed) while its sibling holds a task; the run on node1 runs
    task 2's tasks once Grid Engine no longer lists that task, never its sibling's."""
    t0 = time.monotonic()
    job_dir = gluster_dirs.node1
    witness = Witness(tmp_path / "w")
    lines = [f"t{i:02d}" for i in range(1, 13)]
    (job_dir / "tasks.txt").write_text("".join(f"{ln}\n" for ln in lines))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ZOTSINK_", "SLURM_"))}
    env.update(job_settings(tmp_path, job_dir, witness), ZOTSINK_ARGS="--jobs 1")
    ledger = job_dir / "results.tsv.ledger"

    def qsub(*args: str) -> str:
        got = sge_cluster.run("qsub", *args, str(PULL_SGE), env=env, cwd=tmp_path)
        return sge_job(got.stdout + got.stderr)

    array = qsub("-t", "1-2", "-q", "all.q@node2")
    other = qsub("-t", "1-1", "-q", "all.q@node1")
    try:
        wait_for(lambda: len(witness.held()) == 3, "three runs holding a task each")
        held = {who: line for line, who in witness.held().items()}
        assert sorted(held) == ["node1 1", "node2 1", "node2 2"], held
        gone_line, sibling_line = held["node2 2"], held["node2 1"]
        gone_num = lines.index(gone_line) + 1
        if how == "qdel":
            got = sge_cluster.run("qdel", array, "-t", "2")
            assert got.returncode == 0, got.stdout + got.stderr
        else:
            kill_all(JOB_ID=array, SGE_TASK_ID="2")
        for line in lines:
            if line != sibling_line:
                witness.release(line)

        def taken_over() -> bool:
            return any(
                r["event"] == "end" and r["status"] == "ok" and r["host"] == "node1"
                for r in ledger_rows(ledger)
                if int(r["tasknum"]) == gone_num
            )

        # with the sibling still running, task 2's is run on node1
        wait_for(taken_over, f"node1 running {gone_line}, which task 2 held", timeout=240)
        took = time.monotonic() - t0
        listed = sge_cluster.run("qstat", "-g", "d", "-u", "*").stdout
        assert any(
            ln.split()[:1] == [array] and ln.split()[-1] == "1" for ln in listed.splitlines()
        ), listed  # the sibling was alive all along
        assert witness.ran()[sibling_line] == 1  # and kept its task
        witness.release(sibling_line)

        def all_gone() -> bool:
            q = sge_cluster.run("qstat", "-u", "*").stdout.split()
            return array not in q and other not in q

        wait_for(all_gone, "the runs finished", timeout=240, poll=0.5)
    finally:
        witness.release()
        sge_cluster.run("qdel", "-f", array, other)

    rows = check_each_task_once(job_dir, lines, witness)
    assert witness.ran() == collections.Counter({**dict.fromkeys(lines, 1), gone_line: 2})
    gone_ends = [r for r in rows if r["event"] == "end" and r["array_task"] == "2"]
    if how == "qdel":  # -notify's SIGUSR2 reached the run: it ended its task and said so
        assert [(r["key"], r["status"]) for r in gone_ends] == [(gone_line, "interrupted")]
    else:
        assert gone_ends == []
    cluster_report(f"{how}: task 2's task run on node1 after {took:.1f} s")


def test_sge_job_end_is_the_tasks_start_and_h_rt(gluster_dirs, sge_cluster, tmp_path: Path):
    """Under Grid Engine, --deadline's default is the task's start and its h_rt: a pull
    run whose tasks would take longer than the job has left starts none and says so."""
    job_dir = gluster_dirs.node1
    witness = Witness(tmp_path / "w")
    witness.release()
    (job_dir / "tasks.txt").write_text("a\nb\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ZOTSINK_", "SLURM_"))}
    env.update(job_settings(tmp_path, job_dir, witness), ZOTSINK_ARGS="--task-time 900")
    ends = tmp_path / "ends"
    probe = (
        f"{sys.executable} -c 'import os; from zotsink._run.alive import job_end;"
        f' print(job_end(os.environ))\' > {ends}.$SGE_TASK_ID; exec "$@"'
    )
    script = tmp_path / "probe.sh"
    script.write_text(f"#!/bin/bash\n{probe}\n")
    script.chmod(0o755)
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    env["ZOTSINK"] = f"{script} {shlex.join(ZOTSINK)}"
    before = time.time()
    got = sge_cluster.run(
        "qsub", "-sync", "y", "-t", "1-2", "-l", "h_rt=600", "-o", f"{tmp_path}/out.$TASK_ID",
        str(PULL_SGE), env=env, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    after = time.time()
    assert got.stdout.count("exited with exit code 0") == 2, got.stdout + got.stderr
    for task in ("1", "2"):
        end = float(Path(f"{ends}.{task}").read_text())
        # Grid Engine keeps whole seconds of the start
        assert before - 1 + 600 <= end <= after + 600, (before, end, after)
    for task in ("1", "2"):
        said = (tmp_path / f"out.{task}").read_text()
        assert "they would not end before this job's deadline" in said, said
    assert witness.ran() == collections.Counter()


def squeue_wrapper(slurm_cluster, tmp_path: Path) -> tuple[Path, Path]:
    """A squeue first on the PATH that notes every question and answer (see SQUEUE): its
    directory and its log."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    asked = tmp_path / "squeue.log"
    asked.touch()
    real = shutil.which("squeue", path=slurm_cluster.env.get("PATH"))
    assert real, "squeue not found"
    wrapper = bin_dir / "squeue"
    wrapper.write_text(SQUEUE.format(python=sys.executable, real=real, log=str(asked)))
    wrapper.chmod(0o755)
    return bin_dir, asked


def test_a_stopped_element_is_never_robbed_while_slurm_shows_it(
    gluster_dirs, slurm_cluster, tmp_path: Path, cluster_report
) -> None:
    """Element 2 and its tasks are SIGSTOPped (a frozen node) while it holds two tasks: the
    others run every other task, ask Slurm about element 2, hear it runs, and leave its
    tasks alone; resumed, it finishes them, each task run once."""
    t0 = time.monotonic()
    job_dir = gluster_dirs.node1
    witness = Witness(tmp_path / "w")
    lines = [f"t{i:02d}" for i in range(1, 41)]
    (job_dir / "tasks.txt").write_text("".join(f"{ln}\n" for ln in lines))
    bin_dir, asked = squeue_wrapper(slurm_cluster, tmp_path)
    env = {k: v for k, v in slurm_cluster.env.items() if not k.startswith("ZOTSINK_")}
    env.update(job_settings(tmp_path, job_dir, witness))
    env["PATH"] = f"{bin_dir}:{env.get('PATH', '')}"
    ledger = job_dir / "results.tsv.ledger"
    sub = subprocess.run(
        ["sbatch", "--parsable", f"--chdir={job_dir}", "--array=1-3",
         f"--cpus-per-task={slurm_cluster.cpus // len(slurm_cluster.nodes)}",
         f"--output={tmp_path}/slurm-%a.out", str(PULL_SBATCH)],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert sub.returncode == 0, sub.stderr
    job = sub.stdout.strip().split(";")[0]
    element = f"{job}_2"
    stopped: list[int] = []
    try:
        wait_for(lambda: len(witness.held()) == 6, "three elements holding two tasks each")
        frozen = sorted(line for line, who in witness.held().items() if who.endswith(" 2"))
        assert len(frozen) == 2, witness.held()
        stopped = stop_all(SLURM_ARRAY_JOB_ID=job, SLURM_ARRAY_TASK_ID="2")
        witness.release()
        others_done: list[str] = []

        def others_asked_and_heard_it_runs() -> bool:
            oks = [
                r["time"]
                for r in ledger_rows(ledger, lock=False)  # the frozen run may hold the lock
                if r["event"] == "end" and r["status"] == "ok"
            ]
            if len(oks) < len(lines) - 2:
                return False
            others_done[:] = [max(oks)]
            return any(
                f"-j {element} " in ln + " " and ln.split("\t")[3] and ln > max(oks)
                for ln in asked.read_text().splitlines()
            )

        wait_for(others_asked_and_heard_it_runs, "the others asking Slurm about element 2")
        # not taken: claimed by element 2, by no other after it, begun by no other
        rows = ledger_rows(ledger, every=True, lock=False)
        frozen_nums = {int(r["tasknum"]) for r in rows if r["key"] in frozen}
        assert len(frozen_nums) == 2 and taken_from(rows, "2", frozen_nums) == [], rows
        assert not set(ran_by(rows, lambda e: e != "2")) & frozen_nums, rows
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        stopped = []

        def array_done() -> bool:
            q = slurm_cluster.run("squeue", "-h", "-j", job, "-o", "%i", check=False)
            return q.returncode != 0 or not q.stdout.strip()

        wait_for(array_done, "every element finished", timeout=240, poll=0.5)
    finally:
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        witness.release()
        slurm_cluster.run("scancel", job, check=False)

    rows = check_each_task_once(job_dir, lines, witness)
    assert witness.ran() == collections.Counter(lines)  # each once: nothing ran twice
    assert (
        sorted(r["key"] for r in rows if r["event"] == "end" and r["array_task"] == "2") == frozen
    )  # element 2 finished its own
    cluster_report(f"stopped element left alone; {time.monotonic() - t0:.1f} s in all")
