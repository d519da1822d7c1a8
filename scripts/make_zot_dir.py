#!/usr/bin/env python3
"""Make a realistic legacy "zillions of tiny files" directory, for tests and benchmarks.

Kinds of tiny files, as job arrays leave them behind:

``seed``    the classic per-image statistics writer: one file per image in class subfolders,
            ``filename:<path> min:57 max:253 mean:82.02685546875`` and no final newline
``tsv``     one file per task, a header line then one row, ending in a newline
``csv``     the same as CSV, with CRLF line ends
``jsonl``   one JSON object per line, two records per file
``params``  parameters encoded in the name (``run_12_alpha_0.5_seed_3.dat``), ``key=value``
``mixed``   a bit of every kind above

``--dups``, ``--empty`` and ``--binary`` add copies, empty files and files that are not text.

Every value is a function of the file's index, so two runs with the same arguments give the
same bytes. Tests import the functions; the command line makes directories of any size::

    scripts/make_zot_dir.py DIR -n 27000                 # seed-style, 27 class folders
    scripts/make_zot_dir.py DIR -n 1000000 --jobs 2      # a million files, two writers
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from typing import Final

__all__ = [
    "KINDS",
    "make",
    "make_binary",
    "make_copies",
    "make_empty",
    "seed_record",
    "seed_values",
]

KINDS: Final = ("seed", "tsv", "csv", "jsonl", "params", "mixed")
#: Files per class folder in seed-style trees (ImageNet has about 1,300 per class).
PER_CLASS: Final = 1000
_FLAGS: Final = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC


def class_name(c: int) -> str:
    """A WordNet-style class folder name, as ImageNet uses (``n01440764``)."""
    return f"n{1440764 + c * 7919:08d}"


def seed_values(i: int) -> tuple[str, int, int, float]:
    """(image path, min, max, mean) of image ``i``: deterministic and cheap."""
    c = i // PER_CLASS
    cls = class_name(c)
    lo = (i * 7 + 3) % 120
    hi = 200 + (i * 13) % 56
    # a multiple of 2**-12: its repr is exact and long, like the statistics writer's output
    mean = lo + ((i * 2654435761) % (4096 * (hi - lo))) / 4096
    return f"/data/imagenet/train/{cls}/{cls}_{i}.JPEG", lo, hi, mean


def seed_record(i: int) -> str:
    path, lo, hi, mean = seed_values(i)
    return f"filename:{path} min:{lo} max:{hi} mean:{mean!r}"


def seed_path(i: int) -> str:
    """Relative path of seed file ``i`` inside its tree."""
    cls = class_name(i // PER_CLASS)
    return f"{cls}/{cls}_{i}.JPEG.txt"


def _write(path: str, data: bytes) -> None:
    fd = os.open(path, _FLAGS, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def _seed(root: str, start: int, stop: int) -> Iterator[tuple[str, bytes]]:
    made: set[str] = set()
    for i in range(start, stop):
        rel = seed_path(i)
        d = rel.rsplit("/", 1)[0]
        if d not in made:
            os.makedirs(os.path.join(root, d), exist_ok=True)
            made.add(d)
        yield rel, seed_record(i).encode()


def _tsv(root: str, start: int, stop: int) -> Iterator[tuple[str, bytes]]:
    os.makedirs(os.path.join(root, "tasks"), exist_ok=True)
    for i in range(start, stop):
        body = f"task\tscore\tlabel\n{i}\t{i * 0.25!r}\tlabel {i % 7}\n"
        yield f"tasks/task_{i:06d}.tsv", body.encode()


def _csv(root: str, start: int, stop: int) -> Iterator[tuple[str, bytes]]:
    os.makedirs(os.path.join(root, "csv"), exist_ok=True)
    for i in range(start, stop):
        body = f'task,score,note\r\n{i},{i % 97},"a, b {i}"\r\n'
        yield f"csv/out_{i:06d}.csv", body.encode()


def _jsonl(root: str, start: int, stop: int) -> Iterator[tuple[str, bytes]]:
    os.makedirs(os.path.join(root, "json"), exist_ok=True)
    for i in range(start, stop):
        body = (
            f'{{"task": {i}, "part": 1, "loss": {1 / (i + 1)!r}}}\n'
            f'{{"task": {i}, "part": 2, "loss": {1 / (i + 2)!r}, "ok": true}}\n'
        )
        yield f"json/task_{i:06d}.jsonl", body.encode()


def _params(root: str, start: int, stop: int) -> Iterator[tuple[str, bytes]]:
    os.makedirs(os.path.join(root, "runs"), exist_ok=True)
    for i in range(start, stop):
        alpha = (0.1, 0.5, 0.9)[i % 3]
        name = f"run_{i}_alpha_{alpha}_seed_{i % 5}.dat"
        yield f"runs/{name}", f"loss={i / 1000!r} acc={(i % 100) / 100!r}".encode()


_MAKERS: Final = {"seed": _seed, "tsv": _tsv, "csv": _csv, "jsonl": _jsonl, "params": _params}


def make(root: str, n: int, kind: str = "seed", start: int = 0) -> list[str]:
    """Write files ``start .. start+n-1`` of ``kind`` under ``root``; their relative paths.

    ``mixed`` spreads ``n`` over every kind (seed, tsv, csv, jsonl, params in turn).
    """
    os.makedirs(root, exist_ok=True)
    if kind == "mixed":
        out: list[str] = []
        kinds = list(_MAKERS)
        share = n // len(kinds)
        for j, k in enumerate(kinds):
            count = n - share * (len(kinds) - 1) if j == 0 else share
            out += make(root, count, k, start)
        return out
    rels = []
    for rel, data in _MAKERS[kind](root, start, start + n):
        _write(os.path.join(root, rel), data)
        rels.append(rel)
    return rels


def make_copies(root: str, rels: list[str], folder: str = "copies") -> list[str]:
    """Copy the files ``rels`` of ``root`` into ``root/folder`` (same bytes, flat names)."""
    dest = os.path.join(root, folder)
    os.makedirs(dest, exist_ok=True)
    out = []
    for rel in rels:
        with open(os.path.join(root, rel), "rb") as f:
            data = f.read()
        new = f"{folder}/{rel.replace('/', '__')}"
        _write(os.path.join(root, new), data)
        out.append(new)
    return out


def make_empty(root: str, n: int, folder: str = "empty") -> list[str]:
    if n <= 0:
        return []
    os.makedirs(os.path.join(root, folder), exist_ok=True)
    rels = [f"{folder}/empty_{i}.txt" for i in range(n)]
    for rel in rels:
        _write(os.path.join(root, rel), b"")
    return rels


def make_binary(root: str, n: int, folder: str = "binary") -> list[str]:
    """Files that are not text: NUL bytes (a stray image) and undecodable bytes (Latin-1)."""
    if n <= 0:
        return []
    os.makedirs(os.path.join(root, folder), exist_ok=True)
    rels = []
    for i in range(n):
        if i % 2 == 0:
            rel, data = (
                f"{folder}/thumb_{i}.png",
                b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR" + bytes(range(256)),
            )
        else:
            rel, data = f"{folder}/latin_{i}.txt", "filename:caf\xe9 min:1".encode("latin-1")
        _write(os.path.join(root, rel), data)
        rels.append(rel)
    return rels


def _worker(args: tuple[str, int, str, int]) -> int:
    root, n, kind, start = args
    return len(make(root, n, kind, start))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("root", help="directory to fill (created when missing)")
    p.add_argument("-n", type=int, default=27000, help="number of record files (27000)")
    p.add_argument("--kind", choices=KINDS, default="seed")
    p.add_argument("--dups", type=int, default=0, help="copies of this many files in copies/")
    p.add_argument("--empty", type=int, default=0, help="empty files in empty/")
    p.add_argument("--binary", type=int, default=0, help="binary/undecodable files in binary/")
    p.add_argument("--jobs", type=int, default=1, help="writer processes (seed kind only)")
    a = p.parse_args(argv)
    if a.jobs > 1 and a.kind == "seed":
        from multiprocessing import get_context

        # whole class folders per chunk, so no two writers create the same folder
        step = max(PER_CLASS, -(-a.n // (a.jobs * 8)) // PER_CLASS * PER_CLASS)
        chunks = [(a.root, min(step, a.n - s), a.kind, s) for s in range(0, a.n, step)]
        with get_context("spawn").Pool(a.jobs) as pool:
            made = sum(pool.map(_worker, chunks))
        rels = [seed_path(i) for i in range(min(a.dups, a.n))]
    else:
        all_rels = make(a.root, a.n, a.kind)
        made = len(all_rels)
        rels = all_rels[: a.dups]
    if a.dups:
        make_copies(a.root, rels[: a.dups])
    make_empty(a.root, a.empty)
    make_binary(a.root, a.binary)
    print(
        f"{a.root}: {made} {a.kind} files, {a.dups} copies, {a.empty} empty, {a.binary} binary",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
