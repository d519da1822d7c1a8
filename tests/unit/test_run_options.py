"""The checks of a run's options (zotsink/_run/options.py)."""

from __future__ import annotations

import os

import pytest

from zotsink._core.options import write_options
from zotsink._run.options import checked_options
from zotsink.errors import UsageError


def jobs_under(env: dict[str, str], jobs: int | str = "auto") -> int:
    o = checked_options(
        "tasks.txt", "out.tsv", ["echo"], call=None, function=None, index=None, chunk=1,
        base=1, jobs=jobs, shell=False, rerun=False, retries=0, task_timeout=None, grace=1.0,
        max_attempts=None, halt_after=None, new_settings=False, ledger=None, log=None,
        write=write_options(), env=env, stopper=None, progress=None,
    )  # fmt: skip
    return o.jobs


@pytest.mark.parametrize(
    ("env", "want"),
    [
        ({"SLURM_CPUS_PER_TASK": "6", "NSLOTS": "3"}, 6),  # Slurm
        ({"NSLOTS": "3", "SGE_TASK_ID": "2"}, 3),  # Grid Engine's slots (-pe smp 3)
        ({"NCPUS": "5", "PBS_ARRAY_INDEX": "2"}, 5),  # PBS Pro's select ncpus
        ({"NSLOTS": "0", "NCPUS": "x"}, len(os.sched_getaffinity(0))),  # nonsense: this CPU set
    ],
)
def test_jobs_auto_is_the_cpus_the_scheduler_gave(env: dict[str, str], want: int) -> None:
    assert jobs_under(env) == want


def test_jobs_must_be_a_number_or_auto() -> None:
    with pytest.raises(UsageError, match="--jobs must be a number or auto, not 'many'"):
        jobs_under({}, "many")
    with pytest.raises(UsageError, match="--jobs must be at least 1, not 0"):
        jobs_under({}, 0)
