"""The CLI's one exit-code table and its shared pieces."""

from __future__ import annotations

import subprocess
import sys

import pytest

import zotsink.errors as errors
from zotsink.cli._common import EXIT_CODES, exit_code, outcome_code


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (errors.LockTimeout("t"), 75),
        (errors.LockError("l"), 74),
        (errors.WriteError("w"), 74),
        (errors.UsageError("u"), 2),
        (errors.HeaderMismatch("h"), 1),
        (errors.RecordError("r"), 1),
        (errors.InputError("i"), 1),
        (OSError(5, "EIO"), 74),
        (RuntimeError("bug"), 70),
    ],
)
def test_each_error_has_one_exit_code(error: BaseException, code: int) -> None:
    assert exit_code(error) == code


def test_library_exceptions_carry_no_exit_code() -> None:
    kinds = [v for v in vars(errors).values() if isinstance(v, type) and issubclass(v, Exception)]
    assert len(kinds) >= 8
    for kind in kinds:
        assert not hasattr(kind, "exit_code"), kind
    # every zotsink error is in the table, and no entry is shadowed by an earlier, wider one
    zk = [k for k in kinds if issubclass(k, errors.ZotsinkError)]
    table = [k for k, _ in EXIT_CODES]
    assert set(zk) <= set(table)
    for i, k in enumerate(table):
        assert not any(issubclass(k, wider) for wider in table[:i]), k


def test_a_signal_outranks_an_error_which_outranks_refusals() -> None:
    assert outcome_code(errors.LockTimeout("t"), 3, 15) == 143
    assert outcome_code(errors.WriteError("w"), 3, None) == 74
    assert outcome_code(None, 3, None) == 1
    assert outcome_code(None, 0, None) == 0


def test_help_lists_the_commands_in_order_with_one_line_each() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "zotsink", "--help"], capture_output=True, check=True, text=True
    ).stdout
    listed = out.split("Commands:", 1)[1].strip().splitlines()
    names = [line.split()[0] for line in listed]
    assert names[:2] == ["append", "collect"]
    assert {"verify", "missing", "cat", "recover", "doctor"} <= set(names)
    assert all(len(line.split(None, 1)) == 2 for line in listed)  # each has its description
