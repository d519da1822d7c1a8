"""The one wait loop: attempts spaced by exponential backoff, by named policies.

Every wait of zotsink's own (a busy lock, a create race, a stale file handle, a network
client that has not caught up yet) is a :class:`Policy` here and runs in :func:`tries`
or :func:`retry_until`; nothing else in zotsink sleeps to wait for a file. A wait for a
lock that a stop signal may cut short runs in :func:`wait_for_lock`, the one loop around
lock calls of zotsink's commands.

Blocking kernel lock waits are avoided on purpose: a lost NFS lock callback leaves a blocked
waiter hanging forever, while a poller keeps its deadline. Full jitter (a uniform draw from
zero to the current ceiling) keeps thousands of job-array tasks that started together from
retrying in lockstep. Waits for a client's cache to let go have no jitter: there the time
that passes is the point, and a short draw would only spend a try.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any, Final, TypeVar

from ..errors import LockTimeout
from .stop import STOP_LOCK_TIMEOUT, Stopper

__all__ = [
    "CREATE_RACE",
    "FIRST_DELAY",
    "HEADER_SETTLE",
    "LOCK_WAIT",
    "MAX_DELAY",
    "STALE_HANDLE",
    "STOP_CHECK",
    "Policy",
    "delays",
    "pause",
    "retry_until",
    "tries",
    "wait_for_lock",
]

#: Ceiling of the first sleep of a lock wait, in seconds.
FIRST_DELAY: Final = 50e-6
#: Ceiling the sleeps of a lock wait grow to, in seconds.
MAX_DELAY: Final = 50e-3
#: While a wait for a lock may be cut short by a stop signal, how often it looks for one
#: (seconds): no single lock call of :func:`wait_for_lock` waits longer.
STOP_CHECK: Final = 1.0

T = TypeVar("T")


class Policy:
    """How one kind of wait backs off; not changed once made (:meth:`replace` makes another).

    Sleeps start at a ceiling of ``first`` seconds that doubles up to ``cap``; with
    ``jitter`` each sleep is a uniform draw below the ceiling, else the ceiling itself.
    ``tries``: attempts in all; ``budget``: seconds from the first attempt to the last.
    None for both: until the caller stops (:func:`retry_until` gives the budget).
    """

    # A plain class: the CLI imports this on every start, and a dataclass or NamedTuple
    # costs more to define than all the rest of the module.
    __slots__ = ("budget", "cap", "first", "jitter", "tries")
    first: float
    cap: float
    jitter: bool
    tries: int | None
    budget: float | None

    def __init__(
        self,
        first: float,
        cap: float,
        jitter: bool = True,
        tries: int | None = None,
        budget: float | None = None,
    ) -> None:
        for name, value in zip(self.__slots__, (budget, cap, first, jitter, tries)):
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"a Policy is not changed ({name}): make another with replace()")

    def replace(self, **changes: Any) -> Policy:
        """A copy with ``changes`` (field=value)."""
        fields = {name: getattr(self, name) for name in self.__slots__}
        return Policy(**{**fields, **changes})

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"Policy({fields})"


#: A lock held by another writer: the caller's --timeout is the budget.
LOCK_WAIT: Final = Policy(FIRST_DELAY, MAX_DELAY)
#: A create that is not exclusive answered EEXIST (a FUSE client's stale lookup of a name
#: another client just created): the name's old lookup must expire before a new open.
CREATE_RACE: Final = Policy(1e-3, 64e-3, jitter=False, tries=8)
#: A stale NFS/FUSE file handle: the file was replaced through another client, whose cache
#: lets go of the old one soon; each try reopens by name.
STALE_HANDLE: Final = Policy(20e-3, 50e-3, jitter=False, tries=40)
#: OUT is known to be longer than what this client's read returns: a network client that
#: read OUT before another node wrote its header serves its cached pages for a while.
HEADER_SETTLE: Final = Policy(10e-3, 0.25, jitter=False, budget=5.0)


def delays(
    first: float = FIRST_DELAY,
    cap: float = MAX_DELAY,
    rand: Callable[[], float] | None = None,
    jitter: bool = True,
) -> Iterator[float]:
    """Endless sleeps: each a uniform draw (``jitter``) below a ceiling that doubles up to
    ``cap``, or the ceiling itself."""
    if jitter and rand is None:
        # imported only once a wait is needed: an uncontended append (the CLI's one
        # record per task) never pays for the random module
        import random

        rand = random.random
    ceiling = first
    while True:
        yield ceiling * rand() if rand is not None and jitter else ceiling
        ceiling = min(cap, ceiling * 2)


def tries(
    policy: Policy,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    rand: Callable[[], float] | None = None,
) -> Iterator[bool]:
    """The attempts of one wait: yields once before each attempt, True before the last one
    (whose failure the caller raises), sleeping the policy's delays in between.

    The first attempt comes at once. With a budget, no sleep runs past it and one last
    attempt comes at its end. The caller leaves the loop when an attempt succeeds::

        for last in tries(STALE_HANDLE):
            try:
                return open_it()
            except OSError as e:
                if e.errno != errno.ESTALE or last:
                    raise
    """
    deadline = None if policy.budget is None else clock() + max(0.0, policy.budget)
    waits: Iterator[float] | None = None
    n = 1
    while True:
        last = (policy.tries is not None and n >= policy.tries) or (
            deadline is not None and clock() >= deadline
        )
        yield last
        if last:
            return
        if waits is None:  # made on the first retry only: see delays()
            waits = delays(policy.first, policy.cap, rand, policy.jitter)
        d = next(waits)
        if deadline is not None:
            d = min(d, max(0.0, deadline - clock()))
        sleep(d)
        n += 1


def pause(policy: Policy, n: int, *, sleep: Callable[[float], None] = time.sleep) -> None:
    """Sleep the policy's delay before retry ``n`` (0 for the first retry), for a loop that
    retries only some of its turns (:func:`.locking.open_locked` retries a stale handle after a
    pause, a replaced file at once)."""
    ceiling = min(policy.cap, policy.first * 2 ** min(n, 64))
    if policy.jitter:
        import random

        ceiling *= random.random()
    sleep(ceiling)


def retry_until(
    attempt: Callable[[], bool],
    timeout: float,
    *,
    policy: Policy = LOCK_WAIT,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    rand: Callable[[], float] | None = None,
) -> tuple[bool, int, float]:
    """Call ``attempt`` until it returns True or ``timeout`` seconds have passed.

    Returns ``(succeeded, attempts, seconds waited)``. The first attempt is made at once;
    no sleep runs past the deadline, and one last attempt is made at the deadline.
    """
    start = clock()
    n = 0
    for _last in tries(policy.replace(budget=timeout), clock=clock, sleep=sleep, rand=rand):
        n += 1
        if attempt():
            return True, n, 0.0 if n == 1 else clock() - start
    return False, n, clock() - start


def wait_for_lock(
    attempt: Callable[[float], T],
    timeout: float,
    *,
    path: str,
    stopper: Stopper | None = None,
    stopping: bool = False,
    after_stop: float = STOP_LOCK_TIMEOUT,
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """``attempt(seconds)`` (one lock call, which raises :class:`LockTimeout` when the lock
    is still held after that long), within ``timeout`` seconds in all, cut short by a stop.

    A job told to stop (walltime warning, ``scancel``) may get SIGKILL within seconds. With a
    ``stopper``, the wait runs in calls of at most :data:`STOP_CHECK` seconds, and looks at
    its signal between them. Once a signal came (from the start when ``stopping``: the
    caller is ending anyway), the wait goes on ``after_stop`` seconds more at most: what the
    caller may still spend. A writer with records in hand gives :data:`STOP_LOCK_TIMEOUT`,
    then saves them elsewhere; a reader, with nothing to save, gives 0.

    The :class:`LockTimeout` raised tells the whole wait, not its last call, and names the
    signal when one came; a wait that was one call raises that call's own.
    """
    if stopper is None and not stopping:
        return attempt(timeout)  # nothing can cut the wait short: one call
    start = now = clock()
    deadline = start + timeout
    stopped = False
    calls = 0
    while True:
        if not stopped and (stopping or (stopper is not None and stopper.signum is not None)):
            deadline = min(deadline, now + after_stop)
            stopped = True  # from now on one last call up to the deadline
        left = max(0.0, deadline - now)
        if left <= STOP_CHECK:
            break
        try:
            return attempt(STOP_CHECK)
        except LockTimeout:
            calls += 1
            now = clock()
    try:
        return attempt(left)
    except LockTimeout as e:
        signum = None if stopper is None else stopper.signum
        if not calls and signum is None:
            raise
        waited = f"the lock was still held by another writer after {round(clock() - start, 1):g} s"
        if signum is not None:
            waited = f"stopped by signal {signum} while waiting for its lock: {waited}"
        raise LockTimeout(f"{path}: {waited}", path=path) from e
