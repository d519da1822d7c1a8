"""Where the tasks' bytes go: OUT and the shared log, each through one locked writer.

Many tasks feed one :class:`Outlet`: their whole lines wait in one :class:`Batch`, appended
when it is big or old enough, and always before a task's ``end`` row is written (so a task
the ledger calls done has its records in OUT). Nothing is lost: ``append_or_save`` sends a
batch that cannot be appended to a spill file, one that OUT's header refuses to
``OUT.rejects``.
"""

from __future__ import annotations

from collections.abc import Sequence

from .._core import sidefiles
from .._core.batch import Batch
from .._core.writer import Writer
from ..errors import HeaderMismatch, LockError, WriteError

__all__ = ["Outlet"]


class Outlet:
    """A shared batch in front of one :class:`Writer`."""

    def __init__(self, writer: Writer, batch_bytes: int, flush_interval: float) -> None:
        self.writer = writer
        self.batch = Batch(batch_bytes, flush_interval)
        self.records = 0  # appended
        self.rejected = 0  # sent to the rejects file
        self.spilled = 0  # saved to spill files
        self.spill_paths: list[str] = []
        self.rejects_file: str | None = None
        self.error: Exception | None = None  # the first LockError/WriteError/HeaderMismatch

    def add(self, data: bytes | memoryview, count: int, timeout: float) -> None:
        if data and self.batch.add(data, count):
            self.flush(timeout)

    def due_in(self, now: float) -> float | None:
        """Seconds until the batch is due by age; None when it is empty."""
        return self.batch.wait(now)

    def flush(self, timeout: float) -> None:
        """Append the batch; on failure it is spilled or rejected, and the error kept."""
        if not self.batch:
            return
        data, n = self.batch.take()
        try:
            sidefiles.append_or_save(self.writer, data, timeout)
            self.records += n
        except HeaderMismatch as e:
            self.rejected += n
            self.rejects_file = e.spill_path
            self.error = self.error or e
        except (LockError, WriteError) as e:  # LockTimeout is a LockError
            self.spilled += n
            if e.spill_path and e.spill_path not in self.spill_paths:
                self.spill_paths.append(e.spill_path)
            self.error = self.error or e

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
