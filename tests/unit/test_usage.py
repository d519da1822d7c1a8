"""zotsink._run.usage: collecting a command with its usage, a function call's meter, and the
OOM counter of a memory cgroup, read from real processes and from recorded kernel files.

Figures against ``/usr/bin/time`` are checked in tests/behaviour/test_usage_accuracy.py.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path
from subprocess import PIPE

import pytest

from zotsink._run.usage import (
    CallMeter,
    OomCounter,
    OomWatch,
    SpawnFloor,
    Usage,
    command_usage,
    memory_cgroup_file,
    oom_kills,
    peak_from_status,
    reap,
)

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="figures and files of Linux"
)

ALLOC = "import sys; x = b'a' * (int(sys.argv[1]) << 20); sys.exit(int(sys.argv[2]))"


def test_reap_hands_over_the_code_and_the_usage_and_leaves_popen_answering() -> None:
    p = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=PIPE)
    assert reap(p) is None  # it waits for its stdin: still running
    assert p.returncode is None
    p.stdin.close()  # type: ignore[union-attr]
    got = reap(p, block=True)
    assert got is not None and got.returncode == 0 and got.rusage is not None
    assert p.returncode == 0
    assert p.poll() == 0 and p.wait() == 0  # subprocess never waits for it again
    assert reap(p) == (0, None)  # collected: its usage was handed over once


#: A small run: starts argv, collects it with its usage (what the engine does).
RUN = r"""
import json, subprocess, sys
from zotsink._run.usage import SpawnFloor, command_usage, reap
got = reap(subprocess.Popen(sys.argv[1:]), block=True)
usage = command_usage(got.rusage, floor=SpawnFloor())
print(json.dumps({"code": got.returncode, "usage": usage._asdict(), "cpu": usage.cpu_s}))
"""


def run(*argv: str) -> dict:  # type: ignore[type-arg]
    r = subprocess.run([sys.executable, "-c", RUN, *argv], capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr.decode()
    return json.loads(r.stdout)  # type: ignore[no-any-return]


def test_a_command_s_peak_and_cpu_and_its_exit() -> None:
    got = run(sys.executable, "-c", ALLOC, "80", "3")
    usage = got["usage"]
    assert got["code"] == 3
    assert usage["peak_kib"] is not None and 80 * 1024 < usage["peak_kib"] < 200 * 1024
    assert usage["user_s"] is not None and usage["sys_s"] is not None
    assert got["cpu"] == usage["user_s"] + usage["sys_s"]
    assert usage["oom"] is False


def test_a_signal_is_a_negative_code() -> None:
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    p.send_signal(signal.SIGTERM)
    got = reap(p, block=True)
    assert got is not None and got.returncode == -signal.SIGTERM


def test_collected_elsewhere_is_not_measured() -> None:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()  # subprocess took it, and its usage with it
    got = reap(p)
    assert got is not None and got.returncode == 0 and got.rusage is None
    assert command_usage(got.rusage) == Usage(None, None, None, False)


def test_a_peak_no_larger_than_the_run_s_is_not_measured() -> None:
    class Rusage:
        ru_maxrss, ru_utime, ru_stime = 40_000, 0.5, 0.25

    assert command_usage(Rusage(), floor=40_000).peak_kib is None
    assert command_usage(Rusage(), floor=39_999).peak_kib == 40_000
    assert command_usage(Rusage()).peak_kib == 40_000
    assert command_usage(Rusage(), floor=50_000) == Usage(None, 0.5, 0.25, False)
    assert command_usage(Rusage(), oom=True).oom is True


#: A run started by a large process: the kernel counts its starter's size in its own
#: getrusage figure, not in its own peak (VmHWM); the floor is the run's own.
FLOOR = r"""
import json, resource
from zotsink._run.usage import SpawnFloor, peak_from_status
floor = SpawnFloor()
bound = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
own = peak_from_status(open("/proc/self/status", "rb").read())
print(json.dumps({"bound": bound, "own": own, "above_own": floor.covers(own + 20_000),
                  "own_peak": floor.covers(own), "above_bound": floor.covers(bound + 1)}))
