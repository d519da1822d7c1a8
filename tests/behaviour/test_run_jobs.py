"""The job templates of scripts/jobs (both families: ``zotsink-run.*`` and
``zotsink-array.*``), and resubmit-run.sh.

There is no SGE or PBS here: the templates run as those schedulers would start them, with
their environment variables set by the test (the Slurm ones too, with Slurm's); ``qsub`` and
``sbatch`` are stand-ins that record how they were called. (The Slurm templates also run on a
real cluster in tests/cluster/.)
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.ledgers import ledger_rows

JOBS = Path(__file__).resolve().parents[2] / "scripts" / "jobs"
PROCESS = """#!/bin/sh
[ -e "fail.$1" ] && { echo "no luck with $1" >&2; exit 4; }
echo "item:$1 size:${#1}"
"""


@pytest.fixture
def job_dir(tmp_path: Path) -> Path:
    (tmp_path / "tasks.txt").write_text("".join(f"f{i:02d}\n" for i in range(1, 11)))
    proc = tmp_path / "process-item"
    proc.write_text(PROCESS)
    proc.chmod(0o755)
    return tmp_path


def run_job(
    script: str, cwd: Path, child_env: Callable[..., dict[str, str]], **env: str | None
) -> subprocess.CompletedProcess[bytes]:
    settings = {
        "ZOTSINK": shlex.join([sys.executable, "-m", "zotsink"]),
        "KV": ":",
        "CHUNK": "3",
        "SLURM_ARRAY_TASK_ID": None,
        **env,
    }
    return subprocess.run(
        ["bash", str(JOBS / script)],
        cwd=cwd,
        env=child_env(settings),
        capture_output=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("script", "env", "job"),
    [
        ("zotsink-run.sge", {"SGE_TASK_ID": "2", "JOB_ID": "4711"}, "4711"),
        ("zotsink-run.pbs", {"PBS_ARRAY_INDEX": "2", "PBS_JOBID": "815[2].pbs01"}, "815"),
        ("zotsink-run.pbs", {"PBS_ARRAYID": "2", "PBS_JOBID": "815[].torque"}, "815"),
    ],
)
def test_template_runs_its_chunk_into_one_table(
    job_dir: Path, child_env: Callable[..., dict[str, str]], script: str, env: dict[str, str],
    job: str,
) -> None:  # fmt: skip
    r = run_job(script, job_dir, child_env, **env)
    assert r.returncode == 0, r.stderr
    # --jobs auto runs the chunk's tasks side by side: they end, and append, in any order
    head, *rows = (job_dir / "results.tsv").read_text().splitlines(keepends=True)
    assert head == "job\ttasknum\titem\tsize\n"
    assert sorted(rows) == [f"{job}\t4\tf04\t3\n", f"{job}\t5\tf05\t3\n", f"{job}\t6\tf06\t3\n"]
    ends = [r for r in ledger_rows(job_dir / "results.tsv.ledger") if r["event"] == "end"]
    ends.sort(key=lambda e: int(e["tasknum"]))
    assert [(e["tasknum"], e["status"], e["job"], e["array_task"]) for e in ends] == [
        (str(n), "ok", job, "2") for n in (4, 5, 6)
    ]
    # Nothing else in the job's directory: no file per task or per array element.
    assert sorted(os.listdir(job_dir)) == [
        "process-item", "results.tsv", "results.tsv.ledger", "tasks.txt",
    ]  # fmt: skip


def test_template_outside_an_array_says_how_to_submit(
    job_dir: Path, child_env: Callable[..., dict[str, str]]
) -> None:
    r = run_job("zotsink-run.sge", job_dir, child_env, SGE_TASK_ID="undefined")
    assert r.returncode == 2
    assert b"qsub -t 1-N" in r.stderr


STUB = """#!/bin/sh
printf '%s' "$(basename "$0")" >> "{log}"
for a in "$@"; do printf ' %s' "$a" >> "{log}"; done
printf ' ZOTSINK_BASE=%s\\n' "$ZOTSINK_BASE" >> "{log}"
"""


@pytest.mark.parametrize("scheduler", ["slurm", "sge", "pbs"])
def test_resubmit_sends_only_chunks_not_ok(
    job_dir: Path, child_env: Callable[..., dict[str, str]], scheduler: str
) -> None:
    # Every chunk of 3 ran once; f05 (chunk 2) and f10 (chunk 4) failed.
    (job_dir / "fail.f05").touch()
    (job_dir / "fail.f10").touch()
    for index in ("1", "2", "3", "4"):
        run_job("zotsink-run.sge", job_dir, child_env, SGE_TASK_ID=index, JOB_ID="1")
    bin_dir = job_dir / "bin"
    bin_dir.mkdir()
    log = job_dir / "submitted"
    for name in ("sbatch", "qsub"):
        stub = bin_dir / name
        stub.write_text(STUB.format(log=log))
        stub.chmod(0o755)
    env = child_env(
        {
            "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            "ZOTSINK": shlex.join([sys.executable, "-m", "zotsink"]),
            "CHUNK": "3",
            "SCHEDULER": scheduler,
            "MAX_ARRAY": "1001",
        }
    )
    r = subprocess.run(
        ["bash", str(JOBS / "resubmit-run.sh"), "--wait"],
        cwd=job_dir, env=env, capture_output=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    suffix = {"slurm": "sbatch", "sge": "sge", "pbs": "pbs"}[scheduler]
    job = str(JOBS / f"zotsink-run.{suffix}")
    want = {
        "slurm": [f"sbatch --wait --array=2,4 --export=ALL,ZOTSINK_BASE=1 {job} ZOTSINK_BASE="],
        "sge": [
            f"qsub --wait -t 2-2 {job} ZOTSINK_BASE=1",
            f"qsub --wait -t 4-4 {job} ZOTSINK_BASE=1",
        ],
        "pbs": [
            f"qsub --wait -v TASK_INDEX=2,ZOTSINK_BASE=1 {job} ZOTSINK_BASE=",
            f"qsub --wait -v TASK_INDEX=4,ZOTSINK_BASE=1 {job} ZOTSINK_BASE=",
        ],
    }[scheduler]
    assert log.read_text().splitlines() == want

    # Once they are fixed and rerun, there is nothing left to send.
    (job_dir / "fail.f05").unlink()
    (job_dir / "fail.f10").unlink()
    for index in ("2", "4"):
        assert run_job("zotsink-run.sge", job_dir, child_env, SGE_TASK_ID=index).returncode == 0
    log.unlink()
    r = subprocess.run(
        ["bash", str(JOBS / "resubmit-run.sh")], cwd=job_dir, env=env, capture_output=True,
        timeout=60,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert b"every task of tasks.txt is ok" in r.stderr
    assert not log.exists()


# -- both families: the same PROCESS, and a failing task's stderr in one shared log ------------

#: A processor that prints TSV rows: ``[--label L] ITEM`` -> ``ITEM<TAB>L<length>``; an item
#: with a ``fail.ITEM`` file makes it complain on stderr (one line holding a tab) and fail.
PROCESS_TSV = """#!/bin/sh
label=
[ "$1" = --label ] && { label=$2; shift 2; }
[ -e "fail.$1" ] && { echo "corrupt image $1" >&2; printf 'at\\tbyte 7\\n' >&2; exit 4; }
printf '%s\\t%s\\n' "$1" "$label${#1}"
"""

#: (template, the scheduler's variables for array index N, the --stamp field of the index)
FAMILIES = {
    "array.sbatch": ("zotsink-array.sbatch", {"SLURM_ARRAY_TASK_ID": "{n}"}, "task"),
    "array.sge": ("zotsink-array.sge", {"SGE_TASK_ID": "{n}", "JOB_ID": "1"}, "task"),
    "array.pbs": ("zotsink-array.pbs", {"PBS_ARRAY_INDEX": "{n}", "PBS_JOBID": "1[].x"}, "task"),
    "run.sge": ("zotsink-run.sge", {"SGE_TASK_ID": "{n}", "JOB_ID": "1"}, "tasknum"),
    "run.pbs": ("zotsink-run.pbs", {"PBS_ARRAY_INDEX": "{n}", "PBS_JOBID": "1[].x"}, "tasknum"),
}


@pytest.fixture
def tsv_job_dir(tmp_path: Path) -> Path:
    job = tmp_path / "job"
    job.mkdir()
    (job / "tasks.txt").write_text("f01\nf{}&02\nf03\n")  # {} and & are no pattern
    proc = job / "process-item"
    proc.write_text(PROCESS_TSV)
    proc.chmod(0o755)
    (tmp_path / "tmp").mkdir()
    return job


def run_family(
    family: str, n: int, cwd: Path, child_env: Callable[..., dict[str, str]], **env: str
) -> subprocess.CompletedProcess[bytes]:
    script, index_vars, stamp = FAMILIES[family]
    settings: dict[str, str | None] = {k: v.format(n=n) for k, v in index_vars.items()}
    # no variable of another scheduler, from the environment the tests run in
    for other in (
        "SLURM_ARRAY_TASK_ID",
        "SLURM_ARRAY_JOB_ID",
        "SLURM_JOB_ID",
        "SGE_TASK_ID",
        "JOB_ID",
        "PBS_ARRAY_INDEX",
        "PBS_ARRAYID",
        "PBS_JOBID",
        "PBS_O_WORKDIR",
    ):
        settings.setdefault(other, None)
    return run_job(
        script, cwd, child_env, **settings, KV="", CHUNK="1", FIELDS="item,result",
        STAMP=stamp, TMPDIR=str(cwd.parent / "tmp"), **env,
    )  # fmt: skip


@pytest.mark.parametrize("family", list(FAMILIES))
def test_a_failing_task_stderr_lands_in_one_shared_log(
    tsv_job_dir: Path, child_env: Callable[..., dict[str, str]], family: str
) -> None:
    (tsv_job_dir / "fail.f03").touch()
    codes = [run_family(family, n, tsv_job_dir, child_env) for n in (1, 2, 3)]
    assert [c.returncode == 0 for c in codes] == [True, True, False], [c.stderr for c in codes]
    if family.startswith("array"):
        assert codes[2].returncode == 4  # the processor's own exit code
    rows = (tsv_job_dir / "results.tsv").read_text().splitlines()[1:]
    assert rows == ["1\tf01\t3", "2\tf{}&02\t6"]
    # the message of the failed task, line by line behind its task number: the same layout
    # in both families (`zotsink run`'s log)
    log = (tsv_job_dir / "results.tsv.log").read_bytes()
    assert log == b"3.1\tcorrupt image f03\n3.1\tat\tbyte 7\n"
    # one table, one log (and the run family's ledger): no file per task, no FIFO left over
    extra = {"results.tsv.ledger"} if family.startswith("run") else set()
    assert set(os.listdir(tsv_job_dir)) == {
        "tasks.txt", "process-item", "fail.f03", "results.tsv", "results.tsv.log", *extra,
    }  # fmt: skip
    assert os.listdir(tsv_job_dir.parent / "tmp") == []


@pytest.mark.parametrize(
    ("process", "result"),
    [
        ("./process-item --label L", "L6"),  # the item is the last argument
        ("./process-item --label <{}> {}", "<f{}&02>6"),  # the item in place of each {}
    ],
)
@pytest.mark.parametrize("family", list(FAMILIES))
def test_process_with_arguments_means_the_same_in_both_families(
    tsv_job_dir: Path, child_env: Callable[..., dict[str, str]], family: str, process: str,
    result: str,
) -> None:  # fmt: skip
    r = run_family(family, 2, tsv_job_dir, child_env, PROCESS=process)
    assert r.returncode == 0, r.stderr
    assert (tsv_job_dir / "results.tsv").read_text().splitlines()[1:] == [f"2\tf{{}}&02\t{result}"]
    assert not (tsv_job_dir / "results.tsv.log").exists()


#: Prints N rows and a line on stderr, waits until zotsink has read every row (the pipe is
#: empty), says so with a file, then works until it is told to stop.
STREAMER = r"""
import array, fcntl, os, sys, termios, time
os.write(1, b"".join(b"%s\t%d\n" % (sys.argv[1].encode(), i) for i in range(int(sys.argv[2]))))
os.write(2, b"working on %s\n" % sys.argv[1].encode())
def unread():
    buf = array.array("i", [0])
    fcntl.ioctl(1, termios.FIONREAD, buf, True)
    return buf[0]
