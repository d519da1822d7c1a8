"""What to ask the scheduler for next time, from what the tasks used (``status --advise``).

:func:`advise` is a pure function of the tasks' figures (:class:`TaskUse`: each ended
attempt's peak memory, CPU and time) and of how the elements ran them (``--jobs``, tasks
per element); its :class:`Advice` holds the figures and gives the directives of Slurm,
Grid Engine and PBS (:meth:`Advice.directives`). The rules, each a high quantile
(:data:`QUANTILE`, not the largest: one odd task does not size every element) with a
stated margin:

- memory per element: the peak's quantile x ``jobs`` x :data:`MEMORY_MARGIN` (a task killed
  for memory had at least its peak too little: the basis is never below it);
- CPUs per element: ``jobs`` x the CPUs a task keeps busy ((user + system) / time, its
  quantile, a part of one counting as one);
- time per element: the tasks before the last turn of ``jobs`` at their mean time, then
  one at the quantile, x :data:`TIME_MARGIN`.

Figures that were not measured (None) are counted as such and never guessed; a rule whose
figures are all missing gives no directive.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, Final, NamedTuple

from .spread import Spread

__all__ = [
    "MEMORY_MARGIN",
    "QUANTILE",
    "SCHEDULERS",
    "TIME_MARGIN",
    "Advice",
    "TaskUse",
    "UseTally",
    "advise",
    "memory_text",
]

#: The quantile of the tasks' figures the advice is sized by.
QUANTILE: Final = 0.95
#: Memory asked for, over the quantile of the peaks.
MEMORY_MARGIN: Final = 1.25
#: Time asked for, over the estimate.
TIME_MARGIN: Final = 1.25
#: The schedulers whose directives :meth:`Advice.directives` writes.
SCHEDULERS: Final = ("slurm", "sge", "pbs")
#: A part of a CPU above a whole number that still counts as that number (measurement and
#: the run's own work add a little to a task that keeps one CPU busy).
_CPU_SLACK: Final = 0.1
#: Tasks named as peaking above the memory a task is given, at most.
_OVER_SHOWN: Final = 5


class TaskUse(NamedTuple):
    """One ended attempt of a task, and what it used (None: not measured)."""

    tasknum: int
    element: str  # the array element that ran it, ``JOB[INDEX]``
    host: str
    seconds: float | None  # its own time
    peak_kib: int | None
    user_s: float | None
    sys_s: float | None
    status: str  # its end: ok, failed, killed, oom, timeout, ...


class Advice(NamedTuple):
    """The figures behind the advice, and the advice (None: not measured)."""

    tasks: int  # ended attempts looked at
    peak_measured: int  # of them with a peak
    cpu_measured: int  # with CPU times and a time
    quantile: float
    jobs: int  # tasks an element runs at a time
    per_element: int  # tasks an element runs in all (what the time is for)
    peak_kib: int | None  # the quantile of the peaks
    peak_max: tuple[int, int] | None  # (KiB, task): the largest peak
    oom: int  # attempts killed for memory
    oom_peak_kib: int | None  # the largest peak among them
    memory_kib: int | None  # per element, rounded up
    over: tuple[tuple[int, int], ...]  # (task, KiB) that peaked above memory_kib / jobs
    cpu_per_task: float | None  # the quantile of (user + system) / time
    cpus: int | None  # per element
    seconds_mean: float | None
    seconds_q: float | None
    time_s: int | None  # per element, whole minutes
    memory_margin: float = MEMORY_MARGIN
    time_margin: float = TIME_MARGIN

    def to_dict(self) -> dict[str, Any]:
        d = self._asdict()
        d["peak_max"] = None if self.peak_max is None else list(self.peak_max)
        d["over"] = [list(x) for x in self.over]
        d["directives"] = {s: self.directives(s) for s in SCHEDULERS}
        return d

    def directives(self, scheduler: str) -> list[str]:
        """The lines of a job script that ask for this (``slurm``, ``sge`` or ``pbs``);
        what was not measured is left out."""
        if scheduler == "slurm":
            out = []
            if self.memory_kib is not None:
                out.append(f"#SBATCH --mem={memory_text(self.memory_kib, 'M', 'G')}")
            if self.cpus is not None:
                out.append(f"#SBATCH --cpus-per-task={self.cpus}")
            if self.time_s is not None:
                out.append(f"#SBATCH --time={_clock(self.time_s)}")
            return out
        if scheduler == "sge":
            out = []
            if self.cpus is not None and self.cpus > 1:
                out.append(f"#$ -pe smp {self.cpus}")
            if self.memory_kib is not None:
                # h_vmem is counted per slot of the parallel environment
                slots = self.cpus if self.cpus is not None and self.cpus > 1 else 1
                per_slot = memory_text(_round_memory(-(-self.memory_kib // slots)), "M", "G")
                out.append(f"#$ -l h_vmem={per_slot}")
            if self.time_s is not None:
                out.append(f"#$ -l h_rt={_clock(self.time_s)}")
            return out
        if scheduler == "pbs":
            out = []
            chunk = [f"ncpus={self.cpus if self.cpus is not None else 1}"]
            if self.memory_kib is not None:
                chunk.append(f"mem={memory_text(self.memory_kib, 'mb', 'gb')}")
            if self.cpus is not None or self.memory_kib is not None:
                out.append(f"#PBS -l select=1:{':'.join(chunk)}")
            if self.time_s is not None:
                out.append(f"#PBS -l walltime={_clock(self.time_s)}")
            return out
        raise ValueError(f"scheduler {scheduler!r}: one of {', '.join(SCHEDULERS)}")


class UseTally:
    """The figures of ended attempts summed as they come (:meth:`add`), in bounded memory;
    :meth:`advice` sizes an element from them. For a reader that makes one pass for
    several views; :func:`advise` is the one-call form."""

    def __init__(self) -> None:
        self.peaks, self.cpu, self.seconds = Spread(), Spread(), Spread()
        self.tasks = self.oom = 0
        self.oom_peak: int | None = None
        self.peak_max: tuple[int, int] | None = None
        self.per: dict[str, int] = {}  # element -> attempts it ended
        self._top: list[tuple[int, int]] = []  # (KiB, task): the largest peaks

    def add(self, u: TaskUse) -> None:
        """One attempt (passed by unless it ended: ``running`` and ``lost`` never did)."""
        if u.status in ("running", "lost"):
            return
        self.tasks += 1
        self.per[u.element] = self.per.get(u.element, 0) + 1
        if u.seconds is not None:
            self.seconds.add(u.seconds)
        if u.peak_kib is not None:
            self.peaks.add(u.peak_kib)
            if self.peak_max is None or u.peak_kib > self.peak_max[0]:
                self.peak_max = (u.peak_kib, u.tasknum)
            _keep_top(self._top, (u.peak_kib, u.tasknum))
            if u.status == "oom":
                self.oom_peak = max(self.oom_peak or 0, u.peak_kib)
        if u.status == "oom":
            self.oom += 1
        if u.user_s is not None and u.sys_s is not None and u.seconds:
            self.cpu.add((u.user_s + u.sys_s) / u.seconds)

    def advice(
        self, *, jobs: int = 1, per_element: int | None = None, quantile: float = QUANTILE
    ) -> Advice:
        """The advice for elements that run ``jobs`` tasks at a time and ``per_element``
        tasks in all (default: the most an element ran here)."""
        if jobs < 1:
            raise ValueError(f"jobs must be at least 1, not {jobs}")
        if not 0 < quantile <= 1:
            raise ValueError(f"quantile must be above 0 and at most 1, not {quantile}")
        if per_element is None:
            per_element = max(self.per.values(), default=0)
        peak_q = self.peaks.quantile(quantile)
        memory = None
        if peak_q is not None:
            # a task killed for memory had at least its peak too little
            basis = max(peak_q, self.oom_peak or 0)
            memory = _round_memory(math.ceil(basis * jobs * MEMORY_MARGIN))
        cpu_q = self.cpu.quantile(quantile)
        cpus = None if cpu_q is None else jobs * max(1, math.ceil(cpu_q - _CPU_SLACK))
        mean, secs_q = self.seconds.mean, self.seconds.quantile(quantile)
        time_s = None
        if mean is not None and secs_q is not None and per_element:
            turns = math.ceil(per_element / jobs)
            estimate = ((turns - 1) * mean + secs_q) * TIME_MARGIN
            time_s = max(60, math.ceil(estimate / 60) * 60)
        share = None if memory is None else memory / jobs
        over = tuple(
            (task, kib)
            for kib, task in sorted(self._top, reverse=True)
            if share is not None and kib > share
        )
        return Advice(
            tasks=self.tasks,
            peak_measured=self.peaks.count,
            cpu_measured=self.cpu.count,
            quantile=quantile,
            jobs=jobs,
            per_element=per_element,
            peak_kib=None if peak_q is None else math.ceil(peak_q),
            peak_max=self.peak_max,
            oom=self.oom,
            oom_peak_kib=self.oom_peak,
            memory_kib=memory,
            over=over,
            cpu_per_task=cpu_q,
            cpus=cpus,
            seconds_mean=mean,
            seconds_q=secs_q,
            time_s=time_s,
        )


def advise(
    uses: Iterable[TaskUse],
    *,
    jobs: int = 1,
    per_element: int | None = None,
    quantile: float = QUANTILE,
) -> Advice:
    """The advice for elements that run ``jobs`` tasks at a time and ``per_element`` tasks
    in all (default: the most an element ran here), from the attempts ``uses`` (read once;
    attempts that did not end, still running or lost, are passed by)."""
    tally = UseTally()
    for u in uses:
        tally.add(u)
    return tally.advice(jobs=jobs, per_element=per_element, quantile=quantile)


def _keep_top(top: list[tuple[int, int]], item: tuple[int, int]) -> None:
    import heapq

    if len(top) < _OVER_SHOWN:
        heapq.heappush(top, item)
    elif item > top[0]:
        heapq.heapreplace(top, item)


def _round_memory(kib: int) -> int:
    """Up to a whole 100 MiB below 10 GiB, to a whole GiB from there (at least 100 MiB)."""
    step = 100 * 1024 if kib < 10 * 1024 * 1024 else 1024 * 1024
    return max(step, -(-kib // step) * step)


def memory_text(kib: int, mega: str, giga: str) -> str:
    """KiB as the schedulers write it: whole GiB as ``<n><giga>``, else MiB as
    ``<n><mega>`` (rounded up)."""
    if kib % (1024 * 1024) == 0:
        return f"{kib // (1024 * 1024)}{giga}"
    return f"{-(-kib // 1024)}{mega}"


def _clock(seconds: int) -> str:
    h, rest = divmod(seconds, 3600)
    return f"{h:02d}:{rest // 60:02d}:{rest % 60:02d}"
