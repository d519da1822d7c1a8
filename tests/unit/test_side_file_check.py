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
