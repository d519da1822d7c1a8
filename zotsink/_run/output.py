"""Where the tasks' bytes go: OUT and the shared log, each through one locked writer.

Many tasks feed one :class:`Outlet`: their whole lines are gathered into one batch, written
when it reaches ``batch_bytes``, when its oldest line is ``flush_interval`` old, and always
before a task's ``end`` row is written (so a task that the ledger calls done has its records
in OUT). Nothing is lost: a batch that cannot be appended goes to a spill file, one that
OUT's header refuses goes to ``OUT.rejects``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from .. import sidefiles
from ..errors import HeaderMismatch, LockError, WriteError
from ..writer import Writer

__all__ = ["Outlet"]


class Outlet:
    """A shared batch in front of one :class:`Writer`."""

    def __init__(self, writer: Writer, batch_bytes: int, flush_interval: float) -> None:
        self.writer = writer
        self.batch_bytes = batch_bytes
        self.flush_interval = flush_interval
        self._buf: list[bytes] = []
        self._size = 0
        self._count = 0
        self._oldest = 0.0
        self.records = 0  # appended
        self.rejected = 0  # sent to the rejects file
        self.spilled = 0  # saved to spill files
        self.spill_paths: list[str] = []
        self.rejects_file: str | None = None
        self.error: Exception | None = None  # the first LockError/WriteError/HeaderMismatch

    def add(self, data: bytes, count: int, timeout: float) -> None:
        if not data:
            return
        if not self._buf:
            self._oldest = time.monotonic()
        self._buf.append(data)
        self._size += len(data)
        self._count += count
        if self._size >= self.batch_bytes:
            self.flush(timeout)

    def due_in(self, now: float) -> float | None:
        """Seconds until the batch is due by age; None when it is empty."""
        if not self._buf:
            return None
        return max(0.0, self._oldest + self.flush_interval - now)

    def flush(self, timeout: float) -> None:
        """Append the batch; on failure it is spilled or rejected, and the error kept."""
        if not self._buf:
            return
        data, n = b"".join(self._buf), self._count
        self._buf, self._size, self._count = [], 0, 0
        saved = self.writer.timeout
        self.writer.timeout = timeout
        try:
            self.writer.append(data)
            self.records += n
        except (LockError, WriteError) as e:  # LockTimeout is a LockError
            self.spilled += n
            if e.spill_path and e.spill_path not in self.spill_paths:
                self.spill_paths.append(e.spill_path)
            self.error = self.error or e
            if e.spill_path is None:
                raise  # saved nowhere: the caller must say so loudly
        except HeaderMismatch as e:
            # Nothing was written to OUT; keep the records where the user will look.
            self.reject([("header mismatch", ln) for ln in data.splitlines()], timeout)
            self.error = self.error or e
        finally:
            self.writer.timeout = saved

    def reject(self, items: Sequence[tuple[str, bytes]], timeout: float) -> None:
        """Append refused lines to ``OUT.rejects`` (or, if that fails, its spill file)."""
        if not items:
            return
        try:
            self.rejects_file = sidefiles.reject(
                self.writer.path, items, lock=self.writer.locker.requested, timeout=timeout
            )
        except (LockError, WriteError) as e:
            if e.spill_path is None:
                raise
            self.rejects_file = e.spill_path
            self.error = self.error or e
        self.rejected += len(items)

    def close(self) -> None:
        self.writer.close()