while unread():
    time.sleep(0.005)
open("ready", "w").close()
time.sleep(600)
"""


@pytest.mark.parametrize("family", ["array.sbatch", "array.sge", "array.pbs"])
def test_array_template_stopped_by_a_signal_keeps_rows_and_log(
    tsv_job_dir: Path, child_env: Callable[..., dict[str, str]], family: str
) -> None:
    # The warning signal reaches only the batch shell (`--signal=B:USR2`, SGE's -notify):
    # zotsink appends every row it read and exits 128+N, the processor is ended, and its
    # stderr is in the log.
    (tsv_job_dir / "streamer.py").write_text(STREAMER)
    script, index_vars, _ = FAMILIES[family]
    settings: dict[str, str | None] = {k: v.format(n=2) for k, v in index_vars.items()}
    env = child_env({
        **settings, "ZOTSINK": shlex.join([sys.executable, "-m", "zotsink"]),
        "PROCESS": f"{sys.executable} streamer.py {{}} 500", "FIELDS": "item,i",
        "STAMP": "task", "TMPDIR": str(tsv_job_dir.parent / "tmp"),
        # nothing is appended before the end of input or a signal
        "ZOTSINK_ARGS": "--flush-interval 3600 --batch-bytes 1000000000",
    })  # fmt: skip
    shell = subprocess.Popen(
        ["bash", str(JOBS / script)], cwd=tsv_job_dir, env=env, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 60
        while not (tsv_job_dir / "ready").exists():
            assert shell.poll() is None, shell.stderr.read()  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "the processor never got going"
            time.sleep(0.01)
        assert not (tsv_job_dir / "results.tsv").exists()
        shell.send_signal(signal.SIGUSR2)
        assert shell.wait(60) == 128 + signal.SIGUSR2
    finally:
        if shell.poll() is None:
            shell.kill()
            shell.wait()
    rows = (tsv_job_dir / "results.tsv").read_text().splitlines()
    assert rows == ["task\titem\ti", *(f"2\tf{{}}&02\t{i}" for i in range(500))]
    assert (tsv_job_dir / "results.tsv.log").read_text() == "2.1\tworking on f{}&02\n"
    assert os.listdir(tsv_job_dir.parent / "tmp") == []


def test_array_template_says_in_the_log_when_its_line_is_missing(
    tsv_job_dir: Path, child_env: Callable[..., dict[str, str]]
) -> None:
    r = run_family("array.sbatch", 7, tsv_job_dir, child_env)
    assert r.returncode == 1
    assert (tsv_job_dir / "results.tsv.log").read_text() == "7.1\tno task on line 7 of tasks.txt\n"
    assert not (tsv_job_dir / "results.tsv").exists()


def test_array_template_without_zotsink_fails_instead_of_hanging(
    tsv_job_dir: Path, child_env: Callable[..., dict[str, str]]
) -> None:
    # neither the table's writer nor the log's can start: the task ends, 127, and says why
    missing = str(tsv_job_dir.parent / "no-such-zotsink")
    r = run_family("array.sbatch", 1, tsv_job_dir, child_env, ZOTSINK=missing)
    assert r.returncode == 127
    assert b"no-such-zotsink: No such file or directory" in r.stderr
    assert os.listdir(tsv_job_dir.parent / "tmp") == []


# -- CALL: a Python function per task, through every zotsink-run template ----------------------

MEASURE = """
def measure(line):
    if line == "f05":
        raise FileNotFoundError(line)
    return {"item": line, "size": len(line)}
