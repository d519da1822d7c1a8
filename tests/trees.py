"""Directories of tiny files for the collect tests."""

from __future__ import annotations

import os
import time
from pathlib import Path


def make_tree(root: Path, spec: dict[str, bytes] | dict[str, str], age: float = 0.0) -> Path:
    """Write ``spec`` (relative path -> bytes or text) under ``root``; ``age``: seconds in
    the past for every file's times."""
    now = time.time()
    for rel, data in spec.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data.encode() if isinstance(data, str) else data)
        if age:
            os.utime(p, (now - age, now - age))
    return root
