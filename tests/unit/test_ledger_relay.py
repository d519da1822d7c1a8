"""The relay rows folded (``zotsink._ledger.relay.Chain``): fed rows as a ledger holds them,
with no file; and the one view folds them for every reader."""

from __future__ import annotations

from zotsink._ledger.format import INITIAL, Row, advance, make_row, parse_row
from zotsink._ledger.relay import Chain, join_note, relay_fields
from zotsink._ledger.view import LedgerView


def row(what: str, run: str = "r1", at_time: float = 100.0, **fields: str) -> Row:
    names = ("what", "ticket", "job", "count", "note")
    return Row("relay", at_time, run, dict(zip(names, relay_fields(what, **fields))), INITIAL)


def fold(*rows: Row) -> Chain:
    chain = Chain()
    for at, r in enumerate(rows):
        chain.fold(at * 100, r)
    return chain


def test_a_chain_counts_its_elements_by_the_rows() -> None:
    chain = fold(
        row("join", job="c:1", note=join_note(3, None)),
        row("decide", ticket="1", count="1/3", note="fill"),
    )
    assert chain.active and chain.n == 3 and chain.max is None
    assert list(chain.open()) == ["c:1"] and chain.open()["c:1"].state == "running"
    assert [t.ticket for t in chain.pending(now=101.0, ttl=60)] == ["1"]
    assert chain.pending(now=1000.0, ttl=60) == []  # a decision never answered holds no place
    chain.fold(300, row("job", ticket="1", job="c:2"))
    assert chain.pending(now=101.0, ttl=60) == []
    assert chain.open()["c:2"].state == "queued" and chain.submitted == 1
    # its run joins, naming the decision: the same element, however it spells its job
    chain.fold(400, row("join", run="r2", job="2", note=join_note(3, None, by="r1.1")))
    assert sorted(chain.open()) == ["2", "c:1"] and chain.open()["2"].state == "running"
    chain.fold(500, row("exit", run="r2", job="2"))
    assert chain.open()["2"].state == "exited"  # shown a moment longer by the scheduler
    chain.fold(600, row("gone", job="2"))
    assert list(chain.open()) == ["c:1"]


def test_a_run_that_joins_before_its_job_row_is_not_counted_twice() -> None:
    chain = fold(
        row("join", job="c:1", note=join_note(2, None)),
        row("decide", ticket="1"),
        row("join", run="r2", job="c:2", note=join_note(2, None, by="r1.1")),
        row("job", ticket="1", job="c:2"),
    )
    assert {j: e.state for j, e in chain.open().items()} == {"c:1": "running", "c:2": "running"}


def test_failures_in_a_row_pause_the_next_try_longer_each_time() -> None:
    chain = fold(row("join", job="c:1"), row("decide", ticket="1"))
    assert chain.retry_at(2.0, 300.0) == 0.0
    chain.fold(200, row("fail", ticket="1", at_time=10.0, note="sbatch: error:\tno\nway"))
    assert chain.last_fail is not None and chain.last_fail.message == "sbatch: error: no way"
    assert chain.retry_at(2.0, 300.0) == 12.0
    chain.fold(300, row("decide", ticket="2"))
    chain.fold(400, row("fail", ticket="2", at_time=20.0, note="again"))
    assert chain.retry_at(2.0, 300.0) == 24.0  # twice as long
    for i in range(3, 12):
        chain.fold(i * 100 + 500, row("fail", ticket=str(i), at_time=30.0))
    assert chain.retry_at(2.0, 300.0) == 330.0  # never longer than the most
    chain.fold(2000, row("job", ticket="12", job="c:9"))
    assert chain.fails_in_row == 0 and chain.retry_at(2.0, 300.0) == 0.0


def test_an_end_closes_the_chain_and_the_next_join_begins_another() -> None:
    chain = fold(
        row("join", job="c:1", note=join_note(1, 5)),
        row("decide", ticket="1"),
        row("job", ticket="1", job="c:2"),
        row("exit", job="c:1"),
        row("end", run="r2", job="c:2", note="done: no work waits"),
    )
    assert not chain.active and chain.ended is not None
    assert (chain.ended.reason, chain.ended.words) == ("done", "no work waits")
    assert chain.open() == {} and chain.submitted == 1
    chain.fold(900, row("join", run="r3", job="c:7", note=join_note(1, 5)))
    assert chain.active and chain.epoch_at == 900 and chain.submitted == 0
    assert chain.decided_at("r1", "1") == 100  # a successor finds its own decision


def test_a_refusal_is_kept_for_status() -> None:
    chain = fold(row("refused", job="c:4", note="settings differ"))
    assert chain.refused is not None and chain.refused.job == "c:4"
    assert chain.to_dict()["refused"]["message"] == "settings differ"


def test_a_note_is_one_line_and_bounded() -> None:
    fields = relay_fields("fail", ticket="1", note="a\tb\nc" + "x" * 1000)
    assert "\t" not in fields[4] and "\n" not in fields[4] and len(fields[4]) == 500
    line = make_row("relay", 1.0, "r", fields, advance(INITIAL, "relay", fields))
    parsed = parse_row(line.rstrip(b"\n"))
    assert parsed is not None and parsed.fields["what"] == "fail"


def test_relay_rows_move_the_control_counter_and_the_view_folds_them() -> None:
    state = advance(INITIAL, "relay", relay_fields("join", job="c:1"))
    assert state.ctl == INITIAL.ctl + 1  # every run reads them at its next claim
    view = LedgerView()
    view.feed([(10, row("join", job="c:1", note=join_note(2, None)))])
    assert view.chain.n == 2 and list(view.chain.open()) == ["c:1"]
