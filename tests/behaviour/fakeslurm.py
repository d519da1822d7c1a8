"""A stand-in Slurm on PATH for the relay's behaviour tests: ``sbatch``, ``squeue``,
``scontrol`` and ``scancel`` as small Python scripts over a state directory, whose jobs are
local processes.

- ``sbatch [--parsable] [OPTION ...] [SCRIPT]`` (the script on stdin when not named)
  notes the call (its time, argv, environment and script) in ``submits.jsonl``, then does
  what ``sbatch.mode`` says: ``ok``, ``fail N`` (the next N calls fail, saying so on
  stderr, exit 1), ``slow S`` (answer after S seconds). With a file ``hold`` holding K,
  the jobs after the first K wait in the queue until ``release`` exists. A job runs its
  script with ``bash`` in a session of its own,
  in sbatch's directory, with sbatch's environment and ``SLURM_JOB_ID``,
  ``SLURM_CLUSTER_NAME=fake``, ``SLURM_JOB_NAME`` (``--array=I`` gives it an array index
  too, as an element); ``jobs/ID`` holds its state (``PENDING``, ``RUNNING``,
  ``COMPLETED``, ``CANCELLED``), its pid, its restarts.
- ``squeue -h -j ID -o %T`` / ``-O State,RestartCnt`` / ``-o %e``: its state while
  pending or running, nothing once ended, "Invalid job id" for an id it never gave;
  ``squeue -h -u USER -n NAME -o %i``: the ids of the jobs of that name pending or running.
- ``scontrol write batch_script ID -``: the script as submitted.
- ``scancel ID``: the job's process group gets SIGTERM (SIGKILL after 5 s).

:func:`install` writes the commands into a directory; :class:`FakeSlurm` reads the state.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

CODE = r"""#!{python}
import fcntl, json, os, signal, subprocess, sys, time
STATE = {state!r}
HERE = {here!r}
sys.path.insert(0, HERE)
from fakeslurm import main
sys.exit(main(STATE, os.path.basename(sys.argv[0]), sys.argv[1:]))
"""


def install(bin_dir: Path, state: Path) -> None:
    """The stand-in commands in ``bin_dir``, over the state directory ``state``."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    (state / "jobs").mkdir(parents=True, exist_ok=True)
    (state / "sbatch.mode").write_text("ok")
    for name in ("sbatch", "squeue", "scontrol", "scancel"):
        p = bin_dir / name
        p.write_text(
            CODE.format(python=sys.executable, state=str(state), here=str(Path(__file__).parent))
        )
        p.chmod(0o755)


def _locked_next(state: str) -> int:
    import fcntl

    path = os.path.join(state, "next")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        data = os.pread(fd, 64, 0).decode().strip()
        n = int(data) if data else 100
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(n + 1).encode(), 0)
        return n
    finally:
        os.close(fd)


def _write_job(where: str, job: str, **fields: Any) -> None:
    path = os.path.join(where, "jobs", job)
    old = _read_job(where, job) or {}
    old.update(fields)
    tmp = f"{path}.{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(old, f)
    os.replace(tmp, path)


