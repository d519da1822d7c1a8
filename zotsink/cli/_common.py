"""What every command shares: option decorators, reporting, and the exit-code table.

The library raises exceptions and knows nothing of exit codes; this module is the ONE place
that turns an exception type into the number a job script sees.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterable
from typing import Any, Final, NoReturn, TypeVar

import click

from .._core.locking import LOCK_KINDS
from .._core.options import MAX_BATCH_BYTES, MAX_FLUSH_INTERVAL, MAX_TIMEOUT
from .._core.records import FORMATS
from .._core.stop import end_at_stop_signals  # noqa: F401 - for status, which may not import _core
from .._core.writer import SYNC_POLICIES
from ..errors import (
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
)

F = TypeVar("F", bound=Callable[..., Any])

#: Exception type -> exit code, most specific first (the first ``isinstance`` match wins).
#: 1 data error or refused records · 2 usage · 74 I/O error (records spilled) · 75 lock
#: timeout (records spilled); 128+N after signal N is decided by the command itself.
EXIT_CODES: Final[tuple[tuple[type[BaseException], int], ...]] = (
    (LockTimeout, 75),
    (LockError, 74),
    (HoldError, 74),
    (WriteError, 74),
    (UsageError, 2),
    (HeaderMismatch, 1),
    (RecordError, 1),
    (InputError, 1),
    (ResultError, 1),
    (CallError, 1),
    (GivenUp, 1),
    (ExecutorBroken, 1),
    (ZotsinkError, 1),
    (OSError, 74),
)
#: An unexpected internal failure (sysexits EX_SOFTWARE).
EXIT_INTERNAL: Final = 70
#: A run that ended with tasks of its own waiting for a run (none ran them, none runs them:
#: stopped, out of time, a dead run's tasks it could not take), and no task failed.
EXIT_LEFT: Final = 3

FORMAT_CHOICES: Final = ("auto", *FORMATS)
CONTEXT: Final = {"help_option_names": ["-h", "--help"]}


def exit_code(error: BaseException) -> int:
    """The exit code for ``error`` (see :data:`EXIT_CODES`)."""
    for kind, code in EXIT_CODES:
        if isinstance(error, kind):
            return code
    return EXIT_INTERNAL


def outcome_code(error: BaseException | None, refused: int, signum: int | None) -> int:
    """The exit code of a run that may have refused records, failed, and been stopped.

    A stop signal outranks everything (the job script must see 128+N to know it was cut
    short), then the error (74/75: records are in a spill file), then refused records (1).
    """
    if signum is not None:
        return 128 + signum
    if error is not None:
        return exit_code(error)
    return 1 if refused else 0


class _State:
    verbose = 0
    quiet = False
    args: list[str] = []  # the command line as main() was given it


state = _State()


def say(message: str, *, level: int = 0) -> None:
    """A progress or report line on stderr (``-q`` silences, ``-v`` shows level 1)."""
    if state.quiet or level > state.verbose:
        return
    click.echo(f"zotsink: {message}", err=True)


def warn(message: str) -> None:
    if not state.quiet:
        click.echo(f"zotsink: warning: {message}", err=True)


def fail(message: str, code: int) -> NoReturn:
    click.echo(f"zotsink: error: {message}", err=True)
    sys.exit(code)


def counted(count: int, noun: str) -> str:
    """``1 record``, ``2 records``: a count and its noun, in the right number."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def report_outcome(outcomes: Iterable[Any]) -> BaseException | None:
    """Tell what did not reach its file, for every command that appends records; the first
    error that was not a header mismatch (for the exit code, see :func:`outcome_code`).

    Printed even under ``-q``: refused records, a failed append and where spilled records
    wait are errors, and the user must learn where the records are. ``outcomes`` are
    :class:`zotsink.Outcome` values, one per file written: OUT first, then (for ``run``)
    its log and ledger.
    """
    from ..errors import HeaderMismatch

    failed: BaseException | None = None
    for i, o in enumerate(outcomes):
        mismatch = isinstance(o.error, HeaderMismatch)
        if o.rejected:
            why = "header mismatch" if mismatch else "refused"
            click.echo(
                f"zotsink: {counted(o.rejected, 'record')} {why}; they are in {o.rejects_path}"
                + (f" ({o.error})" if mismatch else ""),
                err=True,
            )
        if o.repeated_headers:
            # the producer printed OUT's header again (pandas' to_csv does): not a record
            click.echo(
                f"zotsink: {o.repeated_headers} repeated header lines dropped "
                f"(the same line as the header of {o.path})",
                err=True,
            )
        if o.error is not None and not mismatch:
            # Once per file, however many batches failed: the first error says why and where.
            click.echo(f"zotsink: error: {o.error}", err=True)
            failed = failed or o.error
        if o.spilled:
            # the first file is the command's OUT; the others (run's log and ledger) are named
            what = "record" if i == 0 else "line"
            meant = "" if i == 0 else f" meant for {o.path}"
            safe = "is safe in" if o.spilled == 1 else "are safe in"
            where = ", ".join(o.spill_paths)
            click.echo(
                f"zotsink: {counted(o.spilled, what)}{meant} {safe} {where}; "
                f"run `{recover_command(o.path, o.spill_paths)}` when the cause is fixed",
                err=True,
            )
    return failed


