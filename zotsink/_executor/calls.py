"""An Executor's calls as task lines, and their answers as records: the one format both ends
share. The client writes lines (:func:`call_text`, :func:`line_of`) and reads records
(:func:`decode_record`); the worker side (:mod:`zotsink._executor.serve`) reads lines
(:func:`decode_line`) and writes records (:func:`value_record`, :func:`raised_record`,
:func:`cancelled_record`).

A task line is one call, ``{"id": ID, "fn": SPEC, "args": [...], "kwargs": {...}}``, or
several (``map``'s ``chunksize``) as a JSON array of such objects. A record is one line of
OUT per call, its task number first (the reader finds it without parsing the rest)::

    {"task": 17, "id": "3f9a0c1e-42", "status": "ok", "value": 0.5}
    {"task": 17, "id": ..., "status": "raised", "error": {"type": "builtins.ValueError",
        "message": "...", "traceback": "..."}}
    {"task": 17, "id": ..., "status": "unsent", "error": {"type": ..., "message": ...}}
    {"task": 17, "id": ..., "status": "cancelled"}

Invariants: both are JSON written with ASCII escapes, so a line never holds a NUL byte, a
newline, a tab or a byte that is not UTF-8, and is a valid task line and a valid record
whatever the values; a value is carried only when JSON gives it back equal (None, bool,
int, float, str, lists, dicts with str keys; a tuple comes back as a list; NumPy scalars as
the Python numbers they hold): anything else is refused with the place it was found, never
turned into something else.
"""

from __future__ import annotations

import json
import sys
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, NamedTuple

from .._core.records import MAX_LINE
from .._run.frames import names_file
from .._run.worker import function_spec
from ..errors import UsageError

__all__ = [
    "MAX_CALL_BYTES",
    "MAX_RECORD_BYTES",
    "Call",
    "call_text",
    "cancelled_record",
    "decode_line",
    "decode_record",
    "json_problem",
    "line_of",
    "raised_record",
    "record_task",
    "spec_of",
    "value_record",
]

#: The longest task line: a line is written to the task list and, as the task's key, to
#: two rows of the ledger, so arguments are names and parameters, not data.
MAX_CALL_BYTES: Final = 1 << 20
#: The longest record: the longest line OUT takes, less room for its newline.
MAX_RECORD_BYTES: Final = MAX_LINE - 1

#: Value types JSON gives back as they are.
_PLAIN: Final = frozenset((str, int, float, bool, type(None)))
_WHAT_JSON_HOLDS: Final = "None, bool, int, float, str, and lists and dicts (with str keys) of them"
_ENCODE = json.JSONEncoder(
    separators=(",", ":"), allow_nan=True, default=lambda o: _scalar(o)
).encode


def _scalar(value: object) -> object:
    """A NumPy scalar as the Python number (or str, bool) it holds; TypeError otherwise
    (:func:`json_problem` found none such before)."""
    if type(value).__module__ == "numpy" and getattr(value, "ndim", None) == 0:
        return value.item()  # type: ignore[attr-defined]
    raise TypeError(f"a {type(value).__name__} is no JSON value")


def _name(kind: type) -> str:
    module = kind.__module__
    return kind.__qualname__ if module == "builtins" else f"{module}.{kind.__qualname__}"


def json_problem(value: object, where: str) -> str | None:
    """What keeps ``value`` (found at ``where``) from coming back from JSON equal: the
    first such place, or None when there is none."""
    kind = type(value)
    if kind in _PLAIN:
        return None
    if isinstance(value, (str, int, float)):  # a subclass (IntEnum, str_): its plain value
        return None
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            found = json_problem(item, f"{where}[{i}]")
            if found is not None:
                return found
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return (
                    f"{where} has the key {key!r} (a {_name(type(key))}), which JSON would "
                    "turn into a string: use str keys"
                )
            found = json_problem(item, f"{where}[{key!r}]")
            if found is not None:
                return found
        return None
    if kind.__module__ == "numpy" and getattr(value, "ndim", None) == 0:
        return None  # a NumPy scalar: its number
    hint = ""
    if kind.__module__ == "numpy" or hasattr(value, "tolist"):
        hint = " (value.tolist() gives lists of numbers)"
    elif isinstance(value, (bytes, bytearray)):
        hint = " (decode it, or keep the bytes in a file and pass its path)"
    elif isinstance(value, (set, frozenset)):
        hint = " (sorted(value) gives a list)"
    return f"{where} is a {_name(kind)}, which JSON cannot carry{hint}"


def spec_of(fn: Callable[..., Any]) -> str:
    """How the elements load ``fn``: ``module:qualname``, or ``/path/script.py:qualname``
    for a function of the script run as ``__main__`` (loaded by its path, as ``run --call
    FILE.py:FUNC`` loads one). :class:`UsageError` at once for a function they cannot load
    by a name: a lambda, a nested function or closure, a function typed into an
    interactive session, a method of an object, a name that gives another object back."""
    if isinstance(fn, types.MethodType) and not isinstance(fn.__self__, type):
        raise UsageError(
            f"cannot submit {fn!r}: a method of an object, whose object does not travel to "
            "the elements: submit a function defined at the top level of a module, and pass "
            "it what it needs as arguments"
        )
    try:
        spec = function_spec(fn)
    except UsageError as e:
        raise UsageError(
            f"cannot submit it: {e.message}. An Executor's elements import the function by "
            "its module and name: define it at the top level of a module (or of the script "
            "you run) and submit that"
        ) from None
    where, _, qualname = spec.rpartition(":")
    module = sys.modules.get("__main__" if names_file(where) else where)
    found: object = module
    for part in qualname.split("."):
        found = getattr(found, part, None)
    if module is not None and found is not fn and found != fn:
        raise UsageError(
            f"cannot submit {fn!r}: the elements would load it as {qualname} of {where}, "
            f"which is {'nothing' if found is None else repr(found)} there (a decorator "
            "that does not keep the function's name, functools.wraps does; or a name bound "
            "to something else since): submit the function that name gives"
        )
    return spec


