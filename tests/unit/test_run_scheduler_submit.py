"""What the relay asks of the scheduler (``zotsink._run.scheduler``): a job's start told
from the element, successors submitted clean of the job they come from, one job not an
array; through stand-in commands on PATH."""

from __future__ import annotations

import json
import os
import select
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from zotsink._run import backends, schedcmd, schedout, scheduler
from zotsink._run.backends import PBS, GridEngine, JobRef, Slurm
from zotsink._run.scheduler import Errand


@pytest.fixture
def fresh() -> Iterator[None]:
    scheduler.reset()
    yield
    scheduler.reset()


def stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **commands: str) -> Path:
    """Stand-in commands (sh) alone on PATH; each notes its argv, environment and stdin."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in commands.items():
        p = bin_dir / name
        p.write_text(
            "#!/bin/sh\n"
            f'echo "$*" >> {tmp_path}/{name}.argv\n'
            f"/usr/bin/env > {tmp_path}/{name}.env\n"
            f"/bin/cat > {tmp_path}/{name}.stdin\n" + body
        )
        p.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    return tmp_path


def test_a_key_may_name_one_start_of_an_element() -> None:
    assert backends.job_key("77", "3", "c2", restart=1) == "c2:77_3+1"
    assert backends.job_key("77", "", "", restart=0) == "77+0"
    assert backends.parse_job("c2:77_3+1") == JobRef("c2", "77", "3", 1)
    assert backends.parse_job("77_3") == JobRef("", "77", "3", -1)
    assert backends.parse_job("1234.pbs01") == JobRef("", "1234.pbs01", "", -1)


def test_a_start_is_over_once_the_element_restarted_and_stopped_ending() -> None:
    assert schedout.slurm_start_over(["RUNNING 0"], 0) is False
    assert schedout.slurm_start_over(["PENDING 1"], 0) is True  # requeued, waiting
    assert schedout.slurm_start_over(["RUNNING 2"], 1) is True
    # its processes are being ended: that start may still run
    assert schedout.slurm_start_over(["COMPLETING 1"], 0) is False
    assert schedout.slurm_start_over(["PENDING 1"], 1) is False  # this start itself, queued
    assert schedout.slurm_start_over(["PENDING"], 0) is None


def test_what_a_submission_printed() -> None:
    assert schedout.submitted_job("slurm", b"1234;zotsink\n") == "1234"
    assert schedout.submitted_job("slurm", b"1234\n") == "1234"
    assert schedout.submitted_job("slurm", b"sbatch: error: nope\n") is None
    assert schedout.submitted_job("sge", b"88\n") == "88"
    assert schedout.submitted_job("sge", b"89.1-4:1\n") == "89"
    assert schedout.submitted_job("pbs", b"1201.pbs01\n") == "1201.pbs01"
    assert schedout.submitted_job("pbs", b"qsub: illegal -J value\n") is None
    assert schedout.submitted_job("slurm", b"") is None


def test_a_successor_is_one_job_not_an_array() -> None:
    script = (
        b"#!/bin/bash\n#SBATCH --job-name=x\n#SBATCH --array=1-8\n#SBATCH -a 1-3\n"
        b"#SBATCH --cpus-per-task=4\n\n# a comment\nset -e\necho '#SBATCH --array=1-2'\n"
    )
    got = backends.single(script, b"#SBATCH", backends._SLURM_ARRAY)
    assert b"--array=1-8" not in got and b"-a 1-3" not in got
    assert b"#SBATCH --cpus-per-task=4" in got and b"#SBATCH --job-name=x" in got
    assert b"echo '#SBATCH --array=1-2'" in got  # past the directives: the script's own
    sge = b"#!/bin/bash\n#$ -N x\n#$ -t 1-8\n#$ -V\nexec true\n"
    assert (
        backends.single(sge, b"#$", backends._SGE_ARRAY)
        == b"#!/bin/bash\n#$ -N x\n#$ -V\nexec true\n"
    )
    pbs = b"#!/bin/bash\n#PBS -J 1-8\n#PBS -t 1-3\n#PBS -V\n"
    assert backends.single(pbs, b"#PBS", backends._PBS_ARRAY) == b"#!/bin/bash\n#PBS -V\n"


def test_a_successor_inherits_no_job_ids_nor_array_index() -> None:
    env = {
        "PATH": "/bin",
        "HOME": "/h",
        "SLURM_CONF": "/etc/slurm.conf",
        "SLURM_JOB_ID": "7",
        "SLURM_ARRAY_TASK_ID": "3",
        "SLURM_ARRAY_JOB_ID": "6",
        "SLURMD_NODENAME": "n1",
        "SLURM_RESTART_COUNT": "1",
        "SBATCH_ACCOUNT": "mine",
    }
    got = Slurm(env).job_env(env)
    assert got == {
        "PATH": "/bin",
        "HOME": "/h",
        "SLURM_CONF": "/etc/slurm.conf",
        "SBATCH_ACCOUNT": "mine",
    }
    sge = {
        "PATH": "/bin",
        "JOB_ID": "4",
        "SGE_TASK_ID": "2",
        "SGE_TASK_LAST": "8",
        "TMPDIR": "/tmp/4.1.all.q",
        "SGE_ROOT": "/sge",
        "SGE_CELL": "default",
        "SGE_O_WORKDIR": "/w",
        "JOB_SCRIPT": "/spool/4",
    }
    assert GridEngine(sge).job_env(sge) == {
        "PATH": "/bin",
        "SGE_ROOT": "/sge",
        "SGE_CELL": "default",
    }
    pbs = {
        "PATH": "/bin",
        "PBS_JOBID": "5[2].s",
        "PBS_ARRAY_INDEX": "2",
        "NCPUS": "4",
        "PBS_SERVER": "s",
        "TMPDIR": "/var/tmp/pbs.5",
    }
    assert PBS(pbs).job_env(pbs) == {"PATH": "/bin", "PBS_SERVER": "s"}


def test_slurm_submits_the_script_on_stdin_named_and_placed_like_its_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh: None
) -> None:
    where = stand_in(tmp_path, monkeypatch, sbatch="echo '4242;zotsink'\n")
    like = {
        "SLURM_JOB_NAME": "pull",
        "SLURM_JOB_PARTITION": "debug",
        "SLURM_CPUS_PER_TASK": "4",
        "SLURM_MEM_PER_NODE": "1000",
    }
    env = {"PATH": os.environ["PATH"], "ZOTSINK_RELAY": "r.1"}
    job, said = Slurm(like).submit(b"#!/bin/bash\n#SBATCH --array=1-4\necho hi\n", env, like)
    assert (job, said) == ("4242", "")
    argv = (where / "sbatch.argv").read_text().split()
    assert argv == [
        "--parsable",
        "--job-name=pull",
        "--partition=debug",
        "--cpus-per-task=4",
        "--mem=1000M",
    ]
    assert (where / "sbatch.stdin").read_bytes() == b"#!/bin/bash\necho hi\n"
    assert "ZOTSINK_RELAY=r.1" in (where / "sbatch.env").read_text().split("\n")


def test_a_submission_that_fails_says_the_scheduler_s_words(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh: None
) -> None:
    stand_in(
        tmp_path,
        monkeypatch,
        sbatch="echo 'sbatch: error: QOSMaxSubmitJobPerUserLimit' >&2; exit 1\n",
    )
    job, said = Slurm({}).submit(b"#!/bin/sh\n", {"PATH": os.environ["PATH"]}, {})
    assert job is None and said == "sbatch exited 1: sbatch: error: QOSMaxSubmitJobPerUserLimit"
    big = b"#!/bin/sh\n" + b"#" * schedcmd.MAX_INPUT
    assert Slurm({}).submit(big, {}, {})[0] is None


def test_the_scripts_of_this_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh: None
) -> None:
    where = stand_in(tmp_path, monkeypatch, scontrol="printf '#!/bin/bash\\necho again\\n'\n")
    script, why = Slurm({}).job_script({"SLURM_JOB_ID": "12"})
    assert script == b"#!/bin/bash\necho again\n" and why == ""
    assert (where / "scontrol.argv").read_text().split() == ["write", "batch_script", "12", "-"]
    assert Slurm({}).job_script({})[0] is None
    spooled = tmp_path / "job_scripts" / "9"
    spooled.parent.mkdir()
    spooled.write_bytes(b"#!/bin/sh\n#$ -t 1-2\n")
    assert GridEngine({}).job_script({"JOB_SCRIPT": str(spooled)}) == (
        b"#!/bin/sh\n#$ -t 1-2\n",
        "",
    )
    script, why = PBS({}).job_script({"PBS_JOBID": "1.s"})
    assert script is None and "--relay-script" in why


def test_slurm_asks_about_one_start_with_the_restart_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh: None
) -> None:
    where = stand_in(tmp_path, monkeypatch, squeue=f"/bin/cat {tmp_path}/answer\n")
    (where / "answer").write_text("PENDING             1                   \n")
    backend = Slurm({"SLURM_JOB_ID": "1"})
    assert backend.alive(JobRef("", "77", "3", 0)) is False  # requeued since: over
    assert backend.alive(JobRef("", "77", "3", 1)) is True  # the start now queued
    (where / "answer").write_text("COMPLETING          1                   \n")
    assert backend.alive(JobRef("", "77", "3", 0)) is True  # its processes being ended
    asked = (where / "squeue.argv").read_text().splitlines()
    assert asked[0] == "-h -j 77_3 -O State,RestartCnt"
    (where / "answer").write_text("RUNNING\n")
    assert backend.alive(JobRef("", "77", "3")) is True  # any start: as before
    assert (where / "squeue.argv").read_text().splitlines()[-1] == "-h -j 77_3 -o %T"


def test_an_old_squeue_without_restart_counts_is_asked_as_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh: None
) -> None:
    body = (
        'case "$*" in *RestartCnt*) echo "squeue: error: Invalid job format specification:'
        ' restartcnt" >&2; exit 1;; esac\necho RUNNING\n'
    )
    where = stand_in(tmp_path, monkeypatch, squeue=body)
    backend = Slurm({})
    assert backend.alive(JobRef("", "77", "3", 0)) is True
    assert backend.alive(JobRef("", "77", "3", 0)) is True
    asked = (where / "squeue.argv").read_text().splitlines()
    assert asked == ["-h -j 77_3 -O State,RestartCnt", "-h -j 77_3 -o %T", "-h -j 77_3 -o %T"]


def test_an_errand_is_done_in_a_thread_and_tells_a_poll_loop() -> None:
    errand: Errand[int] = Errand("t", lambda: (time.sleep(0.05), 42)[1])
    assert select.select([errand], [], [], 5)[0] == [errand]
    assert errand.result() == (42, "")
    errand.close()

    def boom() -> int:
        raise RuntimeError("no")

    bad: Errand[int] = Errand("t", boom)
    assert select.select([bad], [], [], 5)[0] == [bad]
    assert bad.result() == (None, "RuntimeError: no")
    bad.close()


def test_a_word_newer_than_an_event_is_waited_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh: None
) -> None:
    where = stand_in(tmp_path, monkeypatch, squeue=f"/bin/cat {tmp_path}/answer\n")
    (where / "answer").write_text("RUNNING\n")
    asker = scheduler.Asker(Slurm({}))
    assert asker.wait("77", 5) is True
    exited = time.time()
    (where / "answer").write_text("")
    assert asker.ask("77") is True  # the answer serves its while
    assert asker.since("77", exited) is None  # asked before the exit: no word yet
    deadline = time.monotonic() + 5
    while asker.pending() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert asker.since("77", exited) is False
    assert asker.since("77", time.time() + 60) is False  # gone is gone, however old the word
    assert len((where / "squeue.argv").read_text().splitlines()) == 2


def test_job_env_drops_nothing_a_user_set(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {"PYTHONPATH": "/p", "ZOTSINK_SPILL_DIR": "/s", "OMP_NUM_THREADS": "2"}
    assert Slurm({}).job_env(env) == env
    assert json.dumps(GridEngine({}).job_env(env), sort_keys=True) == json.dumps(
        env, sort_keys=True
    )


def test_a_relay_script_is_read_only_when_a_regular_file_of_a_job_scripts_size(
    tmp_path: Path,
) -> None:
    script = tmp_path / "runner.sbatch"
    script.write_bytes(b"#!/bin/bash\nzotsink run --pull tasks out -- ./task\n")
    assert schedcmd.read_script(str(script), "--relay-script") == (script.read_bytes(), "")
    fifo = tmp_path / "planted"
    os.mkfifo(fifo)  # nobody writes to it: reading it would hang the submission
    data, why = schedcmd.read_script(str(fifo), "--relay-script")
    assert data is None
    assert why == f"--relay-script {fifo} is a FIFO, not a job script"
    big = tmp_path / "big"
    big.write_bytes(b"#" * (schedcmd.MAX_INPUT + 1))
    data, why = schedcmd.read_script(str(big), "--relay-script")
    assert data is None and why == f"--relay-script {big} is over 65536 bytes: not a job script"
    data, why = schedcmd.read_script(str(tmp_path / "typo"), "--relay-script")
    assert data is None
    assert why == f"cannot read --relay-script {tmp_path / 'typo'}: No such file or directory"
