"""The quick lane of collect: files like the ones before spooled straight into the table.

The quick lane (:class:`QuickLane`). Most directories given to collect hold files alike: one
``key:value`` line, the same keys in the same order in every file (``filename:x.jpg min:57
max:253 mean:82.0``). For each of them the general path (:func:`zotsink._collect.parse.parse`,
then :meth:`Table.add`) sniffs the format, builds a dict with a Python loop, looks the key
layout up, builds the row and encodes it: per file it decides again what the file before
already decided.

Once a layout (keys, separator) has been seen twice, the lane compiles one regular expression
for it, ``\\s*KEY0<sep>(\\S*)\\s+KEY1<sep>(\\S*)...\\s*``, and a file that matches it whole
is spooled straight from the match's groups. A file the lane does not take (another layout, a
second line, a value with a space in it, a NUL, bytes that are not UTF-8, a byte-order mark,
a file name ending in ``.tsv``...) goes the general way, so every message and every byte is
the general path's own. Why a match gives the very record :func:`zotsink._core.kv.parse_kv`
would: ``\\s`` is exactly what ``str.split()`` splits on (both are ``str.isspace``); every
token of a matching line is ``KEY<sep>VALUE`` with no separator in KEY (the keys came out of
parse_kv), so its first separator is the one after KEY; and a token without a separator, which
parse_kv would add to the value before it, cannot match. Sniffing gives ``kv`` with the same
separator when the first key starts with none of ``{``, ``[`` or a byte-order mark and holds
neither ``:`` nor ``=`` (see :func:`zotsink._collect.parse.sniff`).

The lane runs only where the row is that simple: TSV rows, no ``--name-pattern``, ``--dedup
exact`` or ``none``. The general path placed the layout's columns in the union when it added
the files the lane learnt from; columns are only ever appended, so they stay where they are.
The lane spools through the table's own row spooler and counters, so files taken by the lane
and files that go the general way mix freely, in order.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Final, NamedTuple

from .._core.records import encode_row
from .parse import ENDINGS
from .table import FIRST, Table, row_digest

__all__ = ["QuickLane"]

#: Layouts counted while looking for one seen twice; the count starts over past this many
#: (files that all differ must not grow a dict without end, nor compile a pattern each).
_MAX_SEEN: Final = 1024
#: Patterns compiled whatever the lane has taken, and the rows it must take for each more.
_FREE: Final = 4
_PAYBACK: Final = 32
#: Separators the sniffing can find.
_SEPS: Final = (":", "=")

Match = Callable[[str], "re.Match[str] | None"]


def _pattern(keys: tuple[str, ...], sep: str) -> Match | None:
    """The fullmatch of a line of exactly these keys, or None when the lane cannot promise
    the general path's result for them (see the module's docstring)."""
    if any(not k or sep in k or len(k.split()) != 1 for k in keys):
        return None  # not a key parse_kv can give (cannot happen: a guard, not a case)
    k0 = keys[0]
    if k0[0] in "{[\ufeff" or any(s in k0 for s in _SEPS):
        return None  # sniffing could see JSON, a BOM or the other separator
    fields = [re.escape(k + sep) + r"(\S*)" for k in keys]
    return re.compile(r"\s*" + r"\s+".join(fields) + r"\s*").fullmatch


class _Armed(NamedTuple):
    """What the lane needs of one layout: its line pattern and where its cells go."""

    match: Match
    template: str | None  # cells of a row, for str.format; None: in key order, joined by tabs
    idx: list[int] | None  # as Table.layout() gives it: the column of each key (None: in order)
    span: int  # the row's cells after the fixed columns


class QuickLane:
    """The quick way through parse and :meth:`Table.add` for files like the ones before (see
    the module's docstring).

    :meth:`take` spools a file and says True, or says False having changed nothing: the
    caller then parses it and adds it as usual, and shows the result to :meth:`learn`.
    """

    def __init__(self, table: Table, mode: str) -> None:
        self.table = table
        self._auto = mode == "auto"  # else kv: the ending of a file name does not matter
        self._exact = table.dedup == "exact"
        self._nsrc = 1 if table.source else 0
        self._nfix = len(table.fixed)
        self._last = table.state.last_source  # read from OUT before the table was made
        # the last file name ending that decided no format; none yet (a base has no "/")
        self._end = "/"
        self._seen: dict[tuple[tuple[str, ...], str], int] = {}
        self._general = 0  # records the general path was given since the lane was made
        self._compiled = 0  # patterns compiled
        self._armed: dict[tuple[tuple[str, ...], str], _Armed | None] = {}
        self._at: tuple[tuple[str, ...], str] | None = None  # the armed layout and separator
        # the armed layout's parts, spread out: take() reads them once a file
        self._match: Match | None = None
        self._template: str | None = None
        self._cells = 0  # cells of a row, the source cell included
        self._lay: _Armed | None = None
        self._put = table.row_spooler()

    @staticmethod
    def usable(table: Table, mode: str) -> bool:
        """Whether the lane can run for this table and ``--input`` at all."""
        return (
            mode in ("auto", "kv")
            and table.fmt == "tsv"
            and table.pattern is None
            and table.dedup in ("exact", "none")
        )

    def take(self, data: bytes, name: str, base: str) -> bool:
        """Spool the file ``data`` as the general path would and say True; or False."""
        match = self._match
        if match is None:
            return False
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return False
        # NUL is the same byte and character in UTF-8: cheaper to find in the text
        if "\n" in text or "\0" in text:
            return False  # several lines (several records, or blank lines) or binary
        if self._auto and not base.endswith(self._end) and not self._plain_end(base):
            return False  # the ending decides the format
        m = match(text)
        if m is None or name == self._last:
            return False  # _last: its rows already in OUT are counted off one by one
        vals = m.groups()
        template = self._template
        cells = "\t".join(vals) if template is None else template.format(*vals)
        # a value holds no whitespace: only a backslash there, or an odd file name, needs
        # escapes (encode_row's test, in fewer scans)
        if "\\" in cells or (
            self._nsrc and ("\\" in name or "\t" in name or "\n" in name or "\r" in name)
        ):
            row = (encode_row(self._row(name, vals), "tsv") + "\n").encode(
                "utf-8", "surrogateescape"
            )
            # the identity, as Table.add takes it: the row less its source cell
            ident = row_digest(row.partition(b"\t")[2] if self._nsrc else row)
        else:
            row = (f"{name}\t{cells}\n" if self._nsrc else cells + "\n").encode(
                "utf-8", "surrogateescape"
            )
            # the same identity, from the cells before they were joined to the name
            ident = row_digest(cells.encode("utf-8"))
        t = self.table
        if self._exact:
            seen = t.seen
            if ident in seen:
                t.duplicates += 1
                return True
            seen.add(ident)
        # records are ranked (Table.add's order) only for --dedup key, which never takes this lane
        self._put(row, self._cells, FIRST)
        return True

    def _row(self, name: str, vals: tuple[str, ...]) -> list[str]:
        """The row's cells as Table.add builds them, for encode_row to escape."""
        lay = self._lay
        assert lay is not None  # armed
        if lay.idx is None:
            full = list(vals)
        else:
            full = [""] * lay.span
            for i, v in zip(lay.idx, vals):
                full[i - self._nfix] = v
        return [name, *full] if self._nsrc else full

    def _plain_end(self, base: str) -> bool:
        """Whether a file name's ending leaves the format to the sniffing, as in
        :func:`zotsink._collect.parse.sniff`; if so the next names are tried against it."""
        dot = base.rfind(".")
        if dot < 0:
            return True
        if base[dot:].lower() in ENDINGS:
            return False
        # it holds one dot, its first character: a name ending in it has its last dot there
        self._end = base[dot:]
        return True

    def learn(self, data: bytes, recs: list[dict[str, str]]) -> None:
        """Arm the lane for the layout of a file the general path took, once seen twice."""
        self._general += len(recs)
        if len(recs) != 1 or not recs[0]:
            return
        keys = tuple(recs[0])
        text = data.decode("utf-8")  # parse() decoded it: this cannot fail
        if text[:1] == "\ufeff":
            text = text[1:]
        # the separator, as the usual line shows it right after its first key (any other
        # line, or a guess that parse did not make, only arms a pattern that never matches)
        sep = text[len(keys[0]) : len(keys[0]) + 1] if text.startswith(keys[0]) else ""
        if sep not in _SEPS:
            return  # not key:value, or not the usual line
        at = (keys, sep)
        if at == self._at:
            return  # armed for it already: that file missed for another reason
        if at not in self._armed:
            n = self._seen.get(at, 0) + 1
            if n < 2 or not self._affordable():
                if len(self._seen) >= _MAX_SEEN:
                    self._seen.clear()
                self._seen[at] = n
                return
            del self._seen[at]
            if len(self._armed) >= _MAX_SEEN:
                self._armed.clear()
            self._armed[at] = self._arm(*at)
            self._compiled += 1  # or found it could not: as rare
        lay = self._armed[at]
        if lay is not None:
            self._at, self._lay = at, lay
            self._match, self._template = lay.match, lay.template
            self._cells = self._nsrc + lay.span

    def _affordable(self) -> bool:
        """Whether one more pattern may be compiled: a compile costs what the lane saves on
        some 20 files, so past the first few the lane must have taken _PAYBACK rows for each
        (rows the general path spooled do not count), or a directory whose layouts each
        fill only a few files would be slower than without the lane."""
        # rows spooled less records the general path was given: what the lane spooled, or
        # fewer when the general path dropped duplicates
        lane_rows = self.table.records - self._general
        return self._compiled < _FREE or lane_rows >= _PAYBACK * self._compiled

    def _arm(self, keys: tuple[str, ...], sep: str) -> _Armed | None:
        match = _pattern(keys, sep)
        if match is None:
            return None
        # the file's add() placed the keys: a layout's columns never move (only appended to)
        idx, width = self.table.layout(keys)
        span = width - self._nfix
        if idx is None:
            return _Armed(match, None, None, span)
        cols = {c - self._nfix: i for i, c in enumerate(idx)}
        template = "\t".join(f"{{{cols[j]}}}" if j in cols else "" for j in range(span))
        return _Armed(match, template, idx, span)
