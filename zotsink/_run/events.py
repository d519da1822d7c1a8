"""What a run's decisions are fed and what they decide: small typed records.

:class:`~zotsink._run.state.RunState` takes a turn's events (what happened: a process
started or exited, a call returned, a claim or a commit was made, a look found news, a stop
signal came) and returns instructions (what to do: claim, start, signal, commit, write
rows, release, look, spawn or hold workers, stop the loop). The poll loop
(:mod:`zotsink._run.pool`) turns instructions into calls, and what those calls find into
the next events. Neither side reads the other's fields: these records are all they share.

A task's attempt is named by its :data:`Key`, ``(task number, attempt)``: every event and
instruction about an attempt carries it, and a backend's answer for an attempt it does not
hold under that key is refused.
"""

from __future__ import annotations

import signal
from collections.abc import Sequence
from typing import Any, Final, Literal, NamedTuple

from .._core.stop import STOP_SIGNALS
from .tasks import Task
from .usage import Usage

__all__ = [
    "SIGKILL",
    "SIGTERM",
    "STOPS",
    "Began",
    "Claim",
    "ClaimFailed",
    "Claimed",
    "Commit",
    "Committed",
    "Done",
    "Drain",
    "Drained",
    "EndStatus",
    "Exited",
    "HandedBack",
    "Hold",
    "Key",
    "Look",
    "Looked",
    "Placed",
    "RelayCheck",
    "RelayChecked",
    "Release",
    "Returned",
    "Rows",
    "Signal",
    "Signalled",
    "Spawn",
    "Start",
    "StartFailed",
    "Started",
    "StopWorkers",
    "Submit",
    "Submitted",
    "Turn",
    "Unloadable",
    "WorkerGone",
    "WorkerReady",
    "WorkerStarted",
]

#: The signals the decisions send, and those that stop a run (a task dead of one may have
#: died of the run's own stop: see ``STOP_SETTLE``), as numbers: the decisions import no
#: ``signal``.
SIGTERM: Final = int(signal.SIGTERM)
SIGKILL: Final = int(signal.SIGKILL)
STOPS: Final = frozenset(int(s) for s in STOP_SIGNALS)
#: An attempt: (task number, attempt number).
Key = tuple[int, int]
#: How an attempt ended, as its end row says.
EndStatus = Literal["ok", "failed", "killed", "timeout", "oom", "interrupted"]


# -- events ----------------------------------------------------------------------------------


class Turn(NamedTuple):
    """A turn of the loop begins: the time, and how many tasks could start now."""

    now: float
    free: int


class Signalled(NamedTuple):
    """Stop signals came (walltime warning, scancel, Ctrl-C): the latest, and how many so far."""

    signum: int
    count: int


class Started(NamedTuple):
    """A command's process started: its pid and start time (what its ``begin`` row names)."""

    key: Key
    pid: int
    start: str


class StartFailed(NamedTuple):
    """A command could not start; ``own``: the task's line is at fault (too long, a program
    named by it not there), not the command."""

    key: Key
    why: str
    own: bool


class Began(NamedTuple):
    """A function's call began in the worker ``pid`` (started at ``start``)."""

    key: Key
    pid: int
    start: str


class Exited(NamedTuple):
    """A command's process exited (code < 0: killed by signal -code); its pipes may still be
    open, held by something it started."""

    key: Key
    code: int
    usage: Usage


class Drained(NamedTuple):
    """Every pipe of an attempt was read to its end: ``size`` bytes of records are held;
    ``last``: its last stderr line that is not blank (what a failure is grouped by)."""

    key: Key
    size: int
    last: str = ""


class Returned(NamedTuple):
    """A function's call ended: 0 it returned, 1 it raised, else its worker's exit (< 0 a
    signal); ``seconds``: its own time, as the worker measured it (None: not told)."""

    key: Key
    code: int
    seconds: float | None
    usage: Usage
    size: int = 0  # bytes of records held
    why: str = ""  # what ended it, for its note (the exception's last line, a worker's death)
    last: str = ""  # its last printed line that is not blank
    died: bool = False  # its worker died under it (``code`` is the worker's exit)


class HandedBack(NamedTuple):
    """A held worker gave back tasks it was sent and did not begin."""

    keys: Sequence[Key]


class WorkerStarted(NamedTuple):
    pid: int
    start: str


class WorkerReady(NamedTuple):
    """A worker loaded the function."""

    pid: int


class WorkerGone(NamedTuple):
    """A worker ended; ``loaded``: it had loaded the function."""

    pid: int
    code: int
    loaded: bool


class Unloadable(NamedTuple):
    """The function cannot be loaded: the text says why."""

    text: str


class Claimed(NamedTuple):
    """A claim was written: the tasks with their attempts (``fresh``: the task's line is
    another than its earlier attempts ran), whether the list has no more tasks to claim by
    the cursor, and lines passed by (NUL bytes)."""

    tasks: Sequence[tuple[Task, int]]
    drained: bool
    passed: Sequence[int] = ()
    stopped: bool = False  # a stop row came for this run
    rest: Sequence[Any] = ()  # asked by name, still free, not claimed: candidates again


