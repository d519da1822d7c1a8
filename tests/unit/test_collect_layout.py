"""The vote on a collection's layout: who wins, and the names of the files that lost."""

from __future__ import annotations

import pytest

from zotsink._collect import spool as collect_spool
from zotsink._collect.layout import FIELDS, LINES, Layout, NameLog, held, winner


def test_the_name_log_gives_every_name_back_in_order_past_its_spool_in_memory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(collect_spool, "MEM_LIMIT", 1000)  # the spool moves to a file
    names = [f"d/{i}\udcff\n\t x" if i % 7 == 0 else f"d/f{i}.txt" for i in range(10001)]
    log = NameLog(None)
    try:
        for n in names:
            log.append(n)
        assert list(log) == names
        assert list(log) == names  # and again: reading flushes, it does not consume
    finally:
        log.close()


def _layout(kind: str, files: int) -> Layout:
    lay = Layout(kind, None, None)  # type: ignore[arg-type]  # the table plays no part here
    for n in range(files):
        lay.add(n, f"f{n}", f"f{n}")
    return lay


@pytest.mark.parametrize(
    "fields,lines,out,kept",
    [
        (3, 0, None, FIELDS),
        (3, 4, None, LINES),
        (4, 4, None, FIELDS),  # a tie: any text can be read as lines
        (1, 5, FIELDS, FIELDS),  # OUT holds records already
        (5, 1, LINES, LINES),
    ],
)
def test_winner(fields: int, lines: int, out: str | None, kept: str) -> None:
    f, ln = _layout(FIELDS, fields), _layout(LINES, lines) if lines else None
    won, lost = winner(f, ln, out)
    assert won.kind == kept
    assert lost is (None if ln is None else (ln if kept == FIELDS else f))


def test_held_reads_the_layout_from_outs_columns() -> None:
    assert (held([]), held(["line"]), held(["k"]), held(["line", "k"])) == (
        None,
        LINES,
        FIELDS,
        FIELDS,
    )