"""
BIG_STARTER = r"""
import subprocess, sys
ballast = b"s" * (300 << 20)
sys.exit(subprocess.run([sys.executable, "-c", sys.argv[1]]).returncode)
"""


def test_the_floor_is_the_run_s_own_peak_not_its_starter_s() -> None:
    r = subprocess.run([sys.executable, "-c", BIG_STARTER, FLOOR], capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr.decode()
    got = json.loads(r.stdout)
    assert got["bound"] > 300 * 1024 > got["own"]  # getrusage says the starter's size
    assert got["above_own"] is False  # a child above the run's own peak: its own
    assert got["own_peak"] is True  # no more than the run's: not the child's own
    assert got["above_bound"] is False


def test_a_floor_that_cannot_read_its_peak_says_covered_up_to_getrusage() -> None:
    with SpawnFloor(proc="/nonexistent") as floor:
        bound = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        assert floor.covers(bound) is True
        assert floor.covers(bound + 1) is False


def test_peak_from_status() -> None:
    status = b"Name:\tpython3\nVmPeak:\t  300000 kB\nVmHWM:\t   123456 kB\nVmRSS:\t 1000 kB\n"
    assert peak_from_status(status) == 123456
    assert peak_from_status(b"Name:\tkthreadd\nState:\tS (sleeping)\n") is None


#: A worker's calls in a process of their own (the meter resets this process's peak).
CALLS = r"""
import json, subprocess, sys
from zotsink._run.usage import CallMeter
meter = CallMeter()
out = {"measures_peak": meter.measures_peak}
def call(name, work):
    meter.begin()
    work()
    out[name] = meter.end()._asdict()
