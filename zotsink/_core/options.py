"""How records are written: the options every record writer shares, checked once.

``append_stream``, ``run_tasks``, ``append_record``, ``Sink`` and ``collect`` take the
same keywords (format, columns, kv, stamp, lock, sync, timeout, batch_bytes,
flush_interval). Each public function builds one :class:`WriteOptions` with
:func:`write_options` at its edge and passes the object down: a value that cannot work is
refused there, before anything is read, with the same words whichever door it came in by.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Final, NamedTuple, Union

from ..errors import UsageError
from .header import Columns
from .locking import LOCK_KINDS
from .records import FORMATS
from .stamp import DEFAULT_STAMP, parse_stamp
from .writer import SYNC_POLICIES

__all__ = [
    "BATCH_BYTES",
    "MAX_BATCH_BYTES",
    "MAX_FLUSH_INTERVAL",
    "MAX_TIMEOUT",
    "Stamp",
    "WriteOptions",
    "check_seconds",
    "write_options",
]

#: The largest values accepted (the CLI's option types use the same bounds): a batch is
#: held in memory; poll() takes its wait as a C int of milliseconds; no job waits 115 days
#: for a lock.
MAX_BATCH_BYTES: Final = 1 << 30
MAX_FLUSH_INTERVAL: Final = 1e6
MAX_TIMEOUT: Final = 1e7
#: The default batch of the stream and of ``run``: each batch costs a lock hold (and an
#: fsync on network filesystems), and the flush interval, not the size, bounds how long a
#: record waits in memory.
BATCH_BYTES: Final = 1 << 20

#: ``stamp=`` as the Python API takes it: field names (a list or "a,b"), True for the
#: default set, None or False for none.
Stamp = Union[str, Sequence[str], bool, None]


class WriteOptions(NamedTuple):
    """Checked options of one record writer (see :func:`write_options`)."""

    format: str | None  # None: by OUT's name
    columns: Columns
    kv: str | None
    stamp: tuple[str, ...]
    lock: str
    sync: str
    timeout: float
    batch_bytes: int
    flush_interval: float


def check_seconds(name: str, value: object, most: float) -> float:
    """``value`` as seconds from 0 to ``most``; UsageError in the shared wording."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not (math.isfinite(value) and 0 <= value <= most)
    ):
        raise UsageError(
            f"{name} (--{name.replace('_', '-')}) must be a number of seconds from 0 to "
            f"{most:g}, not {value!r}"
        )
    return float(value)


def stamp_fields(stamp: Stamp) -> tuple[str, ...]:
    """``stamp=`` as field names: True is the default set, None and False none."""
    if stamp is True:
        return DEFAULT_STAMP
    if stamp is None or stamp is False or (not isinstance(stamp, str) and not stamp):
        return ()  # an empty list of fields is none; an empty string is a bare --stamp
    return parse_stamp(stamp)


def write_options(
    *,
    format: str | None = None,
    columns: Columns = None,
    kv: str | None = None,
    stamp: Stamp = None,
    lock: str = "auto",
    sync: str = "auto",
    timeout: float = 600.0,
    batch_bytes: int = BATCH_BYTES,
    flush_interval: float = 1.0,
) -> WriteOptions:
    """Check the shared options once; :class:`UsageError` names the first that cannot work."""
    if format == "auto":
        format = None
    if format is not None and format not in FORMATS:
        raise UsageError(
            f"format (--format) must be one of auto, {', '.join(FORMATS)}; not {format!r}"
        )
    if kv is not None and kv not in (":", "="):
        raise UsageError(f"kv (--kv) separator must be ':' or '=', not {kv!r}")
    if lock not in LOCK_KINDS:
        raise UsageError(f"lock (--lock) must be one of {', '.join(LOCK_KINDS)}; not {lock!r}")
    if sync not in SYNC_POLICIES:
        raise UsageError(f"sync (--sync) must be one of {', '.join(SYNC_POLICIES)}; not {sync!r}")
    if (
        isinstance(batch_bytes, bool)
        or not isinstance(batch_bytes, int)
        or not 1 <= batch_bytes <= MAX_BATCH_BYTES
    ):
        raise UsageError(
            f"batch_bytes (--batch-bytes) must be a whole number from 1 to {MAX_BATCH_BYTES}, "
            f"not {batch_bytes!r}"
        )
    return WriteOptions(
        format=format,
        columns=columns,
        kv=kv,
        stamp=stamp_fields(stamp),
        lock=lock,
        sync=sync,
        timeout=check_seconds("timeout", timeout, MAX_TIMEOUT),
        batch_bytes=batch_bytes,
        flush_interval=check_seconds("flush_interval", flush_interval, MAX_FLUSH_INTERVAL),
    )
