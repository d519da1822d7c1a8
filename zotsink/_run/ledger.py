"""The ledger as ``zotsink run`` writes it: rows appended under the lock, fsynced, and the
claim of tasks in the same lock hold, reading the ledger's last row, not its history.

The format is :mod:`zotsink._ledger.format`, what rows mean :mod:`zotsink._ledger.view`. A
:class:`Ledger` is one run's: it names the run (a ``run`` row: its host, the boot and pid
namespace of its pid table, its pid and start time, its job and array element, its
settings when they are new), folds a snapshot when the run begins (:meth:`Ledger.open`:
what is recorded, the control rows, every task's history), and then writes:

- claims (:meth:`Ledger.claim`): under the exclusive lock, the state the last row carries
  says where the cursor is; tasks claimed by name (a chunk, retries, tasks a look found
  free) are checked against the rows written since this run last read them, which it reads
  only when a row claimed or freed tasks by name, or a control row came, since (the
  state's counters say so); then the cursor's next tasks are read from the task list (by
  offset; :func:`~zotsink._run.tasks.read_ahead`) and one ``claim`` row names them all;
- the rows that wait for the next append (:meth:`Ledger.put`): ``begin`` rows (a command's
  at once: a task whose process outlives its run must be known by its own process), ``end``
  rows (one per group commit, naming where the records went), ``release`` rows (claimed
  tasks given back), ``worker`` rows;
- looks (:meth:`Ledger.look`): the rows other runs appended since, under a shared lock,
  folded into the view, for a run that waits on others or follows its list;
- relay checks (:meth:`Ledger.relay`, ``run --relay``): under the exclusive lock, the rows
  other runs wrote since folded (this run's own relay rows among them), the chain's rule
  says which ``relay`` rows to append (:func:`~zotsink._run.relay.decide`).

Every row carries the ledger's state after it: a writer computes it from the last row's,
under the lock, so the rows are stamped only there (:meth:`Ledger._stamp`).

A format 1 ledger is migrated to format 2 before the first row is written
(:mod:`zotsink._run.migrate`); a ledger of a newer format is refused.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from .._core.fileio import open_regular
from .._core.outlet import Outcome, Outlet
from .._core.snapshot import snapshot
from .._core.stamp import stamp_values
from .._core.stop import Stopper
from .._core.writer import Writer, first_line
from .._ledger.format import (
    FORMAT,
    INITIAL,
    Block,
    EndItem,
    State,
    advance,
    begin_items_text,
    blocks_text,
    end_items_text,
    header_format,
    header_line,
    line_crc,
    make_row,
    notes_text,
    tasks_text,
)
from .._ledger.read import Snapshot, tail_state, too_new
from .._ledger.relay import relay_fields
from .._ledger.view import LedgerView
from ..errors import UsageError, ZotsinkError
from .alive import element_key, host_identity, proc_start, qualified_job, run_element
from .attempt import End
from .events import Key
from .queue import Candidate
from .tasks import Cursor, Task, read_ahead

__all__ = ["ClaimResult", "Ledger", "append_stamped", "header_of", "write_control"]


class ClaimResult(NamedTuple):
    """What a claim wrote: the tasks and their attempts, those asked by name that another
    run claimed since, whether the cursor has no more for now, lines passed by (a NUL
    byte), and whether a ``stop`` row came for this run."""

    tasks: list[tuple[Task, int]]
    dropped: list[Candidate]
    drained: bool
    passed: list[int]
    stopped: bool
    rest: list[Candidate]  # asked by name, still free, beyond the ``n`` claimed


class _Want(NamedTuple):
    n: int
    named: Sequence[Candidate]
    cursor: bool
    closed_lines: int | None


def header_of(path: str) -> bytes:
    """The first line of the ledger at ``path`` (kept whatever release of this format wrote
    it), or a new ledger's; a ledger of a newer format is refused."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return header_line()
    try:
        line = first_line(fd)
    except OSError:
        line = b""
    finally:
        os.close(fd)
    found = header_format(line) if line else None
    if found is not None and found[0] == FORMAT:
        return line
    if found is not None and found[0] > FORMAT:
        raise too_new(path, *found)
    # empty, format 1 (migrated in open(), after which it is this release's), or no
    # ledger (the reader's refusal says so)
    return header_line()


