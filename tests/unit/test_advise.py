"""zotsink._run.advise: what to ask the scheduler for, from what the attempts used."""

from __future__ import annotations

import re

import pytest

from zotsink._run.advise import TaskUse, UseTally, advise

MIB = 1024  # KiB


def use(
    n: int,
    peak_mib: float | None,
    *,
    seconds: float | None = 100.0,
    cpu: float | None = 1.0,
    status: str = "ok",
    element: str = "7[1]",
) -> TaskUse:
    user = None if cpu is None or seconds is None else cpu * seconds * 0.9
    system = None if cpu is None or seconds is None else cpu * seconds * 0.1
    peak = None if peak_mib is None else int(peak_mib * MIB)
    return TaskUse(n, element, "node1", seconds, peak, user, system, status)


def test_tasks_of_300_to_400_mb_ask_between_400_mb_and_1_gb() -> None:
    uses = [use(i, 300 + (i * 37) % 101) for i in range(1, 1001)]
    advice = advise(uses)
    assert advice.memory_kib is not None
    assert 400e6 <= advice.memory_kib * 1024 <= 1e9
    (mem,) = [d for d in advice.directives("slurm") if d.startswith("#SBATCH --mem=")]
    assert re.fullmatch(r"#SBATCH --mem=\d+M", mem)
    assert 400e6 <= int(mem[len("#SBATCH --mem=") : -1]) * 2**20 <= 1e9
    # by a high quantile of the peaks, not their largest
    assert advice.quantile == 0.95 and advice.peak_max == (400 * MIB, 30)
    assert 390 * MIB <= advice.peak_kib <= 400 * MIB  # type: ignore[operator]


def test_the_directives_of_each_scheduler() -> None:
    uses = [use(i, 1000) for i in range(1, 21)]
    advice = advise(uses, jobs=4, per_element=40)
    # 1000 MiB x 4 at a time x 1.25; a task keeps one CPU busy; 10 turns of 100 s x 1.25
    assert advice.directives("slurm") == [
        "#SBATCH --mem=5000M",
        "#SBATCH --cpus-per-task=4",
        "#SBATCH --time=00:21:00",
    ]
    assert advice.directives("sge") == [
        "#$ -pe smp 4",
        "#$ -l h_vmem=1300M",  # per slot
        "#$ -l h_rt=00:21:00",
    ]
    assert advice.directives("pbs") == [
        "#PBS -l select=1:ncpus=4:mem=5000mb",
        "#PBS -l walltime=00:21:00",
    ]
    with pytest.raises(ValueError, match="lsf"):
        advice.directives("lsf")


def test_large_memory_in_whole_gib_and_one_task_per_element() -> None:
    advice = advise([use(1, 9 * 1024, seconds=3600.0, cpu=3.6)], jobs=1, per_element=1)
    assert advice.directives("slurm") == [
        "#SBATCH --mem=12G",  # 9 GiB x 1.25, up to a whole GiB
        "#SBATCH --cpus-per-task=4",  # 3.6 CPUs busy: 4
        "#SBATCH --time=01:15:00",  # one turn: the task at its quantile x 1.25
    ]
    assert advice.directives("pbs")[0] == "#PBS -l select=1:ncpus=4:mem=12gb"


def test_not_measured_is_said_and_never_guessed() -> None:
    uses = [use(i, None, cpu=None) for i in range(1, 11)] + [use(11, None, seconds=None, cpu=None)]
    advice = advise(uses, jobs=2)
    assert advice.tasks == 11 and advice.peak_measured == 0 and advice.cpu_measured == 0
    assert advice.memory_kib is None and advice.cpus is None and advice.peak_kib is None
    assert advice.directives("slurm") == ["#SBATCH --time=00:13:00"]  # 6 turns of 100 s
    assert advice.directives("pbs") == ["#PBS -l walltime=00:13:00"]
    d = advice.to_dict()
    assert d["memory_kib"] is None and d["directives"]["sge"] == ["#$ -l h_rt=00:13:00"]


def test_a_task_killed_for_memory_sizes_the_memory_above_its_peak() -> None:
    uses = [use(i, 100) for i in range(1, 101)] + [use(101, 1000, status="oom")]
    advice = advise(uses)
    assert advice.oom == 1 and advice.oom_peak_kib == 1000 * MIB
    assert advice.directives("slurm")[0] == "#SBATCH --mem=1300M"  # 1000 MiB x 1.25


def test_one_odd_task_is_named_not_sized_for() -> None:
    uses = [use(i, 350) for i in range(1, 1000)] + [use(1000, 4096)]
    advice = advise(uses)
    assert advice.directives("slurm")[0] == "#SBATCH --mem=500M"
    assert advice.over == ((1000, 4096 * MIB),)


def test_running_attempts_are_passed_by_and_one_pass_serves() -> None:
    tally = UseTally()
    for u in [use(1, 100), use(2, 5000, status="running"), use(3, 100, element="7[2]")]:
        tally.add(u)
    advice = tally.advice(jobs=1)
    assert advice.tasks == 2 and advice.per_element == 1
    assert advice.peak_max == (100 * MIB, 1)


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="jobs"):
        advise([], jobs=0)
    with pytest.raises(ValueError, match="quantile"):
        advise([], quantile=0)
    assert advise([]).directives("slurm") == []
