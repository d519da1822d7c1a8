"""``key:value`` records: the one parser behind ``append --kv`` and ``collect --input kv``.

Seed-style tiny files and per-task programs print ``filename:x.jpg min:57 max:253``;
``--kv`` turns such lines into rows whose columns are the keys.
"""

from __future__ import annotations

import re
from typing import Final

from ..errors import RecordError

__all__ = ["kv_shaped", "parse_kv"]

#: One ``key:value`` or ``key=value`` token as programs print them: a name, then the value
#: (a URL's ``scheme://`` is no key).
_KV_TOKEN: Final = re.compile(rb"[A-Za-z_][A-Za-z0-9_.-]*[:=](?!//)")


def parse_kv(line: str, sep: str | None = ":") -> dict[str, str]:
    """Parse ``key:value`` tokens separated by whitespace into a mapping.

    A token without ``sep`` continues the previous value, joined by one space, so
    ``filename:my image.jpg`` keeps its space, and ``key: value`` (a space after the
    separator, as YAML-like files have it) reads as ``key:value``. ``sep=None`` takes
    whichever of ``:`` and ``=`` comes first in the first token. Raises
    :class:`RecordError` when the first token has no separator, a key is empty, or a key
    repeats.
    """
    tokens = line.split()
    if not tokens:
        return {}
    if sep is None:
        first = tokens[0]
        cands = [i for i in (first.find(":"), first.find("=")) if i > 0]
        if not cands:
            raise RecordError(f"not a key:value or key=value line: {_preview(line)}")
        sep = first[min(cands)]
    out: dict[str, str] = {}
    key = ""
    for tok in tokens:
        # one partition does what find and two slices did (collect calls this once a file)
        k, found, value = tok.partition(sep)
        if not found:
            if not key:
                raise RecordError(
                    f"the first token {tok!r} has no {sep!r}: expected key{sep}value tokens"
                )
            # `key: value` (a space after the separator) gives the key this value
            out[key] = out[key] + " " + tok if out[key] else tok
            continue
        if not k:
            raise RecordError(f"empty key in token {tok!r}")
        if k in out:
            raise RecordError(f"key {k!r} appears twice in {_preview(line)}")
        key = k
        out[k] = value
    return out


def kv_shaped(line: bytes, fmt: str) -> bool:
    """Whether a line is key:value records rather than a header: every field (split by
    whitespace as ``--kv`` splits, and by commas in csv) is ``key:value`` or ``key=value``.
    No header looks so, and ``filename:img1.png min:1 max:9`` taken as one would name
    OUT's single column after the first record."""
    fields = (line.replace(b",", b" ") if fmt == "csv" else line).split()
    return bool(fields) and all(_KV_TOKEN.match(f) for f in fields)


def _preview(line: str, width: int = 60) -> str:
    return repr(line if len(line) <= width else line[:width] + "...")