class ClaimFailed(NamedTuple):
    error: Exception


class Placed(NamedTuple):
    """Where an attempt's records went: ``offset`` in OUT (-1: not appended, in a spill
    file), how many and how large; lines refused (in OUT's rejects file); ``lost``: its
    output could not all be held (none of it may be claimed); ``notes`` of the output (a
    missing final newline, where refused lines went)."""

    key: Key
    offset: int
    records: int
    size: int
    refused: int = 0
    lost: bool = False
    notes: tuple[str, ...] = ()


class Committed(NamedTuple):
    """A group's records were appended (or saved in a side file): each attempt's place, in
    the order of OUT's blocks, and the blocks themselves (what the end row names)."""

    placed: Sequence[Placed]
    blocks: Sequence[Any] = ()  # zotsink._ledger.format.Block
    ino: int = -1  # the file OUT was
    header: int = 0  # OUT's header's length


class Looked(NamedTuple):
    """What a look at the ledger and the task list found: tasks free to claim (each with its
    next attempt and whether its line is another than its earlier attempts ran), how many
    other runs hold or run, whether the list is closed (and at how many lines), a stop,
    whether the list grew past the cursor, and an error (the lock, a stop)."""

    # task, attempt, fresh, taken over, failures so far: a Candidate's fields
    free: Sequence[tuple[Task, int, bool, bool, int]] = ()
    held: int = 0
    closed: bool = False
    stopped: bool = False
    grew: bool = False
    unknown: int = 0
    error: Exception | None = None


class RelayChecked(NamedTuple):
    """A relay check was made under the ledger's lock: its verdict
    (:class:`~zotsink._run.relay.Verdict`), or the error that kept its rows out."""

    verdict: Any = None
    error: Exception | None = None


class Submitted(NamedTuple):
    """A successor's submission ended: the job id (None: it failed, ``message`` says why)."""

    ticket: str
    job: str | None
    message: str = ""


# -- instructions -----------------------------------------------------------------------------


class Claim(NamedTuple):
    """Claim up to ``n`` tasks (with the rows waiting to be written), under the ledger's lock;
    ``explicit``: tasks to claim by name first (retries, tasks found free by a look)."""

    n: int
    explicit: Sequence[Any] = ()  # zotsink._run.queue.Candidate


class Start(NamedTuple):
    """Start these attempts (commands) or hand them to the workers (calls)."""

    attempts: Sequence[tuple[Task, int]]


class Signal(NamedTuple):
    """Send ``signum`` to an attempt's process group (a command) or to its worker."""

    key: Key
    signum: int


class Drain(NamedTuple):
    """Take what an attempt's lingering pipes hold, and close them."""

    key: Key


class Commit(NamedTuple):
    """Append these ended attempts' records to OUT and flush the log."""

    keys: Sequence[Key]


class Rows(NamedTuple):
    """Ledger rows to write: ``begins`` (key, pid, start), ``ends`` (an end's facts),
    ``releases`` (claimed, never begun: given back), ``workers`` (pid, start); ``now``:
    write them at once, not with the next claim."""

    begins: Sequence[tuple[Key, int, str]] = ()
    ends: Sequence[Any] = ()
    releases: Sequence[Key] = ()
    workers: Sequence[tuple[int, str]] = ()
    now: bool = False
    relays: Sequence[Sequence[str]] = ()  # relay rows' fields (a submission's outcome)


class Release(NamedTuple):
    """Tell the call backend to hand back what it holds and begin nothing more."""


class Look(NamedTuple):
    """Read the ledger's news and the task list's growth (under a shared lock); not
    ``deep``: only whether the list has lines past the ledger's cursor now (its last row,
    no lock, no news: a peek)."""

    deep: bool  # fold the news and judge other runs' tasks, not only the last row
    #: wait (a few seconds at most, not past a stop signal) for the scheduler's word about
    #: runs of other hosts, rather than take its last answer: the run ends on this look
    ask: bool = False


class Spawn(NamedTuple):
    """Start ``n`` function workers."""

    n: int


class Hold(NamedTuple):
    """Workers begin no more calls and hand back what they hold."""


class StopWorkers(NamedTuple):
    """No more tasks: each worker ends after its last result."""


class RelayCheck(NamedTuple):
    """Apply the relay's rule under the ledger's lock (:func:`~zotsink._run.relay.decide`)
    with ``ticket`` as the next submission's, the run's ``facts``, whether its ``exit`` row
    is written, and how long it has been ending."""

    ticket: str
    facts: Any  # zotsink._run.relay.Facts
    exited: bool = False
    waited: float = 0.0


class Submit(NamedTuple):
    """Submit one successor (ticket ``ticket``), outside the loop's thread."""

    ticket: str


class Done(NamedTuple):
    """The loop ends."""
