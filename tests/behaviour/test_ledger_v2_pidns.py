"""Two runs on one host name in two pid namespaces (a container with the host's name) never
run a task twice: each judges the other by the host identity its ``run`` row names (the
boot and the pid namespace, ``hostid``), not by a pid table it cannot see.

Each run is started by ``unshare --pid --fork --mount-proc``: it is pid 1 of a namespace of
its own, so both ledger rows name host ``H`` and pid 1, and in either namespace pid 1 is
the run itself. Every task holds a witness lock (an flock of its own file) while it runs: a
second holder at once is a task run twice at once. Slow tasks wait for a release file of
their own (events, not sleeps).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.behaviour.waiting import wait_for

ZOTSINK = [sys.executable, "-m", "zotsink"]

# argv[1]: the task line. Holds the line's witness lock (a second holder at once:
# double/), notes each start in ran/; "slow..." notes held/LINE and waits for release-LINE.
WITNESS = r"""
import fcntl, os, sys, time
line = sys.argv[1]
for d in ("witness", "ran", "double", "held"):
    os.makedirs(d, exist_ok=True)
fd = os.open(f"witness/{line}", os.O_RDWR | os.O_CREAT, 0o644)
try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
except OSError:
    open(f"double/{line}.{os.getpid()}", "w").close()
    sys.exit(9)
open(f"ran/{line}.{os.getpid()}", "w").close()
if line.startswith("slow"):
    open(f"held/{line}", "w").close()
    while not os.path.exists(f"release-{line}"):
        time.sleep(0.01)
print(line, flush=True)
"""


def _namespaces_work() -> str | None:
    """Why a pid namespace cannot be made here (None: it can)."""
    if os.geteuid() != 0:
        return "needs root: runs zotsink in pid namespaces of its own (unshare --pid)"
    if shutil.which("unshare") is None:
        return "no unshare(1) here"
    r = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True, timeout=60
    )
    return None if r.returncode == 0 else f"unshare --pid fails here: {r.stderr!r}"


pytestmark = pytest.mark.skipif(_namespaces_work() is not None, reason=str(_namespaces_work()))


def env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("ZOTSINK_", "SLURM_"))}


def start_in_namespace(d: Path) -> subprocess.Popen[str]:
    """A pull run, two at a time, as pid 1 of a new pid namespace (its own /proc)."""
    argv = ["unshare", "--pid", "--fork", "--mount-proc", "--", *ZOTSINK, "run", "tasks.txt"]
    argv += ["out.txt", "--pull", "--jobs", "2", "--", sys.executable, "witness.py"]
    return subprocess.Popen(
        argv, cwd=d, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def run_process(unshare: subprocess.Popen[str]) -> int:
    """The run's pid as this namespace sees it: the child unshare forked."""
    path = Path(f"/proc/{unshare.pid}/task/{unshare.pid}/children")
    children = path.read_text().split() if path.exists() else []
    return int(children[0]) if children else -1


def pid_namespace(pid: int) -> int:
    return os.stat(f"/proc/{pid}/ns/pid").st_ino


def committed(d: Path) -> list[str]:
    if not (d / "out.txt").exists():
        return []
    r = subprocess.run(
        [*ZOTSINK, "cat", "out.txt"], cwd=d, capture_output=True, env=env(), text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()


def ran(d: Path) -> Counter[str]:
    if not (d / "ran").exists():
        return Counter()
    return Counter(p.name.rsplit(".", 1)[0] for p in (d / "ran").iterdir())


@pytest.fixture
def d(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / "witness.py").write_text(WITNESS)
    yield tmp_path
    for line in ("slowA", "slowB", "slowC", "slowD"):
        (tmp_path / f"release-{line}").touch()


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()  # unshare: its namespace's pid 1 dies with it, and so does the rest
        p.communicate()


def test_two_pid_namespaces_with_one_host_name_never_run_a_task_twice(
    d: Path, procs: list[subprocess.Popen[str]]
) -> None:
    quick = [f"q{n}" for n in range(1, 21)]
    items = ["slowA", "slowB", *quick, "slowC", "slowD"]
    (d / "tasks.txt").write_text("".join(f"{i}\n" for i in items))
    x = start_in_namespace(d)
    procs.append(x)
    wait_for(lambda: (d / "held/slowA").exists() and (d / "held/slowB").exists(), x, "held A, B")
    y = start_in_namespace(d)
    procs.append(y)
    wait_for(
        lambda: (
            (d / "held/slowC").exists()
            and (d / "held/slowD").exists()
            and set(quick) <= set(committed(d))
        ),
        y,
        "ran the quick tasks and held C, D",
        120,
    )
    spaces = {pid_namespace(run_process(p)) for p in (x, y)}
    # X ends slowA, claims nothing, and looks at Y's tasks while Y lives: it must leave them
    (d / "release-slowA").touch()
    wait_for(lambda: "slowA" in committed(d), x, "committed slowA", 120)
    # Y ends C and D, and looks before it ends at X's slowB while X lives: it must leave it
    (d / "release-slowC").touch()
    (d / "release-slowD").touch()
    _out, y_err = y.communicate(timeout=120)
    (d / "release-slowB").touch()
    _out, x_err = x.communicate(timeout=120)
    assert not (d / "double").exists() or not os.listdir(d / "double"), "a task ran twice at once"
    assert ran(d) == Counter(items), "a task of a live run was started again"
    assert y.returncode == 0, y_err
    assert x.returncode == 0, x_err
    assert sorted(committed(d)) == sorted(items)

    # the ledger names each run by its host and its host identity: one host name, one boot,
    # two pid namespaces (pid 1 in both)
    from zotsink._ledger.read import Snapshot

    with Snapshot(d / "out.txt.ledger") as snap:
        runs = [row.fields for _at, row in snap.rows() if row.kind == "run"]
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip().replace("-", "")[:12]
    assert len(runs) == 2
    assert {r["host"] for r in runs} == {os.uname().nodename}
    assert {r["pid"] for r in runs} == {"1"}
    assert {r["hostid"] for r in runs} == {f"{boot}.{ns}" for ns in spaces}
    assert len(spaces) == 2 and pid_namespace(os.getpid()) not in spaces
