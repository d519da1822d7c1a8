"""What a relay does in the world: the chain's rule applied under the ledger's lock, and
successors submitted (``run --relay``, ``add --relay``). The decisions are
:mod:`zotsink._run.relay`'s; the scheduler's commands :mod:`zotsink._run.backends`'s.

- :class:`Desk`: a relay run's side. A check folds every row appended since into the run's
  view, asks the scheduler (without waiting: its last answers) about the elements the rows
  name, reads whether work waits (tasks the ledger says were given back or interrupted, else
  whole lines of the task list past the cursor), and appends what
  :func:`~zotsink._run.relay.decide` says, in one lock hold. A submission runs in a thread
  of its own (:class:`~zotsink._run.scheduler.Errand`): the poll loop never waits on it.
- What is submitted: ``--relay-script FILE``, else the script of the job the run is in, as
  the scheduler kept it (Slurm's ``scontrol write batch_script``, Grid Engine's
  ``JOB_SCRIPT``; PBS does not give it: ``--relay-script`` there), on stdin, its array
  directives dropped: one job. Its environment is this run's, without what the scheduler
  set for this job (:meth:`~zotsink._run.backends.Backend.job_env`) nor this run's marks
  (``ZOTSINK_RUN``, a task's number), with ``ZOTSINK_RELAY`` naming the decision that
  submitted it (so that a stop that came while it was queued ends it too).
- :func:`ensure_runner` (``zotsink add --relay SCRIPT``): after lines were added, a runner
  is submitted when no element of the chain is queued or running, decided under the
  ledger's lock as a run decides (the dropbox without cron).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any, Final, NamedTuple

from .._core.fileio import fresh_stat, line_blocks
from .._core.fsinfo import wants_fsync
from .._core.snapshot import snapshot
from .._core.stamp import ATTEMPT_VAR, TASKNUM_VAR
from .._ledger.format import State, advance, make_row, parse_row
from .._ledger.read import Snapshot
from .._ledger.relay import Chain, relay_fields
from .._ledger.view import LedgerView
from ..errors import UsageError, ZotsinkError
from .alive import RUN_VAR, job_alive, qualified_job
from .backends import Backend, choose
from .events import RelayCheck, RelayChecked, Submitted
from .ledger import Ledger, append_stamped
from .relay import TICKET_TTL, RelayPlan, decide
from .schedcmd import read_script
from .scheduler import SCHEDULER_WAIT, Errand, asker, scheduler_wait
from .tasks import runs

__all__ = ["RELAY_VAR", "Desk", "RunnerOutcome", "ensure_runner", "relay_backend"]

#: The environment variable that names, in a successor, the decision that submitted it:
#: ``RUN.TICKET``.
RELAY_VAR: Final = "ZOTSINK_RELAY"
#: Bytes of the task list past the cursor read to tell whether a task waits there.
_LOOK_AHEAD: Final = 1 << 16


def relay_backend(env: Mapping[str, str], script: str | None) -> Backend:
    """The scheduler a relay submits to (the one its job came from), checked before the run
    begins: :class:`UsageError` where none is, or where it cannot give the job's script and
    none was given."""
    backend = choose(env)
    if backend is None:
        raise UsageError(
            "--relay submits successors, and no batch scheduler's commands are here (sbatch, "
            "qsub): run it inside a job of a cluster whose compute nodes may submit jobs"
        )
    if script is None and backend.name == "pbs":
        raise UsageError(
            "--relay under PBS needs --relay-script FILE: PBS does not give a job its own script"
        )
    if script is None and not backend.in_job:
        raise UsageError(
            f"--relay submits this job's script again, and this run is in no {backend.name} "
            "job: give --relay-script FILE (the job script a successor is)"
        )
    return backend


def successor_env(env: Mapping[str, str], backend: Backend, decision: str) -> dict[str, str]:
    """The environment a successor is submitted with: ``env`` without the scheduler's
    variables of this job and without this run's marks, naming ``decision``."""
    mine = (RUN_VAR, TASKNUM_VAR, ATTEMPT_VAR, RELAY_VAR)
    clean = backend.job_env({k: v for k, v in env.items() if k not in mine})
    clean[RELAY_VAR] = decision
    return clean


def _script(backend: Backend, env: Mapping[str, str], path: str | None) -> tuple[bytes | None, str]:
    """The job script a successor is: the file given, read now (an edit made meanwhile is
    what the next element runs), else the script of this job as the scheduler kept it."""
    if path is None:
        return backend.job_script(env)
    return read_script(path, "--relay-script")


