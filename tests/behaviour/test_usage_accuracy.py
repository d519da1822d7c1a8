"""What a task used, measured by :mod:`zotsink._run.usage`, against ``/usr/bin/time -v``.

Ten programs touch 50 to 500 MB: commands (one forks a child that allocates, one is a shell
running the allocating program) and functions (one starts a child that allocates). Each
execution is measured by both instruments at once, so the comparison is of the
instruments, not of two runs on a loaded machine:

- a command runs as ``/usr/bin/time -v PROGRAM`` started by a small process acting as the
  run (:func:`reap`, :func:`command_usage` with the run's floor): both see the same
  process tree;
- a function is called once, between ``CallMeter.begin()`` and ``end()``, in a worker
  process that ``/usr/bin/time -v`` runs; the worker's start-up, measured by time in a
  second worker that calls nothing, is taken off time's CPU figure (the median of three
  of each: a start-up's CPU varies from run to run).

The peak must be within 10 % of time's "Maximum resident set size", the CPU (user + system)
within 10 % or 20 ms (time cuts its figures to hundredths of a second: half of what that
takes off is given back). A command the run starts itself
peaks as time says it does in a run of its own; one smaller than the run is not measured
(the kernel counts the run's size in its child's peak), never given the run's size. A
function whose peak is reset
between two calls (300 MB, then 50 MB) reports about 50 MB for the second. A task killed by
the kernel for memory in a cgroup limited to it is named oom, one killed by SIGKILL from
elsewhere is not (as root, where a memory cgroup can be made; else skipped, saying why).

``/usr/bin/time`` is the Debian package ``time`` (scripts/test installs it as root).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

TIME = "/usr/bin/time"
MB = 1 << 20

#: The run's side: starts the command, collects it with its usage as the engine does.
ENGINE = r"""
import json, subprocess, sys
from zotsink._run.usage import SpawnFloor, command_usage, reap
p = subprocess.Popen(sys.argv[1:], stderr=subprocess.PIPE)
err = p.stderr.read()
got = reap(p, block=True)
usage = command_usage(got.rusage, floor=SpawnFloor())
print(json.dumps({"code": got.returncode, "usage": usage._asdict(), "time": err.decode()}))
"""

#: A function worker's side: FUNC(ARG) called once between the meter's begin and end (not
#: at all with "skip": the worker's own start-up and end, for time's CPU figure).
WORKER = r"""
import importlib.util, json, sys
from zotsink._run.usage import CallMeter
spec = importlib.util.spec_from_file_location("calls", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
func, arg, call = getattr(module, sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "call"
meter = CallMeter()
meter.begin()
if call:
    func(arg)
usage = meter.end()
print(json.dumps(usage._asdict()))
"""

CALLS = """
import subprocess, sys

def touch(mb):
    data = b"f" * (mb << 20)
    return len(data)

def touch_and_count(mb):
    data = bytearray(b"f" * (mb << 20))
    total = 0
    for i in range(0, len(data), 64):
        total += data[i]
    return total

def child(mb):
    subprocess.run([sys.executable, "-c", f"x = b'c' * ({mb} << 20)"], check=True)
"""

ALLOC = "import sys; x = b'a' * (int(sys.argv[1]) << 20)"
FORKS = """
import os, sys
keep = b"p" * (50 << 20)
pid = os.fork()
if pid == 0:
    x = b"c" * (int(sys.argv[1]) << 20)
    os._exit(0)
os.waitpid(pid, 0)
"""
COUNTS = """
import sys
data = bytearray(b"z" * (int(sys.argv[1]) << 20))
total = 0
for i in range(0, len(data), 32):
    total += data[i]
"""

#: (name, kind, program or function, MB)
PROGRAMS = [
    ("command 50 MB", "command", ALLOC, 50),
    ("command 150 MB", "command", ALLOC, 150),
    ("command 500 MB", "command", ALLOC, 500),
    ("command 200 MB and CPU", "command", COUNTS, 200),
    ("command that forks a child of 300 MB", "command", FORKS, 300),
    ("shell running a program of 250 MB", "shell", ALLOC, 250),
    ("function 50 MB", "function", "touch", 50),
    ("function 400 MB", "function", "touch", 400),
    ("function 150 MB and CPU", "function", "touch_and_count", 150),
    ("function that starts a child of 250 MB", "function", "child", 250),
]


def _time() -> str:
    if not os.access(TIME, os.X_OK):
        reason = f"no {TIME} here (scripts/test installs the Debian package time as root)"
        if os.environ.get("ZOTSINK_CLUSTER_REQUIRED") == "1":
            pytest.fail(f"{reason} (ZOTSINK_CLUSTER_REQUIRED=1)", pytrace=False)
        pytest.skip(reason)
    return TIME


def time_figures(text: str) -> tuple[int, float]:
    """(peak KiB, user + system seconds) of ``/usr/bin/time -v``'s report."""

    def field(name: str) -> str:
        m = re.search(rf"{re.escape(name)}: ([\d.]+)", text)
        assert m is not None, f"no {name!r} in {TIME}'s report: {text[-1000:]}"
        return m.group(1)

    peak = int(field("Maximum resident set size (kbytes)"))
    return peak, float(field("User time (seconds)")) + float(field("System time (seconds)"))


def run_json(argv: list[str], cwd: Path) -> dict[str, Any]:
    r = subprocess.run(argv, capture_output=True, cwd=cwd, timeout=300)
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    return json.loads(r.stdout)  # type: ignore[no-any-return]


def within(ours: float, theirs: float, ratio: float, absolute: float = 0.0) -> bool:
    return abs(ours - theirs) <= max(ratio * theirs, absolute)


@pytest.mark.parametrize(("name", "kind", "program", "mb"), PROGRAMS, ids=[p[0] for p in PROGRAMS])
def test_peak_and_cpu_agree_with_usr_bin_time(
    tmp_path: Path, name: str, kind: str, program: str, mb: int
) -> None:
    time = _time()
    if kind == "function":
        calls = tmp_path / "calls.py"
        calls.write_text(CALLS)
        worker = [sys.executable, "-c", WORKER, str(calls), program, str(mb)]
        runs: dict[str, list[tuple[dict[str, Any], int, float]]] = {"call": [], "skip": []}
        for _ in range(3):  # a worker's start-up takes more or less CPU from run to run
            for how in runs:
                r = subprocess.run([time, "-v", *worker, how], capture_output=True, timeout=300)
                assert r.returncode == 0, r.stderr.decode()[-2000:]
                runs[how].append((json.loads(r.stdout), *time_figures(r.stderr.decode())))
        usage, peak, total = sorted(runs["call"], key=lambda u: u[2])[1]  # the median run
        # time's figure for the call: the median worker's less the median idle one's
        cpu = total - sorted(c for _, _, c in runs["skip"])[1]
    else:
        argv = [sys.executable, "-c", program, str(mb)]
        if kind == "shell":
            argv = ["/bin/sh", "-c", 'python=$1; shift; "$python" "$@"; true', "sh", *argv]
        got = run_json([sys.executable, "-c", ENGINE, time, "-v", *argv], tmp_path)
        assert got["code"] == 0, got["time"]
        usage = got["usage"]
        peak, cpu = time_figures(got["time"])
        # time cuts each of its two figures to hundredths (it never rounds up); what it
        # itself used is in ours too: our figure is above its own by up to that
        cpu += 0.010
    assert peak >= mb * 1024  # the program touched what it was to touch
    assert usage["peak_kib"] is not None, f"{name}: peak not measured"
    assert within(usage["peak_kib"], peak, 0.10), (name, usage, peak)
    ours = usage["user_s"] + usage["sys_s"]
    assert within(ours, cpu, 0.10, 0.020), (name, usage, cpu)
    assert usage["oom"] is False


@pytest.mark.parametrize("mb", [50, 300])
def test_a_command_started_by_the_run_itself(tmp_path: Path, mb: int) -> None:
    """As the engine runs a command: its own child, collected with :func:`reap`; the peak
    is the program's, as time gives it for a run of its own (a peak is the same from run to
    run: the program touches what it touches)."""
    time = _time()
    argv = [sys.executable, "-c", ALLOC, str(mb)]
    got = run_json([sys.executable, "-c", ENGINE, *argv], tmp_path)
    r = subprocess.run([time, "-v", *argv], capture_output=True, timeout=300)
    peak, _cpu = time_figures(r.stderr.decode())
    assert got["usage"]["peak_kib"] is not None, got
    assert within(got["usage"]["peak_kib"], peak, 0.10), (got, peak)


#: A run whose own size is above its task's: the kernel counts the run's size in its
#: child's peak, which is then not the task's.
BIG_RUN = r"""
import json, subprocess
from zotsink._run.usage import SpawnFloor, command_usage, reap
ballast = b"r" * (200 << 20)
got = reap(subprocess.Popen(["/bin/true"]), block=True)
print(json.dumps({"maxrss": got.rusage.ru_maxrss,
                  "usage": command_usage(got.rusage, floor=SpawnFloor())._asdict()}))
"""


def test_a_command_smaller_than_the_run_is_not_measured(tmp_path: Path) -> None:
    got = run_json([sys.executable, "-c", BIG_RUN], tmp_path)
    assert got["maxrss"] > 200 * 1024  # what the kernel says: the run's size, not true's
    assert got["usage"]["peak_kib"] is None  # not measured, never 200 MB for /bin/true
    assert got["usage"]["user_s"] is not None


#: Two calls in one worker: 300 MB, then 50 MB; and a call that touches nothing, for the
#: worker's own size.
TWO_CALLS = r"""
import json
from zotsink._run.usage import CallMeter
meter = CallMeter()
out = {"measures_peak": meter.measures_peak}
for name, mb in (("idle", 0), ("big", 300), ("small", 50)):
    meter.begin()
    data = b"f" * (mb << 20)
    del data
    out[name] = meter.end().peak_kib
print(json.dumps(out))
"""


def test_the_peak_is_reset_between_calls(tmp_path: Path) -> None:
    got = run_json([sys.executable, "-c", TWO_CALLS], tmp_path)
    if not got["measures_peak"]:
        pytest.skip("this kernel refuses to reset a process's peak (/proc/self/clear_refs)")
    idle, big, small = got["idle"], got["big"], got["small"]
    assert within(big - idle, 300 * 1024, 0.10), got
    # the second call's own 50 MB over the worker's size: not the first call's 300
    assert within(small - idle, 50 * 1024, 0.10), got
    assert small < big / 3


# -- a real OOM kill ------------------------------------------------------------------------

#: Inside the limited cgroup: a task that allocates past the limit, and one that another
#: process kills with SIGKILL; each collected, and judged by an OomWatch on this process's
#: own memory cgroup (found as the run finds it).
OOM_RUN = r"""
import json, os, signal, subprocess, sys
from zotsink._run.usage import OomCounter, OomWatch, command_usage, reap
counter = OomCounter()
out = {"file": counter.path, "readable": counter.readable}
for name, code in (("hog", "x = b'h' * (400 << 20)"),
                   ("killed", "import sys; sys.stdin.read()")):
    watch = OomWatch(counter)
    watch.before()
    p = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE)
    if name == "killed":
        p.send_signal(signal.SIGKILL)
    got = reap(p, block=True)
    sig = -got.returncode if got.returncode < 0 else None
    out[name] = {"code": got.returncode, "oom": watch.after(sig),
                 "usage": command_usage(got.rusage, oom=watch.after(sig))._asdict()}
print(json.dumps(out))
"""

LIMIT = 128 * MB


def _own_cgroup(controllers: str) -> tuple[str, str] | None:
    """(kind, path) of this process's memory cgroup directory that a child can be made
    in: cgroup v2 with the memory controller, else v1's memory hierarchy."""
    text = Path("/proc/self/cgroup").read_text()
    mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    for line in text.splitlines():
        number, ctl, path = line.split(":", 2)
        for m in mounts:
            fields = m.split(" - ")
            left, right = fields[0].split(), fields[1].split()
            root, point, fstype, options = left[3], left[4], right[0], right[2]
            if root != "/":
                continue
            if number == "0" and fstype == "cgroup2" and "v2" in controllers:
                where = point + path
                enabled = Path(where, "cgroup.subtree_control")
                if enabled.exists() and "memory" in Path(where, "cgroup.controllers").read_text():
                    return "v2", where
            if "memory" in ctl.split(",") and fstype == "cgroup" and "memory" in options:
                return "v1", point + path
    return None


def test_a_task_killed_for_memory_is_named_oom(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("a memory cgroup is made as root only (not root here)")
    found = _own_cgroup("v2") or _own_cgroup("v1")
    if found is None:
        pytest.skip("no memory cgroup (v2 with the memory controller, or v1) to make one in")
    kind, parent = found
    group = Path(parent, f"zotsink-oom-test-{os.getpid()}")
    try:
        group.mkdir()
        if kind == "v2":
            (group / "memory.max").write_text(str(LIMIT))
            if (group / "memory.swap.max").exists():
                (group / "memory.swap.max").write_text("0")
        else:
            (group / "memory.limit_in_bytes").write_text(str(LIMIT))
            if (group / "memory.memsw.limit_in_bytes").exists():
                (group / "memory.memsw.limit_in_bytes").write_text(str(LIMIT))
    except OSError as e:
        if group.exists():
            group.rmdir()
        pytest.skip(f"cannot make a memory cgroup in {parent}: {e.strerror or e}")
    try:
        # the shell puts itself in the cgroup, then becomes the run
        script = 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"'
        r = subprocess.run(
            ["/bin/sh", "-c", script, "sh", str(group), sys.executable, "-c", OOM_RUN],
            capture_output=True,
            timeout=120,
        )
        assert r.returncode == 0, r.stderr.decode()[-2000:]
        got = json.loads(r.stdout)
    finally:
        group.rmdir()
    assert got["readable"], got
    assert got["file"].startswith(str(group)), got
    assert got["hog"]["code"] == -9 and got["hog"]["oom"] is True, got
    assert got["hog"]["usage"]["oom"] is True
    assert got["killed"]["code"] == -9 and got["killed"]["oom"] is False, got


@pytest.fixture(autouse=True)
def _linux() -> None:
    if not sys.platform.startswith("linux"):
        pytest.skip("these figures are Linux's (/proc, wait4's ru_maxrss in KiB)")
    assert shutil.which("sh")
