"""zotsink: every job-array task appends its records to ONE shared file, whole and locked.

Everything public is importable from here. Commands that are not on the writers' path
(collect, verify, missing, doctor) load their modules on first use, so that a task that only
appends pays only for the writer at start-up.
"""

from __future__ import annotations

import sys
import types
from typing import Any

from .api import Sink, append_record, append_records, read_records
from .errors import (
    HeaderMismatch,
    InputError,
    LockError,
    LockTimeout,
    RecordError,
    UsageError,
    WriteError,
    ZotsinkError,
)
from .locking import ZotsinkWarning
from .sidefiles import RecoverReport, recover
from .stream import StreamReport, append_stream

__version__ = "0.1.0"

#: Public names loaded on first use: name -> module.
_LAZY = {
    "collect": "zotsink.collect",
    "CollectReport": "zotsink.collect",
    "verify": "zotsink.verify",
    "VerifyReport": "zotsink.verify",
    "missing": "zotsink.missing",
    "doctor": "zotsink.doctor",
    "DoctorReport": "zotsink.doctor",
}

__all__ = [
    "HeaderMismatch",
    "InputError",
    "LockError",
    "LockTimeout",
    "RecordError",
    "RecoverReport",
    "Sink",
    "StreamReport",
    "UsageError",
    "WriteError",
    "ZotsinkError",
    "ZotsinkWarning",
    "__version__",
    "append_record",
    "append_records",
    "append_stream",
    "read_records",
    "recover",
    *_LAZY,
]


class _Package(types.ModuleType):
    """The zotsink package, whose lazily loaded functions keep their names.

    Importing a submodule binds it as an attribute of its package, so after ``import
    zotsink.verify`` the name ``zotsink.verify`` would be the module, and ``from zotsink
    import verify`` would hand out a module instead of the function. The lazy names stay
    bound to the functions and classes they stand for.
    """

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _LAZY and isinstance(value, types.ModuleType):
            value = getattr(value, name)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'zotsink' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
