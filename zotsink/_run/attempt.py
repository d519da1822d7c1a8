"""One attempt of a task: its life in named phases, its output, the facts of its end row.

An attempt runs a command (a child process with its stdout and stderr on pipes) or a call
in a function worker. Its life, as :attr:`Attempt.phase` says it:

- ``running``: started; a :attr:`~Attempt.deadline` (``--task-timeout``, or ``--grace``
  after a stop) is when it gets SIGTERM;
- ``terminating``: SIGTERM sent; the deadline is when SIGKILL follows;
- ``killed``: SIGKILL sent, its exit awaited;
- ``exited``: the process exited (or the call returned, or its worker died); pipes may
  still be open, held by something it started: the deadline is how long they may linger;
- ``ended``: exited and every pipe read to its end: it waits for its group's commit.

What to do next is a decision (:meth:`Attempt.step`); signals, reads and polls are the
pool's. The output: stdout lines are records, held in one piece until the attempt ends
(they reach OUT together or not at all); stderr lines go to the log. Both are cut by the
one pipe line cutter (:class:`~zotsink._core.pump.LineCutter`). The records are encoded
against the run's one template (:class:`Output`): the first ``key:value`` line of any task
names the columns for all.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Mapping
from typing import IO, Any, Final, Literal

from .._core.blocks import BlockEncoder, Held, LongLine
from .._core.outlet import Outlet
from .._core.pump import LineCutter
from .._core.records import MAX_LINE, Encoder
from ..errors import HoldError, RecordError, ZotsinkError
from .frames import LINES, PIECE
from .logline import LogLines
from .tasks import Task
from .worker import Worker

__all__ = ["KILL_AFTER", "PIPE_LINGER", "Attempt", "Output", "Phase", "Step", "signame"]

#: Seconds between the SIGTERM and the SIGKILL of a task that has to go.
KILL_AFTER: Final = 5.0
#: Seconds a task's pipes may stay open after it exited (a background child holds them).
PIPE_LINGER: Final = 2.0
_READ_SIZE: Final = 1 << 16

#: Where an attempt stands (see the module's docstring).
Phase = Literal["running", "terminating", "killed", "exited", "ended"]
#: What the pool does next for an attempt: end it (its commit), take what its lingering
#: pipes hold, send SIGTERM, send SIGKILL; None: nothing yet.
Step = Literal["end", "drain", "term", "kill", None]


class Output:
    """What every attempt of a run writes to: OUT (through the run's one template of
    columns), OUT's rejects file, and the log."""

    def __init__(self, template: Encoder, out: Outlet, log: Outlet, kv: str | None) -> None:
        self.template = template
        self.out = out
        self.log = log
        self.kv = kv
        # each attempt's last stderr line that is not blank, until its end is told: what
        # its failure is grouped by (see .halting)
        self.last_lines: dict[tuple[int, int], bytes] = {}

    def encoder(self, env: Mapping[str, str]) -> BlockEncoder:
        """An attempt's own encoder: its task number and attempt in its stamps."""
        tpl = self.template
        # like(): OUT's header as the template found it, so that each task's encoder can
        # refuse a key:value first line of a new OUT and drop a repeated header. An OUT that
        # was there before the run may begin with a piece no row claims (an interrupted
        # attempt's records, kept): its first line is a record then, not a header, and a
        # task's line equal to it is kept. Only a header the run knows is dropped again:
        # the columns given, or the first line kept for a new OUT.
        enc = tpl.like(env)
        if not enc.out_new:
            enc.out_header = None
        return BlockEncoder(enc, self.kv, count=True)

    def encode(self, enc: BlockEncoder, block: bytes) -> tuple[bytes | memoryview, int]:
        """Lines of records, encoded with the run's columns (see :meth:`_columns`)."""
        self._columns_in(enc)
        data, n = enc.encode(block)
        self._columns_out(enc)
        return data, n

    def encode_record(self, enc: BlockEncoder, value: Any) -> bytes:
        """One record by column name (a function's mapping); raises RecordError."""
        self._columns_in(enc)
        line = enc.enc.encode(value)
        self._columns_out(enc)
        return line

    def _columns_in(self, enc: BlockEncoder) -> None:
        # another task's first key:value line named the columns: this one uses them too
        tpl = self.template
        if enc.enc.columns is None and tpl.columns is not None:
            enc.enc.set_columns(tpl.columns)

    def _columns_out(self, enc: BlockEncoder) -> None:
        # this task named them first: every later task, and OUT's header, follow
        tpl = self.template
        if tpl.columns is None and enc.enc.columns is not None:
            tpl.set_columns(enc.enc.columns)
            self.out.follow(tpl)

    @property
    def log_path(self) -> str:
        return self.log.writer.path

    def header_size(self) -> int:
        """The bytes of OUT's header: what readers keep of OUT before the claimed pieces."""
        return len(self.out.writer.header or b"")

    def log_due_in(self, now: float) -> float | None:
        return self.log.due_in(now)

    def flush_log(self, now: float | None = None) -> None:
        """The log's batch appended (when due at ``now``; at once without it)."""
        if now is None or self.log.due(now):
            self.log.flush()

    def close(self) -> None:
        self.out.close()
        self.log.close()

    def long_line(self, where: str) -> LongLine:
        return LongLine(self.out.writer.path, where)

    def log_lines(self, num: int, attempt: int) -> LogLines:
        return LogLines(self.log, num, attempt, self.last_lines if num else None)