"""


@pytest.mark.parametrize(
    ("script", "env", "job"),
    [
        ("zotsink-run.sbatch", {"SLURM_ARRAY_TASK_ID": "2", "SLURM_ARRAY_JOB_ID": "77",
                                "SLURM_JOB_ID": "79"}, "77"),
        ("zotsink-run.sge", {"SGE_TASK_ID": "2", "JOB_ID": "4711"}, "4711"),
        ("zotsink-run.pbs", {"PBS_ARRAY_INDEX": "2", "PBS_JOBID": "815[2].pbs01"}, "815"),
    ],
)  # fmt: skip
def test_template_with_call_runs_a_function_per_task(
    job_dir: Path, child_env: Callable[..., dict[str, str]], script: str, env: dict[str, str],
    job: str,
) -> None:  # fmt: skip
    (job_dir / "measure.py").write_text(MEASURE)
    # PROCESS names a command that does not exist: with CALL set it is not used
    r = run_job(
        script, job_dir, child_env, **env, CALL="measure.py:measure", KV="",
        PROCESS="./no-such-command",
    )  # fmt: skip
    assert r.returncode == 1, r.stderr  # task 5 failed
    head, *rows = (job_dir / "results.tsv").read_text().splitlines(keepends=True)
    assert head == "job\ttasknum\titem\tsize\n"
    assert sorted(rows) == [f"{job}\t4\tf04\t3\n", f"{job}\t6\tf06\t3\n"]
    ends = [r for r in ledger_rows(job_dir / "results.tsv.ledger") if r["event"] == "end"]
    assert sorted((e["tasknum"], e["status"], e["job"]) for e in ends) == [
        ("4", "ok", job), ("5", "failed", job), ("6", "ok", job),
    ]  # fmt: skip
    assert b"FileNotFoundError: f05" in (job_dir / "results.tsv.log").read_bytes()


def test_the_readme_walk_through_runs_through_the_slurm_template_with_call(
    job_dir: Path, child_env: Callable[..., dict[str, str]]
) -> None:
    """The README's measure.py and its chunked alternative, `TASKS=... CALL=... sbatch`,
    through the template."""
    try:
        from PIL import Image
    except ImportError as e:  # in the test extra: in CI it is there
        if os.environ.get("CI", "").lower() not in ("", "0", "false"):
            pytest.fail(f"could not import PIL ({e})", pytrace=False)
        pytest.skip(f"could not import PIL ({e})")
    readme = (JOBS.parents[1] / "README.md").read_text()
    (job_dir / "measure.py").write_text(
        readme.split("```python\n# measure.py\n", 1)[1].split("```")[0]
    )
    assert (
        "TASKS=images.txt CALL=measure.py:measure sbatch --array=1-270 "
        "scripts/jobs/zotsink-run.sbatch"
    ) in readme
    names = []
    for i in range(5):
        Image.new("L", (4, 4), 10 * i).save(job_dir / f"img{i}.png")
        names.append(f"img{i}.png")
    (job_dir / "images.txt").write_text("".join(f"{n}\n" for n in names))
    for index in ("1", "2", "3"):  # CHUNK 2: elements 1-3 of the array
        r = run_job(
            "zotsink-run.sbatch", job_dir, child_env, TASKS="images.txt",
            CALL="measure.py:measure", KV="", CHUNK="2", SLURM_ARRAY_TASK_ID=index,
            SLURM_ARRAY_JOB_ID="55", SLURM_JOB_ID="56",
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
    rows = (job_dir / "results.tsv").read_text().splitlines()
    assert rows[0] == "job\ttasknum\tfilename\tmin\tmax\tmean"
    assert sorted(rows[1:]) == [
        f"55\t{i + 1}\timg{i}.png\t{10 * i}\t{10 * i}\t{10 * i:.1f}" for i in range(5)
    ]
