"""The pull templates (scripts/jobs/zotsink-pull.*) and the dropbox recipe
(scripts/jobs/dropbox): what they call, and the cron check that submits a runner.

The templates run with a stand-in ``zotsink`` that prints its arguments, one per line; the
cron check runs the real ``zotsink status --waiting`` with stand-ins for ``squeue`` and
``sbatch`` on PATH.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

JOBS = Path(__file__).resolve().parents[2] / "scripts" / "jobs"
PULL = ["zotsink-pull.sbatch", "zotsink-pull.sge", "zotsink-pull.pbs"]
ARGV = '#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done\n'


@pytest.mark.parametrize("script", [*PULL, "dropbox/runner.sbatch", "dropbox/submit-runner.sh"])
def test_the_scripts_parse(script: str) -> None:
    r = subprocess.run(["bash", "-n", str(JOBS / script)], capture_output=True)
    assert r.returncode == 0, r.stderr
    assert os.access(JOBS / script, os.X_OK)


def _argv(
    script: str, tmp_path: Path, child_env: Callable[..., dict[str, str]], **env: str | None
) -> list[str]:
    fake = tmp_path / "fake-zotsink"
    fake.write_text(ARGV)
    fake.chmod(0o755)
    r = subprocess.run(
        ["bash", str(JOBS / script)],
        cwd=tmp_path,
        env=child_env({"ZOTSINK": str(fake), **env}),
        capture_output=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    return r.stdout.decode().splitlines()


@pytest.mark.parametrize("script", PULL)
@pytest.mark.parametrize(
    "index", [{"SLURM_ARRAY_TASK_ID": "5", "SGE_TASK_ID": "5", "PBS_ARRAY_INDEX": "5"}, {}]
)
def test_a_pull_element_runs_the_whole_list_whatever_its_index(
    tmp_path: Path, child_env: Callable[..., dict[str, str]], script: str, index: dict[str, str]
) -> None:
    argv = _argv(script, tmp_path, child_env, PROCESS="python3 measure.py {}", **index)
    grace = {"sbatch": "240", "sge": "30", "pbs": "5"}[script.rsplit(".", 1)[1]]
    assert argv == [
        "run",
        "tasks.txt",
        "results.tsv",
        "--pull",
        "--jobs",
        "auto",
        "--grace",
        grace,
        "--stamp=job,tasknum",
        "--",
        "python3",
        "measure.py",
        "{}",
    ]
    assert not {"--index", "--chunk", "--base"} & set(argv)


@pytest.mark.parametrize("script", PULL)
def test_a_pull_element_takes_call_and_the_settings(
    tmp_path: Path, child_env: Callable[..., dict[str, str]], script: str
) -> None:
    argv = _argv(
        script,
        tmp_path,
        child_env,
        CALL="measure.py:measure",
        TASKS="list.txt",
        RESULTS="out.csv",
        STAMP="",
        KV="=",
        GRACE="9",
        ZOTSINK_ARGS="--retries 1",
    )
    head = ["run", "list.txt", "out.csv", "--pull", "--jobs", "auto", "--grace", "9"]
    assert argv == [*head, "--retries", "1", "--kv==", "--call", "measure.py:measure"]


def test_the_dropbox_runner_follows_the_list_and_idles_out(
    tmp_path: Path, child_env: Callable[..., dict[str, str]]
) -> None:
    argv = _argv("dropbox/runner.sbatch", tmp_path, child_env, IDLE="120")
    head = ["run", "tasks.txt", "results.tsv", "--follow", "--idle", "120"]
    assert argv[:8] == [*head, "--jobs", "auto"]
    assert argv[-2:] == ["--", "./process-item"]
    assert _argv("dropbox/runner.sbatch", tmp_path, child_env)[5] == "600"


@pytest.fixture
def cron(tmp_path: Path, child_env: Callable[..., dict[str, str]]) -> Callable[..., Path]:
    """``cron(queued=..., squeue_fails=...)``: run submit-runner.sh with stand-ins for
    squeue (prints ``queued``) and sbatch (notes its arguments in ``sbatch.calls``) on
    PATH; the path of the notes."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    calls = tmp_path / "sbatch.calls"
    (bin_ / "sbatch").write_text(f'#!/bin/sh\necho "$@" >> {calls}\necho "Submitted 7"\n')
    (bin_ / "sbatch").chmod(0o755)

    def run(
        queued: str = "", squeue_fails: bool = False, code: int = 0, quiet: bool = False
    ) -> Path:
        exit_ = "exit 1" if squeue_fails else "exit 0"
        (bin_ / "squeue").write_text(
            f'#!/bin/sh\necho "$@" > {tmp_path}/squeue.args\nprintf "%s" "{queued}"\n{exit_}\n'
        )
        (bin_ / "squeue").chmod(0o755)
        r = subprocess.run(
            ["bash", str(JOBS / "dropbox" / "submit-runner.sh")],
            cwd=tmp_path,
            env=child_env(
                {
                    "PATH": f"{bin_}:{os.environ['PATH']}",
                    "ZOTSINK": shlex.join([sys.executable, "-m", "zotsink"]),
                    "USER": "me",
                }
            ),
            capture_output=True,
            timeout=60,
        )
        assert r.returncode == code, r.stderr
        if quiet:  # cron mails what a job prints: nothing to do, nothing said
            assert (r.stdout, r.stderr) == (b"", b"")
        return calls

    return run


def test_an_empty_dropbox_is_nothing_to_do_and_nothing_to_say(
    tmp_path: Path, cron: Callable[..., Path]
) -> None:
    calls = cron(quiet=True)  # no task list yet
    assert not calls.exists() and not (tmp_path / "squeue.args").exists()
    (tmp_path / "tasks.txt").write_bytes(b"")
    cron(quiet=True)  # an empty one
    assert not calls.exists() and not (tmp_path / "squeue.args").exists()


def test_cron_submits_a_runner_only_when_tasks_wait_and_none_is_queued(
    tmp_path: Path, cron: Callable[..., Path]
) -> None:
    from zotsink import add_tasks, run_tasks

    calls = cron()  # no task list yet: no task waits
    assert not calls.exists()
    add_tasks(tmp_path / "tasks.txt", ["a", "b"])
    cron(queued="1234\n")  # tasks wait, a runner is queued: it will take them
    assert not calls.exists()
    asked = (tmp_path / "squeue.args").read_text().split()
    assert asked == ["-h", "-u", "me", "-n", "zotsink-dropbox", "-o", "%i"]
    cron(squeue_fails=True, code=1)  # the scheduler cannot say: submit nothing
    assert not calls.exists()
    cron()  # tasks wait, no runner: one is submitted
    runner = JOBS / "dropbox" / "runner.sbatch"
    assert calls.read_text().splitlines() == [f"--job-name=zotsink-dropbox {runner}"]
    calls.unlink()
    report = run_tasks(tmp_path / "tasks.txt", tmp_path / "results.tsv", ["echo"])
    assert report.states == {1: "ok", 2: "ok"}
    cron()  # every task ok: nothing waits, nothing submitted
    assert not calls.exists()
