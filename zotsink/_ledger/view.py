"""The one fold of a ledger's rows: where each task stands, the runs, the control rows.

Every reader that needs more than a claim's last row folds the rows here: ``status``,
``missing --ledger``, ``cat`` (which parts of OUT are claimed), the live runs, a run's
look at the tasks of others (its rare path: takeovers, retries, a resubmission). The rows
come from :mod:`zotsink._ledger.read` (format 1 translated); what a row says of a task:

- ``claim``: the task is its run's (``claimed``), its attempt the one named. A claim of a
  task that another run had claimed or begun takes it over (that run died): counted, and
  a begun attempt so lost counts as a failure (``--max-attempts``). A claim marked ``!``
  says the task's line is another than the one its earlier attempts ran: their history
  no longer counts.
- ``begin``: its current attempt began, in the process named (``running``).
- ``end``: it ended with the item's status (``ok``, ``failed``, ``killed``, ``timeout``,
  ``oom``, ``interrupted``; an unknown one counts as ``failed``); an ``ok`` one claims its
  piece of OUT (the latest ok counts), a ``failed``, ``killed``, ``timeout`` or ``oom``
  one counts as a failure.
- ``release``: given back before it began: free again (``never`` once settled).

A :class:`LedgerView` keeps a few bytes per task (arrays by task number), the runs, the
claim rows' proof of their lines, and only for the few tasks that need them the details
(a begun task's process, a failed task's last end). :meth:`LedgerView.verify` drops the
history of tasks whose claim named other lines than the task list has now (it was
edited); :meth:`LedgerView.settle` says what the states are now, asking a :class:`Judge`
once per run whether it lives: a claimed task of a dead run is free (``never``), a begun
one is ``running`` while its own process lives and ``lost`` once it does not; a task whose
failures reached ``max_attempts`` (a begun attempt lost with its run counts as one) is
``given-up``; an ``ok`` task whose piece is no longer in OUT is ``lost``.
"""

from __future__ import annotations

import heapq
import math
from array import array
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from itertools import compress
from typing import Final, Literal

from .control import Control
from .format import (
    Block,
    EndItem,
    Row,
    line_crc,
    ok_spans,
    parse_begin_items,
    parse_blocks,
    parse_element,
    parse_end_items,
    parse_notes,
    parse_settings,
    parse_tasks,
)
from .pieces import Claims, OutFile, Piece
from .relay import Chain
from .runs import Judge, RunRecord

__all__ = [
    "FAILING",
    "STATES",
    "Judge",
    "LedgerView",
    "RunRecord",
    "State",
]

#: A task's state.
State = Literal[
    "ok",
    "failed",
    "killed",
    "timeout",
    "oom",
    "interrupted",
    "given-up",
    "running",
    "claimed",
    "lost",
    "never",
]
#: Every state, in the order reports list them.
STATES: Final[tuple[State, ...]] = (
    "ok",
    "failed",
    "killed",
    "timeout",
    "oom",
    "interrupted",
    "given-up",
    "running",
    "claimed",
    "lost",
    "never",
)
#: End statuses that count towards ``max_attempts`` (``interrupted`` does not: a walltime
#: warning or a cancel says nothing of the task).
FAILING: Final = ("failed", "killed", "timeout", "oom")

# the codes kept per task: an index into STATES, and two more before settling
_CODE: Final = {name: i for i, name in enumerate(STATES)}
_OK, _RUNNING, _CLAIMED, _LOST, _NEVER = (
    _CODE[s] for s in ("ok", "running", "claimed", "lost", "never")
)
_GIVEN_UP, _INTERRUPTED = _CODE["given-up"], _CODE["interrupted"]
_BEGUN: Final = len(STATES)  # before settling: begun (running or lost, by its process)
_RELEASED: Final = _BEGUN + 1  # before settling: given back (never)
_HELD: Final = frozenset((_CLAIMED, _BEGUN))  # before settling: a run holds it
_UNCHECKED: Final = object()  # settle(): OUT not to be checked
_FAILING_CODES: Final = frozenset(_CODE[s] for s in FAILING)
_END_CODES: Final = {s: _CODE[s] for s in ("ok", *FAILING, "interrupted")}
#: bytes.translate table: 1 for the codes a look must judge, 0 for ok and never
_UNSETTLED: Final = bytes(0 if c in (_CODE["ok"], _CODE["never"]) else 1 for c in range(256))


