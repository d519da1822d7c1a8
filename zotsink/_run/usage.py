"""What a task used: its peak memory, its CPU time, and whether the kernel killed it for
memory. Measured where the task ran, by the process that knows it best, at a cost of a
few system calls per task.

- A command (``run -- CMD``): :func:`reap` collects the task's process with ``wait4``,
  which hands over its resource usage (``subprocess`` would discard it), and
  :func:`command_usage` reads that usage. Its peak is the largest resident size of the
  process or of any process it waited for, one at a time: a command's peak is its
  largest process's, never the sum of its tree (as ``/usr/bin/time`` says). The kernel
  counts in a child's peak the size of the process that started it (its memory is the
  child's until ``exec``), so a peak no larger than the starting process's own (its
  :class:`SpawnFloor`) says only "no more than that": it is not measured, never given as
  the task's.
- A function (``run --call``): a :class:`CallMeter` inside the worker process resets the
  process's peak before each call (``/proc/self/clear_refs``) and reads it after
  (``VmHWM`` of ``/proc/self/status``), and takes the CPU time the call and the processes
  it waited for used as differences of ``getrusage``. Where the kernel refuses the reset
  (not Linux, an old kernel, a locked-down ``/proc``) the peak is None: not measured.
- A task killed by SIGKILL while the memory cgroup it ran in counted an OOM kill is
  ``oom`` (:class:`OomWatch` on an :class:`OomCounter`: cgroup v2 ``memory.events``, else
  v1 ``memory.oom_control``, read before the task and after it). Where no counter is
  readable nothing is called oom.

Invariant: a figure is the kernel's own, or None; none is ever estimated. This module
imports nothing of the engine: the engine calls it (see each name's docstring).
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import signal
import sys
import time
from typing import TYPE_CHECKING, Any, Final, NamedTuple

if TYPE_CHECKING:  # a function worker measures its calls without subprocess's import
    import subprocess

try:
    import resource
except ImportError:  # not POSIX: nothing is measured
    resource = None  # type: ignore[assignment]

__all__ = [
    "UNMEASURED",
    "CallMeter",
    "OomCounter",
    "OomWatch",
    "Reaped",
    "SpawnFloor",
    "Usage",
    "command_usage",
    "memory_cgroup_file",
    "oom_kills",
    "peak_from_status",
    "reap",
]


class Usage(NamedTuple):
    """What one task used. None: not measured (never a guess)."""

    peak_kib: int | None = None  # the largest resident size, KiB
    user_s: float | None = None  # CPU seconds in user mode
    sys_s: float | None = None  # CPU seconds in the kernel
    oom: bool = False  # the kernel killed it for memory

    @property
    def cpu_s(self) -> float | None:
        """User and system CPU seconds together (None when either is not measured)."""
        if self.user_s is None or self.sys_s is None:
            return None
        return self.user_s + self.sys_s


#: Nothing measured: what a task whose usage is unknown carries.
UNMEASURED: Final = Usage()

#: ``ru_maxrss`` is in KiB on Linux and the BSDs, in bytes on macOS.
_MAXRSS_BYTES: Final = sys.platform == "darwin"


def _kib(maxrss: int) -> int:
    return maxrss // 1024 if _MAXRSS_BYTES else maxrss


_VMHWM: Final = re.compile(rb"VmHWM:\s*(\d+)\s*kB")
#: Bytes read of ``/proc/self/status``: all of it (it is a page at most).
_STATUS_READ: Final = 1 << 14


def peak_from_status(status: bytes) -> int | None:
    """``VmHWM`` (the peak resident size, KiB) of a ``/proc/PID/status`` text; None when it
    has none (a kernel thread, a zombie, not Linux)."""
    m = _VMHWM.search(status)
    return int(m.group(1)) if m else None


# -- commands -------------------------------------------------------------------------------


class Reaped(NamedTuple):
    """A command's process, collected: its return code as ``Popen.returncode`` gives it
    (negative: the signal that ended it) and its resource usage (None: another waiter
    collected it first, and took its usage along)."""

    returncode: int
    rusage: Any  # resource.struct_rusage | None


def reap(popen: subprocess.Popen[Any], *, block: bool = False) -> Reaped | None:
    """Collect ``popen``'s process if it ended (with ``block``, wait until it does); None
    while it runs.

    Called by the engine in place of ``popen.poll()`` / ``popen.wait()`` for a task's
    command: ``wait4`` hands over the process's resource usage, which ``subprocess`` would
    collect and drop. ``popen.returncode`` is set, so that ``poll()`` and ``wait()`` answer
    from it afterwards and never wait for the process again.
    """
    if popen.returncode is not None:
        return Reaped(popen.returncode, None)
    try:
        pid, status, rusage = os.wait4(popen.pid, 0 if block else os.WNOHANG)
    except ChildProcessError:
        # collected by another waiter (Popen.poll from elsewhere): its code is there, its
        # usage is gone
        popen.poll()
        return Reaped(popen.returncode if popen.returncode is not None else 127, None)
    if pid == 0:
        return None
    popen.returncode = _exit_code(status)
    return Reaped(popen.returncode, rusage)


def _exit_code(status: int) -> int:
    if hasattr(os, "waitstatus_to_exitcode"):
        return os.waitstatus_to_exitcode(status)
    if os.WIFSIGNALED(status):  # Python before 3.9.0 final
        return -os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


class SpawnFloor:
    """How much of a child's peak may be this process's own size: the kernel counts in the
    peak of a child the peak of the process that started it (``VmHWM``: its memory was the
    child's until ``exec``). One per run, asked about each command it collects
    (:meth:`covers`).

    This process's peak is read from ``/proc/self/status`` only when ``getrusage`` cannot
    tell alone: its figure is never below that peak, but may be the size of the process
    that started this one (counted in this one's figure the same way); once the two agree
    they agree for good (the peak only grows), and ``getrusage`` answers alone.
    """

    def __init__(self, proc: str = "/proc/self") -> None:
        self._status = -1
        self._same = False  # getrusage's figure is this process's own peak
        with contextlib.suppress(OSError):
            self._status = os.open(f"{proc}/status", os.O_RDONLY | os.O_CLOEXEC)

    def covers(self, peak_kib: int) -> bool:
        """Whether a child's ``peak_kib``, read after the child ended, may be no more than
        this process's size counted in it (then it is not the child's own)."""
        if resource is None:
            return True
        bound = _kib(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
        if peak_kib > bound:
            return False
        if self._same or self._status < 0:
            return True
        try:
            own = peak_from_status(os.pread(self._status, _STATUS_READ, 0))
        except OSError:
            own = None
        if own is None:
            return True
        self._same = own >= bound
        return peak_kib <= own

    def close(self) -> None:
        if self._status >= 0:
            os.close(self._status)
        self._status = -1

    def __enter__(self) -> SpawnFloor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def command_usage(
    rusage: Any, *, floor: SpawnFloor | int | None = None, oom: bool = False
) -> Usage:
    """A command's usage from the ``rusage`` :func:`reap` collected (None: not measured).

    ``floor``: the :class:`SpawnFloor` of the process that started it (or a size in KiB).
    A peak it covers is not the command's own (the kernel counts the starting process's
    size in its child's peak): not measured. Without ``floor`` the peak is taken as it is:
    right for a command started by a small process (a shell, ``/usr/bin/time``)."""
    if rusage is None:
        return Usage(None, None, None, oom)
    peak: int | None = _kib(rusage.ru_maxrss)
    if peak is not None and floor is not None:
        covered = peak <= floor if isinstance(floor, int) else floor.covers(peak)
        if covered:
            peak = None
    return Usage(peak, rusage.ru_utime, rusage.ru_stime, oom)


# -- function calls -------------------------------------------------------------------------

#: A call this long (seconds) has its peak read always; a quicker one once per
#: :data:`SAMPLE_EVERY` seconds of a worker's calls (see :class:`CallMeter`).
LONG_CALL: Final = 0.002
SAMPLE_EVERY: Final = 0.05


class CallMeter:
    """Measures each call of a function worker, inside the worker process::

        meter = CallMeter()           # once, when the worker starts
        meter.begin()                 # right before FUNC(line)
        usage = meter.end()           # right after it returns or raises

    ``begin`` resets the process's peak to its present size and notes the CPU times of
    the process and of the children it waited for; ``end`` reads the peak since and takes
    the differences. The call's peak is the worker's, or a child's the call waited for
    when that is larger; where an earlier call's child was larger still, a child of this
    call may hide under it: then, unless the worker's own peak is above that, the peak is
    not measured. ``measures_peak`` says whether the kernel lets the peak be reset here
    (not: every peak is None). Not for threads: one call at a time.

    The peak is read from ``/proc/self/status``, which the kernel writes whole at each read
    (most of what measuring a quick call costs): it is read for every call of
    :data:`LONG_CALL` seconds or more, and for one quick call each :data:`SAMPLE_EVERY`
    seconds; the other quick calls' peaks are not measured (None). The reset before each
    call keeps every figure read the call's own. CPU is measured for every call.
    """

    def __init__(self, proc: str = "/proc/self") -> None:
        self._clear = self._status = -1
        try:
            self._status = os.open(f"{proc}/status", os.O_RDONLY | os.O_CLOEXEC)
            self._clear = os.open(f"{proc}/clear_refs", os.O_WRONLY | os.O_CLOEXEC)
            os.write(self._clear, b"5")  # the kernel says now whether it resets the peak
            if peak_from_status(os.pread(self._status, _STATUS_READ, 0)) is None:
                raise OSError("no VmHWM")
        except OSError:
            self._close()
        self._self: Any = None
        self._children: Any = None
        self._began = 0.0
        self._read_at = -math.inf  # when the peak was last read

    @property
    def measures_peak(self) -> bool:
        return self._clear >= 0

    def begin(self) -> None:
        """A call begins: reset the peak, note the CPU times."""
        if self._clear >= 0:
            try:
                os.write(self._clear, b"5")
            except OSError:
                self._close()
        if resource is not None:
            self._self = resource.getrusage(resource.RUSAGE_SELF)
            self._children = resource.getrusage(resource.RUSAGE_CHILDREN)
        self._began = time.perf_counter()

    def end(self) -> Usage:
        """The call ended: what it used since :meth:`begin`."""
        own: int | None = None
        now = time.perf_counter()
        due = now - self._began >= LONG_CALL or now - self._read_at >= SAMPLE_EVERY
        if self._clear >= 0 and due:
            self._read_at = now
            try:
                own = peak_from_status(os.pread(self._status, _STATUS_READ, 0))
            except OSError:
                own = None
        if resource is None or self._self is None:
            return Usage(own, None, None)
        me = resource.getrusage(resource.RUSAGE_SELF)
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        before, kids_before = self._self, self._children
        self._self = self._children = None
        user = me.ru_utime - before.ru_utime + kids.ru_utime - kids_before.ru_utime
        system = me.ru_stime - before.ru_stime + kids.ru_stime - kids_before.ru_stime
        return Usage(_call_peak(own, kids_before, kids), max(user, 0.0), max(system, 0.0))

    def close(self) -> None:
        self._close()

    def _close(self) -> None:
        for fd in (self._clear, self._status):
            if fd >= 0:
                os.close(fd)
        self._clear = self._status = -1

    def __enter__(self) -> CallMeter:
        return self

    def __exit__(self, *exc: object) -> None:
        self._close()


def _call_peak(own: int | None, kids_before: Any, kids: Any) -> int | None:
    """A call's peak: the worker's own, or a child's it waited for when larger."""
    if own is None:
        return None
    # a child collected during the call shows in the children's counts (every process
    # faults pages in before it exits)
    waited = (kids.ru_minflt, kids.ru_majflt, kids.ru_utime, kids.ru_stime) != (
        kids_before.ru_minflt,
        kids_before.ru_majflt,
        kids_before.ru_utime,
        kids_before.ru_stime,
    )
    if not waited:
        return own
    was, now = _kib(kids_before.ru_maxrss), _kib(kids.ru_maxrss)
    if now > was:
        return max(own, now)  # a child of this call set a new high: its peak is that
    # this call's children stayed under an earlier high: known only when that is below own
    return own if was <= own else None


# -- OOM ------------------------------------------------------------------------------------

_OOM_KILL: Final = re.compile(rb"(?m)^oom_kill (\d+)$")


def oom_kills(text: bytes) -> int | None:
    """The ``oom_kill`` count of a cgroup v2 ``memory.events`` or a v1
    ``memory.oom_control`` text; None when it has none (an old kernel)."""
    m = _OOM_KILL.search(text)
    return int(m.group(1)) if m else None


def memory_cgroup_file(cgroup: bytes | None = None, mountinfo: bytes | None = None) -> str | None:
    """The file that counts the OOM kills of this process's memory cgroup: cgroup v2
    ``memory.events``, else v1 ``memory.oom_control``; None when neither is there.

    ``cgroup`` and ``mountinfo``: the texts of ``/proc/self/cgroup`` and
    ``/proc/self/mountinfo`` (read here when not given)."""
    try:
        if cgroup is None:
            with open("/proc/self/cgroup", "rb") as f:
                cgroup = f.read()
        if mountinfo is None:
            with open("/proc/self/mountinfo", "rb") as f:
                mountinfo = f.read()
    except OSError:
        return None
    v2, v1 = _cgroup_paths(cgroup)
    mounts = _cgroup_mounts(mountinfo)
    found = []
    if v2 is not None and "cgroup2" in mounts:
        found.append((mounts["cgroup2"], v2, "memory.events"))
    if v1 is not None and "memory" in mounts:
        found.append((mounts["memory"], v1, "memory.oom_control"))
    for (point, root), path, name in found:
        rel = _below(path, root)
        if rel is None:
            continue
        candidate = os.path.join(point, rel.lstrip("/"), name)
        if os.path.isfile(candidate):
            return candidate
    return None


def _cgroup_paths(text: bytes) -> tuple[str | None, str | None]:
    """(the v2 path, the v1 memory controller's path) of a ``/proc/PID/cgroup`` text."""
    v2 = v1 = None
    for m in re.finditer(rb"(?m)^(\d+):([^:\n]*):(.*)$", text):
        controllers = m.group(2).split(b",")
        path = m.group(3).decode("utf-8", "surrogateescape")
        if m.group(1) == b"0" and m.group(2) == b"":
            v2 = path
        elif b"memory" in controllers:
            v1 = path
    return v2, v1


def _cgroup_mounts(text: bytes) -> dict[str, tuple[str, str]]:
    """{"cgroup2" or "memory": (mount point, the cgroup path mounted there)} of a
    ``/proc/PID/mountinfo`` text."""
    out: dict[str, tuple[str, str]] = {}
    for m in re.finditer(rb"(?m)^\S+ \S+ \S+ (\S+) (\S+) .*? - (\S+) \S+ (\S+)$", text):
        root, point, fstype, options = (_mount_path(g) for g in m.groups())
        if fstype == "cgroup2":
            out.setdefault("cgroup2", (point, root))
        elif fstype == "cgroup" and "memory" in options.split(","):
            out.setdefault("memory", (point, root))
    return out


def _mount_path(field: bytes) -> str:
    # mountinfo writes a space, tab, newline and backslash in a path as octal escapes
    text = field.decode("utf-8", "surrogateescape")
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), text)


