"""Asking the batch scheduler without waiting on it: one asker per process.

The backends (:mod:`zotsink._run.backends`) know each scheduler's commands; this module
is how the rest of zotsink asks them:

- **The thread that must obey stop signals never waits on a scheduler without end.**
  :meth:`Asker.ask` answers at once (from what is known) and asks in a daemon thread, at
  most one question per job at a time, each answer kept :data:`ANSWER_TTL` seconds;
  :meth:`Asker.wait` waits for an answer at most as long as it is told, and not past a
  stop signal that the process's :class:`~zotsink._core.stop.Stopper` notes.
- **None is "cannot tell", never "dead"** (the backends' rule): an answer not come yet,
  or not come by a wait's end, is None.
- :class:`Errand`: one piece of work (a submission) in a thread of its own, its end a
  readable descriptor that a poll loop waits on with everything else.
- :func:`job_alive`, :func:`scheduler_wait`, :func:`job_end`: today's callers' ways, a
  wait bounded by the block's deadline (``status``) or by a stop (``run``).
"""

from __future__ import annotations

import math
import os
import select
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from typing import Final, Generic, TypeVar

from .._core.stop import current_stopper
from .backends import Backend, choose, parse_job

__all__ = [
    "ANSWER_TTL",
    "SCHEDULER_WAIT",
    "Asker",
    "Errand",
    "asker",
    "forget_jobs",
    "job_alive",
    "job_end",
    "reset",
    "scheduler_wait",
]

T = TypeVar("T")

#: Seconds an answer of the scheduler serves: an element that ends is seen within this,
#: without a question per claim.
ANSWER_TTL: Final = 30.0
#: Seconds ``zotsink status`` waits for the scheduler's answers in all (see
#: :func:`scheduler_wait`): a busy login node, or one whose controller is unreachable, can
#: take far longer, and the ledger's counts must not wait for it.
SCHEDULER_WAIT: Final = 3.0


# -- asking without waiting --------------------------------------------------------------------
class _Question(Generic[T]):
    """One question in a daemon thread of its own; waited for with a deadline, and not past
    a stop signal (see :meth:`wait`)."""

    def __init__(self, name: str, work: Callable[[], T]) -> None:
        self.answer: T | None = None
        self.done = threading.Event()
        self._lock = threading.Lock()
        self._wakers: list[int] = []  # write ends of the pipes waiters poll
        threading.Thread(
            target=self._ask, args=(work,), name=f"zotsink-scheduler-{name}", daemon=True
        ).start()

    def _ask(self, work: Callable[[], T]) -> None:
        try:
            self.answer = work()
        except Exception:  # output no parser foresaw is no answer, and no crash
            self.answer = None
        finally:
            with self._lock:
                self.done.set()
                for fd in self._wakers:
                    with suppress(OSError):
                        os.write(fd, b"!")

    def wait(self, timeout: float | None) -> bool:
        """Whether the answer came within ``timeout`` seconds (None: as long as it takes,
        which :data:`COMMAND_TIMEOUT` bounds). A stop signal noted by the process's
        :class:`~zotsink._core.stop.Stopper` ends the wait at once: a run told to stop
        does not wait for the scheduler."""
        stopper = current_stopper()
        if stopper is None:
            return self.done.wait(timeout)
        with self._lock:
            if self.done.is_set():
                return True
            r, w = os.pipe()
            self._wakers.append(w)
        try:
            poller = select.poll()
            poller.register(r, select.POLLIN)
            poller.register(stopper.wakeup_fd, select.POLLIN)
            end = None if timeout is None else time.monotonic() + timeout
            while not self.done.is_set():
                if stopper.signum is not None:
                    return False
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    return False
                for fd, _ in poller.poll(None if left is None else math.ceil(left * 1000)):
                    if fd == stopper.wakeup_fd:
                        # a signal's byte: the stopper's handler has noted it by the next
                        # look at signum; emptied, or the poll would spin on it
                        _empty(fd)
            return True
        finally:
            with self._lock:
                self._wakers.remove(w)
            os.close(r)
            os.close(w)


