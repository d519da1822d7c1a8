"""Child processes for the pack behaviour tests (run as a script, never imported by pytest).

``writer ARCHIVE ID COUNT SEED``
    COUNT calls of ``append_members``, each a random binary member (1 B - 64 KiB) and a
    small JSON member, named ``w<ID>/<n>.bin`` and ``.json``. After each call returns it
    prints ``<name> <sha256>`` for both members: the acknowledged members.
``victim ARCHIVE FD``
    Appends one large member and its JSON, but stops halfway through writing them: once
    the header and part of the data are in the archive it writes one byte to FD and waits,
    holding the lock, to be killed.
``samples ARCHIVE ID COUNT``
    COUNT webdataset samples ``s<ID>_<n>.png`` + ``.json``, one call each.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import sys

from zotsink import append_members
from zotsink._pack import append as append_module


def writer(archive: str, ident: int, count: int, seed: int) -> None:
    rnd = random.Random(seed)
    for n in range(count):
        data = rnd.randbytes(rnd.randint(1, 64 * 1024))
        meta = json.dumps({"writer": ident, "n": n, "size": len(data)}).encode()
        members = {f"w{ident}/{n:04d}.bin": data, f"w{ident}/{n:04d}.json": meta}
        append_members(archive, members)
        for name, body in members.items():
            print(name, hashlib.sha256(body).hexdigest(), flush=True)


def victim(archive: str, fd: int) -> None:
    real = append_module.write_all

    def torn_write(out: int, data: bytes) -> int:
        if len(data) > 100_000:  # the members' block, not an index row
            os.write(out, data[: len(data) // 2])  # the headers and part of the data
            os.write(fd, b"!")
            while True:  # hold the lock until the test kills this process
                signal.pause()
        return real(out, data)

    append_module.write_all = torn_write  # type: ignore[assignment]
    append_members(archive, {"victim/big.bin": os.urandom(200_000), "victim/big.json": b"{}"})


def samples(archive: str, ident: int, count: int) -> None:
    for n in range(count):
        key = f"s{ident}_{n:04d}"
        body = hashlib.sha256(key.encode()).digest() * (n + 1)
        append_members(
            archive, {f"{key}.png": body, f"{key}.json": json.dumps({"key": key}).encode()}
        )


if __name__ == "__main__":
    kind, path, *rest = sys.argv[1:]
    if kind == "writer":
        writer(path, int(rest[0]), int(rest[1]), int(rest[2]))
    elif kind == "victim":
        victim(path, int(rest[0]))
    else:
        samples(path, int(rest[0]), int(rest[1]))