class Call(NamedTuple):
    """One call, as a task line holds it."""

    id: str
    fn: str  # module:qualname, or /path/script.py:qualname
    args: list[Any]
    kwargs: dict[str, Any]


def call_text(
    call_id: str,
    spec: str,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    *,
    named: str,
) -> str:
    """One call as the JSON object a task line holds; :class:`UsageError` naming the
    argument JSON cannot carry, or a call too large for a task line. ``named``: the
    function as the user knows it, for the messages."""
    for i, arg in enumerate(args):
        found = json_problem(arg, f"argument {i + 1}")
        if found is not None:
            raise UsageError(_refused(named, found))
    for key, arg in kwargs.items():
        found = json_problem(arg, f"keyword argument {key}")
        if found is not None:
            raise UsageError(_refused(named, found))
    text = _ENCODE({"id": call_id, "fn": spec, "args": list(args), "kwargs": dict(kwargs)})
    if len(text) > MAX_CALL_BYTES:
        raise UsageError(
            f"cannot submit {named}: its arguments are {len(text):,} bytes as JSON, over the "
            f"{MAX_CALL_BYTES:,} a call may take (each call is a line of the task list and of "
            "the ledger): pass the data's path, or a name in an archive "
            "(zotsink.append_member), and read it in the function"
        )
    return text


def _refused(named: str, found: str) -> str:
    return (
        f"cannot submit {named}: {found}. A call travels as JSON ({_WHAT_JSON_HOLDS}): "
        "pass such values, or the path of a file that holds the data"
    )


def line_of(calls: Sequence[str]) -> str:
    """The task line of one call (its object) or of several (an array of them)."""
    return calls[0] if len(calls) == 1 else "[" + ",".join(calls) + "]"


def decode_line(line: str) -> list[Call]:
    """The calls of a task line; ValueError when it is not one of an Executor's lines."""
    data = json.loads(line)
    items = data if isinstance(data, list) else [data]
    calls = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("fn"), str):
            raise ValueError(f"not an Executor's call: {line[:200]!r}")
        args, kwargs = item.get("args", []), item.get("kwargs", {})
        if not isinstance(args, list) or not isinstance(kwargs, dict):
            raise ValueError(f"not an Executor's call: {line[:200]!r}")
        calls.append(Call(str(item.get("id", "")), item["fn"], args, kwargs))
    return calls


def value_record(task: int, call_id: str, value: object) -> str:
    """The record of a call that returned ``value``: ``ok``, or ``unsent`` when JSON cannot
    carry it back or it is larger than a record may be."""
    found = json_problem(value, "the value it returned")
    if found is not None:
        return _unsent(task, call_id, f"{found}: return {_WHAT_JSON_HOLDS}")
    text = _ENCODE({"task": task, "id": call_id, "status": "ok", "value": value})
    if len(text) > MAX_RECORD_BYTES:
        return _unsent(
            task,
            call_id,
            f"the value it returned makes a record of {len(text):,} bytes as JSON, over the "
            f"{MAX_RECORD_BYTES:,} a record may hold: return less (a summary), or keep the "
            "data in one shared archive (zotsink.append_member(ARCHIVE, NAME, DATA)) and "
            "return NAME",
        )
    return text


def _unsent(task: int, call_id: str, why: str) -> str:
    error = {"type": "zotsink.ResultError", "message": why}
    return _ENCODE({"task": task, "id": call_id, "status": "unsent", "error": error})


def raised_record(task: int, call_id: str, kind: type, message: str, traceback: str) -> str:
    """The record of a call that raised: the exception's type, text and traceback's tail."""
    error = {"type": _name(kind), "message": message, "traceback": traceback}
    text = _ENCODE({"task": task, "id": call_id, "status": "raised", "error": error})
    if len(text) > MAX_RECORD_BYTES:  # an exception whose text is a whole data set
        error = {
            "type": error["type"],
            "message": message[:4096] + " ... (cut: the message was longer than a record)",
            "traceback": traceback[-16384:],
        }
        text = _ENCODE({"task": task, "id": call_id, "status": "raised", "error": error})
    return text


def cancelled_record(task: int, call_id: str) -> str:
    """The record of a call that was cancelled before it began: it never runs."""
    return _ENCODE({"task": task, "id": call_id, "status": "cancelled"})


#: What begins every record: its task number follows.
_TASK_HEAD: Final = '{"task":'


def record_task(line: str) -> int | None:
    """The task number a record names, read without parsing the rest; None when the line
    is not an Executor's record."""
    if not line.startswith(_TASK_HEAD):
        return None
    end = line.find(",", len(_TASK_HEAD))
    number = line[len(_TASK_HEAD) : end]
    return int(number) if end > 0 and number.isdigit() else None


def decode_record(line: str) -> dict[str, Any]:
    """A record as its fields; ValueError when it is not an Executor's record."""
    data = json.loads(line)
    if not isinstance(data, dict) or not isinstance(data.get("id"), str) or "status" not in data:
        raise ValueError(f"not an Executor's record: {line[:200]!r}")
    return data