def lines_waiting(tasks: str, at: int, *, closed: bool, lock: str, timeout: float) -> bool:
    """Whether the task list has a task past byte ``at`` (the cursor): a whole line that
    runs (blank and ``#`` lines never do), or, with the list closed, a last line without
    its newline. Read under the list's shared lock (``add`` appends under the exclusive
    one), at the size the server has: a line added a moment ago is seen."""
    try:
        fd, size = snapshot(tasks, lock=lock, timeout=timeout)
    except (OSError, ZotsinkError):
        # not read now (its lock, a network filesystem's hiccup): bytes past the cursor are
        # lines to come; "no work" here would end the chain with its work left
        try:
            return os.stat(tasks).st_size > at
        except OSError:
            return False
    try:
        size = max(size, fresh_stat(fd, wants_fsync(tasks))[2])
        if size <= at:
            return False
        data = os.pread(fd, min(size - at, _LOOK_AHEAD), at)
    finally:
        os.close(fd)
    # a last piece with no newline is a line being written, unless the list is closed and
    # it is the list's end
    last_counts = closed and len(data) < _LOOK_AHEAD
    for lines, whole in line_blocks((data,)):
        if any(p and b"\0" not in p and runs(p) for p in lines if whole or last_counts):
            return True
    return False


class Desk:
    """A relay run's dealings with the ledger and the scheduler (see the module's
    docstring)."""

    def __init__(
        self,
        ledger: Ledger,
        plan: RelayPlan,
        *,
        backend: Backend,
        env: Mapping[str, str],
        script: str | None,
        lock: str,
        timeout: float,
    ) -> None:
        self.ledger = ledger
        self.plan = plan
        self.backend = backend
        self.env = dict(env)
        self.script = script
        self.lock = lock
        self.timeout = timeout

    def check(self, ins: RelayCheck) -> RelayChecked:
        """The chain's rule under the ledger's lock, its rows appended: the verdict."""
        got: list[Any] = []
        ask = asker()

        def under_lock(view: LedgerView, state: State) -> list[list[str]]:
            control = view.control

            def alive(job: str, after: float, by_rows: bool) -> bool | None:
                # a row its run wrote since says it lives, without asking anybody
                el = view.chain.open().get(job)
                if by_rows and el is not None and el.state == "running":
                    r = view.run_index.get(el.run)
                    if r is not None and view.runs[r].last_time >= after:
                        return True
                return ask.since(job, after)

            # tasks given back below the cursor wait as surely as lines past it: a run that
            # left at its deadline gave back what it had claimed, and another one leaving
            # at the same moment must not end the chain "done" over them
            waiting = view.free_waiting() or lines_waiting(
                self.ledger.tasks,
                state.at,
                closed=control.closed,
                lock=self.lock,
                timeout=self.timeout,
            )
            verdict = decide(
                view.chain,
                self.plan,
                ins.facts,
                ticket=ins.ticket,
                now=time.time(),
                alive=alive,
                list_waiting=waiting,
                stopped=self.ledger.stopped,
                exited=ins.exited,
                waited=ins.waited,
            )
            got.append(verdict)
            return verdict.rows

        try:
            self.ledger.relay(under_lock)
        except ZotsinkError as e:
            return RelayChecked(error=e)
        return RelayChecked(got[-1] if got else None)

    def submit(self, ticket: str) -> Errand[tuple[str | None, str]]:
        """Submit one successor in a thread of its own (its fd is readable once done)."""
        backend, env, path = self.backend, self.env, self.script
        decision = f"{self.plan.run}.{ticket}"

        def work() -> tuple[str | None, str]:
            script, why = _script(backend, env, path)
            if script is None:
                return None, why
            job, message = backend.submit(script, successor_env(env, backend, decision), env)
            return (qualified_job(job, env), "") if job is not None else (None, message)

        return Errand(f"relay-{ticket}", work)

    @staticmethod
    def answered(ticket: str, errand: Errand[tuple[str | None, str]]) -> Submitted:
        """A submission's outcome, as the decisions are fed it."""
        answer, error = errand.result()
        errand.close()
        if answer is None:
            return Submitted(ticket, None, error or "the submission gave no answer")
        job, message = answer
        return Submitted(ticket, job, message)


# -- zotsink add --relay SCRIPT ------------------------------------------------------------------
class RunnerOutcome(NamedTuple):
    """What ``add --relay`` did about the chain: the elements it found queued or running,
    the job it submitted (None: none), why not or what failed, and whether the ledger was
    made (no run had written it: a new dropbox, or a name mistyped)."""

    elements: int
    job: str | None
    said: str
    made: bool = False

    def to_dict(self) -> dict[str, object]:
        return self._asdict()