def _below(path: str, root: str) -> str | None:
    """``path`` (a cgroup path) relative to the mount's ``root``; None when outside it."""
    if root in ("", "/"):
        return path
    if path == root:
        return "/"
    if path.startswith(root.rstrip("/") + "/"):
        return path[len(root.rstrip("/")) :]
    return None


class OomCounter:
    """The OOM kills counted by a memory cgroup: its ``memory.events`` (v2) or
    ``memory.oom_control`` (v1) file, kept open and read again from its start (one
    ``pread``). One per run, shared by its tasks' :class:`OomWatch`."""

    def __init__(self, path: str | None = None) -> None:
        """``path``: the file (default: this process's, :func:`memory_cgroup_file`)."""
        self.path = path if path is not None else memory_cgroup_file()
        self._fd = -1
        if self.path is not None:
            try:
                self._fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
                if self.count() is None:
                    raise OSError("no oom_kill count")
            except OSError:
                self.close()

    @property
    def readable(self) -> bool:
        """Whether a count can be read here (else no task is ever called oom)."""
        return self._fd >= 0

    def count(self) -> int | None:
        """The OOM kills counted so far; None when unreadable."""
        if self._fd < 0:
            return None
        try:
            return oom_kills(os.pread(self._fd, 4096, 0))
        except OSError:
            return None

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
        self._fd = -1

    def __enter__(self) -> OomCounter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class OomWatch:
    """Whether one task the kernel killed died for memory::

        counter = OomCounter()        # once per run: this process's memory cgroup
        watch = OomWatch(counter)     # per task
        watch.before()                # when the task starts
        oom = watch.after(sig)        # when it ended by signal ``sig`` (None: it exited)

    A task is ``oom`` when it died of SIGKILL while its cgroup's counter rose: the cgroup it
    shares with the run killed a process for memory meanwhile. Tasks that run side by side
    share the cgroup, so a SIGKILL from elsewhere at the moment of another process's OOM
    kill would be taken for one. Where no counter is readable nothing is oom.
    """

    __slots__ = ("_counter", "_mark", "_noted")

    def __init__(self, counter: OomCounter | None = None) -> None:
        self._counter = counter if counter is not None else OomCounter()
        self._mark: int | None = None
        self._noted = -math.inf

    def before(self, *, reuse: float = 0.0) -> None:
        """The task starts: note the count (``reuse``: seconds a count noted before still
        serves: a worker's calls come back to back, and a read costs a system call)."""
        now = time.monotonic()
        if self._mark is not None and now - self._noted < reuse:
            return
        self._mark = self._counter.count()
        self._noted = now

    def after(self, sig: int | None) -> bool:
        """The task ended by signal ``sig`` (None or 0: it exited): was it an OOM kill?"""
        if self._mark is None or sig != signal.SIGKILL:
            return False
        now = self._counter.count()
        return now is not None and now > self._mark
