"""The shipped job scripts on a real one-host Slurm cluster, writing to the GlusterFS volume:
a 100-task array into one table, cancelled tasks that keep what they had read, and the
`zotsink missing --array` resubmission round."""

from __future__ import annotations

import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.cluster, pytest.mark.xdist_group("cluster")]

SLURM_DIR = Path(__file__).resolve().parents[2] / "scripts" / "jobs"
SBATCH = SLURM_DIR / "zotsink-array.sbatch"
RESUBMIT = SLURM_DIR / "resubmit.sh"

# The per-item processor of the array tests: one row, or nothing and exit 3 when the
# item is named in the fail directory.
PROCESS = """#!/bin/sh
[ -e "{fail}/$1" ] && {{ echo "failing on purpose: $1" >&2; exit 3; }}
printf '%s\\t%s\\n' "$1" "${{#1}}"
"""

# A streaming processor: prints N rows, waits until the pipe is empty (so zotsink has
# read every one of them), says so with a marker file, then works "forever".
STREAMER = r"""
import fcntl, os, struct, sys, termios, time
item, n, ready = sys.argv[1], int(sys.argv[2]), sys.argv[3]
os.write(1, b"".join(b"%s\t%d\n" % (item.encode(), i) for i in range(n)))
while struct.unpack("i", fcntl.ioctl(1, termios.FIONREAD, b"\0\0\0\0"))[0]:
    time.sleep(0.01)
open(ready, "w").close()
time.sleep(600)
"""


def job_env(slurm_cluster, **settings: str) -> dict[str, str]:
    """The job's environment (sbatch passes it on): this cluster, zotsink, the settings."""
    env = {k: v for k, v in slurm_cluster.env.items() if not k.startswith("ZOTSINK_")}
    env["ZOTSINK"] = f"{sys.executable} -m zotsink"
    env.update(settings)
    return env


