#!/usr/bin/env python3
"""The per-image processor of the seed workload: one record per image.

    seed_process.py IMAGE

Prints ``filename:NAME min:N max:N mean:X`` (key:value tokens, for ``zotsink --kv``):
the smallest, largest and mean channel value of a binary PPM (P6) image such as those
seed_images.py makes. Exit 2 with a message on stderr when IMAGE is not such a file.
"""

from __future__ import annotations

import os
import sys


def stats(data: bytes) -> tuple[int, int, float]:
    """(min, max, mean) of the pixel bytes of a P6 image with maxval 255."""
    # The header is four whitespace-separated fields and then exactly ONE whitespace
    # byte: the pixels may start with bytes that look like whitespace themselves.
    fields = data.split(maxsplit=3)
    if len(fields) < 4 or fields[0] != b"P6" or not fields[3].startswith(b"255"):
        raise ValueError("not a binary PPM (P6) image with maxval 255")
    width, height = int(fields[1]), int(fields[2])
    pixels = fields[3][4:]
    if len(pixels) != width * height * 3 or not pixels:
        raise ValueError(f"{len(pixels)} bytes of pixels for {width}x{height}")
    return min(pixels), max(pixels), sum(pixels) / len(pixels)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: seed_process.py IMAGE", file=sys.stderr)
        return 2
    try:
        with open(argv[1], "rb") as f:
            lo, hi, mean = stats(f.read())
    except (OSError, ValueError) as e:
        print(f"{argv[1]}: {e}", file=sys.stderr)
        return 2
    print(f"filename:{os.path.basename(argv[1])} min:{lo} max:{hi} mean:{mean:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
