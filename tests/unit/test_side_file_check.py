"""One check decides whether a file zotsink found at a name may be written or trusted
(``fileio.side_file_problem``): no other module compares a file's owner with this user."""

from __future__ import annotations

import re
from pathlib import Path

import zotsink

OWNER_TEST = re.compile(r"st_uid\s*[!=]=\s*os\.geteuid|geteuid\(\)\s*[!=]=\s*\w+\.st_uid")


def test_only_fileio_asks_whose_a_file_is() -> None:
    root = Path(zotsink.__file__).parent
    found = sorted(
        str(p.relative_to(root)) for p in root.rglob("*.py") if OWNER_TEST.search(p.read_text())
    )
    assert found == ["_core/fileio.py"]


def test_a_side_file_is_never_created_writable_by_group_or_others(tmp_path: Path) -> None:
    """Whatever mode a caller asks for and whatever the umask, a side file (the ledger, the
    log, OUT.rejects) is its owner's to write; OUT keeps what it is asked for."""
    import os
    import stat

    from zotsink._core.fileio import open_for_append, shared_write_problem, side_bits

    assert side_bits(0o666) == 0o644 and side_bits(0o660) == 0o640 and side_bits(0o600) == 0o600
    old = os.umask(0)
    try:
        for name, side in (("ledger", True), ("out", False)):
            fd, _ = open_for_append(str(tmp_path / name), 0o666, side_file=side)
            os.close(fd)
    finally:
        os.umask(old)
    ledger, out = (os.stat(tmp_path / n) for n in ("ledger", "out"))
    assert stat.S_IMODE(ledger.st_mode) == 0o644 and shared_write_problem(ledger) is None
    assert stat.S_IMODE(out.st_mode) == 0o666
    assert shared_write_problem(out) == "group and others may write it (mode 0666)"
