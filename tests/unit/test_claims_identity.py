"""What the ledger's ``ok`` rows claim: each task once, by its number and the line that
number last ran as; a piece that is not in OUT as its row says is named, not shown."""

from __future__ import annotations

from pathlib import Path

from zotsink._ledgerfile import LATER_COLUMNS, LEDGER_COLUMNS, OutFile, claims, piece_problem

COLUMNS = (*LEDGER_COLUMNS, *LATER_COLUMNS)


def _row(event: str, num: int, key: str, **fields: str) -> str:
    values = dict.fromkeys(COLUMNS, "")
    values.update(event=event, time="2026-11-26T10:00:00.000000Z", tasknum=str(num), key=key)
    values.update(fields)
    return "\t".join(values[c] for c in COLUMNS) + "\n"


def _ok(num: int, key: str, offset: int, length: int) -> str:
    return _row(
        "end",
        num,
        key,
        status="ok",
        bytes=str(length),
        out_offset=str(offset),
        out_header="5",
        out_ino="7",
        out_crc="0",
    )


def test_a_renumbered_line_counts_once_and_an_unknown_kind_is_passed_over(
    tmp_path: Path,
) -> None:
    ledger = tmp_path / "out.tsv.ledger"
    rows = ["\t".join(COLUMNS) + "\n"]
    rows += [_row("start", 1, "a"), _ok(1, "a", 5, 2), _row("start", 2, "b"), _ok(2, "b", 7, 2)]
    # "z" inserted at the top: every line has a new number now, and runs again
    rows += [_row("start", 1, "z"), _ok(1, "z", 9, 2), _row("start", 2, "a"), _ok(2, "a", 11, 2)]
    rows += [_row("start", 3, "b"), _ok(3, "b", 13, 2)]
    rows += [_row("pause", 3, "b")]  # a newer release's kind of row
    ledger.write_text("".join(rows))
    c = claims(ledger)
    assert c is not None and c.header == 5
    assert [(p.tasknum, p.key, p.offset) for p in c.parts] == [
        (1, "z", 9),
        (2, "a", 11),
        (3, "b", 13),
    ]


def test_piece_problem_names_another_file_a_short_one_and_none() -> None:
    here = OutFile(7, 100)
    assert piece_problem("10", "20", "7", here) is None
    assert piece_problem("10", "0", "8", here) is None  # no records claimed
    assert "another file" in (piece_problem("10", "20", "8", here) or "")
    assert "shorter" in (piece_problem("90", "20", "7", here) or "")
    assert "does not exist" in (piece_problem("10", "20", "7", None) or "")
    assert piece_problem("10", "20", "", None) is None  # an older release's row: unchecked
    assert "shorter" in (piece_problem("90", "20", "", here) or "")
