"""Scheduler arithmetic: array indices, the chunks of tasks they run, and array specs.

Array element ``index`` with ``chunk`` K and ``base`` B runs the task lines
``(index - B) * K + 1`` ... ``(index - B + 1) * K``. :func:`array_spec` writes a set of
numbers as a compact Slurm ``--array`` spec; :func:`split_spec` splits one under a site's
MaxArraySize. ``run`` (which tasks are mine), ``status`` and ``missing`` (which indices to
resubmit) all count this way.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Final

from .errors import UsageError

__all__ = [
    "INDEX_VARS",
    "array_spec",
    "chunk_of",
    "chunk_range",
    "scheduler_index",
    "split_spec",
]

#: Where schedulers put the array index, in the order they are looked at.
INDEX_VARS: Final = (
    "SLURM_ARRAY_TASK_ID",
    "SGE_TASK_ID",
    "PBS_ARRAY_INDEX",
    "PBS_ARRAYID",
    "LSB_JOBINDEX",
)


def scheduler_index(env: Mapping[str, str] | None = None) -> int | None:
    """This array element's index from the scheduler's variables, or None outside an array."""
    env = os.environ if env is None else env
    for var in INDEX_VARS:
        val = env.get(var, "")
        if not val or val == "undefined":  # SGE says "undefined" outside arrays
            continue
        if var == "LSB_JOBINDEX" and val == "0":  # LSF: 0 outside arrays
            continue
        try:
            return int(val)
        except ValueError:
            raise UsageError(f"{var}={val!r} is not an array index; give --index N") from None
    return None


def chunk_range(index: int, chunk: int, base: int) -> range:
    """Task numbers that array element ``index`` runs."""
    if chunk < 1:
        raise UsageError(f"--chunk must be at least 1, not {chunk}")
    first = (index - base) * chunk + 1
    if first < 1:
        raise UsageError(
            f"array index {index} is below --base {base}: it would run task {first}; "
            "check --base (0 for arrays that start at 0)"
        )
    return range(first, first + chunk)


def chunk_of(tasknum: int, chunk: int, base: int) -> int:
    """The array index whose chunk holds task ``tasknum``."""
    return (tasknum - 1) // chunk + base


def split_spec(chunks: Sequence[int], base: int, max_array: int | None) -> list[tuple[str, int]]:
    """Array specs for the chunk numbers ``chunks`` (1-based), each with the base to run it.

    Chunk c runs as index ``c - 1 + base``. When the largest index would not stay below
    ``max_array`` (Slurm's MaxArraySize: indices run up to MaxArraySize - 1), the chunks are
    split into groups that each fit, and each group gets its own base, so index ``a`` of a
    group still runs chunk ``a - base + 1``.
    """
    if not chunks:
        return []
    if max_array is None or max(chunks) - 1 + base < max_array:
        return [(array_spec(c - 1 + base for c in chunks), base)]
    low = max(base, 0)  # the smallest index a group uses: the user's own base, never negative
    cap = max_array - low  # chunks per group
    if cap < 1:
        raise UsageError(f"--max-array {max_array} leaves no index at or above --base {base}")
    groups: dict[int, list[int]] = {}
    for c in sorted(set(chunks)):
        groups.setdefault((c - 1) // cap, []).append(c)
    out = []
    for g, members in sorted(groups.items()):
        b = low - g * cap
        out.append((array_spec(c - 1 + b for c in members), b))
    return out


def array_spec(numbers: Iterable[int]) -> str:
    """A compact Slurm ``--array`` spec: ``[3, 7, 8, 9, 15]`` -> ``"3,7-9,15"``."""
    parts: list[str] = []
    run: list[int] = []
    for n in sorted(set(numbers)):
        if run and n == run[-1] + 1:
            run.append(n)
            continue
        if run:
            parts.append(_span(run))
        run = [n]
    if run:
        parts.append(_span(run))
    return ",".join(parts)


def _span(run: list[int]) -> str:
    return str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}"
