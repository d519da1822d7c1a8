"""Reading a file on the GlusterFS volume once the bytes written elsewhere have arrived."""

from __future__ import annotations

import time
from pathlib import Path


def read_settled(path: Path, size: int, timeout: float = 10.0) -> bytes:
    """``path``'s bytes once its size is ``size`` (or, failing that, after ``timeout``).

    A client serves a stale size for up to the FUSE attribute timeout (1 s by default)
    after a write through another client, and reads stop at that size: the mount catches
    up, it is not told. A record that never arrives leaves the size short, and the
    caller's comparison of the bytes fails after ``timeout``.
    """
    deadline = time.monotonic() + timeout
    while path.stat().st_size != size and time.monotonic() < deadline:
        time.sleep(0.05)
    return path.read_bytes()
