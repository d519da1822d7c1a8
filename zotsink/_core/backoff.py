"""The one wait loop: non-blocking attempts with full-jitter exponential backoff.

Blocking kernel lock waits are avoided on purpose: a lost NFS lock callback leaves a blocked
waiter hanging forever, while a poller keeps its deadline. Full jitter (a uniform draw from
zero to the current ceiling) keeps thousands of job-array tasks that started together from
retrying in lockstep.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Final

__all__ = ["FIRST_DELAY", "MAX_DELAY", "delays", "retry_until"]

#: Ceiling of the first sleep, in seconds (about 50 µs).
FIRST_DELAY: Final = 50e-6
#: Ceiling the sleeps grow to, in seconds (about 50 ms).
MAX_DELAY: Final = 50e-3


def delays(
    first: float = FIRST_DELAY,
    cap: float = MAX_DELAY,
    rand: Callable[[], float] | None = None,
) -> Iterator[float]:
    """Endless sleeps: each a uniform draw below a ceiling that doubles up to ``cap``."""
    if rand is None:
        # imported only once a lock is found busy: an uncontended append (the CLI's one
        # record per task) never pays for the random module
        import random

        rand = random.random
    ceiling = first
    while True:
        yield ceiling * rand()
        ceiling = min(cap, ceiling * 2)


def retry_until(
    attempt: Callable[[], bool],
    timeout: float,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    rand: Callable[[], float] | None = None,
) -> tuple[bool, int, float]:
    """Call ``attempt`` until it returns True or ``timeout`` seconds have passed.

    Returns ``(succeeded, attempts, seconds waited)``. The first attempt is made at once;
    no sleep runs past the deadline, and one last attempt is made at the deadline.
    """
    start = clock()
    if attempt():
        return True, 1, 0.0
    deadline = start + max(0.0, timeout)
    tries = 1
    for d in delays(rand=rand):
        now = clock()
        left = deadline - now
        if left <= 0:
            return False, tries, now - start
        sleep(min(d, left))
        tries += 1
        if attempt():
            return True, tries, clock() - start
    raise AssertionError("unreachable")  # pragma: no cover