class _Pipe:
    __slots__ = ("cutter", "file", "sink")

    def __init__(self, file: IO[bytes], sink: Any) -> None:
        # the file object owns the descriptor: closed through it alone (a descriptor closed
        # by number and then again by its file object could by then be another file's)
        self.file = file
        self.cutter = LineCutter(MAX_LINE)
        self.sink = sink


class Attempt:
    """One attempt of a task: a command's process, or a call in a function worker."""

    def __init__(
        self, task: Task, attempt: int, output: Output, env: Mapping[str, str], now: float
    ) -> None:
        self.task = task
        self.attempt = attempt
        self.output = output
        self.encoder = output.encoder(env)  # encodes its records; batches nothing
        self.popen: subprocess.Popen[bytes] | None = None  # a command's process
        self.worker: Worker | None = None  # or the worker that calls the function
        self.code: int | None = None  # a function's exit: 0, 1 (it raised), a worker's death
        self.started = now
        self.phase: Phase = "running"
        self.deadline: float | None = None  # see Phase
        self.ended_by: str | None = None  # zotsink ended it: timeout, interrupted, killed
        self.pipes: dict[int, _Pipe] = {}  # open pipe fd -> its reading
        self.out_fd = -1
        self.long: LongLine | None = None  # a stdout line over the limit, kept aside
        self.records = 0
        # The attempt's records, held until it ends: they reach OUT in one piece, and its
        # end row names that piece (exactly-once: see commit.append_held).
        self.held = Held(out=output.out.writer.path)
        self.text: LineCutter | None = None  # a function's large text, arriving in pieces
        self.out_ino = -1  # the file its piece went to (see commit.append_held)
        self.notes: list[str] = []
        self.lost: str | None = None  # why its output could not be held: it fails
        self.reap_wait = 0.0005  # seconds until the next look for its exit

    # -- the process -----------------------------------------------------------------------
    def watch(self, popen: subprocess.Popen[bytes]) -> list[int]:
        """Its process started: its stdout and stderr pipes, to poll."""
        assert popen.stdout is not None and popen.stderr is not None
        self.popen = popen
        self.out_fd = popen.stdout.fileno()
        err = self.output.log_lines(self.task.num, self.attempt)
        self.pipes = {
            self.out_fd: _Pipe(popen.stdout, self),
            popen.stderr.fileno(): _Pipe(popen.stderr, err),
        }
        return list(self.pipes)

    @property
    def group(self) -> subprocess.Popen[bytes] | None:
        """The process whose group signals reach: the command's, or the worker's."""
        return self.worker.popen if self.worker is not None else self.popen

    @property
    def returncode(self) -> int:
        if self.worker is not None or self.popen is None:
            return 127 if self.code is None else self.code
        return self.popen.returncode if self.popen.returncode is not None else 127

    @property
    def status(self) -> str:
        """The status of an attempt that ended, as its process (or call) ended."""
        if self.ended_by is not None:
            return self.ended_by  # zotsink ended it: timeout, interrupted
        if self.lost is not None:
            return "failed"  # its records could not all be held: none may be claimed
        code = self.returncode
        if code == 0:
            return "ok"
        return "killed" if code < 0 else "failed"

    # -- its phases --------------------------------------------------------------------------
    def poll(self, now: float) -> None:
        """Look whether a command's process exited."""
        running = self.phase not in ("exited", "ended")
        if running and self.popen is not None and self.popen.poll() is not None:
            self.exited(now)

    def exited(self, now: float, code: int | None = None) -> None:
        """Its process exited (its call returned: ``code``); its pipes may linger a while."""
        if code is not None:
            self.code = code
        self.phase = "exited"
        self.deadline = now + PIPE_LINGER

    def limit(self, at: float) -> None:
        """SIGTERM is due at ``at`` (``--task-timeout``)."""
        self.deadline = at

    def stop(self, now: float, grace: float) -> None:
        """The run stops: what it does ends ``interrupted``, SIGTERM after ``grace``."""
        self.ended_by = "interrupted"
        if self.phase == "running":
            self.deadline = now + grace

    def terminated(self, now: float) -> None:
        """SIGTERM sent (at its deadline): SIGKILL follows."""
        if self.ended_by is None:
            self.ended_by = "timeout"
        self.phase = "terminating"
        self.deadline = now + KILL_AFTER

    def killed(self) -> None:
        """SIGKILL sent."""
        self.phase = "killed"
        self.deadline = None

    def step(self, now: float) -> Step:
        """What is to be done for it now."""
        if self.phase == "exited":
            if not self.pipes:
                self.phase = "ended"
                return "end"
            return "drain" if self.deadline is not None and now >= self.deadline else None
        if self.deadline is None or now < self.deadline:
            return None
        if self.phase == "running":
            return "term"
        return "kill" if self.phase == "terminating" else None

    def wait(self, now: float) -> float | None:
        """Seconds until it should be looked at again (None: when its pipes say so)."""
        waits = []
        if self.deadline is not None:
            waits.append(self.deadline - now)
        if self.worker is None:
            if self.phase == "exited" or not self.pipes:
                # Exited, or its pipes closed: the exit follows at once, so look again soon,
                # then less often (a fixed wait would be added to every quick task).
                waits.append(self.reap_wait)
                self.reap_wait = min(self.reap_wait * 2, 0.05)
            else:
                waits.append(1.0)  # look for a task that exited behind an open pipe
        # a function's result and its worker's end come through the pipes polled
        return min(waits) if waits else None

    # -- its output --------------------------------------------------------------------------
    def read(self, fd: int) -> bool:
        """Read what pipe ``fd`` holds; whether it ended (and is closed). Raises
        BlockingIOError when a pipe that does not block holds nothing."""
        pipe = self.pipes[fd]
        try:
            chunk = os.read(fd, _READ_SIZE)
        except BlockingIOError:
            raise
        except OSError:
            chunk = b""
        if chunk:
            pipe.cutter.feed(chunk, pipe.sink)
            return False
        added = pipe.cutter.finish(pipe.sink, "; the output ended without a newline")
        if added and fd == self.out_fd:
            self.notes.append("no newline at the end of the output: one was added")
        self._close(fd)
        return True

    def drain(self, fd: int) -> None:
        """Take what a lingering pipe holds now, and close it."""
        os.set_blocking(fd, False)
        try:
            while not self.read(fd):
                pass
        except BlockingIOError:
            pipe = self.pipes[fd]
            pipe.cutter.finish(pipe.sink, "; cut off where the task exited")
            self._close(fd)

    def _close(self, fd: int) -> None:
        self.pipes.pop(fd).file.close()

    # stdout: a LineSink of records
    def lines(self, block: bytes) -> None:
        """Lines of records (a command's stdout, a function's returned text), held."""
        data, n = self.output.encode(self.encoder, block)
        self.records += n
        self._hold(data, n)

    def _hold(self, data: bytes | memoryview, n: int) -> None:
        """Hold records; when no place can take them (HoldError) the attempt fails, with
        the error as its note, and its further output is dropped: the run goes on."""
        if self.lost is not None:
            return
        try:
            self.held.add(data, n)
        except HoldError as e:
            self.lost = str(e)
            self.notes.append(self.lost)

    def long_begin(self, head: bytes) -> None:
        # never held whole: a line over the limit goes to a temporary file for the rejects
        self.long = self.output.long_line(f"task {self.task.num} {self.encoder.take_line()}")
        self.long_more(head)

    def long_more(self, piece: bytes) -> None:
        assert self.long is not None
        if self.lost is not None:
            return
        try:
            self.long.add(piece)
        except HoldError as e:
            self.lost = str(e)
            self.notes.append(self.lost)

    def long_end(self, size: int, how: str) -> None:
        long, self.long = self.long, None
        assert long is not None
        self.encoder.skip(long.size + 1)
        out = self.output.out
        if self.text is not None:  # a function's text: its line's length is known, as before
            why = f"line of {size} bytes is over the {MAX_LINE}-byte limit"
        else:
            why = f"over the {MAX_LINE}-byte line limit{how}"
        out.reject_long(long, why)
        self.notes.append(f"a line over the limit refused, see {out.rejects_file}")

    def item(self, kind: int, value: Any) -> None:
        """One item of a function's result: text of lines (or a piece of it that the next
        item goes on with), or one record by column name."""
        if kind == PIECE or (kind == LINES and self.text is not None):
            raw = value.encode("utf-8", "surrogateescape") if isinstance(value, str) else value
            if self.text is None:
                self.text = LineCutter(MAX_LINE)  # a large text, cut as a command's stdout
            self.text.feed(raw, self)
            if kind == LINES:  # its last piece
                self.text.finish(self, "")
                self.text = None
            return
        if kind == LINES:
            raw = value.encode("utf-8", "surrogateescape") if isinstance(value, str) else value
            if not raw:
                return
            if not raw.endswith(b"\n"):
                raw += b"\n"
            self.lines(raw)
            return
        try:
            line = self.output.encode_record(self.encoder, value)
        except (RecordError, ZotsinkError) as e:
            where = self.encoder.take_line()
            self.encoder.rejects.append((f"{where}: {e}", repr(value).encode()))
            return
        self.encoder.line_no += 1
        self.records += 1
        self._hold(line, 1)

    def drop_records(self) -> None:
        """Forget the records held (a function's result whose call then raised)."""
        self.held.close()
        self.held = Held(out=self.output.out.writer.path)
        self.records = 0
        self.text = None

    # -- its end -----------------------------------------------------------------------------
    @property
    def size(self) -> int:
        """Bytes of records it holds."""
        return self.held.size

    def refuse(self) -> None:
        """Its refused lines to OUT's rejects file, with a note."""
        rejects = self.encoder.rejects
        if rejects:
            out = self.output.out
            out.reject([(f"task {self.task.num} {why}", ln) for why, ln in rejects])
            self.notes.append(f"{len(rejects)} lines refused, see {out.rejects_file}")
        self.output.out.repeated_headers += self.encoder.repeats

    def end_fields(self, status: str, at: int | None, header: int, now: float) -> dict[str, Any]:
        """The fields of its end row: ``status``, and ``at`` where its records begin in OUT
        (None: they are not in OUT) after a header of ``header`` bytes."""
        code = self.returncode
        return {
            "status": status,
            "exit": code if code >= 0 else "",
            "signal": signame(-code) if code < 0 else "",
            "seconds": f"{now - self.started:.3f}",
            "records": self.records,
            "bytes": self.size,
            "note": "; ".join(self.notes),
            "out_offset": "" if at is None else at,
            "out_header": "" if at is None else header,
            # what a reader checks the piece by: the file it went to, its checksum
            "out_ino": "" if at is None or self.out_ino < 0 else self.out_ino,
            "out_crc": "" if at is None else f"{self.held.crc:08x}",
        }

    def close(self) -> None:
        """Free what it holds (after its commit, or after an error)."""
        self.held.close()
        for pipe in self.pipes.values():
            pipe.file.close()
        self.pipes.clear()


def signame(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return str(signum)
