"""A prototype of another ``--call`` design, for ``scripts/bench/call.py --inline``: the run
calls FUNC itself, in its own process, instead of sending it to a worker.

    python scripts/bench/benchlib/inline.py run TASKS OUT --call mod.py:f --jobs 1

It runs ``zotsink`` with the pool's :class:`~zotsink._run.worker.Worker` replaced by a stand-in
that loads FUNC here and calls it as soon as it is sent a task, handing the pool the same
frames a worker would. No process, no pipes of frames, no prints kept: what is left is the
run's own work per task (its attempt, its records, the group commit, the ledger's rows), the
floor of any design that keeps that bookkeeping. Only for measuring: it keeps none of the
guarantees a worker gives (a crash of FUNC is the run's, a timeout cannot end it).
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
    from zotsink._run import pool, serve, worker

    class _Popen:
        pid = os.getpid()

        def poll(self) -> int | None:
            return None

        def wait(self, timeout: float | None = None) -> int:
            return 0

    class _NoPrints:
        def returned(self, call: Any) -> None:
            pass

    class InlineWorker:
        refusal = worker.Worker.refusal
        holds = worker.Worker.holds
        returned = worker.Worker.returned
        handed_back = worker.Worker.handed_back
        took = worker.Worker.took
        batching = True

        def __init__(
            self, spec: str, env: Mapping[str, str], prints_to: Callable[..., Any], max_line: int
        ) -> None:
            self.func = serve._load(spec)
            self.results_fd, self._wake = os.pipe()  # readable: frames wait
            self.prints_fd, self._prints_w = os.pipe()  # never written
            os.set_blocking(self.results_fd, False)
            self.pidfd = None
            self.pid = os.getpid()
            self.popen = _Popen()
            self.began = time.monotonic()
            self.queued: deque[tuple[Any, int, int]] = deque()
            self.sent: tuple[int, int] | None = None
            self.ready = False
            self.closed = False
            self.held = False
            self.batch = 1
            self.call_time = 0.0
            self.timed: tuple[int, int] | None = None
            self.task: Any = None
            self._prints_to = _NoPrints()
            self._frames: list[tuple[Any, ...]] = [("ready", self.pid)]
            os.write(self._wake, b"x")

        def send(self, tasks: list[tuple[Any, int, int, str]]) -> bool:
            for task, num, attempt, line in tasks:
                self.queued.append((task, num, attempt))
                items = list(serve._items(self.func(line)))
                self._frames.append(("done", self.pid, num, attempt, items))
            self.sent = self.queued[0][1:]
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
                os.close(fd)

    pool.Worker = InlineWorker  # type: ignore[misc,assignment]
    sys.argv = ["zotsink", *sys.argv[1:]]
    runpy.run_module("zotsink", run_name="__main__")


if __name__ == "__main__":
    main()