class Ledger:
    """One run's ledger: its rows, its claims, its looks (see the module's docstring)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        tasks: str,
        lock: str = "auto",
        timeout: float = 600.0,
        env: Mapping[str, str] | None = None,
        stopper: Stopper | None = None,
    ) -> None:
        env = os.environ if env is None else env
        self.path = os.fspath(path)
        self.tasks = tasks
        self.timeout = timeout
        self._lock = lock
        self._stopper = stopper
        self.run_id = os.urandom(4).hex()
        job, element = stamp_values(("job", "task"), env)
        host, hostid = host_identity()
        pid = os.getpid()
        self.start = proc_start(pid) or ""
        element = run_element(element, env)
        self._me = [host, hostid, str(pid), self.start, qualified_job(job, env), element]
        # the element as the chain of a relay names it (any start of it)
        self.job_key = element_key(qualified_job(job, env), element)
        self._settings = ""  # this run's settings as JSON, when they are new ("": recorded)
        self._mine: dict[str, str] | None = None
        self._named = False  # the run row is written
        # A side file: never through a link, only ever this user's (a ledger planted with
        # forged ok rows would make every task be skipped). fsync always: a claim or a
        # begin row must be on disk before its task runs.
        self.writer = Writer(
            self.path,
            lock=lock,
            sync="fsync",
            header=header_of(self.path),
            side_file=True,
            prepare=self._hook,
        )
        self.outlet = Outlet(self.writer, timeout=timeout, stopper=stopper)
        # this run's knowledge of every task, lean: the parts of OUT ok ends claim are read
        # anew only when OUT no longer holds them all (whole_view)
        self.view = LedgerView(lean=True)
        self._seen = 0  # ledger bytes folded into the view: rows past it are news
        self._began = 0  # the ledger's size when this run began (a stop after it is for it)
        self._known = (-1, -1)  # (xgen, ctl) the view is up to date with
        self._pending: list[tuple[str, list[str]]] = []  # kind, fields
        self._want: _Want | None = None
        self._relay: Callable[[LedgerView, State], list[list[str]]] | None = None
        self._stop_since = -1  # a stop row at or after it is for this run (-1: _began)
        self._result: ClaimResult | None = None
        self._conflict: str | None = None
        self._cursor = INITIAL

    # -- beginning --------------------------------------------------------------------------
    def open(self, judge: Any = None) -> LedgerView:
        """Fold a snapshot of the ledger into this run's view (a format 1 ledger is migrated
        first); what the run begins with: the recorded settings, the control rows, every
        task's history."""
        snap = Snapshot(self.path, lock=self._lock, timeout=self.timeout, stopper=self._stopper)
        try:
            if snap.exists and snap.format == 1:
                snap.close()
                from .migrate import migrate

                migrate(self.path, lock=self._lock, timeout=self.timeout, judge=judge)
                self.writer.set_header(header_of(self.path))
                snap = Snapshot(
                    self.path, lock=self._lock, timeout=self.timeout, stopper=self._stopper
                )
            last = INITIAL
            for _at, row in self._rows(snap):
                last = row.state
            self._seen = self._began = snap.end if snap.exists else 0
            self._known = (last.xgen, last.ctl)
            self._cursor = last
        finally:
            snap.close()
        return self.view

    def _rows(self, snap: Snapshot, start: int = 0) -> Any:
        """Rows of a snapshot, folded into the view as they pass (the run's own rows too)."""
        feed = self.view.feed
        for at, row in snap.rows(start):
            feed(((at, row),))
            if row.kind == "run" and row.run != self.run_id and row.fields["settings"]:
                self._news_settings(row.fields["settings"], at)
            yield at, row

    def record(self, settings: Mapping[str, str], recorded: Mapping[str, str] | None) -> None:
        """This run's settings: recorded with its first row when they differ from the
        ledger's (``recorded``). A run row of other settings that another run writes
        meanwhile makes the next claim raise :class:`UsageError`."""
        self._mine = dict(settings)
        if dict(recorded or {}) != self._mine:
            self._settings = json.dumps(self._mine, ensure_ascii=True, sort_keys=True)

    def _news_settings(self, text: str, at: int) -> None:
        # a run that began under its settings (its run row written) is not stopped halfway
        # by another run recording others from now on (--new-settings)
        if self._mine is None or at < self._began or self._named:
            return
        from .settings import check_news_settings

        conflict, _same = check_news_settings(self.path, text, self._mine)
        if conflict is not None:
            self._conflict = conflict

    @property
    def stopped(self) -> bool:
        """Whether ``zotsink stop`` told this run to claim nothing more."""
        since = self._began if self._stop_since < 0 else min(self._stop_since, self._began)
        return self.view.control.stopped(since)

    def stopped_since(self, offset: int) -> None:
        """A stop row at or after ``offset`` (before the run began) is for this run too: a
        successor a chain decided there, queued when the stop came, ends with the chain."""
        self._stop_since = offset

    def join(self, note: str) -> None:
        """This run is an element of its list's chain (``run --relay``): a ``join`` row goes
        with its first append (outside a job, where nobody can ask after it, none)."""
        if self.job_key:
            self._pending.append(("relay", relay_fields("join", job=self.job_key, note=note)))

    def refused(self, message: str) -> None:
        """This run was refused before it began (its settings): a ``refused`` row says so,
        appended alone (with the run row that names it)."""
        self._pending.append(("relay", relay_fields("refused", job=self.job_key, note=message)))
        self._settings = ""  # refused settings are not recorded
        self.flush()

    def relay(self, decide: Callable[[LedgerView, State], list[list[str]]]) -> None:
        """Under the ledger's exclusive lock, every row appended since folded: ``decide``
        (fed this run's view and the last row's state) gives the ``relay`` rows to append,
        with the rows waiting, in one fsynced append. Raises like :meth:`flush`."""
        self._relay = decide
        try:
            self.outlet.write_or_raise(b"")
        finally:
            self._relay = None
        self.committed()

    # -- rows ---------------------------------------------------------------------------------
    def put(
        self,
        *,
        begins: Sequence[tuple[Key, int, str]] = (),
        ends: Sequence[tuple[Any, Sequence[End]]] = (),
        releases: Sequence[Key] = (),
        workers: Sequence[tuple[int, str]] = (),
        relays: Sequence[Sequence[str]] = (),
    ) -> None:
        """Rows to write with the next append: begins, end groups (a commit's blocks and
        its ends), releases, workers, relay rows (a submission's outcome)."""
        pending = self._pending
        for fields in relays:
            pending.append(("relay", list(fields)))
        for pid, start in workers:
            pending.append(("worker", [f"{pid}:{start}"]))
        if begins:
            text = begin_items_text((k[0], k[1], pid, start) for k, pid, start in begins)
            pending.append(("begin", [text]))
        for committed, group in ends:
            if group:
                pending.append(("end", _end_fields(committed, group)))
        if releases:
            pending.append(("release", [tasks_text(sorted(releases))]))

    @property
    def pending(self) -> bool:
        return bool(self._pending)

    def flush(self, *, spill: bool = False) -> ZotsinkError | None:
        """Append the rows waiting (raises LockTimeout/LockError/WriteError). With
        ``spill`` (a run's last append) rows that cannot be written are saved to a spill
        file of the ledger instead, stamped with no state: ``zotsink recover LEDGER``
        stamps them anew under the lock and appends them. The error, then."""
        if not self._pending:
            return None  # a run row alone says nothing: a run that claimed nothing is no news
        try:
            self.outlet.write_or_raise(b"")
        except ZotsinkError as e:
            if not spill or not self._pending:
                raise
            now = time.time()
            rows = [] if self._named else [self._run_row(now, INITIAL)]
            rows += [make_row(k, now, self.run_id, f, INITIAL) for k, f in self._pending]
            err = self.outlet.saved(b"".join(rows), len(rows), e)
            self._pending.clear()
            return err
        self.committed()
        return None

    def _run_row(self, now: float, state: State) -> bytes:
        return make_row("run", now, self.run_id, [*self._me, self._settings], state)

    def claim(
        self, n: int, named: Sequence[Candidate], *, cursor: bool, closed_lines: int | None
    ) -> ClaimResult:
        """Claim up to ``n`` tasks, those ``named`` first (each dropped when another run
        claimed it since: its next attempt is not the one named; those free beyond ``n``
        given back as ``rest``), then the cursor's, with
        the rows waiting, in one locked, fsynced append (see the module's docstring).
        Raises like :meth:`flush` (nothing claimed then), and :class:`UsageError` when
        another run recorded other settings meanwhile."""
        self._want = _Want(n, named, cursor, closed_lines)
        self._result = None
        try:
            self.outlet.write_or_raise(b"")
        finally:
            self._want = None
        self.committed()
        if self._conflict is not None:
            raise UsageError(self._conflict, path=self.path)
        result = self._result
        assert result is not None
        return result

    # -- under the lock -------------------------------------------------------------------------
    def _hook(self, fd: int, st: os.stat_result, data: bytes) -> bytes:
        """The writer's hook, under the ledger's exclusive lock: the state the last row
        carries; the news, when counters moved and a claim needs them; the rows, stamped."""
        size = st.st_size
        coherent = self.writer.coherent
        state = tail_state(self.path, fd, size, settle=True, coherent=coherent) if size else INITIAL
        want, relay = self._want, self._relay
        stale = (state.xgen, state.ctl) != self._known
        # a claim by number must see claims by the cursor since (they move only its place):
        # one that passed a task this run names has taken it
        passed = want is not None and any(
            self._cursor.next <= c.task.num < state.next for c in want.named
        )
        if (stale and relay is not None) or ((stale or passed) and want is not None):
            self._news(fd, size)
            self._known = (state.xgen, state.ctl)
            stale = False
        rows: list[bytes] = []
        now = time.time()
        if not self._named:
            if self._settings and self.view.settings == self._mine:
                self._settings = ""  # another run recorded these very settings meanwhile
            state = advance(state, "run", [self._settings])
            rows.append(self._run_row(now, state))
        for kind, fields in self._pending:
            state = advance(state, kind, fields)
            rows.append(make_row(kind, now, self.run_id, fields, state))
        if want is not None:
            state = self._claim_row(fd, state, want, now, rows)
        chained = any(kind == "relay" for kind, _f in self._pending)
        if relay is not None:
            for fields in relay(self.view, state):
                state = advance(state, "relay", fields)
                rows.append(make_row("relay", now, self.run_id, fields, state))
                chained = True
        # this run's own relay rows are read back with the next news (the chain it counts
        # by must hold its own decisions): its view is not up to date with them
        if not stale and not chained:
            self._known = (state.xgen, state.ctl)
        self._cursor = state
        return b"".join(rows)

    def _news(self, fd: int, size: int) -> None:
        """Fold the rows appended since this run last read (under the lock: all of them)."""
        snap = Snapshot.under_lock(self.path, fd, size, self._seen)
        for _ in self._rows(snap, self._seen):
            pass
        self._seen = max(self._seen, snap.end)

    def _claim_row(
        self, fd: int, state: State, want: _Want, now: float, rows: list[bytes]
    ) -> State:
        view = self.view
        stopped = self.stopped
        tasks: list[tuple[Task, int, bool]] = []
        dropped: list[Candidate] = []
        rest: list[Candidate] = []
        passed: list[int] = []
        drained = not want.cursor
        if stopped or self._conflict is not None:
            rest.extend(want.named)  # nothing claimed: none of them was another run's
        else:
            for c in want.named:
                num = c.task.num
                # claimed by another run since the look (or since this run's own attempt
                # before a retry, which this run's view need not hold): its attempt moved
                seen = view.attempt[num] if num < len(view.code) else 0
                if seen >= c.attempt:
                    dropped.append(c)  # another run claimed it since the look
                elif len(tasks) < want.n:
                    tasks.append((c.task, c.attempt, c.fresh))
                else:
                    rest.append(c)
            more = want.n - len(tasks)
            if want.cursor and more > 0:
                start = Cursor(state.next, state.at, state.span, state.span_crc)
                got, after, passed = read_ahead(
                    self.tasks,
                    start,
                    more,
                    skip=self.claimed_by_name,
                    closed_lines=want.closed_lines,
                    coherent=self.writer.coherent,
                )
                tasks.extend((t, 1, False) for t in got)
                drained = len(got) < more
                state = state._replace(
                    next=after.next, at=after.at, span=after.span, span_crc=after.span_crc
                )
        self._result = ClaimResult(
            [(t, a) for t, a, _f in tasks], dropped, drained, passed, stopped, rest
        )
        if not tasks:
            return state
        if any(a != 1 or f for _t, a, f in tasks) or want.named:
            state = advance(state, "claim", {})  # by name: the cursor readers read it
        items = tasks_text((t.num, a, f) for t, a, f in tasks)
        crc = line_crc(t.line for t, _a, _f in tasks)
        rows.append(make_row("claim", now, self.run_id, [items, f"{crc:x}"], state))
        return state

    def claimed_by_name(self, num: int) -> bool:
        """Whether a line the cursor reaches was claimed by name since (its history lives
        in the view: a chunk's, a migrated ledger's)."""
        view = self.view
        return num < len(view.attempt) and view.attempt[num] > 0

    def committed(self) -> None:
        """The append succeeded: the rows are written; the run row once."""
        self._pending.clear()
        self._named = True

    # -- looks ----------------------------------------------------------------------------------
    def whole_view(self) -> LedgerView:
        """Every row read anew, under a shared lock, into a view that keeps the part of OUT
        each ok end claims: for the rare look at an OUT renamed, replaced, emptied or cut
        since (its ok tasks whose records are gone run again). Raises like :meth:`look`."""
        view = LedgerView(pieces=True)
        if os.path.exists(self.path):
            with Snapshot(
                self.path, lock=self._lock, timeout=self.timeout, stopper=self._stopper
            ) as snap:
                view.feed(snap.rows())
        return view

    def look(self) -> LedgerView:
        """Fold the rows other runs appended since this run last read, from a snapshot
        under a shared lock (a run that waits on others takes no exclusive lock to look)."""
        if not os.path.exists(self.path):
            return self.view
        fd, size = snapshot(self.path, lock=self._lock, timeout=self.timeout, stopper=self._stopper)
        try:
            snap = Snapshot.under_lock(self.path, fd, size, self._seen)
            last = None
            for _at, row in self._rows(snap, self._seen):
                last = row.state
            self._seen = max(self._seen, snap.end)
            if last is not None:
                self._known = (last.xgen, last.ctl)
                self._cursor = last
        finally:
            os.close(fd)
        return self.view

    def peek(self) -> State | None:
        """The state the ledger's last whole row carries now, read from its end with no
        lock and no news folded (a hint: a row being written is passed over for the one
        before it); None when the ledger cannot be read as this run's (then nothing is
        concluded from it)."""
        try:
            fd, st = open_regular(self.path)
        except OSError:
            return None
        if fd < 0:
            return None  # not a regular file now: the next claim or look says what it is
        try:
            return tail_state(self.path, fd, st.st_size, settle=False, coherent=False)
        except (OSError, ZotsinkError):
            return None
        finally:
            os.close(fd)

    @property
    def cursor(self) -> State:
        """The ledger's state as this run last saw it."""
        return self._cursor

    def outcome(self) -> Outcome:
        return self.outlet.outcome()

    def close(self) -> None:
        self.outlet.close()