def recover_command(path: str, spill_paths: Iterable[str]) -> str:
    """The ``zotsink recover`` line that takes these spill files back into ``path``:
    recover finds those beside it by itself; any elsewhere (a full disk sends them to
    ``$TMPDIR``) must be named."""
    import os
    import shlex

    from .._core.sidefiles import find_spills

    beside = {os.path.abspath(p) for p in find_spills(path)}
    extra = [p for p in spill_paths if os.path.abspath(p) not in beside]
    return " ".join(shlex.quote(a) for a in ["zotsink", "recover", path, *extra])


def run_api(call: Callable[[], Any]) -> Any:
    """Run an API call, turning zotsink errors into a message and their exit code."""
    try:
        return call()
    except ZotsinkError as e:
        if state.verbose:
            import traceback

            traceback.print_exc()
        fail(e.message, exit_code(e))


def set_verbosity(verbose: int, quiet: bool) -> None:
    state.verbose = verbose
    state.quiet = quiet


def show_warning(
    message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None
) -> None:
    warn(str(message))


# -- option values ----------------------------------------------------------------------------


class Seconds(click.ParamType):
    """A finite number of seconds in ``[0, maximum]`` (``inf`` and ``nan`` are refused: a
    value the engine cannot wait for would only fail after stdin was read)."""

    name = "seconds"

    def __init__(self, maximum: float) -> None:
        self.maximum = maximum

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, float):
            number = value
        else:
            try:
                number = float(value)
            except ValueError:
                self.fail(f"{value!r} is not a number of seconds", param, ctx)
        if not math.isfinite(number) or not 0 <= number <= self.maximum:
            self.fail(f"{value!r} is not between 0 and {self.maximum:g} seconds", param, ctx)
        return number


def stamp_list(value: str | None) -> str | tuple[str, ...]:
    """``--stamp`` as given (bare ``--stamp``: the default fields); checked by the API."""
    return () if value is None else value


def column_list(value: str | None) -> list[str] | None:
    if value is None:
        return None
    return [c.strip() for c in value.split(",")]


# -- shared option decorators -------------------------------------------------------------------


def _stack(*decorators: Callable[[F], F]) -> Callable[[F], F]:
    def apply(f: F) -> F:
        for d in reversed(decorators):
            f = d(f)
        return f

    return apply


