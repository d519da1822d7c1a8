"""A prototype of another ``--call`` design, for ``scripts/bench/call.py --inline``: the run
calls FUNC itself, in its own process, instead of sending it to a worker.

    python scripts/bench/benchlib/inline.py run TASKS OUT --call mod.py:f --jobs 1

It runs ``zotsink`` with the call backend's :class:`~zotsink._run.worker.Worker` (in
:mod:`zotsink._run.calls`) replaced by a stand-in that loads FUNC here and calls it as soon
as it is sent a task, handing the backend the same frames a worker would. No process, no
pipes of frames, no prints kept: what is left is the run's own work per task (its attempt,
its records, the group commit, the ledger's rows), the floor of any design that keeps that
bookkeeping. Only for measuring: it keeps none of the guarantees a worker gives (a crash of
FUNC is the run's, a timeout cannot end it).
"""

from __future__ import annotations

import contextlib
import os
import runpy
import sys
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any


def main() -> None:
    from zotsink._run import calls, serve, worker

    class _Popen:
        pid = os.getpid()

        def poll(self) -> int | None:
            return None

        def wait(self, timeout: float | None = None) -> int:
            return 0

    class _NoPrints:
        def returned(self, call: Any) -> None:
            pass

    class InlineWorker(worker.Worker):
        """A worker's handle whose calls are made here, at once, as they are sent (its
        bookkeeping, the queue of tasks sent and the answers' checks, is the worker's)."""

        batching = True  # type: ignore[assignment]

        def __init__(
            self, spec: str, env: Mapping[str, str], prints_to: Callable[..., Any], max_line: int
        ) -> None:
            self.func = serve._load(spec)
            self.results_fd, self._wake = os.pipe()  # readable: frames wait
            self.prints_fd, self._prints_w = os.pipe()  # never written
            os.set_blocking(self.results_fd, False)
            self.pidfd = None
            self.pid = os.getpid()
            self.popen = _Popen()  # type: ignore[assignment]
            self.began = time.monotonic()
            self.queued: deque[tuple[int, int]] = deque()
            self.ready = False
            self.closed = False
            self.held = False
            self.batch = 1
            self.call_time = 0.0
            self.timed: tuple[int, int] | None = None
            self.load_ended = False
            self._held = None
            self._prints_to = _NoPrints()  # type: ignore[assignment]
            self._frames: list[tuple[Any, ...]] = [("ready", self.pid)]
            os.write(self._wake, b"x")

        def send(self, tasks: list[tuple[int, int, str]]) -> bool:
            clock = time.perf_counter
            for num, attempt, line in tasks:
                self.queued.append((num, attempt))
                t0 = clock()
                items = list(serve._items(self.func(line)))
                self.took((num, attempt), clock() - t0)  # what a worker's end mark tells
                self._frames.append(("done", self.pid, num, attempt, items))
            os.write(self._wake, b"x")
            return True

        def frames(self) -> tuple[list[tuple[Any, ...]], bool]:
            with contextlib.suppress(BlockingIOError):
                os.read(self.results_fd, 1 << 16)
            out, self._frames = self._frames, []
            return out, False

        def take_prints(self, *, last: bool = False) -> bool:
            return False

        def dead(self) -> bool:
            return False

        def hold(self) -> None:
            self.held = True

        def stop(self) -> None:
            self.closed = True

        def signal(self, signum: int) -> None:
            pass

        def exit_code(self, wait: float) -> int:
            return 0

        def close(self) -> None:
            for fd in (self.results_fd, self._wake, self.prints_fd, self._prints_w):
                with contextlib.suppress(OSError):
                    os.close(fd)

    calls.Worker = InlineWorker  # type: ignore[misc]
    sys.argv = ["zotsink", *sys.argv[1:]]
    runpy.run_module("zotsink", run_name="__main__")


if __name__ == "__main__":
    main()
