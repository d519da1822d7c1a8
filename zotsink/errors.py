"""The one exception tree of zotsink.

Every error derives from :class:`ZotsinkError` and from the closest built-in exception, so
callers can catch either way::

    ZotsinkError(Exception)
    ├── UsageError(ValueError)          a bad option value or argument
    ├── RecordError(ValueError)         a record zotsink refuses
    │   └── HeaderMismatch              OUT already has a different header
    ├── InputError(ValueError)          a source file that cannot be parsed
    ├── LockError(OSError)              no lock kind works on this filesystem
    │   └── LockTimeout(TimeoutError)   the lock was not had within the timeout
    ├── WriteError(OSError)             OUT could not be written
    │   └── HoldError                   output held until its end could be kept nowhere
    ├── CallError(RuntimeError)         an Executor's call raised where it ran
    ├── ResultError(ValueError)         what a call returned cannot come back as JSON
    ├── GivenUp(RuntimeError)           a call's task was given up (its worker kept dying)
    └── ExecutorBroken(RuntimeError)    an Executor's elements cannot run its calls

    ZotsinkWarning(UserWarning)         worth knowing, does not stop the work

The exit code each error means on the command line is decided in one place,
``zotsink.cli._common.EXIT_CODES``: the library's exceptions carry none.

Each carries ``path`` (the file concerned) and, where records were saved to a side file
instead of OUT, ``spill_path``. All of them pickle, so they cross ``multiprocessing``.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "CallError",
    "ExecutorBroken",
    "GivenUp",
    "HeaderMismatch",
    "HoldError",
    "InputError",
    "LockError",
    "LockTimeout",
    "RecordError",
    "ResultError",
    "UsageError",
    "WriteError",
    "ZotsinkError",
    "ZotsinkWarning",
]


def _rebuild(cls: type[ZotsinkError], message: str, kwargs: dict[str, Any]) -> ZotsinkError:
    return cls(message, **kwargs)


class ZotsinkError(Exception):
    """Base of every zotsink error."""

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        spill_path: str | None = None,
        errno: int | None = None,
    ) -> None:
        # OSError's own __init__ would reinterpret a single argument; pass the message only.
        Exception.__init__(self, message)
        self.message = message
        self.path = path
        self.spill_path = spill_path
        if errno is not None:
            self.errno = errno  # attribute of the OSError branch of the tree

    def __str__(self) -> str:
        return self.message

    def __reduce__(self) -> tuple[Any, ...]:
        kwargs: dict[str, Any] = {"path": self.path, "spill_path": self.spill_path}
        err = getattr(self, "errno", None)
        if err is not None:
            kwargs["errno"] = err
        return (_rebuild, (type(self), self.message, kwargs))


class UsageError(ZotsinkError, ValueError):
    """An option value or argument that cannot work (for example an unknown format)."""


class RecordError(ZotsinkError, ValueError):
    """A record zotsink refuses: NUL byte, over-long line, wrong field count, unknown column."""


class HeaderMismatch(RecordError):
    """OUT already starts with a header that differs from the columns of the records."""


class InputError(ZotsinkError, ValueError):
    """A source file that cannot be parsed (``collect --strict``)."""


class LockError(ZotsinkError, OSError):
    """No lock kind works on OUT's filesystem, or the lock call failed unexpectedly."""


class LockTimeout(LockError, TimeoutError):
    """The lock was not had within the timeout; the records went to ``spill_path``."""


class WriteError(ZotsinkError, OSError):
    """OUT could not be written (ENOSPC, EDQUOT, EIO, ...); the records went to ``spill_path``."""


class ZotsinkWarning(UserWarning):
    """Something the user should know that does not stop the work (e.g. a lock fallback)."""


class HoldError(WriteError):
    """Output held until it ends (one ``run`` attempt's records, a line over the limit)
    could be kept neither in memory nor in a temporary file, in ``$TMPDIR`` or beside OUT
    (both full): those lines are not in OUT, and the message says so. Raised per attempt,
    so that the attempt fails and the run goes on."""


class CallError(ZotsinkError, RuntimeError):
    """A call of an :class:`~zotsink.Executor` raised in the element that ran it: the
    message starts with the exception's type and text; ``remote_type`` (``module.Name``),
    ``remote_message`` and ``remote_traceback`` (the traceback's tail, from the call's own
    frame on) carry them, and ``call_id`` names the call."""

    def __init__(
        self,
        message: str,
        *,
        call_id: str = "",
        remote_type: str = "",
        remote_message: str = "",
        remote_traceback: str = "",
        path: str | None = None,
    ) -> None:
        super().__init__(message, path=path)
        self.call_id = call_id
        self.remote_type = remote_type
        self.remote_message = remote_message
        self.remote_traceback = remote_traceback

    def __reduce__(self) -> tuple[Any, ...]:
        kwargs: dict[str, Any] = {
            "call_id": self.call_id,
            "remote_type": self.remote_type,
            "remote_message": self.remote_message,
            "remote_traceback": self.remote_traceback,
            "path": self.path,
        }
        return (_rebuild, (type(self), self.message, kwargs))


class ResultError(ZotsinkError, ValueError):
    """What a call of an :class:`~zotsink.Executor` returned cannot come back: JSON cannot
    carry it, or it is larger than a record may be. The call ran; its value is not kept."""


class GivenUp(ZotsinkError, RuntimeError):
    """A call of an :class:`~zotsink.Executor` will not run again: the worker that ran its
    task died (or its task failed) as many times as the Executor's ``max_attempts``."""


class ExecutorBroken(ZotsinkError, RuntimeError):
    """The elements of an :class:`~zotsink.Executor` cannot run its calls (they halted on
    alike failures, a module they cannot import, or never began): every call not done
    resolves with this one error, and new calls are refused. Nothing done is lost: fix the
    cause, then ``Executor.attach(directory)`` runs the calls left."""