def _lock_options(after_timeout: str) -> Callable[[F], F]:
    """``--lock`` and ``--timeout``, the timeout's help ending with what happens then."""
    return _stack(
        click.option(
            "--lock",
            type=click.Choice(LOCK_KINDS),
            default="auto",
            show_default=True,
            help="Lock kind.",
        ),
        click.option(
            "--timeout",
            type=Seconds(MAX_TIMEOUT),
            default=600.0,
            show_default=True,
            help=f"Longest wait for the lock (s); then {after_timeout}.",
        ),
    )


#: ``--lock`` and ``--timeout``: every command that appends records under OUT's lock.
lock_options = _lock_options("the records are spilled, exit 75")
#: ``--lock`` and ``--timeout`` for commands that spill nothing on a timeout (they read, or
#: like recover leave their input in place): the help must not promise a spill file.
read_lock_options = _lock_options("exit 75")


def stamp_field_choices() -> tuple[str, ...]:
    from .._core.stamp import STAMP_FIELDS  # a constant, read only when the shell completes

    return STAMP_FIELDS


def complete_list(
    choices: Callable[[], tuple[str, ...]],
) -> Callable[[click.Context, click.Parameter, str], list[str]]:
    """Shell completion of a comma list (``--stamp job,ta<TAB>`` -> ``job,task`` ...).

    ``choices`` is called only when completing, so a command's start never imports what
    the list comes from. Values already in the list are not offered again.
    """

    def complete(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
        done, _, last = incomplete.rpartition(",")
        taken = set(done.split(","))
        head = f"{done}," if done else ""
        return [head + c for c in choices() if c.startswith(last) and c not in taken]

    return complete


def sync_option(f: F) -> F:
    return click.option(
        "--sync",
        type=click.Choice(SYNC_POLICIES),
        default="auto",
        show_default=True,
        help="auto: fsync before unlock on network and FUSE filesystems (none there can "
        "tear records across clients).",
    )(f)


def format_option(f: F) -> F:
    return click.option(
        "-f",
        "--format",
        "fmt",
        type=click.Choice(FORMAT_CHOICES),
        default="auto",
        show_default=True,
        help="auto: .tsv/.tab -> tsv, .csv -> csv, else lines.",
    )(f)


def record_options(f: F) -> F:
    """How records are shaped: ``--format --columns --kv --stamp`` (append, run)."""
    return _stack(
        format_option,
        click.option("--columns", metavar="A,B,C", help="The header; checked against OUT's."),
        click.option(
            "--kv",
            metavar="[SEP]",
            help="Input lines are key:value tokens (SEP ':' by default, or '=').",
        ),
        click.option(
            "--stamp",
            metavar="[FIELDS]",
            shell_complete=complete_list(stamp_field_choices),
            help="Prepend provenance: any of time,host,pid,job,task,tasknum,attempt "
            "(bare --stamp: time,host,job,task).",
        ),
    )(f)


def batch_options(default_bytes: int) -> Callable[[F], F]:
    """``--batch-bytes`` and ``--flush-interval``: how records wait before a locked append."""
    return _stack(
        click.option(
            "--batch-bytes",
            type=click.IntRange(1, MAX_BATCH_BYTES),
            default=default_bytes,
            show_default=True,
            help="Write a batch when it reaches this size ...",
        ),
        click.option(
            "--flush-interval",
            type=Seconds(MAX_FLUSH_INTERVAL),
            default=1.0,
            show_default=True,
            help="... or when its oldest line is this many seconds old.",
        ),
    )


def quiet_option(f: F) -> F:
    return click.option("-q", "--quiet", is_flag=True, help="Only errors on stderr.")(f)


def verbose_option(f: F) -> F:
    return click.option("-v", "--verbose", count=True, help="Report what was done.")(f)


def json_option(f: F) -> F:
    return click.option(
        "--json", "as_json", is_flag=True, help="Print the report as JSON on stdout."
    )(f)


def print_json(data: Any) -> None:
    import json

    click.echo(json.dumps(data, indent=2))


def stdout_closed() -> NoReturn:
    """`zotsink cat out | head`: the reader left; that is not an error of ours."""
    import os

    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    sys.exit(0)