def _read_job(state: str, job: str) -> dict[str, Any] | None:
    try:
        with open(os.path.join(state, "jobs", job)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _mode(state: str) -> str:
    import fcntl

    path = os.path.join(state, "sbatch.mode")
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        mode = os.pread(fd, 256, 0).decode().strip() or "ok"
        if mode.startswith("fail "):
            left = int(mode.split()[1]) - 1
            os.ftruncate(fd, 0)
            os.pwrite(fd, (f"fail {left}" if left > 0 else "ok").encode(), 0)
            return "fail"
        return mode
    finally:
        os.close(fd)


def sbatch(state: str, args: list[str]) -> int:
    opts: dict[str, str] = {}
    script_path = None
    for a in args:
        if a.startswith("--") and "=" in a:
            k, _, v = a[2:].partition("=")
            opts[k] = v
        elif a.startswith("-"):
            opts[a.lstrip("-")] = ""
        else:
            script_path = a
    if script_path:
        with open(script_path, "rb") as f:
            script = f.read()
    else:
        script = sys.stdin.buffer.read()
    for line in script.decode("utf-8", "replace").splitlines()[1:]:
        if not line.startswith("#"):
            break  # Slurm reads directives up to the first command
        if line.startswith("#SBATCH --job-name="):
            opts.setdefault("job-name", line.split("=", 1)[1].strip())
    mode = _mode(state)
    with open(os.path.join(state, "submits.jsonl"), "a") as f:
        f.write(
            json.dumps(
                {
                    "time": time.time(),
                    "argv": args,
                    "env": dict(os.environ),
                    "script": script.decode("utf-8", "replace"),
                    "mode": mode,
                    "cwd": os.getcwd(),
                }
            )
            + "\n"
        )
    if mode == "fail":
        print("sbatch: error: Batch job submission failed: fake failure", file=sys.stderr)
        return 1
    if mode.startswith("slow "):
        time.sleep(float(mode.split()[1]))
    job = str(_locked_next(state))
    with open(os.path.join(state, "jobs", f"{job}.script"), "wb") as f:
        f.write(script)
    name = opts.get("job-name", "sbatch")
    held = False
    hold = os.path.join(state, "hold")
    if os.path.exists(hold):  # the jobs after the first K wait until `release` exists
        with open(hold) as f:
            held = int(job) - 100 >= int(f.read().strip() or "0")
    _write_job(state, job, state="PENDING", restarts=0, name=name, submitted=time.time(), held=held)
    env = dict(os.environ)
    env.update(SLURM_JOB_ID=job, SLURM_CLUSTER_NAME="fake", SLURM_JOB_NAME=name)
    if "array" in opts:
        env.update(SLURM_ARRAY_JOB_ID=job, SLURM_ARRAY_TASK_ID=opts["array"])
    for k in ("cpus-per-task",):
        if k in opts:
            env["SLURM_CPUS_PER_TASK"] = opts[k]
    me = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fakeslurm.py")
    with open(os.path.join(state, "jobs", f"{job}.out"), "ab") as out:
        subprocess.Popen(
            [sys.executable, me, "_job", state, job],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    print(f"{job};fake" if "parsable" in opts else f"Submitted batch job {job}")
    return 0


def run_job(state: str, job: str) -> int:
    """The job's life: wait while held, run the script, note its end."""
    while (_read_job(state, job) or {}).get("held") and not os.path.exists(
        os.path.join(state, "release")
    ):
        time.sleep(0.05)
    info = _read_job(state, job) or {}
    if info.get("state") == "CANCELLED":
        return 0
    script = os.path.join(state, "jobs", f"{job}.script")
    child = subprocess.Popen(["bash", script])
    _write_job(state, job, state="RUNNING", pid=os.getpid(), child=child.pid, began=time.time())

    def cancelled(signum: int, _frame: object) -> None:
        child.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, cancelled)
    code = child.wait()
    info = _read_job(state, job) or {}
    if info.get("state") != "CANCELLED":
        _write_job(state, job, state="COMPLETED", code=code, ended=time.time())
    else:
        _write_job(state, job, ended=time.time())
    return 0


def squeue(state: str, args: list[str]) -> int:
    job = name = ""
    fmt = "%T"
    it = iter(args)
    for a in it:
        if a == "-j":
            job = next(it)
        elif a == "-n":
            name = next(it)
        elif a == "-u":
            next(it)
        elif a in ("-o", "-O"):
            fmt = next(it)
    if name:  # -n NAME -o %i: the jobs of that name pending or running
        for j in sorted(os.listdir(os.path.join(state, "jobs"))):
            info = _read_job(state, j) if "." not in j else None
            if info and info.get("name") == name and info.get("state") in ("PENDING", "RUNNING"):
                print(j)
        return 0
    info = _read_job(state, job.split("_")[0])
    if info is None:
        print("slurm_load_jobs error: Invalid job id specified", file=sys.stderr)
        return 1
    if info.get("state") not in ("PENDING", "RUNNING"):
        return 0
    if fmt == "%e":
        print("N/A")
    elif "RestartCnt" in fmt:
        print(f"{info['state']:<20}{info.get('restarts', 0):<20}")
    else:
        print(info["state"])
    return 0


def scontrol(state: str, args: list[str]) -> int:
    if args[:2] == ["write", "batch_script"]:
        path = os.path.join(state, "jobs", f"{args[2]}.script")
        try:
            with open(path, "rb") as f:
                sys.stdout.buffer.write(f.read())
        except OSError:
            print(f"scontrol: error: Invalid job id {args[2]}", file=sys.stderr)
            return 1
        return 0
    print("scontrol: error: not faked", file=sys.stderr)
    return 1


def scancel(state: str, args: list[str]) -> int:
    for job in args:
        info = _read_job(state, job)
        if info is None:
            continue
        _write_job(state, job, state="CANCELLED")
        pid = info.get("pid")
        if pid:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(int(pid), signal.SIGTERM)
    return 0


def main(state: str, name: str, args: list[str]) -> int:
    return {"sbatch": sbatch, "squeue": squeue, "scontrol": scontrol, "scancel": scancel}[name](
        state, args
    )


class FakeSlurm:
    """The state of the stand-in Slurm: submissions and jobs."""

    def __init__(self, state: Path) -> None:
        self.state = state

    def mode(self, mode: str) -> None:
        (self.state / "sbatch.mode").write_text(mode)

    def submits(self) -> list[dict[str, Any]]:
        p = self.state / "submits.jsonl"
        if not p.exists():
            return []
        return [json.loads(line) for line in p.read_text().splitlines() if line.strip()]

    def jobs(self) -> dict[str, dict[str, Any]]:
        out = {}
        for p in (self.state / "jobs").iterdir():
            if p.suffix or "." in p.name:
                continue
            info = _read_job(str(self.state), p.name)
            if info is not None:
                out[p.name] = info
        return out

    def live(self) -> list[str]:
        """The jobs pending or running now."""
        return sorted(j for j, i in self.jobs().items() if i.get("state") in ("PENDING", "RUNNING"))

    def output(self, job: str) -> str:
        p = self.state / "jobs" / f"{job}.out"
        return p.read_text(errors="replace") if p.exists() else ""

    def cancel_all(self) -> None:
        scancel(str(self.state), list(self.jobs()))


if __name__ == "__main__":
    if sys.argv[1] == "_job":
        sys.exit(run_job(sys.argv[2], sys.argv[3]))
