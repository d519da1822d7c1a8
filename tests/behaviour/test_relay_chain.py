"""``zotsink run --relay N`` and ``zotsink add --relay SCRIPT`` with a stand-in Slurm on
PATH (tests/behaviour/fakeslurm.py: its jobs are local processes): the test submits ONE
element and the chain does the rest; never more than N elements queued or running; a
failing ``sbatch`` retried with growing pauses and recorded, a slow one never stalling the
run; ``zotsink stop``, a list whose tasks all fail, and ``--max-relays`` end the chain and
say why; producers adding at once submit one runner; the cron fallback submits a bounded
number of runners for a task that always fails.

Waits are on events (rows in the ledger, the stand-in's job states), polled with a
deadline."""

from __future__ import annotations

import collections
import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.behaviour.fakeslurm import FakeSlurm, install
from tests.ledgers import ledger_rows
from zotsink._ledger.read import Snapshot

ZOTSINK = [sys.executable, "-m", "zotsink"]
JOBS = Path(__file__).resolve().parents[2] / "scripts" / "jobs"
#: The environment names a scheduler sets in a job: none may reach a test's jobs from the
#: test's own environment.
SCHEDULER_VARS = ("SLURM_", "SLURMD_", "SBATCH_", "SGE_", "PBS_", "JOB_ID", "ZOTSINK_")


