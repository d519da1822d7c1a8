"""The ``zotsink`` command: a thin layer over the Python API.

Each subcommand lives in a small module imported only when that subcommand runs: the CLI
starts once per job-array task, so start-up time is paid thousands of times.
``zotsink OUT ...`` (a first word that is not a subcommand) means ``zotsink append OUT ...``.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

import click

if TYPE_CHECKING:
    from click.shell_completion import CompletionItem

from ._common import EXIT_INTERNAL, exit_code, fail, show_warning, state

__all__ = ["main"]

#: name -> (module, attribute, one-line help), in the order ``--help`` lists them; a
#: command's module is imported only when it runs.
COMMANDS: Final = {
    "append": ("zotsink.cli.append", "append_cmd", "Append records (arguments or stdin) to OUT."),
    "collect": ("zotsink.cli.collect", "collect_cmd", "Merge tiny files into one table."),
    "verify": ("zotsink.cli.verify", "verify_cmd", "Check OUT's integrity (and --repair)."),
    "missing": ("zotsink.cli.missing", "missing_cmd", "List task inputs with no record yet."),
    "cat": ("zotsink.cli.cat", "cat_cmd", "Print a consistent snapshot of OUT."),
    "recover": ("zotsink.cli.recover", "recover_cmd", "Fold OUT's spill files back into OUT."),
    "doctor": ("zotsink.cli.doctor", "doctor_cmd", "Check a directory's filesystem and locks."),
    "pack": ("zotsink.cli.pack", "pack_cmd", "Append files as members of one shared tar."),
    "run": ("zotsink.cli.run", "run_cmd", "Run this array element's tasks; a locked ledger."),
    "status": ("zotsink.cli.status", "status_cmd", "Where the tasks stand, from the ledger."),
    "add": ("zotsink.cli.add", "add_cmd", "Append task lines to a task list; print their numbers."),
    "close": ("zotsink.cli.close", "close_cmd", "No more task lines will come: follow runs end."),
    "stop": ("zotsink.cli.close", "stop_cmd", "Live runs finish their running tasks and exit."),
    "release": ("zotsink.cli.close", "release_cmd", "Free the tasks of runs that are gone."),
}


class _LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return [n for n, (mod, _a, _h) in COMMANDS.items() if _exists(mod)]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        spec = COMMANDS.get(cmd_name)
        if spec is None:
            return None
        try:
            module = importlib.import_module(spec[0])
        except ModuleNotFoundError as e:
            if e.name != spec[0]:
                raise  # the command is there but something it needs is not: say so
            return None  # a build without this command
        return getattr(module, spec[1])

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(n, COMMANDS[n][2]) for n in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def shell_complete(self, ctx: click.Context, incomplete: str) -> list[CompletionItem]:
        # the shorthand ``zotsink [OPTIONS] OUT`` completes too: append's options before
        # OUT, and a file name beside the command names in OUT's place
        from click.shell_completion import CompletionItem

        items = super().shell_complete(ctx, incomplete)
        append = self.get_command(ctx, "append")
        if incomplete.startswith("-") and append is not None:
            return items + append.shell_complete(ctx, incomplete)
        # the file first: bash's completion script empties its list on a file entry
        return [CompletionItem(incomplete, type="file"), *items]

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        # ``zotsink OUT`` and ``zotsink --stamp OUT`` mean ``zotsink append ...``.
        if args and args[0] not in COMMANDS and args[0] not in ("-h", "--help", "--version"):
            if not ctx.resilient_parsing:  # completing: no error in mid-line
                _refuse_typo(args[0])
            args = ["append", *args]
        return super().parse_args(ctx, args)


def _refuse_typo(word: str) -> None:
    """A first word that is no command, has no extension and names no existing file is an
    error, not a file name.

    ``zotsink cancel tasks.txt out.tsv`` (a command a user might guess) would otherwise append
    two records to a new file named ``cancel`` and exit 0. Such a word is refused, with the
    closest command when one is near (``verfy``); an existing file, a path (``dir/out``) and
    a name with an extension (``out.tsv``) are always taken as OUT, and ``zotsink append
    WORD`` names any file.
    """
    import os

    if word.startswith("-") or set("./") & set(word) or os.path.lexists(word):
        return
    import difflib

    close = difflib.get_close_matches(word.lower(), list(COMMANDS), n=1, cutoff=0.7)
    way_out = f"to append to a file with that name, write `zotsink append {word}`"
    if close or word.lower() in COMMANDS:
        guess = close[0] if close else word.lower()
        fail(f"no command {word!r}: did you mean `zotsink {guess}`? To{way_out[2:]}", 2)
    fail(
        f"no command {word!r} (the commands: {', '.join(COMMANDS)}; `zotsink --help`); {way_out}",
        2,
    )


def _exists(module: str) -> bool:
    # for --help and completion only: importing importlib.util would slow every short task
    import importlib.util

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
    from .._core.records import STAMP_FIELDS

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
    warnings.showwarning = show_warning
    args = state.args = _normalize(sys.argv[1:] if argv is None else argv)
    try:
        cli.main(args=args, prog_name="zotsink", standalone_mode=True)
    except SystemExit:
        raise
    except Exception as e:  # the last guard: no traceback reaches a user unless -v
        if state.verbose:
            raise
        code = exit_code(e) if isinstance(e, OSError) else EXIT_INTERNAL
        fail(f"{type(e).__name__}: {e} (run with -v for details)", code)
    finally:
        state.args = []  # this call's: a later call into the commands must not see them