def _end_fields(committed: Any, group: Sequence[End]) -> list[str]:
    """An ``end`` row's fields: OUT's file and header, the blocks, the items, the notes."""
    items: list[EndItem] = []
    notes: dict[str, str] = {}
    for e in group:
        num, attempt = e.key
        u = e.usage
        cpu = None
        if u.user_s is not None and u.sys_s is not None:
            cpu = (round(u.user_s * 1000), round(u.sys_s * 1000))
        items.append(
            EndItem(
                num,
                attempt,
                e.status,
                e.code if e.status != "ok" else "0",
                round(e.seconds * 1e6),
                None if e.wait is None else round(e.wait * 1000),
                e.records,
                e.size,
                e.in_out,
                u.peak_kib,
                cpu,
            )
        )
        if e.note:
            notes[f"{num}.{attempt}"] = e.note
    blocks: Sequence[Block] = getattr(committed, "blocks", ())
    ino = getattr(committed, "ino", -1)
    header = getattr(committed, "header", 0)
    return [
        f"{'' if ino < 0 else ino}:{header}",
        blocks_text(blocks),
        end_items_text(items),
        notes_text(notes),
    ]


def write_control(
    path: str,
    kind: str,
    *,
    lines: int | None = None,
    runs: Sequence[str] = (),
    note: str = "",
    lock: str = "auto",
    timeout: float = 600.0,
) -> None:
    """Append a control row (``close`` with the task list's ``lines``, ``open``, ``stop``,
    ``gone`` naming ``runs`` a user declared gone) to the ledger at ``path`` (made when
    missing), under its lock, fsynced, stamped with the state after the last row (its
    ``ctl`` counter moved: every run notices it at its next claim). Raises
    LockTimeout/LockError/WriteError."""
    assert kind in ("close", "open", "stop", "gone")
    lines_field = "" if lines is None else str(lines)
    fields = [",".join(runs), note] if kind == "gone" else [lines_field]

    def stamp(state: State, now: float) -> bytes:
        return make_row(kind, now, "-", fields, advance(state, kind, fields))

    append_stamped(path, stamp, lock=lock, timeout=timeout)


def append_stamped(
    path: str,
    rows: Callable[[State, float], bytes],
    *,
    lock: str = "auto",
    timeout: float = 600.0,
    read: Callable[[int, int], None] | None = None,
) -> None:
    """Append to the ledger at ``path`` (made when missing) the rows ``rows(state, now)``
    makes, under its lock, fsynced: ``state`` is the one the last row carries, read there,
    so that the rows are stamped in order with every other writer's. ``read(fd, size)``,
    called under the lock first, may read the ledger's rows (open at ``fd``, of ``size``
    bytes) that ``rows`` decides on. No rows: nothing is written. Raises
    LockTimeout/LockError/WriteError."""

    def stamp(fd: int, st: os.stat_result, _data: bytes) -> bytes:
        size = st.st_size
        coherent = writer.coherent
        state = tail_state(path, fd, size, settle=True, coherent=coherent) if size else INITIAL
        if read is not None:
            read(fd, size)
        return rows(state, time.time())

    writer = Writer(
        path, lock=lock, sync="fsync", header=header_of(path), side_file=True, prepare=stamp
    )
    outlet = Outlet(writer, timeout=timeout)
    try:
        outlet.write_or_raise(b"")
    finally:
        outlet.close()
