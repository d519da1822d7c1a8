#!/usr/bin/env python3
"""The seed workload's per-image step, written once for every way of running it.

    seed_step.py IMAGE                                   # a command per image
    zotsink run ... --call scripts/cluster/seed_step.py:image_stats   # a function per image

As the seed does it: Pillow opens the image (PNG or JPEG, such as seed_images.py makes),
converts it to greyscale ("L") and takes its smallest, largest and mean pixel value.
``image_stats(line)`` returns the record as a mapping, columns by name; run as a command it
prints the same record as ``filename:NAME min:N max:N mean:X`` (key:value tokens, for
``zotsink --kv``), or exits 2 with a message naming the image when it cannot be read.
"""

from __future__ import annotations

import os
import sys

from PIL import Image

COLUMNS = ("filename", "min", "max", "mean")


def image_stats(line: str) -> dict[str, str]:
    """The record of the image whose path is ``line`` (a task line: trailing newline ok)."""
    path = line.rstrip("\n")
    with Image.open(path) as img:
        grey = img.convert("L")
    lo, hi = grey.getextrema()
    # the histogram is 256 counts: the mean without a pass over the pixels in Python
    hist = grey.histogram()
    mean = sum(value * count for value, count in enumerate(hist)) / sum(hist)
    return {
        "filename": os.path.basename(path),
        "min": str(lo),
        "max": str(hi),
        "mean": f"{mean:.3f}",
    }


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: seed_step.py IMAGE", file=sys.stderr)
        return 2
    try:
        record = image_stats(argv[1])
    except (OSError, ValueError) as e:  # Pillow's UnidentifiedImageError is an OSError
        print(f"{argv[1]}: cannot read the image: {e}", file=sys.stderr)
        return 2
    print(" ".join(f"{k}:{record[k]}" for k in COLUMNS))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