class Errand(Generic[T]):
    """Work that may take a scheduler command's whole deadline (a submission), done in a
    daemon thread of its own for a poll loop that must not wait: :meth:`fileno` becomes
    readable once it is done, and :meth:`result` then holds what it gave (None, and the
    exception's words, when it raised)."""

    def __init__(self, name: str, work: Callable[[], T]) -> None:
        self._r, self._w = os.pipe()
        os.set_blocking(self._r, False)
        self._answer: T | None = None
        self._error = ""
        self.done = threading.Event()
        threading.Thread(target=self._do, args=(work,), name=f"zotsink-{name}", daemon=True).start()

    def _do(self, work: Callable[[], T]) -> None:
        try:
            self._answer = work()
        except Exception as e:  # what the work did not foresee is its answer, no crash
            self._error = f"{type(e).__name__}: {e}"
        finally:
            self.done.set()
            # the write end is the thread's own: closed here, never by another, so that
            # its number is never another file's when the byte is written
            with suppress(OSError):
                os.write(self._w, b"!")
            os.close(self._w)

    def fileno(self) -> int:
        return self._r

    def result(self) -> tuple[T | None, str]:
        """What the work gave, and the words of an exception it raised ("")."""
        return self._answer, self._error

    def close(self) -> None:
        """Let go of the read end (the thread, if still at work, ends on its own)."""
        with suppress(OSError):
            os.close(self._r)


def _empty(fd: int) -> None:
    blocking = os.get_blocking(fd)
    os.set_blocking(fd, False)
    try:
        with suppress(OSError):
            os.read(fd, 512)
    finally:
        os.set_blocking(fd, blocking)


class Asker:
    """Questions to one backend about jobs (keys of :func:`job_key`), asked in daemon
    threads, at most one out per job; each answer serves :data:`ANSWER_TTL` seconds."""

    def __init__(self, backend: Backend | None) -> None:
        self.backend = backend
        self._lock = threading.Lock()
        self._fresh: dict[str, tuple[bool | None, float]] = {}  # answers, and when got
        self._last: dict[str, bool | None] = {}  # the latest answer of each job, however old
        self._out: dict[str, _Question[bool | None]] = {}  # questions still out
        self._asked: dict[str, float] = {}  # when each answer's question was asked (wall)
        self._sent: dict[str, float] = {}  # when each question out was asked (wall)

    def ask(self, key: str) -> bool | None:
        """At once: the answer about job ``key`` got within :data:`ANSWER_TTL` seconds;
        else a question is asked (unless one is out already) and the latest answer, however
        old, is given meanwhile (None when there was none). None for "" and where no
        scheduler is."""
        return self._look(key)[0]

    def since(self, key: str, after: float) -> bool | None:
        """At once: the answer about job ``key`` to a question asked at ``after``
        (``time.time()`` seconds) or later, whatever its age; else None, and a question is
        asked (unless one is out already). A job the scheduler once said it no longer has
        is gone for good: False, however old that answer. For a decision that needs a word
        newer than an event (an element said it exits: is it gone now?)."""
        if not key or self.backend is None:
            return None
        with self._lock:
            self._settle()
            last = self._last.get(key, None)
            if key in self._last and (last is False or self._asked.get(key, -math.inf) >= after):
                return last
            if key not in self._out:
                backend, job = self.backend, parse_job(key)
                self._out[key] = _Question(key, lambda: backend.alive(job))
                self._sent[key] = time.time()
            return None

    def wait(self, key: str, timeout: float | None) -> bool | None:
        """The answer about job ``key``, waiting for it at most ``timeout`` seconds (None:
        until the command's deadline) and not past a stop signal; when it has not come by
        then, what :meth:`ask` gives (the question stays out)."""
        answer, question = self._look(key)
        if question is None or not question.wait(timeout):
            return answer
        return self._look(key)[0]

    def answers(self) -> dict[str, bool | None]:
        """The answers that still serve, by job."""
        now = time.monotonic()
        with self._lock:
            self._settle()
            return {k: a for k, (a, at) in self._fresh.items() if now - at < ANSWER_TTL}

    def pending(self) -> frozenset[str]:
        """The jobs a question is out about."""
        with self._lock:
            self._settle()
            return frozenset(self._out)

    def forget(self) -> None:
        """Ask afresh from now on (the latest answers still serve while the questions are
        out): a ``status --watch`` outlives the jobs it asked about, and must see them end."""
        with self._lock:
            self._settle()
            self._fresh.clear()

    def _look(self, key: str) -> tuple[bool | None, _Question[bool | None] | None]:
        """What is known about ``key`` now, and the question out about it (None: an answer
        that serves, or nothing to ask)."""
        if not key or self.backend is None:
            return None, None
        with self._lock:
            self._settle()
            got = self._fresh.get(key)
            if got is not None and time.monotonic() - got[1] < ANSWER_TTL:
                return got[0], None
            question = self._out.get(key)
            if question is None:
                backend, job = self.backend, parse_job(key)
                question = self._out[key] = _Question(key, lambda: backend.alive(job))
                self._sent[key] = time.time()
            return self._last.get(key), question

    def _settle(self) -> None:
        """Take the answers that came in (under the lock)."""
        for key, question in list(self._out.items()):
            if question.done.is_set():
                del self._out[key]
                self._fresh[key] = question.answer, time.monotonic()
                self._last[key] = question.answer
                self._asked[key] = self._sent.pop(key, 0.0)


