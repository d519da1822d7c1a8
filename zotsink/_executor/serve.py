"""The elements' side of an Executor: ``zotsink run CALLS OUT --follow --call
zotsink._executor.serve:call`` calls :func:`call` with each task line, in the run's
long-lived workers, and commits what it returns (one record per call) as the task's records.

Invariants: every call of a line gets exactly one record, in the line's order, whatever it
returned or raised (a value JSON cannot carry back, or too large, is an ``unsent`` record
that says why); the functions a line names are all loaded before any of them is called, so
a line fails whole (no call of it ran) or not at all; a function that cannot be loaded
(its module missing, or raising as it is imported) fails the task with :class:`Unloadable`,
the same last line for every task of that function, so that the run halts on them as on
any failures alike, its traceback in the log; a task the Executor cancelled
(:data:`CANCELLED_VAR`, set by :mod:`zotsink._executor.element` from the Executor's
settings file) gets ``cancelled`` records and calls nothing.
"""

from __future__ import annotations

import os
import socket
import sys
import traceback
from collections.abc import Callable
from typing import Any, Final

from .._core.stamp import TASKNUM_VAR
from .._run.failures import failure_tail
from .._run.serve import load_function
from .calls import Call, cancelled_record, decode_line, raised_record, value_record

__all__ = ["CALL_VAR", "CANCELLED_VAR", "TRACEBACK_LINES", "UNLOADABLE", "Unloadable", "call"]

#: The environment variable that says through which task number the Executor cancelled
#: its calls (the tasks not begun then never run).
CANCELLED_VAR: Final = "ZOTSINK_EXECUTOR_CANCELLED"
#: The environment variable that names the call under way (its future's id), as
#: ``ZOTSINK_TASKNUM`` names its task: a name of the call's own for what it writes
#: elsewhere (a member of a shared archive).
CALL_VAR: Final = "ZOTSINK_CALL_ID"
#: Lines of a raised exception's traceback kept in its record (its last frame whole).
TRACEBACK_LINES: Final = 12


class Unloadable(ImportError):
    """A function the elements cannot load: its task fails, alike for every task of it."""


#: What the ledger's note of a task failed by :class:`Unloadable` holds, before the cause.
UNLOADABLE: Final = f"{Unloadable.__module__}.{Unloadable.__qualname__}: "


_functions: dict[str, Callable[..., Any]] = {}
_unloadable: dict[str, str] = {}  # a spec that failed once fails alike, without a new import


def _function(spec: str) -> Callable[..., Any]:
    fn = _functions.get(spec)
    if fn is not None:
        return fn
    why = _unloadable.get(spec)
    if why is not None:
        raise Unloadable(why)
    try:
        fn = load_function(spec)
    except Exception as e:
        # short: a halt quotes the head of the last line its failures wrote, the ledger's
        # note the head of the exception; the client adds what to do
        why = _unloadable[spec] = (
            f"cannot load {spec}: {type(e).__name__}: {e} (on {socket.gethostname()}, "
            f"{sys.executable})"
        )
        raise Unloadable(why) from e
    _functions[spec] = fn
    return fn


def _cancelled_through() -> int:
    value = os.environ.get(CANCELLED_VAR, "")
    return int(value) if value.isdigit() else 0


def call(line: str) -> str:
    """The records of the calls of one task line (see :mod:`zotsink._executor.calls`)."""
    task_text = os.environ.get(TASKNUM_VAR, "")
    task = int(task_text) if task_text.isdigit() else 0
    calls = decode_line(line)
    if 0 < task <= _cancelled_through():
        return "\n".join(cancelled_record(task, c.id) for c in calls)
    functions = [_function(c.fn) for c in calls]  # all loaded before any is called
    return "\n".join(_one(task, c, fn) for c, fn in zip(calls, functions))


def _one(task: int, c: Call, fn: Callable[..., Any]) -> str:
    os.environ[CALL_VAR] = c.id
    try:
        value = fn(*c.args, **c.kwargs)
    except (Exception, SystemExit) as e:
        # from the function's own frame on: this module's frame is no news to anybody
        tb = e.__traceback__.tb_next if e.__traceback__ is not None else None
        lines = "".join(traceback.format_exception(type(e), e, tb)).splitlines()
        tail = "\n".join(failure_tail(lines, TRACEBACK_LINES))
        return raised_record(task, c.id, type(e), str(e), tail)
    return value_record(task, c.id, value)