#: How many of the latest ends a view keeps in order (:meth:`LedgerView.last_ended`).
RECENT_ENDS: Final = 256


class LedgerView:
    """Where each task stands (see the module's docstring), from rows fed in order.

    ``keys``: the task list now (task number -> line); None: every number the rows name
    (``cat``, which reads no task list). ``pieces``: keep each task's latest ok piece.
    """

    def __init__(
        self, keys: Mapping[int, str] | None = None, *, pieces: bool = False, lean: bool = False
    ) -> None:
        self.keys = keys
        # a run's own view (no pieces): an end row of ok items only is folded as counts,
        # the tasks' states by slices, without the seconds and the latest ends only status
        # reads. A run folds every other run's ends: decoding each item was most of what a
        # claim cost with many runs
        self._lean = lean and not pieces
        size = (max(keys, default=0) + 1) if keys else 1024
        self.code = bytearray([_NEVER]) * size
        self.attempt = array("I", bytes(4 * size))
        self.owner = array("i", [-1]) * size
        self.failures = array("I", bytes(4 * size))
        self.takeovers = bytearray(size)
        self.claim_row = array("i", [-1]) * size
        self.seconds = array("d", [math.nan]) * size
        self.procs: dict[int, tuple[int, str]] = {}  # a begun attempt's process
        self.fails: dict[
            int, tuple[EndItem, float, int, str]
        ] = {}  # not-ok ends: item, time, run, note
        # the latest ends, with their row's notes: what the last tasks to end say (status's
        # "failing alike"); kept as they come, read rarely
        self.recent_ends: deque[tuple[EndItem, dict[str, str]]] = deque(maxlen=RECENT_ENDS)
        self.runs: list[RunRecord] = []
        self.run_index: dict[str, int] = {}
        self.claim_rows: list[tuple[int, str]] = []  # (CRC of their lines, tasks)
        self.control = Control()
        self.chain = Chain()  # the relay rows (run --relay)
        # (job, index) -> the runs of that element and the restart each began in
        self._starts: dict[tuple[str, str], list[tuple[int, int]]] = {}
        self.settings: dict[str, str] | None = None  # the latest recorded
        self.settings_at = -1
        self.first_time = math.inf
        self.last_time = 0.0
        self.size = 0  # ledger bytes folded
        self._pieces = pieces
        self.header = 0  # OUT's header's length, as the latest end row says
        self.blocks: list[tuple[Block, str]] = []  # (block, inode of the file)
        # the files ends appended to, and the furthest block's end: whether OUT now may
        # hold them all, asked before any piece is
        self._out_inos: set[str] = set()
        self._out_end = 0
        if pieces:
            self.piece_off = array("q", [-1]) * size
            self.piece_len = array("q", bytes(8 * size))
            self.piece_blk = array("i", [-1]) * size
        self._final: bytearray | None = None
        self.unknown: set[int] = set()  # running tasks whose run's life nobody can tell
        self._feed: dict[str, Callable[[int, Row], None]] = {
            "run": self._run,
            "claim": self._claim,
            "begin": self._begin,
            "end": self._end,
            "release": self._release,
            "worker": self._worker,
            "gone": self._gone_row,
        }

    # -- folding ---------------------------------------------------------------------------
    def feed(self, rows: Iterable[tuple[int, Row]]) -> None:
        """Fold ``(offset, row)`` pairs, in the ledger's order."""
        feeds = self._feed
        control = self.control
        for at, row in rows:
            f = feeds.get(row.kind)
            if f is not None:
                f(at, row)
                continue
            if row.kind in ("close", "open", "stop"):
                control = control.fold(row.kind, at, row.time, row.fields.get("lines", ""))
            elif row.kind == "relay":
                self.chain.fold(at, row)
        self.control = control
        self._final = None

    def _grow(self, num: int) -> None:
        if num < len(self.code):
            return
        more = max(num + 1, 2 * len(self.code)) - len(self.code)
        self.code.extend(bytearray([_NEVER]) * more)
        self.attempt.extend(array("I", bytes(4 * more)))
        self.owner.extend(array("i", [-1]) * more)
        self.failures.extend(array("I", bytes(4 * more)))
        self.takeovers.extend(bytearray(more))
        self.claim_row.extend(array("i", [-1]) * more)
        self.seconds.extend(array("d", [math.nan]) * more)
        if self._pieces:
            self.piece_off.extend(array("q", [-1]) * more)
            self.piece_len.extend(array("q", bytes(8 * more)))
            self.piece_blk.extend(array("i", [-1]) * more)

    def _who(self, at: int, row: Row) -> int:
        r = self.run_index.get(row.run, -1)
        if r >= 0:
            run = self.runs[r]
            run.last_at, run.last_time = at, row.time
        if row.time < self.first_time:
            self.first_time = row.time
        if row.time > self.last_time:
            self.last_time = row.time
        return r

    def _run(self, at: int, row: Row) -> None:
        r = self.run_index.get(row.run)
        if r is None:
            r = self.run_index[row.run] = len(self.runs)
            self.runs.append(RunRecord(r, at, row))
            self._started(r)
        record = self.runs[r]
        if record.settings is None:
            record.settings = parse_settings(row.fields["settings"])
        if record.settings is not None and row.fields["settings"]:
            self.settings, self.settings_at = record.settings, at

    def _gone_row(self, at: int, row: Row) -> None:
        self._who(at, row)
        for run_id in row.fields["runs"].split(","):
            r = self.run_index.get(run_id)
            if r is not None:
                self.runs[r].gone = True

    def _started(self, r: int) -> None:
        """A run of an array element began: the runs of the element's earlier starts (a
        requeue, a preemption, a node that failed: the same job and index, a lower restart)
        are over, whatever the scheduler says of the element now."""
        run = self.runs[r]
        if not run.job:
            return
        index, restart = parse_element(run.element)
        starts = self._starts.setdefault((run.job, index), [])
        for other, theirs in starts:
            if theirs < restart:
                self.runs[other].supersede()
            elif restart < theirs:
                run.supersede()  # rows out of order: a later start wrote first
        starts.append((r, restart))

    def _worker(self, at: int, row: Row) -> None:
        r = self._who(at, row)
        if r >= 0:
            pid, _, start = row.fields["process"].partition(":")
            if pid.isdigit():
                self.runs[r].workers.append((int(pid), start))

    def _claim(self, at: int, row: Row) -> None:
        r = self._who(at, row)
        text = row.fields["tasks"]
        c = len(self.claim_rows)
        self.claim_rows.append((int(row.fields["lines"] or "0", 16), text))
        code, limit = self.code, len(self.code)
        n_claimed = 0
        for first, last, att, fresh in parse_tasks(text):
            if last >= limit:
                if self.keys is not None:
                    last = min(last, limit - 1)  # numbers past the task list: no tasks
                    if first > last:
                        continue
                else:
                    self._grow(last)
                    code, limit = self.code, len(self.code)
            n = last - first + 1
            n_claimed += n
            window = code[first : last + 1]
            if not fresh and _CLAIMED not in window and _BEGUN not in window:
                # the usual claim: tasks nobody holds (a cursor's block)
                code[first : last + 1] = bytes([_CLAIMED]) * n
                self.attempt[first : last + 1] = array("I", [att]) * n
                self.owner[first : last + 1] = array("i", [r]) * n
                self.claim_row[first : last + 1] = array("i", [c]) * n
                continue
            for num in range(first, last + 1):
                held = code[num]
                if held in (_CLAIMED, _BEGUN) and self.owner[num] != r:
                    # taken over: the run that held it died (or was judged so)
                    if self.takeovers[num] < 255:
                        self.takeovers[num] += 1
                    if held == _BEGUN:
                        self.failures[num] += 1  # a begun attempt lost with its run
                    self.procs.pop(num, None)
                if fresh:
                    self._forget(num)
                code[num] = _CLAIMED
                self.attempt[num] = att
                self.owner[num] = r
                self.claim_row[num] = c
        if r >= 0:
            self.runs[r].claimed += n_claimed

    def _forget(self, num: int) -> None:
        """The task's line changed since its earlier attempts: they say nothing of it."""
        self.failures[num] = 0
        self.takeovers[num] = 0
        self.seconds[num] = math.nan
        self.fails.pop(num, None)
        self.procs.pop(num, None)
        if self._pieces:
            self.piece_off[num] = -1
            self.piece_len[num] = 0

    def _begin(self, at: int, row: Row) -> None:
        r = self._who(at, row)
        code, limit = self.code, len(self.code)
        for num, att, pid, start in parse_begin_items(row.fields["items"]):
            if num < limit and self.attempt[num] == att and code[num] == _CLAIMED:
                code[num] = _BEGUN
                self.procs[num] = (pid, start)
                if r >= 0:
                    self.runs[r].begun += 1

    def _release(self, at: int, row: Row) -> None:
        r = self._who(at, row)
        code, limit = self.code, len(self.code)
        for first, last, att, _fresh in parse_tasks(row.fields["tasks"]):
            for num in range(first, min(last, limit - 1) + 1):
                if self.attempt[num] == att and code[num] == _CLAIMED:
                    code[num] = _RELEASED
                    if r >= 0:
                        self.runs[r].released += 1

    def _end(self, at: int, row: Row) -> None:
        r = self._who(at, row)
        f = row.fields
        blocks = parse_blocks(f["blocks"])
        ino, _, header = f["out"].partition(":")
        if header.isdigit():
            self.header = int(header)
        first_block = len(self.blocks)
        if self._pieces:
            self.blocks.extend((b, ino) for b in blocks)
        if blocks:
            self._out_inos.add(ino)
            last = blocks[-1]
            self._out_end = max(self._out_end, last.offset + last.length)
        run = self.runs[r] if r >= 0 else None
        text = f["items"]
        if self._lean and self.keys is None:
            spans = ok_spans(text)
            if spans is not None:
                self._ok_spans(spans, run)
                return
        items = parse_end_items(text)
        notes = parse_notes(f["notes"])
        code = self.code
        bi, pos = 0, 0  # the block the next piece is in, and where in it
        for it in items:
            num = it.num
            offset = -1
            if it.in_out and it.size:
                while bi < len(blocks) and pos >= blocks[bi].length:
                    bi, pos = bi + 1, 0
                if bi < len(blocks):
                    offset = blocks[bi].offset + pos
                    pos += it.size
            if num >= len(code):
                if self.keys is not None:
                    continue
                self._grow(num)
                code = self.code
            status = _END_CODES.get(it.status, _CODE["failed"])
            code[num] = status
            self.recent_ends.append((it, notes))
            self.seconds[num] = it.seconds / 1e6
            self.procs.pop(num, None)
            if status == _OK:
                self.fails.pop(num, None)
                if run is not None:
                    run.ok += 1
                if self._pieces:
                    if offset >= 0:
                        self.piece_off[num] = offset
                        self.piece_len[num] = it.size
                        self.piece_blk[num] = first_block + bi
                    else:
                        self.piece_off[num] = -1  # its latest ok attempt printed none
                        self.piece_len[num] = 0
                continue
            if run is not None:
                run.not_ok += 1
            if status in _FAILING_CODES:
                self.failures[num] += 1
            self.fails[num] = (it, row.time, r, notes.get(f"{num}.{it.attempt}", ""))

    def _ok_spans(self, spans: list[tuple[int, int]], run: RunRecord | None) -> None:
        """A lean view's fold of an end row whose items are all ok (see ``_end``)."""
        for first, count in spans:
            end = first + count
            if end > len(self.code):
                self._grow(end - 1)
            self.code[first:end] = bytes((_OK,)) * count
            if run is not None:
                run.ok += count
        # the begun and the failed tasks are few (those running now, those failing): the
        # ones this row ended ok are found among them, not among the row's tasks
        code = self.code
        for held in (self.procs, self.fails):
            if held:
                for num in [n for n in held if code[n] == _OK]:
                    del held[num]

    # -- the task list now -------------------------------------------------------------------
    def verify(
        self, lines: Mapping[int, str] | None = None, nums: Iterable[int] | None = None
    ) -> set[int]:
        """Drop the history of tasks whose latest claim named other lines than the task list
        has now (it was edited): each claim row's CRC of its lines, computed again from
        ``lines`` (default ``keys``), which must hold every task of the rows that the tasks
        ``nums`` (default: all of ``lines``) were last claimed by. The tasks dropped."""
        lines = self.keys if lines is None else lines
        if lines is None:
            return set()
        todo = lines if nums is None else nums
        used = {self.claim_row[n] for n in todo if n < len(self.code)} - {-1}
        bad: set[int] = set()
        for c in used:
            crc, text = self.claim_rows[c]
            got = (
                lines[num]
                for first, last, _att, _fresh in parse_tasks(text)
                for num in range(first, last + 1)
                if num in lines
            )
            if line_crc(got) != crc:
                bad.add(c)
        dropped: set[int] = set()
        if not bad:
            return dropped
        for c in bad:
            for first, last, _att, _fresh in parse_tasks(self.claim_rows[c][1]):
                for num in range(first, min(last, len(self.code) - 1) + 1):
                    if self.claim_row[num] == c:
                        dropped.add(num)
        for num in dropped:
            self._forget(num)
            self.code[num] = _NEVER
            self.claim_row[num] = -1
            self.owner[num] = -1
        self._final = None
        return dropped

    def row_tasks(self, nums: Iterable[int]) -> set[int]:
        """Every task of the claim rows the tasks ``nums`` were last claimed by: the lines
        :meth:`verify` needs."""
        used = {self.claim_row[n] for n in nums if n < len(self.code)} - {-1}
        out: set[int] = set()
        for c in used:
            for first, last, _att, _fresh in parse_tasks(self.claim_rows[c][1]):
                out.update(range(first, last + 1))
        return out

    def unsettled(self, upto: int | None = None) -> list[int]:
        """The task numbers (below ``upto``) whose state is not ``ok`` or ``never`` before
        settling: held, begun, given back, failed, interrupted (found at C speed)."""
        code = self.code if upto is None else self.code[: max(upto, 0)]
        mask = code.translate(_UNSETTLED)
        if mask.count(1) * 8 > len(mask):
            # many (the end of a list that many runs share): one pass at C speed costs
            # less than a search per task
            return list(compress(range(len(mask)), mask))
        out: list[int] = []
        at = mask.find(1)
        while at >= 0:
            out.append(at)
            at = mask.find(1, at + 1)
        return out

    def held_by_live(self, judge: Judge, nums: Sequence[int], me: int) -> tuple[list[int], int]:
        """Of ``nums``, the tasks held (claimed or begun) by a run the judge says lives, and
        those of the run ``me``: taken out, as :meth:`settle` would leave them, and counted
        (``me``'s not): ``(the rest, how many other live runs hold)``. At the end of a list
        that many runs share, a look's tasks are mostly these, and a look is their number
        times a judgement per task otherwise; each run is judged once here."""
        owner, code, runs = self.owner, self.code, self.runs
        size = len(code)
        live = {me}
        for r in {owner[n] for n in nums if n < size} - {me, -1}:
            run = runs[r]
            if not run.gone and judge.run_alive(run) is True:
                live.add(r)
        rest: list[int] = []
        held = 0
        for n in nums:
            if n < size and code[n] in _HELD and owner[n] in live:
                if owner[n] != me:
                    held += 1
            else:
                rest.append(n)
        return rest, held

    # -- now -----------------------------------------------------------------------------------
    def settle(
        self,
        judge: Judge | None,
        *,
        max_attempts: int | None = None,
        nums: Iterable[int] | None = None,
        out: OutFile | object | None = _UNCHECKED,
    ) -> None:
        """The states now (see the module's docstring); without ``judge`` a held task is as
        its rows say (``claimed``, ``running``). With ``out`` (OUT as found now, None: it
        does not exist; the view keeps ``pieces``), an ``ok`` task whose piece OUT does not
        hold is ``lost``."""
        check = out is not _UNCHECKED and self._pieces
        final = bytearray(self.code)
        alive: dict[int, bool | None] = {}
        held: dict[int, bool] = {}
        self.unknown = set()
        limit = max_attempts
        if nums is None:
            nums = self.keys if self.keys is not None else range(len(final))
        code = self.code
        for num in nums:
            if num >= len(code):
                continue
            c = code[num]
            if c == _NEVER:
                continue
            if c == _OK:
                if check and self._gone(num, out):  # type: ignore[arg-type]
                    final[num] = _LOST
                continue
            if c == _RELEASED:
                final[num] = _NEVER
            elif c in (_CLAIMED, _BEGUN):
                r = self.owner[num]
                if judge is None or r < 0:
                    final[num] = _CLAIMED if c == _CLAIMED else _RUNNING
                    continue
                run = self.runs[r]
                live = alive.get(r, _ASK)
                if live is _ASK:
                    # a run declared gone is dead, its tasks' processes too: the user's word
                    live = alive[r] = False if run.gone else judge.run_alive(run)
                if live or live is None:
                    final[num] = _CLAIMED if c == _CLAIMED else _RUNNING
                    if live is None:
                        self.unknown.add(num)
                    continue
                if c == _CLAIMED:
                    h = held.get(r)
                    if h is None:
                        h = held[r] = not run.gone and judge.workers_alive(run)
                    h = h or (not run.gone and judge.claim_held(run, num))
                    final[num] = _CLAIMED if h else _NEVER
                    continue
                pid, start = self.procs.get(num, (0, ""))
                orphan = judge.task_alive(run, pid, start) if pid and not run.gone else False
                if orphan or orphan is None:
                    final[num] = _RUNNING
                    if orphan is None:
                        self.unknown.add(num)
                elif limit is not None and self.failures[num] + 1 >= limit:
                    # a begun attempt lost with its run counts as a failure: a task that
                    # takes its run down would otherwise walk through every element
                    final[num] = _GIVEN_UP
                else:
                    final[num] = _LOST
            elif c in _FAILING_CODES and limit is not None and self.failures[num] >= limit:
                final[num] = _GIVEN_UP
        self._final = final

    def _gone(self, num: int, out: OutFile | None) -> bool:
        piece = self.piece(num)
        return piece is not None and piece.problem(out) is not None

    def held_before(self, num: int) -> bool:
        """Whether a task's rows say a run holds it (claimed or begun), whatever the run's
        life: before :meth:`settle`, or a task it made free for a run that died."""
        return num < len(self.code) and self.code[num] in (_CLAIMED, _BEGUN)

    def free_waiting(self) -> bool:
        """Whether a task waits that no run holds, by the rows alone: given back (a run's
        deadline, a stop) or interrupted; found at C speed. A task lost with its run is a
        judgement (:meth:`settle`), not made here."""
        code = self.code
        return code.find(_RELEASED) >= 0 or code.find(_INTERRUPTED) >= 0

    def state(self, num: int) -> State:
        """A task's state (settled when :meth:`settle` was called)."""
        final = self._final if self._final is not None else self.code
        if num >= len(final):
            return "never"
        c = final[num]
        if c == _BEGUN:
            return "running"
        if c == _RELEASED:
            return "never"
        return STATES[c]

    def known(self) -> int:
        """How many task numbers some run claimed at some time (at C speed)."""
        return len(self.attempt) - self.attempt.count(0)

    def ok_count(self) -> int:
        """How many tasks the rows say ended ok last (before settling; at C speed)."""
        return self.code.count(_OK)

    def counts(self) -> dict[str, int]:
        """How many tasks of ``keys`` are in each state of :data:`STATES`, zero included."""
        counts = dict.fromkeys(STATES, 0)
        for num in self.keys if self.keys is not None else range(len(self.code)):
            counts[self.state(num)] += 1
        return counts

    def held_by(self) -> dict[int, tuple[int, int]]:
        """Run index -> (tasks it holds claimed, tasks it runs), as settled."""
        out: dict[int, tuple[int, int]] = {}
        final = self._final if self._final is not None else self.code
        for num in self.keys if self.keys is not None else range(len(self.code)):
            if num >= len(final):
                continue
            c = final[num]
            if c in (_CLAIMED, _RUNNING, _BEGUN):
                r = self.owner[num]
                claimed, running = out.get(r, (0, 0))
                if c == _CLAIMED:
                    claimed += 1
                else:
                    running += 1
                out[r] = (claimed, running)
        return out

    def median_seconds(self) -> float | None:
        """The median own time of the tasks whose latest attempt ended (None: none did)."""
        times = sorted(s for num, s in self._ended_seconds())
        if not times:
            return None
        half = len(times) // 2
        return times[half] if len(times) % 2 else (times[half - 1] + times[half]) / 2

    def _ended_seconds(self) -> Iterator[tuple[int, float]]:
        seconds = self.seconds
        for num in self.keys if self.keys is not None else range(len(self.code)):
            if num < len(seconds):
                s = seconds[num]
                if not math.isnan(s):
                    yield num, s

    def slowest(self, count: int) -> list[tuple[int, float, str]]:
        """The ``count`` tasks whose latest attempt took longest: (number, seconds, line)."""
        keys = self.keys or {}
        top = heapq.nlargest(count, self._ended_seconds(), key=lambda x: x[1])
        return [(n, s, keys.get(n, "")) for n, s in top]

    def last_ended(self, count: int) -> list[tuple[int, str, str, str]]:
        """The latest ends of the ``count`` tasks (of ``keys``) that ended last, ok or not
        (``interrupted`` is no verdict), oldest first: number, status, code, note."""
        seen: set[int] = set()
        got: list[tuple[int, str, str, str]] = []
        for it, notes in reversed(self.recent_ends):
            num = it.num
            if it.status == "interrupted" or num in seen:
                continue  # a stop is no verdict on the task
            if self.keys is not None and num not in self.keys:
                continue
            seen.add(num)
            got.append((num, it.status, it.code, notes.get(f"{num}.{it.attempt}", "")))
            if len(got) == count:
                break
        return got[::-1]

    def latest_fail(self, num: int) -> tuple[EndItem, float, int, str] | None:
        """A task's latest end that was not ok: (item, row time, run index, note)."""
        return self.fails.get(num)

    def out_holds(self, out: OutFile | None) -> bool:
        """Whether OUT as found (``out``; None: it does not exist) may hold every block the
        ends claim: the file they were appended to, long enough. Cheap: a look asks it
        first, and judges each ok task's piece only when it is not so."""
        if not self._out_inos:
            return True
        if out is None:
            return False
        return self._out_inos <= {"", str(out.ino)} and self._out_end <= out.size

    def ok_tasks(self, upto: int) -> list[int]:
        """The tasks below ``upto`` whose latest end is ok (at C speed)."""
        code = self.code[: max(upto, 0)]
        out: list[int] = []
        at = code.find(_OK)
        while at >= 0:
            out.append(at)
            at = code.find(_OK, at + 1)
        return out

    def piece(self, num: int) -> Piece | None:
        """The part of OUT task ``num``'s latest ok end claims (``pieces``); None when its
        latest end is not ok, or claims no part (it printed nothing)."""
        if num >= len(self.code) or self.code[num] != _OK:
            return None
        off = self.piece_off[num]
        if off < 0:
            return None
        block, ino = self.blocks[self.piece_blk[num]]
        return Piece(off, self.piece_len[num], num, ino, block)

    def claims(self, out: OutFile | None) -> Claims:
        """The parts of OUT each task's latest ok end claims (``pieces``), in OUT's order;
        those not in OUT as ``out`` finds it are named in ``untrusted``."""
        parts: list[Piece] = []
        untrusted: list[tuple[int, str]] = []
        nums = self.keys if self.keys is not None else range(len(self.code))
        for num in nums:
            piece = self.piece(num)
            if piece is None:
                continue
            why = None if out is None else piece.problem(out)
            if why is not None:
                untrusted.append((num, why))
                continue
            parts.append(piece)
        parts.sort()
        return Claims(self.header, parts, untrusted)


_ASK: Final = object()
