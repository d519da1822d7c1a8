"""zotsink: every job-array task appends its records to ONE shared file, whole and locked.

Everything public is importable from here, and only from here: the modules behind these
names are private (``zotsink._core``, ``zotsink._check``, ...) and may move. Each name is
loaded on first use (PEP 562), so a task that only appends pays only for the writer at
start-up, and ``import zotsink.cli`` loads no writer at all.
"""

from __future__ import annotations

# Not `from typing import TYPE_CHECKING`: importing typing costs milliseconds that `import
# zotsink` alone should not pay. Type checkers treat this name as typing's own.
TYPE_CHECKING = False

__version__ = "0.2.0"

#: Public name -> the private module that defines it.
_LAZY = {
    # writing
    "append_record": "zotsink._append",
    "append_records": "zotsink._append",
    "Sink": "zotsink._append",
    "append_stream": "zotsink._stream",
    "StreamReport": "zotsink._stream",
    "Stopper": "zotsink._core.stop",
    "Outcome": "zotsink._core.outlet",
    "append_member": "zotsink._pack.append",
    "append_members": "zotsink._pack.append",
    "pack_files": "zotsink._pack.files",
    # reading
    "read_records": "zotsink._read",
    "snapshot": "zotsink._read",
    "committed_chunks": "zotsink._read",
    "iter_snapshot": "zotsink._read",
    "is_pack_archive": "zotsink._pack.index",
    "MemberRow": "zotsink._pack.index",
    "list_members": "zotsink._pack.members",
    "latest_members": "zotsink._pack.members",
    "read_member": "zotsink._pack.members",
    "format_listing": "zotsink._pack.members",
    # side files
    "recover": "zotsink._recover",
    "RecoverReport": "zotsink._recover",
    "recover_archive": "zotsink._pack.recover",
    "ArchiveRecoverReport": "zotsink._pack.recover",
    # checks
    "verify": "zotsink._check.verify",
    "repair": "zotsink._check.verify",
    "VerifyReport": "zotsink._check.report",
    "Problem": "zotsink._check.report",
    "missing": "zotsink._check.missing",
    "missing_lines": "zotsink._check.missing",
    "array_spec": "zotsink._arrays",
    "verify_archive": "zotsink._pack.verify",
    "ArchiveReport": "zotsink._pack.verify",
    # run and its ledger
    "run_tasks": "zotsink._run.runner",
    "RunReport": "zotsink._run.runner",
    "Progress": "zotsink._run.state",
    "task_states": "zotsink._run.runner",
    "TaskEvent": "zotsink._ledger.events",
    "read_ledger": "zotsink._run.report",
    "task_status": "zotsink._run.status",
    "StatusReport": "zotsink._run.status",
    "ChainStatus": "zotsink._run.status",
    "tasks_in": "zotsink._run.status",
    "resubmit_specs": "zotsink._run.status",
    "ledger_missing": "zotsink._run.status",
    "ledger_jobs": "zotsink._run.status",
    "failed_tasks": "zotsink._run.status",
    "FailedTask": "zotsink._run.failures",
    "LedgerMissing": "zotsink._run.status",
    "group_failures": "zotsink._run.failures",
    "failure_tail": "zotsink._run.failures",
    "FailureGroup": "zotsink._run.failures",
    "status_page": "zotsink._run.page",
    "write_page": "zotsink._run.page",
    "iter_attempts": "zotsink._run.report",
    "advise": "zotsink._run.advise",
    "Advice": "zotsink._run.advise",
    "TaskUse": "zotsink._run.advise",
    "UseTally": "zotsink._run.advise",
    "Slots": "zotsink._run.timeline",
    "attempts_by": "zotsink._run.report",
    "Attempt": "zotsink._run.report",
    "read_attempts": "zotsink._run.report",
    "rate_text": "zotsink._run.report",
    "add_tasks": "zotsink._run.add",
    "close_tasks": "zotsink._run.close",
    "stop_runs": "zotsink._run.close",
    "release_runs": "zotsink._run.close",
    "Released": "zotsink._run.close",
    "read_control": "zotsink._run.close",
    "Control": "zotsink._ledger.control",
    "read_runs": "zotsink._run.runs",
    "LiveRuns": "zotsink._run.runs",
    "RunInfo": "zotsink._run.runs",
    "ensure_runner": "zotsink._run.successor",
    "RunnerOutcome": "zotsink._run.successor",
    "Chain": "zotsink._ledger.relay",
    # futures over the elements of an array
    "Executor": "zotsink._executor.executor",
    "CallFuture": "zotsink._executor.executor",
    # collect, doctor
    "collect": "zotsink._collect.collect",
    "CollectReport": "zotsink._collect.collect",
    "export": "zotsink._collect.export",
    "doctor": "zotsink._doctor.doctor",
    "DoctorReport": "zotsink._doctor.doctor",
    # errors and warnings
    "ZotsinkError": "zotsink.errors",
    "CallError": "zotsink.errors",
    "ResultError": "zotsink.errors",
    "GivenUp": "zotsink.errors",
    "ExecutorBroken": "zotsink.errors",
    "UsageError": "zotsink.errors",
    "RecordError": "zotsink.errors",
    "HeaderMismatch": "zotsink.errors",
    "HoldError": "zotsink.errors",
    "InputError": "zotsink.errors",
    "LockError": "zotsink.errors",
    "LockTimeout": "zotsink.errors",
    "WriteError": "zotsink.errors",
    "ZotsinkWarning": "zotsink.errors",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'zotsink' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


if TYPE_CHECKING:  # for type checkers and IDEs: the same names, eagerly
    from ._append import Sink, append_record, append_records
    from ._arrays import array_spec
    from ._check.missing import missing, missing_lines
    from ._check.report import Problem, VerifyReport
    from ._check.verify import repair, verify
    from ._collect.collect import CollectReport, collect
    from ._collect.export import export
    from ._core.outlet import Outcome
    from ._core.stop import Stopper
    from ._doctor.doctor import DoctorReport, doctor
    from ._executor.executor import CallFuture, Executor
    from ._ledger.control import Control
    from ._ledger.events import TaskEvent
    from ._ledger.relay import Chain
    from ._pack.append import append_member, append_members
    from ._pack.files import pack_files
    from ._pack.index import MemberRow, is_pack_archive
    from ._pack.members import format_listing, latest_members, list_members, read_member
    from ._pack.recover import ArchiveRecoverReport, recover_archive
    from ._pack.verify import ArchiveReport, verify_archive
    from ._read import committed_chunks, iter_snapshot, read_records, snapshot
    from ._recover import RecoverReport, recover
    from ._run.add import add_tasks
    from ._run.advise import Advice, TaskUse, UseTally, advise
    from ._run.close import Released, close_tasks, read_control, release_runs, stop_runs
    from ._run.failures import FailedTask, FailureGroup, failure_tail, group_failures
    from ._run.page import status_page, write_page
    from ._run.report import (
        Attempt,
        attempts_by,
        iter_attempts,
        rate_text,
        read_attempts,
        read_ledger,
    )
    from ._run.runner import RunReport, run_tasks, task_states
    from ._run.runs import LiveRuns, RunInfo, read_runs
    from ._run.state import Progress
    from ._run.status import (
        ChainStatus,
        LedgerMissing,
        StatusReport,
        failed_tasks,
        ledger_jobs,
        ledger_missing,
        resubmit_specs,
        task_status,
        tasks_in,
    )
    from ._run.successor import RunnerOutcome, ensure_runner
    from ._run.timeline import Slots
    from ._stream import StreamReport, append_stream
    from .errors import (
        CallError,
        ExecutorBroken,
        GivenUp,
        HeaderMismatch,
        HoldError,
        InputError,
        LockError,
        LockTimeout,
        RecordError,
        ResultError,
        UsageError,
        WriteError,
        ZotsinkError,
        ZotsinkWarning,
    )
