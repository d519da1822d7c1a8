"""How a run was called, as the ledger records it, and the policy of a resubmission.

A ``run`` row (task number 0, no key) of the ledger records a run's settings: a JSON object
of text values in ``note`` (:func:`run_settings` makes them, :func:`settings_note` writes
them, :func:`settings_of` reads them). The latest one counts. A resubmission must be called
as the recorded run was (:data:`COMPARED_SETTINGS`); :func:`reconcile` is what a run makes
of the recorded settings before it starts, and :func:`check_news_settings` what it makes of
a ``run`` row another run appends meanwhile. ``status`` and ``missing --ledger`` count
array indices in the recorded chunk and base (:func:`recorded_array`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Final

from ..errors import InputError, UsageError
from .worker import resolved_call

__all__ = [
    "COMPARED_SETTINGS",
    "check_news_settings",
    "reconcile",
    "recorded_array",
    "recorded_max_attempts",
    "run_settings",
    "settings_conflict",
    "settings_message",
    "settings_note",
    "settings_of",
]

#: Settings a resubmission must share with the recorded ones (a key missing on one side
#: counts as ""). ``chunk`` is compared only when both runs had an array index (a run
#: without one runs every task, whatever its chunk). Other recorded settings may change
#: from run to run: ``tasks``, ``max_attempts``, and ``base``, which only names the indices
#: of the same chunks (the parts of a resubmission split under the site's MaxArraySize each
#: run under a base of their own); the first recorded base stays on record.
COMPARED_SETTINGS: Final = ("chunk", "format", "columns", "kv", "stamp", "command", "call")
_ARRAY_SETTINGS: Final = ("chunk",)


def run_settings(
    tasks: str | os.PathLike[str],
    command: Sequence[str],
    *,
    shell: bool,
    array: bool,
    chunk: int,
    base: int,
    format: str,
    columns: Sequence[str] | None,
    kv: str | None,
    stamp: Sequence[str],
    max_attempts: int | None,
    call: str | None = None,
    array_job: str = "",
) -> dict[str, str]:
    """How a run was called, as the ledger records it (text values, keys as in
    :data:`COMPARED_SETTINGS`); a caller may add keys of its own. ``array_job``: the
    scheduler's id of the array job this run is an element of ("" outside one)."""
    import shlex

    settings = {
        "tasks": os.fspath(tasks),
        "format": format,
        "columns": ",".join(columns or ()),
        "kv": kv or "",
        "stamp": ",".join(stamp),
        "command": "--shell" if shell else shlex.join(command),
        "max_attempts": "" if max_attempts is None else str(max_attempts),
    }
    if call is not None:  # a function per task: its spec (its file's real path) is the command
        settings.update(command="", call=resolved_call(call))
    if array:  # without an index every task runs: chunk and base do not apply
        settings.update(chunk=str(chunk), base=str(base))
    if array_job:
        settings["array_job"] = array_job
    return settings


def _element_command(recorded: Mapping[str, str], new: Mapping[str, str]) -> bool:
    """Whether ``new`` is an element of the array job that recorded ``recorded`` and differs
    from it in its command alone: a command may carry a value of its own per element
    (``$TMPDIR``, ``--seed $SLURM_ARRAY_TASK_ID``), and every element of one submission
    must run."""
    job = recorded.get("array_job", "")
    if not job or job != new.get("array_job", ""):
        return False
    return settings_conflict(recorded, {**new, "command": recorded.get("command", "")}) is None


def settings_note(settings: Mapping[str, str]) -> str:
    """The ``note`` of the ``run`` row that records ``settings``."""
    import json  # here: cat and verify read the ledger without settings, and skip it

    return json.dumps(dict(settings), ensure_ascii=False, sort_keys=True)


def settings_of(note: str) -> dict[str, str] | None:
    """The settings a ``run`` row's note holds; None when it holds none (damaged)."""
    import json  # see settings_note

    try:
        value = json.loads(note)
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    return {str(k): str(v) for k, v in value.items()}


