"""The seed benchmark's helpers run on a node as scripts/bench/seed.py uses them: the
per-element CPU wrapper and the plain one-process loop (tiny sizes, no cluster, no timing)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "scripts" / "cluster"


def outside_a_job(**slurm: str) -> dict[str, str]:
    """This environment without the scheduler's variables (the tests may run in a job),
    with ``slurm`` set instead."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    return {**env, **slurm}


def test_seed_rusage_writes_the_trees_cpu_and_passes_the_exit_on(tmp_path: Path) -> None:
    env = outside_a_job(SLURM_ARRAY_JOB_ID="7", SLURM_ARRAY_TASK_ID="3", SLURM_JOB_ID="9")
    # the child burns CPU in a grandchild it waits for: the wrapper must count it
    burn = f"{sys.executable} -c 'sum(range(3_000_000))'; exit 5"
    r = subprocess.run(
        [
            sys.executable,
            "-I",
            "-S",
            str(CLUSTER / "seed_rusage.py"),
            str(tmp_path),
            "--",
            "/bin/sh",
            "-c",
            burn,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 5, r.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["7_3"]
    start, end, user, system = (float(x) for x in (tmp_path / "7_3").read_text().split())
    assert start <= end and user > 0 and system >= 0


def test_seed_rusage_reports_a_command_that_cannot_start(tmp_path: Path) -> None:
    r = subprocess.run(
        [
            sys.executable,
            "-I",
            "-S",
            str(CLUSTER / "seed_rusage.py"),
            str(tmp_path),
            "--",
            str(tmp_path / "no-such-command"),
        ],
        env=outside_a_job(SLURM_JOB_ID="4"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 127
    assert "no-such-command" in r.stderr
    assert (tmp_path / "4_").read_text().count(" ") == 3


def test_seed_loop_writes_one_table_of_every_image(tmp_path: Path) -> None:
    images = tmp_path / "images"
    r = subprocess.run(
        [sys.executable, str(CLUSTER / "seed_images.py"), str(images), "12"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    out = tmp_path / "stats.tsv"
    r = subprocess.run(
        [sys.executable, str(CLUSTER / "seed_loop.py"), str(images / "tasks.txt"), str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    lines = out.read_text().splitlines()
    assert lines[0] == "filename\tmin\tmax\tmean"
    assert len(lines) == 13
    # the same record as the step run as a command for the same image
    first = (images / "tasks.txt").read_text().splitlines()[0]
    r = subprocess.run(
        [sys.executable, str(CLUSTER / "seed_step.py"), first],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.stdout.split() == [f"{k}:{v}" for k, v in zip(lines[0].split(), lines[1].split())]
