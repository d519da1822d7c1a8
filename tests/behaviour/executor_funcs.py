"""Functions the Executor's tests submit: importable by name, as the elements import them.

``witness`` is how a test sees which calls began and how often: each call takes an
exclusive ``fcntl`` lock on a file named by its call's id (``ZOTSINK_CALL_ID``) in
``base/witness`` (a second holder at once is a call run twice at once, noted in
``base/double``), appends a line to it (one line per beginning: its key and pid), and,
unless its key is below ``free`` or ``base/go`` exists, waits for ``base/go`` (a file the
test creates: an event, not a sleep).
"""

from __future__ import annotations

import fcntl
import os
import time


def square(x: int) -> int:
    return x * x


def boom(i: int, bad: int) -> int:
    if i == bad:
        raise ValueError(f"item {i} is bad")
    return i


def echo(*args: object, **kwargs: object) -> list[object]:
    return [list(args), kwargs]


def witness(key: int, base: str, free: int = 0) -> int:
    path = os.path.join(base, "witness", os.environ["ZOTSINK_CALL_ID"])
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            open(os.path.join(base, "double", f"{key}.{os.getpid()}"), "w").close()
            raise
        os.write(fd, f"began {key} {os.getpid()}\n".encode())
        if key >= free:
            while not os.path.exists(os.path.join(base, "go")):
                time.sleep(0.01)
        return key * key
    finally:
        os.close(fd)


def big(size: int) -> str:
    return "x" * size


def a_set() -> set[int]:
    return {1, 2}


def dies(x: int) -> int:
    os._exit(3)