def settings_conflict(
    recorded: Mapping[str, str], new: Mapping[str, str]
) -> tuple[str, str, str] | None:
    """The first setting of :data:`COMPARED_SETTINGS` that differs: (name, recorded, new)."""
    for name in COMPARED_SETTINGS:
        if name in _ARRAY_SETTINGS and not (recorded.get(name) and new.get(name)):
            continue
        old, now = recorded.get(name, ""), new.get(name, "")
        if name == "call" and old and now:
            # one file however it was named; a spec an older release recorded as given
            # (relative) resolves against this run's directory
            same = resolved_call(old) == resolved_call(now)
        else:
            same = old == now
        if not same:
            return name, old, now
    return None


def settings_message(path: str, name: str, old: str, new: str) -> str:
    """Why a run whose setting ``name`` differs from the ledger's is refused, and the ways on."""
    how = {"command": "command", "call": "--call", "format": "--format (or OUT's name)"}
    option = how.get(name, f"--{name}")
    return (
        f"the ledger {path} records {name} {old or '(none)'!r} for this run's tasks, and "
        f"this run has {new or '(none)'!r}: a resubmission must be called as the run was. "
        f"Run with the recorded {option} (`zotsink status TASKS --ledger {path} --json` "
        "shows every recorded setting), or give a new OUT or --ledger for a new run, or add "
        "--new-settings to record this run's settings and go on with the tasks not ok yet"
    )


def recorded_max_attempts(settings: Mapping[str, str] | None) -> int | None:
    """The ``max_attempts`` recorded settings give (None: no limit)."""
    value = (settings or {}).get("max_attempts", "")
    return int(value) if value.isdigit() and int(value) > 0 else None


def reconcile(
    recorded: Mapping[str, str] | None,
    settings: Mapping[str, str],
    *,
    path: str,
    array: bool,
    new_settings: bool,
) -> dict[str, str]:
    """The settings a run goes on with, given the ledger's latest (``recorded``; None: no
    run recorded any) and its own (:func:`run_settings`; ``array``: it has an array index).

    The array's chunk and base stay on record (for ``missing --array``) through a run of
    every task, and the base through a part of a split resubmission; a ``max_attempts``
    the run was not given is the recorded one, so the limit holds across resubmissions
    that do not repeat it. Raises :class:`UsageError` (:func:`settings_message`) when a
    setting of :data:`COMPARED_SETTINGS` differs, unless ``new_settings``.
    """
    out = dict(settings)
    if recorded is None:
        return out
    kept = ("chunk", "base") if not array else () if new_settings else ("base",)
    out.update({k: recorded[k] for k in kept if k in recorded})
    if not out.get("max_attempts"):
        limit = recorded_max_attempts(recorded)
        out["max_attempts"] = "" if limit is None else str(limit)
    differ = settings_conflict(recorded, out)
    if differ is not None and not new_settings and not _element_command(recorded, out):
        raise UsageError(settings_message(path, *differ), path=path)
    return out


def check_news_settings(
    path: str, note: str, settings: Mapping[str, str]
) -> tuple[str | None, bool]:
    """What a ``run`` row another run appended (its ``note``) means to a run begun under
    ``settings``: why this run must stop (None: it may go on), and whether the row records
    exactly ``settings`` (then this run need not record them again)."""
    recorded = settings_of(note)
    if recorded is None:
        return None, False
    differ = settings_conflict(recorded, settings)
    if differ is not None and not _element_command(recorded, settings):
        return settings_message(path, *differ), False
    return None, recorded == dict(settings)


def recorded_array(
    settings: Mapping[str, str] | None,
    chunk: int | None,
    base: int | None,
    *,
    path: str,
) -> tuple[int, int]:
    """``chunk`` and ``base`` as given, else as the ledger's settings (of the ledger at
    ``path``) record them, else 1. A recorded value that is no chunk (a whole number >= 1)
    or no base (a whole number) raises :class:`InputError`: counting indices in it would
    name the wrong tasks."""
    got = settings or {}

    def pick(given: int | None, name: str, low: int | None) -> int:
        if given is not None:
            return given
        value = got.get(name, "")
        if not value:
            return 1
        digits = value[1:] if value.startswith("-") else value
        number = int(value) if digits.isdecimal() else None
        if number is None or (low is not None and number < low):
            what = "a whole number >= 1" if low is not None else "a whole number"
            raise InputError(
                f"the ledger {path} records {name} {value!r}, which is not {what}: give "
                f"--{name} as the job script runs the array, or record it again with "
                f"`zotsink run ... --{name} N --new-settings`",
                path=path,
            )
        return number

    return pick(chunk, "chunk", 1), pick(base, "base", None)