call("idle", lambda: None)
call("own", lambda: len(b"o" * (120 << 20)))
call("child_big", lambda: subprocess.run([sys.executable, "-c", "x = b'c' * (200 << 20)"]))
call("child_small", lambda: subprocess.run([sys.executable, "-c", "x = b'c' * (30 << 20)"]))
call("cpu", lambda: sum(i * i for i in range(2_000_000)))
print(json.dumps(out))
"""


def test_call_meter_in_a_worker() -> None:
    r = subprocess.run([sys.executable, "-c", CALLS], capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr.decode()
    got = json.loads(r.stdout)
    if not got["measures_peak"]:
        pytest.skip("this kernel refuses to reset a process's peak (/proc/self/clear_refs)")
    idle = got["idle"]["peak_kib"]
    assert 100 * 1024 < got["own"]["peak_kib"] - idle < 140 * 1024
    # a child of the call set a new high: the call's peak is the child's
    assert got["child_big"]["peak_kib"] > 200 * 1024
    assert got["child_big"]["user_s"] + got["child_big"]["sys_s"] > 0
    # a child under that earlier high cannot be told apart from it: not measured, never 200 MB
    assert got["child_small"]["peak_kib"] is None
    # no child: the worker's own peak again
    assert got["cpu"]["peak_kib"] is not None and got["cpu"]["peak_kib"] < 100 * 1024
    assert got["cpu"]["user_s"] > 0.05


def test_call_meter_where_the_kernel_refuses(tmp_path: Path) -> None:
    # no clear_refs (not Linux, a locked-down /proc): the peak is not measured
    (tmp_path / "status").write_text("VmHWM:\t  1000 kB\n")
    with CallMeter(proc=str(tmp_path)) as meter:
        assert not meter.measures_peak
        meter.begin()
        usage = meter.end()
    assert usage.peak_kib is None
    assert usage.user_s is not None and usage.sys_s is not None


def test_end_without_begin_measures_no_cpu() -> None:
    with CallMeter(proc="/nonexistent") as meter:
        assert meter.end() == Usage(None, None, None, False)


# -- OOM ------------------------------------------------------------------------------------

#: As the kernel writes them (cgroup v2 memory.events, v1 memory.oom_control).
EVENTS_V2 = b"low 0\nhigh 0\nmax 17\noom 3\noom_kill 2\noom_group_kill 0\n"
OOM_CONTROL_V1 = b"oom_kill_disable 0\nunder_oom 0\noom_kill 5\n"
OOM_CONTROL_OLD = b"oom_kill_disable 0\nunder_oom 0\n"


def test_oom_kills_of_recorded_files() -> None:
    assert oom_kills(EVENTS_V2) == 2
    assert oom_kills(OOM_CONTROL_V1) == 5
    assert oom_kills(OOM_CONTROL_OLD) is None  # a kernel before the count: nothing is oom
    assert oom_kills(b"") is None


def _mountinfo(*mounts: tuple[str, str, str, str]) -> bytes:
    """mountinfo lines of (root, mount point, fs type, super options)."""
    return b"".join(
        f"{30 + i} 23 0:{40 + i} {root} {point} rw,relatime - {fstype} {fstype} {opts}\n".encode()
        for i, (root, point, fstype, opts) in enumerate(mounts)
    )


def test_the_cgroup_file_v2(tmp_path: Path) -> None:
    events = tmp_path / "unified/slurm/job_7/step_0/memory.events"
    events.parent.mkdir(parents=True)
    events.write_bytes(EVENTS_V2)
    found = memory_cgroup_file(
        b"0::/slurm/job_7/step_0\n",
        _mountinfo(("/", str(tmp_path / "unified"), "cgroup2", "rw")),
    )
    assert found == str(events)


def test_the_cgroup_file_v1_beside_a_v2_without_memory(tmp_path: Path) -> None:
    control = tmp_path / "memory/slurm/uid_0/job_7/memory.oom_control"
    control.parent.mkdir(parents=True)
    control.write_bytes(OOM_CONTROL_V1)
    (tmp_path / "unified/slurm").mkdir(parents=True)  # no memory.events there
    cgroup = b"9:name=systemd:/\n4:memory:/slurm/uid_0/job_7\n2:cpu,cpuacct:/\n0::/slurm\n"
    mounts = _mountinfo(
        ("/", str(tmp_path / "unified"), "cgroup2", "rw"),
        ("/", str(tmp_path / "memory"), "cgroup", "rw,memory"),
        ("/", str(tmp_path / "cpu"), "cgroup", "rw,cpu,cpuacct"),
    )
    assert memory_cgroup_file(cgroup, mounts) == str(control)


def test_the_cgroup_file_in_a_container(tmp_path: Path) -> None:
    # the container sees its own cgroup mounted at the hierarchy's root
    events = tmp_path / "cg/memory.events"
    events.parent.mkdir(parents=True)
    events.write_bytes(EVENTS_V2)
    mounts = _mountinfo(("/docker/abc", str(tmp_path / "cg"), "cgroup2", "rw"))
    assert memory_cgroup_file(b"0::/docker/abc\n", mounts) == str(events)
    assert memory_cgroup_file(b"0::/elsewhere\n", mounts) is None


def test_no_cgroup_file(tmp_path: Path) -> None:
    assert memory_cgroup_file(b"0::/\n", b"") is None
    mounts = _mountinfo(("/", str(tmp_path), "cgroup2", "rw"))
    assert memory_cgroup_file(b"0::/gone\n", mounts) is None


def test_oom_watch_on_a_counter(tmp_path: Path) -> None:
    events = tmp_path / "memory.events"
    events.write_bytes(EVENTS_V2)
    with OomCounter(str(events)) as counter:
        assert counter.readable and counter.count() == 2
        killed, exited, termed = OomWatch(counter), OomWatch(counter), OomWatch(counter)
        for w in (killed, exited, termed):
            w.before()
        events.write_bytes(EVENTS_V2.replace(b"oom_kill 2", b"oom_kill 3"))
        assert killed.after(signal.SIGKILL) is True
        assert exited.after(None) is False  # it exited: no kill
        assert termed.after(signal.SIGTERM) is False  # the kernel kills for memory by SIGKILL
        again = OomWatch(counter)
        again.before()
        assert again.after(signal.SIGKILL) is False  # killed, but the count did not rise


def test_oom_watch_where_nothing_is_readable(tmp_path: Path) -> None:
    (tmp_path / "memory.oom_control").write_bytes(OOM_CONTROL_OLD)
    for path in (str(tmp_path / "none"), str(tmp_path / "memory.oom_control")):
        counter = OomCounter(path)
        assert not counter.readable and counter.count() is None
        w = OomWatch(counter)
        w.before()
        assert w.after(signal.SIGKILL) is False


def test_this_process_s_counter_when_there_is_one() -> None:
    counter = OomCounter()
    if counter.path is None:
        pytest.skip("no memory cgroup file here")
    assert counter.readable == (counter.count() is not None)
    assert os.path.basename(counter.path) in ("memory.events", "memory.oom_control")


def test_the_cgroup_file_under_a_mount_point_with_a_space(tmp_path: Path) -> None:
    events = tmp_path / "cgroup fs/job/memory.events"
    events.parent.mkdir(parents=True)
    events.write_bytes(EVENTS_V2)
    point = str(tmp_path / "cgroup fs").replace(" ", "\\040")  # as mountinfo writes it
    assert memory_cgroup_file(b"0::/job\n", _mountinfo(("/", point, "cgroup2", "rw"))) == str(
        events
    )


def test_quick_calls_have_their_peak_read_once_per_sample_long_ones_always(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The status file costs most of a quick call's measuring: read for every long call,
    for one quick call per SAMPLE_EVERY; CPU for every call."""
    from zotsink._run import usage

    clock = [100.0]
    monkeypatch.setattr(usage.time, "perf_counter", lambda: clock[0])
    meter = usage.CallMeter()
    if not meter.measures_peak:
        pytest.skip("this kernel does not let a process reset its peak")

    def call(took: float) -> usage.Usage:
        meter.begin()
        clock[0] += took
        return meter.end()

    first = call(0.0001)
    assert first.peak_kib is not None  # the first is read: none was before
    quick = [call(0.0001) for _ in range(10)]  # 1 ms of quick calls: within one sample
    assert [u.peak_kib for u in quick] == [None] * 10
    assert all(u.user_s is not None for u in quick)
    assert call(usage.LONG_CALL * 1.5).peak_kib is not None
    clock[0] += usage.SAMPLE_EVERY
    assert call(0.0001).peak_kib is not None
    meter.close()