def _fold_relay(chain: Chain, snap: Snapshot, start: int) -> None:
    """Fold the relay rows of a snapshot from ``start``: the chain alone, the other rows
    passed by unparsed (a producer's add must not cost a run's fold)."""
    for at, line in snap.lines(start):
        if line.startswith(b"relay\t"):
            row = parse_row(line)
            if row is not None:
                chain.fold(at, row)


def ensure_runner(
    ledger: str | os.PathLike[str],
    script: str | os.PathLike[str],
    *,
    lock: str = "auto",
    timeout: float = 600.0,
    env: Mapping[str, str] | None = None,
    wait_scheduler: float = SCHEDULER_WAIT,
) -> RunnerOutcome:
    """Submit the runner ``script`` when the chain of ``ledger`` has no element queued or
    running (an element that said it exits takes no more work), decided under the ledger's
    lock with a ``decide`` row, then its job id or the scheduler's message written. The
    scheduler is asked about the elements the rows name before the lock is taken (within
    ``wait_scheduler`` seconds in all; one it has not answered about counts as queued or
    running); the ledger is made when missing. The runner is submitted from the ledger's
    directory (its working directory there), with this process's environment less what a
    scheduler set for a job this process may be in."""
    env = dict(os.environ if env is None else env)
    path, script_path = os.fspath(ledger), os.path.abspath(os.fspath(script))
    backend = relay_backend(env, script_path)
    data, why = read_script(script_path, "the runner script")
    if data is None:
        raise UsageError(why)
    # the elements the rows name, asked about before the lock (a squeue must not hold it)
    chain = Chain()
    seen = 0
    made = not os.path.lexists(path)
    if not made:
        with Snapshot(path, lock=lock, timeout=timeout) as snap:
            _fold_relay(chain, snap, 0)
            seen = snap.end
    said: dict[str, bool | None] = {}
    with scheduler_wait(wait_scheduler):
        for job, el in list(chain.open().items()):
            if el.state != "exited" and job:
                said[job] = job_alive(job)
    run = os.urandom(4).hex()  # the rows' writer: no run, one decision
    counted: list[int] = []

    def read(fd: int, size: int) -> None:
        if size > seen:
            # the rows since the scheduler was asked: a runner decided meanwhile counts
            _fold_relay(chain, Snapshot.under_lock(path, fd, size, seen), seen)

    def runner_rows(state: State, now: float) -> bytes:
        rows: list[list[str]] = []
        takers = len(chain.pending(now, TICKET_TTL))
        for job, el in chain.open().items():
            if el.state == "exited" or not job:
                continue
            if said.get(job) is False:
                rows.append(relay_fields("gone", job=job))
            else:
                takers += 1
        if not takers:
            rows.append(relay_fields("decide", ticket="1", count="0/1", note="add"))
        counted.append(takers)
        return _stamped(rows, state, now, run)

    append_stamped(path, runner_rows, lock=lock, timeout=timeout, read=read)
    takers = counted[-1]
    if takers:
        return RunnerOutcome(takers, None, f"{takers} element(s) queued or running take it", made)
    # from the ledger's directory: a producer adds from anywhere, and the runner's work is
    # where its list and ledger are
    here = os.path.dirname(os.path.abspath(path))
    job, message = backend.submit(data, successor_env(env, backend, f"{run}.1"), {}, here)
    if job is not None:
        job = qualified_job(job, env)
        row = relay_fields("job", ticket="1", job=job)
    else:
        row = relay_fields("fail", ticket="1", note=message)
    _append_rows(path, [row], run, lock=lock, timeout=timeout)
    return RunnerOutcome(0, job, "submitted" if job is not None else message, made)


def _stamped(rows: list[list[str]], state: State, now: float, run: str) -> bytes:
    """Relay rows stamped with the states after the last row's (``state``)."""
    st = state
    out = []
    for fields in rows:
        st = advance(st, "relay", fields)
        out.append(make_row("relay", now, run, fields, st))
    return b"".join(out)


def _append_rows(path: str, rows: list[list[str]], run: str, *, lock: str, timeout: float) -> None:
    """Append relay rows under the ledger's lock, stamped there."""
    append_stamped(
        path, lambda state, now: _stamped(rows, state, now, run), lock=lock, timeout=timeout
    )
