#!/usr/bin/env python3
"""Make N EuroSAT-like 64x64 RGB images and a task list naming them, one per line.

    seed_images.py DIR N [--tasks FILE] [--format png|jpeg]

EuroSAT tiles are 64x64 satellite crops of ten land-cover classes. These are stand-ins of
the same size and kind: each image is a grid of 8x8 patches in the colours of one class
(forest, water, crops, urban, ...), with per-pixel noise, written with Pillow as PNG (or
JPEG, as EuroSAT ships them), so the per-image step (seed_step.py) decodes a real image
format as the seed does. Image i is the same on every run (seeded by i), so results can be
compared across runs. The task list (default DIR/tasks.txt) holds the images' absolute
paths in order: task number i is image i.
"""

from __future__ import annotations

import argparse
import os
import random
import sys

from PIL import Image

SIZE = 64
PATCH = 8
# (class, palette of patch colours)
CLASSES = (
    ("AnnualCrop", ((170, 150, 90), (150, 160, 80), (190, 170, 110))),
    ("Forest", ((30, 70, 35), (40, 90, 45), (25, 60, 30))),
    ("HerbaceousVegetation", ((90, 120, 60), (110, 130, 70), (80, 110, 55))),
    ("Highway", ((120, 120, 120), (90, 110, 70), (140, 140, 135))),
    ("Industrial", ((150, 150, 155), (120, 115, 110), (180, 180, 185))),
    ("Pasture", ((100, 150, 70), (120, 160, 80), (90, 140, 60))),
    ("PermanentCrop", ((120, 130, 70), (140, 120, 80), (100, 120, 60))),
    ("Residential", ((160, 140, 130), (130, 120, 110), (100, 110, 90))),
    ("River", ((40, 70, 110), (60, 100, 70), (50, 80, 120))),
    ("SeaLake", ((20, 50, 90), (25, 55, 100), (15, 45, 85))),
)
# keep the low 5 bits of a random byte: noise of 0..31 on each channel
NOISE = bytes(b & 0x1F for b in range(256))


def image(index: int) -> tuple[str, bytes]:
    """(class name, the RGB pixel bytes, row by row) of image ``index``."""
    rng = random.Random(index)
    name, palette = CLASSES[index % len(CLASSES)]
    rows = []
    for _ in range(SIZE // PATCH):
        row = b"".join(bytes(rng.choice(palette)) * PATCH for _ in range(SIZE // PATCH))
        rows.append(row * PATCH)
    base = b"".join(rows)
    noise = rng.randbytes(len(base)).translate(NOISE)
    # XOR with values under 32 leaves every channel near its patch colour
    pixels = (int.from_bytes(base, "big") ^ int.from_bytes(noise, "big")).to_bytes(len(base), "big")
    return name, pixels


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir")
    parser.add_argument("n", type=int)
    parser.add_argument("--tasks", help="task list to write (default DIR/tasks.txt)")
    parser.add_argument("--format", choices=("png", "jpeg"), default="png")
    args = parser.parse_args(argv)
    if args.n < 1:
        parser.error("N must be at least 1")
    out_dir = os.path.abspath(args.dir)
    os.makedirs(out_dir, exist_ok=True)
    paths = []
    for i in range(args.n):
        name, pixels = image(i)
        path = os.path.join(out_dir, f"{name}_{i:05d}.{'jpg' if args.format == 'jpeg' else 'png'}")
        Image.frombytes("RGB", (SIZE, SIZE), pixels).save(path, args.format.upper())
        paths.append(path)
    tasks = args.tasks or os.path.join(out_dir, "tasks.txt")
    with open(tasks, "w") as f:
        f.writelines(p + "\n" for p in paths)
    print(f"{args.n} images in {out_dir}, task list {tasks}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