class Dropbox:
    """A directory with a task list, a stand-in Slurm, and a job script that runs
    ``zotsink run ARGS`` there."""

    def __init__(self, tmp_path: Path) -> None:
        self.dir = tmp_path / "work"
        self.dir.mkdir()
        self.tasks = self.dir / "tasks.txt"
        self.out = self.dir / "out.txt"
        self.ledger = self.dir / "out.txt.ledger"
        bin_dir, state = tmp_path / "bin", tmp_path / "slurm"
        install(bin_dir, state)
        self.slurm = FakeSlurm(state)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(SCHEDULER_VARS)}
        self.env["PATH"] = f"{bin_dir}:{self.env.get('PATH', '/usr/bin:/bin')}"

    def script(self, args: str, name: str = "job.sh") -> Path:
        """A job script that runs ``zotsink run TASKS OUT ARGS`` (a task: ``sh -c``)."""
        p = self.dir / name
        p.write_text(
            "#!/bin/bash\n#SBATCH --job-name=relay-test\n"
            f"exec {shlex.join(ZOTSINK)} run tasks.txt out.txt {args}\n"
        )
        return p

    def sbatch(self, script: Path, *opts: str) -> str:
        got = subprocess.run(
            ["sbatch", "--parsable", *opts, str(script)],
            cwd=self.dir,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert got.returncode == 0, got.stderr
        return got.stdout.split(";")[0].strip()

    def zotsink(self, *args: str, check: int | None = 0) -> subprocess.CompletedProcess[str]:
        got = subprocess.run(
            [*ZOTSINK, *args],
            cwd=self.dir,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if check is not None:
            assert got.returncode == check, got.stdout + got.stderr
        return got

    def relays(self) -> list[dict[str, Any]]:
        """The relay rows: what, ticket, job, count, note, and the row's run and time."""
        if not self.ledger.exists():
            return []
        out = []
        with Snapshot(self.ledger) as snap:
            for at, row in snap.rows():
                if row.kind in ("relay", "stop"):
                    out.append(
                        {"kind": row.kind, "at": at, "time": row.time, "run": row.run, **row.fields}
                    )
        return out

    def whats(self) -> list[str]:
        return [r.get("what", r["kind"]) for r in self.relays()]

    def oks(self) -> collections.Counter[int]:
        return collections.Counter(
            int(r["tasknum"])
            for r in ledger_rows(self.ledger, self.tasks)
            if r["event"] == "end" and r["status"] == "ok"
        )

    def wait(self, cond: Callable[[], bool], what: str, limit: float = 120.0) -> None:
        end = time.monotonic() + limit
        while not cond():
            if time.monotonic() > end:
                jobs = {j: self.slurm.output(j) for j in self.slurm.jobs()}
                pytest.fail(f"not within {limit:.0f} s: {what}\nrelays: {self.whats()}\n{jobs}")
            time.sleep(0.05)

    def settled(self) -> bool:
        """No stand-in job is pending or running."""
        return not self.slurm.live()

    def most_at_once(self) -> int:
        """The most jobs pending or running at one time (their submission to their end)."""
        marks = []
        for info in self.slurm.jobs().values():
            marks.append((info["submitted"], 1))
            marks.append((info.get("ended", float("inf")), -1))
        most = now = 0
        for _t, step in sorted(marks):
            now += step
            most = max(most, now)
        return most


@pytest.fixture
def box(tmp_path: Path) -> Iterator[Dropbox]:
    d = Dropbox(tmp_path)
    yield d
    d.slurm.cancel_all()


def lines(n: int, prefix: str = "t") -> str:
    return "".join(f"{prefix}{i:03d}\n" for i in range(1, n + 1))


TASK = "-- sh -c 'sleep 0.2; echo $0'"


def test_one_submission_and_the_chain_does_the_rest_never_more_than_n(box: Dropbox) -> None:
    box.tasks.write_text(lines(60))
    script = box.script(f"--pull --jobs 2 --relay 3 --deadline 2 {TASK}")
    box.sbatch(script, "--array=1")  # an array's element: none of that is inherited
    box.wait(lambda: len(box.oks()) == 60 and box.settled(), "every task ok, the chain ended")
    assert box.oks() == collections.Counter(range(1, 61))
    cat = box.zotsink("cat", "out.txt").stdout.splitlines()
    assert sorted(cat) == [f"t{i:03d}" for i in range(1, 61)]
    submits = box.slurm.submits()
    assert submits[0]["argv"][-2:] == ["--array=1", str(script)]  # the test's one submission
    relayed = submits[1:]
    assert len(relayed) >= 3  # several elements, each of 2 s
    for s in relayed:
        env = s["env"]
        assert not {"SLURM_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_JOB_ID"} & set(env), s
        assert env["ZOTSINK_RELAY"].count(".") == 1 and "ZOTSINK_RUN" not in env
        assert "--array" not in " ".join(s["argv"]) and "--job-name=relay-test" in s["argv"]
        assert s["script"] == script.read_text()  # this job's own script, on stdin
    assert box.most_at_once() <= 3
    whats = box.whats()
    assert whats.count("decide") == len(relayed) and whats.count("job") == len(relayed)
    assert whats[-1] == "end" and box.relays()[-1]["note"].startswith("done: ")
    status = box.zotsink("status", "tasks.txt", "out.txt", "--json")
    relay = json.loads(status.stdout)["relay"]
    said = "\n".join(
        f"{r['time']:.3f} {r['run']} {r.get('what')} {r.get('ticket')} {r.get('job')} "
        f"{r.get('count')} {r.get('note')}"
        for r in box.relays()
    )
    assert relay["ended"]["reason"] == "done" and relay["submitted"] == len(relayed), said
    assert f"relay chain ended at {relay['ended']['time']}: done" in status.stderr


def test_a_failing_sbatch_is_retried_with_growing_pauses_and_recorded(box: Dropbox) -> None:
    box.tasks.write_text(lines(80))
    script = box.script(f"--pull --jobs 1 --relay 2 {TASK}")
    box.sbatch(script)
    box.slurm.mode("fail 3")  # the next three sbatch calls fail
    box.wait(lambda: box.whats().count("fail") >= 1, "the first failure recorded")
    said = box.zotsink("status", "tasks.txt", "out.txt", check=1).stderr
    assert "relay: the last submission failed at" in said and "fake failure" in said
    box.wait(lambda: "job" in box.whats(), "a successor submitted after three failures")
    fails = [r for r in box.relays() if r.get("what") == "fail"]
    assert len(fails) == 3 and all("Batch job submission failed" in r["note"] for r in fails)
    times = [s["time"] for s in box.slurm.submits()[1:5]]
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert gaps[0] >= 2.0 and gaps[1] >= 4.0 and gaps[2] >= 8.0, gaps  # never a storm
    box.wait(lambda: len(box.oks()) == 80 and box.settled(), "the list done")


def test_a_slow_sbatch_never_stalls_the_run(box: Dropbox) -> None:
    box.tasks.write_text(lines(60))
    box.slurm.mode("ok")
    script = box.script("--pull --jobs 2 --relay 2 -- sh -c 'sleep 0.05; echo $0'")
    box.sbatch(script)
    box.slurm.mode("slow 3")
    box.wait(lambda: "job" in box.whats(), "the slow submission answered")
    rows = box.relays()
    decided = next(r["time"] for r in rows if r.get("what") == "decide")
    answered = next(r["time"] for r in rows if r.get("what") == "job")
    assert answered - decided >= 3.0
    with Snapshot(box.ledger) as snap:
        ends = [row.time for _at, row in snap.rows() if row.kind == "end"]
    assert any(decided < t < answered for t in ends)  # tasks ended meanwhile
    box.slurm.mode("ok")
    box.wait(lambda: len(box.oks()) == 60 and box.settled(), "the list done")


def test_stop_ends_the_chain_even_for_successors_still_queued(box: Dropbox) -> None:
    box.tasks.write_text(lines(400))
    script = box.script(f"--pull --jobs 2 --relay 3 {TASK}")
    (box.slurm.state / "hold").write_text("1")  # successors wait in the queue
    box.sbatch(script)
    box.wait(lambda: box.whats().count("job") == 2, "two successors queued")
    box.zotsink("stop", "tasks.txt", "out.txt")
    (box.slurm.state / "release").touch()
    box.wait(box.settled, "every element ended")
    rows = box.relays()
    stop = next(r["at"] for r in rows if r["kind"] == "stop")
    assert not [r for r in rows if r.get("what") == "decide" and r["at"] > stop]
    assert rows[-1].get("what") == "end" and rows[-1]["note"].startswith("stopped: ")
    # the successors decided before the stop claimed nothing
    joined = {r["run"] for r in rows if r.get("what") == "join" and r["at"] > stop}
    with Snapshot(box.ledger) as snap:
        claimers = {row.run for _at, row in snap.rows() if row.kind == "claim"}
    assert joined and not joined & claimers
    assert len(box.oks()) < 400
    said = box.zotsink("status", "tasks.txt", "out.txt", check=1).stderr
    assert "relay chain ended at" in said and "`zotsink stop` ended the chain" in said


def test_a_list_whose_tasks_all_fail_ends_the_chain_and_says_so(box: Dropbox) -> None:
    box.tasks.write_text(lines(40))
    script = box.script("--pull --jobs 2 --relay 2 -- sh -c 'echo no >&2; exit 3'")
    box.sbatch(script)
    box.wait(lambda: "end" in box.whats() and box.settled(), "the chain ended")
    end = [r for r in box.relays() if r.get("what") == "end"][-1]
    assert end["note"].startswith("failing: "), end
    assert len(box.slurm.submits()) <= 3  # one element and a successor or two, not a storm
    said = box.zotsink("status", "tasks.txt", "out.txt", check=1).stderr
    assert "relay chain ended at" in said and ": failing: " in said


def test_max_relays_bounds_the_submissions(box: Dropbox) -> None:
    box.tasks.write_text(lines(200))
    script = box.script(f"--pull --jobs 2 --relay 2 --max-relays 1 --deadline 1.5 {TASK}")
    box.sbatch(script)
    box.wait(lambda: "end" in box.whats() and box.settled(), "the chain ended")
    assert len(box.slurm.submits()) == 2  # the test's, and one successor
    assert box.relays()[-1]["note"].startswith("max-relays: ")


def test_producers_adding_at_once_submit_one_runner(box: Dropbox) -> None:
    runner = box.script("--follow --idle 2 --relay 1 --jobs 2 -- sh -c 'echo $0'", "runner.sh")
    box.tasks.touch()
    adds = [
        subprocess.Popen(
            [
                *ZOTSINK,
                "add",
                "tasks.txt",
                f"p{i}",
                "--relay",
                str(runner),
                "--ledger",
                "out.txt.ledger",
            ],
            cwd=box.dir,
            env=box.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(6)
    ]
    said = [p.communicate(timeout=120) for p in adds]
    assert all(p.returncode == 0 for p in adds), said
    assert len(box.slurm.submits()) == 1, said
    assert sum("submitted a runner" in err for _out, err in said) == 1
    # a new dropbox: the ledger is made, and said to be (a mistyped --ledger would be too)
    made = "made the ledger out.txt.ledger (no run had written it)"
    assert any(made in err for _out, err in said), said
    box.wait(lambda: len(box.oks()) == 6 and box.settled(), "the runner ran them and idled out")
    assert box.relays()[-1]["note"].startswith("idle: ")
    # later lines: the chain is restarted by the next add
    later = box.zotsink(
        "add", "tasks.txt", "later", "--relay", str(runner), "--ledger", "out.txt.ledger"
    )
    assert len(box.slurm.submits()) == 2
    assert "made the ledger" not in later.stderr and "submitted a runner" in later.stderr
    box.wait(lambda: len(box.oks()) == 7 and box.settled(), "the second runner ran it")
    # the runner ran from the ledger's directory, with no job's variables of the producer
    assert box.slurm.submits()[1]["cwd"] == str(box.dir)


def test_a_refused_runner_is_seen_in_status(box: Dropbox) -> None:
    box.tasks.write_text(lines(3))
    box.zotsink("run", "tasks.txt", "out.txt", "--pull", "--", "echo")
    runner = box.script("--follow --idle 1 -- cat", "runner.sh")  # another command
    job = box.sbatch(runner)
    box.wait(box.settled, "the runner ended")
    assert "refused" in box.whats()
    said = box.zotsink("status", "tasks.txt", "out.txt").stderr
    assert "relay: a run was refused at" in said and f"(job fake:{job})" in said


def test_the_relay_s_options_are_checked_before_anything_runs(box: Dropbox) -> None:
    box.tasks.write_text(lines(2))
    got = box.zotsink("run", "tasks.txt", "out.txt", "--relay", "2", "--", "echo", check=2)
    assert "give --pull" in got.stderr
    got = box.zotsink("run", "tasks.txt", "out.txt", "--max-relays", "2", "--", "echo", check=2)
    assert "give --relay N" in got.stderr
    nowhere = box.dir / "no-scheduler"
    nowhere.mkdir()
    got = subprocess.run(
        [*ZOTSINK, "run", "tasks.txt", "out.txt", "--pull", "--relay", "1", "--", "echo"],
        cwd=box.dir,
        env={**box.env, "PATH": str(nowhere)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert got.returncode == 2 and "no batch scheduler" in got.stderr
    # outside a job (the stand-in Slurm is there): no script of its own to submit again
    got = box.zotsink(
        "run", "tasks.txt", "out.txt", "--pull", "--relay", "1", "--", "echo", check=2
    )
    assert "--relay-script" in got.stderr
    got = box.zotsink("add", "tasks.txt", "x", "--relay", "runner.sh", check=2)
    assert "--ledger" in got.stderr
    assert not box.ledger.exists()


def test_the_cron_fallback_submits_a_bounded_number_of_runners(box: Dropbox) -> None:
    """A task that always fails: the runner's --max-attempts gives it up after three
    runners, and cron submits no more; cron's bare environment runs the printed line."""
    box.tasks.write_text("always-fails\n")
    env = {
        **box.env,
        "ZOTSINK": shlex.join(ZOTSINK),
        "TASKS": "tasks.txt",
        "RESULTS": "out.txt",
        "PROCESS": "false",
        "IDLE": "1",
        "NAME": "dropbox-test",
        "GRACE": "2",
    }
    got = subprocess.run(
        ["bash", str(JOBS / "dropbox" / "submit-runner.sh"), "--cron-line"],
        cwd=box.dir,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert got.returncode == 0, got.stderr
    line = got.stdout.strip()
    assert line.startswith("*/5 * * * * cd ") and "PATH=" in line and "PROCESS=" in line
    command = line.split(" ", 5)[5]
    for _tick in range(6):  # cron's ticks, each with cron's bare environment
        tick = subprocess.run(
            ["env", "-i", "HOME=/tmp", "/bin/sh", "-c", command],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert tick.returncode == 0, tick.stderr
        box.wait(box.settled, "the runner ended")
    assert len(box.slurm.submits()) == 3
    said = box.zotsink("status", "tasks.txt", "out.txt", check=1).stderr
    assert "given up (failed 3 times)" in said
    log = box.dir / "out.txt.cron.log"
    assert "command not found" not in (log.read_text() if log.exists() else "")