_asker: Asker | None = None
_asker_lock = threading.Lock()


def asker() -> Asker:
    """This process's :class:`Asker`, its backend chosen once from its environment."""
    global _asker
    with _asker_lock:
        if _asker is None:
            _asker = Asker(choose(os.environ))
        return _asker


def reset() -> None:
    """Choose the backend again at the next question, and forget every answer: for a
    process whose environment changed (tests)."""
    global _asker
    with _asker_lock:
        _asker = None


# -- today's callers: status waits a while, run until an answer or a stop ----------------------
_deadline: float | None = None  # see scheduler_wait
_unanswered: set[str] = set()


def job_alive(job: str) -> bool | None:
    """Whether the scheduler still has job ``job`` (a key of :func:`job_key`) queued or
    running; None when no scheduler command on this host can tell. Waits for the answer
    until the command's deadline or a stop signal; inside :func:`scheduler_wait` at most
    until the block's deadline, and a job not answered about by then is noted (its
    previous answer serves, None when there was none; the question stays out, and its
    answer serves the next call)."""
    ask = asker()
    if _deadline is None:
        return ask.wait(job, None)
    got = ask.wait(job, max(0.0, _deadline - time.monotonic()))
    if job in ask.pending():
        _unanswered.add(job)
    return got


def forget_jobs() -> None:
    """Ask the scheduler afresh from now on: a ``status --watch`` outlives the jobs it
    asked about, and must see them end."""
    asker().forget()


@contextmanager
def scheduler_wait(seconds: float) -> Iterator[set[str]]:
    """Within the block, :func:`job_alive` waits at most ``seconds`` in all for the
    scheduler; the set given is filled, at the block's end, with the jobs it did not
    answer about in time."""
    global _deadline
    _deadline = time.monotonic() + seconds
    _unanswered.clear()
    late: set[str] = set()
    try:
        yield late
    finally:
        late.update(_unanswered)
        _deadline = None


def job_end(env: Mapping[str, str]) -> float | None:
    """When the job of the environment ``env`` must end (its walltime), as ``time.time()``
    seconds, from the scheduler that runs it: Slurm (``squeue -o %e`` of
    ``SLURM_JOB_ID``), Grid Engine (the task's start and its ``h_rt`` or ``s_rt``, from
    ``qstat -j JOB_ID -xml``), PBS (``qstat -f`` of ``PBS_JOBID``: the walltime left, or
    the start and the walltime); None when none tells, or when a stop signal comes first."""
    backend = choose(env)
    if backend is None:
        return None
    question = _Question("end", backend.end)
    return question.answer if question.wait(None) else None
