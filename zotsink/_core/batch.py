"""The one batch buffer: encoded lines wait here until the batch is big or old enough.

Every record writer buffers records here through its outlet (:mod:`zotsink._core.outlet`)
and appends them as one block under one lock hold. A batch is due when it holds
``max_bytes`` or its oldest line has waited ``max_age`` seconds: the size keeps lock holds
few, the age bounds how long a record sits in memory, where a SIGKILL would lose it.

Lines may also wait outside the batch, where copying them in would cost more than it
saves: the stream's lines wait in its read buffer, ``Sink``'s plain text lines in a list
until they are encoded together. The caller tells the batch about them with :meth:`hold`,
and they count toward its size and age all the same: one rule for when records go.
"""

from __future__ import annotations

import time
from typing import Final

__all__ = ["Batch"]

#: ``Batch.wait()`` when nothing is buffered: no deadline.
NO_DEADLINE: Final = None


class Batch:
    """Encoded lines (bytes or a view of bytes, each ending in a newline) waiting to be
    appended together."""

    __slots__ = ("_count", "_held", "_oldest", "_parts", "_size", "max_age", "max_bytes")

    def __init__(self, max_bytes: float, max_age: float) -> None:
        self.max_bytes = max_bytes  # math.inf: only an explicit flush appends (--whole)
        self.max_age = max_age
        self._parts: list[bytes | memoryview] = []
        self._size = 0
        self._count = 0
        self._held = 0  # bytes of lines waiting outside the batch (see hold())
        self._oldest = 0.0  # when the oldest line, inside or held, came

    def age(self, max_age: float) -> None:
        """The age at which the batch is due from now on."""
        self.max_age = max_age

    def __len__(self) -> int:
        """Records buffered."""
        return self._count

    def __bool__(self) -> bool:
        return bool(self._parts)

    @property
    def size(self) -> int:
        return self._size

    @property
    def oldest(self) -> float:
        """When the oldest record came (``time.monotonic``); infinity when nothing waits."""
        return self._oldest if self._parts or self._held else float("inf")

    def add(self, data: bytes | memoryview, count: int, now: float | None = None) -> bool:
        """Buffer ``count`` records encoded as ``data``; whether the batch is now due."""
        if not data:
            return self.due(now)
        if now is None:
            now = time.monotonic()
        if (not self._parts and not self._held) or now < self._oldest:
            self._oldest = now
        self._parts.append(data)
        self._size += len(data)
        self._count += count
        return self._size + self._held >= self.max_bytes or now - self._oldest >= self.max_age

    def hold(self, size: int, now: float | None = None) -> bool:
        """``size`` bytes of lines now wait outside the batch (0: none any more); they count
        toward its size and age. Whether the batch is now due."""
        if size and not self._held and not self._parts:
            self._oldest = time.monotonic() if now is None else now
        self._held = size
        return self.due(now)

    def due(self, now: float | None = None) -> bool:
        """Whether the batch should be appended now (by size or by age)."""
        if not self._parts and not self._held:
            return False
        if self._size + self._held >= self.max_bytes:
            return True
        return (time.monotonic() if now is None else now) - self._oldest >= self.max_age

    def wait(self, now: float | None = None) -> float | None:
        """Seconds until the batch is due by age; None when nothing waits."""
        if not self._parts and not self._held:
            return NO_DEADLINE
        now = time.monotonic() if now is None else now
        return max(0.0, self._oldest + self.max_age - now)

    def take(self) -> tuple[bytes | memoryview, int]:
        """Everything buffered as one block and its record count; the batch is then empty."""
        data = self._parts[0] if len(self._parts) == 1 else b"".join(self._parts)
        count = self._count
        self._parts, self._size, self._count = [], 0, 0
        return data, count

    def put_back(self, data: bytes | memoryview, count: int) -> None:
        """Return a block that :meth:`take` gave out, ahead of anything buffered since."""
        if not data:
            return
        if not self._parts:
            self._oldest = time.monotonic()
        self._parts.insert(0, data)
        self._size += len(data)
        self._count += count
