"""The ``zotsink`` command: a thin layer over the Python API.

Each subcommand lives in a small module imported only when that subcommand runs: the CLI
starts once per job-array task, so start-up time is paid thousands of times.
``zotsink OUT ...`` (a first word that is not a subcommand) means ``zotsink append OUT ...``.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import warnings
from collections.abc import Callable, Sequence
from typing import Any, Final, NoReturn

import click

from ..errors import ZotsinkError

__all__ = ["fail", "main", "run_api", "say"]

#: name -> (module, attribute, one-line help); modules are imported on use.
COMMANDS: Final = {
    "append": ("zotsink.cli.append", "append_cmd", "Append records (arguments or stdin) to OUT."),
    "collect": ("zotsink.cli.collect", "collect_cmd", "Merge tiny files into one table."),
    "verify": ("zotsink.cli.workflow", "verify_cmd", "Check OUT's integrity (and --repair)."),
    "missing": ("zotsink.cli.workflow", "missing_cmd", "List task inputs with no record yet."),
    "cat": ("zotsink.cli.append", "cat_cmd", "Print a consistent snapshot of OUT."),
    "recover": ("zotsink.cli.append", "recover_cmd", "Fold OUT's spill files back into OUT."),
    "doctor": ("zotsink.cli.doctor", "doctor_cmd", "Check a directory's filesystem and locks."),
}

#: Exit code for an unexpected internal failure (sysexits EX_SOFTWARE).
EXIT_INTERNAL: Final = 70


class _State:
    verbose = 0
    quiet = False


state = _State()


def say(message: str, *, level: int = 0) -> None:
    """A progress or report line on stderr (``-q`` silences, ``-v`` shows level 1)."""
    if state.quiet or level > state.verbose:
        return
    click.echo(f"zotsink: {message}", err=True)


def fail(message: str, code: int) -> NoReturn:
    click.echo(f"zotsink: error: {message}", err=True)
    sys.exit(code)


def run_api(call: Callable[[], Any]) -> Any:
    """Run an API call, turning zotsink errors into a message and their exit code."""
    try:
        return call()
    except ZotsinkError as e:
        if state.verbose:
            import traceback

            traceback.print_exc()
        fail(e.message, e.exit_code)


def _show_warning(
    message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None
) -> None:
    if not state.quiet:
        click.echo(f"zotsink: warning: {message}", err=True)


def set_verbosity(verbose: int, quiet: bool) -> None:
    state.verbose = verbose
    state.quiet = quiet


class _LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return [n for n, (mod, _a, _h) in COMMANDS.items() if _exists(mod)]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        spec = COMMANDS.get(cmd_name)
        if spec is None or not _exists(spec[0]):
            return None
        return getattr(importlib.import_module(spec[0]), spec[1])

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(n, COMMANDS[n][2]) for n in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        # ``zotsink OUT`` and ``zotsink --stamp OUT`` mean ``zotsink append ...``.
        if args and args[0] not in COMMANDS and args[0] not in ("-h", "--help", "--version"):
            args = ["append", *args]
        return super().parse_args(ctx, args)


def _exists(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def _version() -> str:
    from .. import __version__

    return __version__


@click.group(
    cls=_LazyGroup,
    context_settings={"help_option_names": ["-h", "--help"]},
    invoke_without_command=False,
)
@click.version_option(_version(), "--version", prog_name="zotsink")
def cli() -> None:
    """Append records from many job-array tasks to ONE shared file, whole and locked.

    \b
      producer | zotsink out.tsv            append stdin lines to out.tsv
      zotsink collect results/ -o out.tsv   merge a directory of tiny files
      zotsink missing tasks.txt out.tsv --key input --array   what to resubmit
    """


def _normalize(argv: Sequence[str]) -> list[str]:
    """Give ``--kv`` and ``--stamp`` their optional values in ``--opt=VALUE`` form.

    Both take an optional value, which a plain parser would steal from the next word
    (``zotsink --stamp out.tsv``): only a word that looks like a value is taken as one
    (``--kv``: ``:`` or ``=``; ``--stamp``: a field name or a comma list without ``/``
    or ``.``). ``--kv=SEP`` and ``--stamp=FIELDS`` are always taken as written.
    """
    from ..records import STAMP_FIELDS

    out: list[str] = []
    args = list(argv)
    i = 0
    while i < len(args):
        a = args[i]
        nxt = args[i + 1] if i + 1 < len(args) else None
        if a == "--":
            out.extend(args[i:])
            break
        if a == "--kv":
            if nxt in (":", "="):
                out.append(f"--kv={nxt}")
                i += 2
                continue
            out.append("--kv=:")
        elif a == "--stamp":
            # a field list (checked later, so `job,node` is an error, not a file name) or
            # one known field; anything else is OUT
            if nxt and (nxt in STAMP_FIELDS or ("," in nxt and not set("/.") & set(nxt))):
                out.append(f"--stamp={nxt}")
                i += 2
                continue
            out.append("--stamp=")
        else:
            out.append(a)
        i += 1
    return out


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``zotsink`` command and ``python -m zotsink``."""
    warnings.showwarning = _show_warning
    args = _normalize(sys.argv[1:] if argv is None else argv)
    try:
        cli.main(args=args, prog_name="zotsink", standalone_mode=True)
    except SystemExit:
        raise
    except Exception as e:  # the last guard: no traceback reaches a user unless -v
        if state.verbose:
            raise
        code = 74 if isinstance(e, OSError) else EXIT_INTERNAL
        fail(f"{type(e).__name__}: {e} (run with -v for details)", code)
