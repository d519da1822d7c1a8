"""scripts/demo sets up only what the main job needs and shows `zotsink run`: a function
per task, a run killed and run again, `status`, every task's record read back once."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_demo_runs_kills_resumes_and_reads_back_every_task_once(tmp_path: Path) -> None:
    venv = tmp_path / "venv"  # a fresh one: what a new user's first run installs
    env = dict(os.environ, ZOTSINK_DEMO_VENV=str(venv), DEMO_TASKS="300")
    r = subprocess.run(
        ["bash", str(ROOT / "scripts" / "demo")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    out, err = r.stdout.splitlines(), r.stderr
    assert "tasks: 300; records read back: 300 (distinct 300); each task once: MATCH" in out
    killed = next(x for x in out if x.startswith("killed (SIGKILL) after "))
    done_first = int(killed.split()[3])
    assert 0 < done_first < 300
    # after the kill nothing of the run lives: no task is held by it any more (each is free
    # again, or lost if its call had begun); the second run does only those
    after_kill = err.split("$ zotsink status tasks.txt results.tsv\n")[1]
    counts = after_kill.splitlines()[0]
    assert counts.startswith(f"zotsink: 300 tasks: {done_first} ok, "), after_kill
    assert " never" in counts and "claimed" not in counts and "running" not in counts, counts
    assert f"{300 - done_first} ok, {done_first} already ok; " in err
    assert "zotsink: 300 tasks: 300 ok\n" in err
    # only zotsink and what it needs: no test extra
    installed = {p.name.split("-")[0].lower() for p in venv.glob("lib/python*/site-packages/*")}
    assert {"click", "filelock"} <= installed
    assert not installed & {"pytest", "pyarrow", "pandas", "polars", "duckdb", "pillow"}
