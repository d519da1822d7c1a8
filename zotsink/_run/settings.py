"""How a run was called, as the ledger records it, and the policy of a resubmission.

A ``run`` row (task number 0, no key) of the ledger records a run's settings: a JSON object
of text values in ``note`` (:func:`run_settings` makes them, :func:`settings_note` writes
them, :func:`settings_of` reads them). The latest one counts. A resubmission must be called
as the recorded run was (:data:`COMPARED_SETTINGS`) once a task ended ok under those
settings: records made under two calls must not mix in one OUT. Settings under which no task
ended ok (a first run with a typo, every task failed) bind nobody: the next run records its
own. :func:`reconcile` is what a run makes of the recorded settings before it starts
(:func:`ended_ok_since_settings` tells it whether they bind), and
:func:`check_news_settings` what it makes of a ``run`` row another run appends meanwhile.
``status`` and ``missing --ledger`` count array indices in the recorded chunk and base
(:func:`recorded_array`).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Final

from .._ledger.view import LedgerView
from ..errors import InputError, UsageError, ZotsinkWarning
from .worker import resolved_call

__all__ = [
    "COMPARED_SETTINGS",
    "check_news_settings",
    "ended_ok_since_settings",
    "reconcile",
    "recorded_array",
    "recorded_max_attempts",
    "run_settings",
    "setting_text",
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


def setting_text(name: str, settings: Mapping[str, str]) -> str:
    """Setting ``name`` of ``settings`` as the command line gives it: ``--chunk 20``, ``no
    --stamp``; the command and the call as what runs the tasks (``--call F``, ``-- CMD``,
    ``--shell``), whichever of the two differs."""
    if name in ("command", "call"):
        call = settings.get("call", "")
        if call:
            where, _, func = call.rpartition(":")
            # the recorded spec is the file's real path: shown as the user would give it
            here = os.path.relpath(where) if os.path.isabs(where) else where
            return f"--call {here if not here.startswith('..') else where}:{func}"
        command = settings.get("command", "")
        if command == "--shell":
            return "--shell"
        return f"-- {command}" if command else "no command"
    value = settings.get(name, "")
    option = "--format" if name == "format" else f"--{name}"
    return f"{option} {value}" if value else f"no {option}"


def settings_message(
    path: str, name: str, recorded: Mapping[str, str], new: Mapping[str, str]
) -> str:
    """Why a run whose setting ``name`` differs from the binding ones recorded in the ledger
    at ``path`` is refused, and the ways on: one line."""
    return (
        f"{path}: tasks ended ok under {setting_text(name, recorded)}, and this run has "
        f"{setting_text(name, new)}: run as recorded, or add --new-settings"
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
    ended_ok: bool | Callable[[], bool] = True,
) -> dict[str, str]:
    """The settings a run goes on with, given the ledger's latest (``recorded``; None: no
    run recorded any) and its own (:func:`run_settings`; ``array``: it has an array index).

    The array's chunk and base stay on record (for ``missing --array``) through a run of
    every task, and the base through a part of a split resubmission; a ``max_attempts``
    the run was not given is the recorded one, so the limit holds across resubmissions
    that do not repeat it. When a setting of :data:`COMPARED_SETTINGS` differs: raises
    :class:`UsageError` (:func:`settings_message`), unless ``new_settings``, or unless
    ``ended_ok`` says no task ended ok under the recorded settings (a callable is asked
    only then: it reads the ledger, see :func:`ended_ok_since_settings`); then the run goes
    on with its own, and a :class:`ZotsinkWarning` says so.
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
    if differ is None or new_settings or _alike(recorded, out):
        return out
    name = differ[0]
    if ended_ok() if callable(ended_ok) else ended_ok:
        raise UsageError(settings_message(path, name, recorded, out), path=path)
    warnings.warn(
        ZotsinkWarning(
            f"{path} records {setting_text(name, recorded)}, under which no task ended ok: "
            f"this run records its own ({setting_text(name, out)})"
        ),
        stacklevel=2,
    )
    return out


def ended_ok_since_settings(view: LedgerView) -> bool:
    """Whether a task ended ok under the settings the ledger (folded in ``view``) records
    last: in a run that began under them, that is, at or after the first ``run`` row of an
    unbroken line of rows recording them (or settings that differ from them only as
    elements of one array job may; a run row of no settings found them recorded). A run
    begun before keeps its own settings, and its ends say nothing of these."""
    latest = view.settings
    if latest is None:
        return False
    first = len(view.runs)
    for run in reversed(view.runs):
        if run.settings is not None:
            if not _alike(latest, run.settings):
                break
            first = run.index
    return any(run.ok for run in view.runs[first:])


def _alike(recorded: Mapping[str, str], new: Mapping[str, str]) -> bool:
    """Whether ``new`` records the settings ``recorded`` did, as a resubmission must."""
    return settings_conflict(recorded, new) is None or _element_command(recorded, new)


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
        name = differ[0]
        return (
            f"{path}: another run recorded {setting_text(name, recorded)} as this run, with "
            f"{setting_text(name, settings)}, began: run again as recorded, or with "
            "--new-settings"
        ), False
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