def sbatch(env: dict[str, str], tmp_path: Path, *args: str, timeout: float = 300):
    return subprocess.run(
        [
            "sbatch",
            "--parsable",
            f"--chdir={tmp_path}",
            f"--output={tmp_path}/slurm-%A_%a.out",
            *args,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def logs(tmp_path: Path) -> str:
    return "".join(f"--- {p.name}\n{p.read_text()}" for p in sorted(tmp_path.glob("slurm-*.out")))


def rows_settled(path: Path, n: int, timeout: float = 10.0) -> list[list[str]]:
    """The rows of a table read through another mount, once it has ``n`` of them.

    A client may serve a stale size for up to the FUSE attribute timeout (1 s).
    """
    deadline = time.monotonic() + timeout
    while True:
        lines = path.read_text().splitlines() if path.exists() else []
        if len(lines) >= n + 1 or time.monotonic() > deadline:
            return [ln.split("\t") for ln in lines]
        time.sleep(0.05)


def write_process(tmp_path: Path) -> tuple[Path, Path]:
    fail = tmp_path / "fail"
    fail.mkdir()
    proc = tmp_path / "process-item"
    proc.write_text(PROCESS.format(fail=fail))
    proc.chmod(0o755)
    return proc, fail


def test_hundred_task_array_appends_one_row_per_task(gluster_dirs, slurm_cluster, tmp_path):
    items = [f"sample-{i:03d}.dat" for i in range(1, 101)]
    (tmp_path / "tasks.txt").write_text("".join(f"{it}\n" for it in items))
    proc, _ = write_process(tmp_path)
    env = job_env(
        slurm_cluster,
        TASKS=str(tmp_path / "tasks.txt"),
        RESULTS=str(gluster_dirs.node1 / "results.tsv"),
        PROCESS=str(proc),
        FIELDS="item,length",
        STAMP="job,task",
    )
    res = sbatch(env, tmp_path, "--wait", "--array=1-100", str(SBATCH))
    assert res.returncode == 0, f"{res.stderr}\n{logs(tmp_path)}"
    job = res.stdout.strip().split(";")[0]
    assert job.isdigit(), res.stdout

    rows = rows_settled(gluster_dirs.reader / "results.tsv", 100)
    assert rows[0] == ["job", "task", "item", "length"]
    body = sorted(rows[1:], key=lambda r: int(r[1]))
    assert body == [[job, str(t), items[t - 1], "14"] for t in range(1, 101)], logs(tmp_path)
    verify = subprocess.run(
        [*env["ZOTSINK"].split(), "verify", str(gluster_dirs.reader / "results.tsv")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert verify.returncode == 0, verify.stderr


def test_cancelled_tasks_keep_every_record_they_had_read(gluster_dirs, slurm_cluster, tmp_path):
    n = 300
    (tmp_path / "tasks.txt").write_text("usr2\nterm\n")
    markers = tmp_path / "ready"
    markers.mkdir()
    (tmp_path / "streamer.py").write_text(STREAMER)
    proc = tmp_path / "process-item"
    proc.write_text(
        f'#!/bin/sh\nexec {sys.executable} {tmp_path}/streamer.py "$1" {n} {markers}/"$1"\n'
    )
    proc.chmod(0o755)
    results = gluster_dirs.node2 / "results.tsv"
    env = job_env(
        slurm_cluster,
        TASKS=str(tmp_path / "tasks.txt"),
        RESULTS=str(results),
        PROCESS=str(proc),
        FIELDS="item,i",
        STAMP="job,task",
        # nothing is written before the end of input or a signal: every row is in memory
        ZOTSINK_ARGS="--flush-interval 3600 --batch-bytes 1000000000",
    )
    cmd = [
        "sbatch",
        "--wait",
        "--parsable",
        "--array=1-2",
        f"--chdir={tmp_path}",
        f"--output={tmp_path}/slurm-%A_%a.out",
        str(SBATCH),
    ]
    waiter = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    job = None
    try:
        ready, _, _ = select.select([waiter.stdout], [], [], 60)
        assert ready, "sbatch printed no job id within 60 s"
        job = waiter.stdout.readline().decode().strip().split(";")[0]
        assert job.isdigit(), job
        deadline = time.monotonic() + 120
        while not all((markers / m).exists() for m in ("usr2", "term")):
            assert waiter.poll() is None, f"the job ended early\n{logs(tmp_path)}"
            assert time.monotonic() < deadline, f"tasks never got going\n{logs(tmp_path)}"
            time.sleep(0.1)
        # every row has been read by zotsink and none written yet
        assert not (gluster_dirs.reader / "results.tsv").exists()

        slurm_cluster.run("scancel", "--batch", "--signal=USR2", f"{job}_1")
        slurm_cluster.run("scancel", f"{job}_2")
        waiter.wait(timeout=120)
    finally:
        if waiter.poll() is None:
            if job:
                slurm_cluster.run("scancel", job, check=False)
            waiter.kill()
            waiter.wait(timeout=30)
        waiter.stdout.close()
        waiter.stderr.close()

    rows = rows_settled(gluster_dirs.reader / "results.tsv", 2 * n)
    assert rows[0] == ["job", "task", "item", "i"]
    for task, item in ((1, "usr2"), (2, "term")):
        mine = [r for r in rows[1:] if r[1] == str(task)]
        assert mine == [[job, str(task), item, str(i)] for i in range(n)], logs(tmp_path)
    assert len(rows) == 2 * n + 1
    log1 = (tmp_path / f"slurm-{job}_1.out").read_text()
    log2 = (tmp_path / f"slurm-{job}_2.out").read_text()
    assert "zotsink: stopped by SIGUSR2 after writing everything read" in log1
    assert "zotsink: stopped by SIGTERM after writing everything read" in log2


def test_missing_names_the_failed_tasks_and_resubmission_completes(
    gluster_dirs, slurm_cluster, tmp_path
):
    items = [f"run_{i:02d}.cfg" for i in range(1, 21)]
    (tmp_path / "tasks.txt").write_text("".join(f"{it}\n" for it in items))
    proc, fail = write_process(tmp_path)
    failing = [3, 7, 11, 12, 19]
    for t in failing:
        (fail / items[t - 1]).touch()
    results = gluster_dirs.node2 / "results.tsv"
    env = job_env(
        slurm_cluster,
        TASKS=str(tmp_path / "tasks.txt"),
        RESULTS=str(results),
        PROCESS=str(proc),
        FIELDS="item,length",
        STAMP="job,task",
    )
    res = sbatch(env, tmp_path, "--wait", "--array=1-20", str(SBATCH))
    assert res.returncode == 3, f"{res.stderr}\n{logs(tmp_path)}"  # the highest task exit
    first = res.stdout.strip().split(";")[0]
    rows_settled(gluster_dirs.reader / "results.tsv", 15)

    zotsink = env["ZOTSINK"].split()
    missing = [*zotsink, "missing", str(tmp_path / "tasks.txt"), str(results), "--key", "item"]
    spec = subprocess.run([*missing, "--array"], capture_output=True, text=True, timeout=60)
    assert (spec.returncode, spec.stdout) == (0, "3,7,11-12,19\n"), spec.stderr

    for p in fail.iterdir():
        p.unlink()
    res = subprocess.run(
        [
            "bash",
            str(RESUBMIT),
            "--wait",
            f"--chdir={tmp_path}",
            f"--output={tmp_path}/slurm-%A_%a.out",
        ],
        env={**env, "KEY": "item"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, f"{res.stdout}{res.stderr}\n{logs(tmp_path)}"
    assert "resubmitting tasks 3,7,11-12,19 of" in res.stderr
    second = res.stdout.split()[-1]
    assert second.isdigit() and second != first, res.stdout

    rows = rows_settled(gluster_dirs.reader / "results.tsv", 20)
    body = sorted(rows[1:], key=lambda r: int(r[1]))
    assert body == [
        [second if t in failing else first, str(t), items[t - 1], "10"] for t in range(1, 21)
    ]
    again = subprocess.run(missing, capture_output=True, text=True, timeout=60)
    assert (again.returncode, again.stdout) == (0, "")
    done = subprocess.run(
        ["bash", str(RESUBMIT)],
        env={**env, "KEY": "item"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and "every task of" in done.stderr
