"""recover appends each spill file exactly once: also when several run at once, and after a
recover died between OUT's fsync and the spill file's removal (see tests/test_recover.py)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from zotsink._core.sidefiles import JOURNAL_SUFFIX, find_spills


def test_recovers_running_at_once_append_each_spill_once(
    tmp_path: Path, zotsink_cmd: list[str], child_env, reap
) -> None:
    out = tmp_path / "out.txt"
    out.touch()
    expected = []
    for n in range(40):  # spill files of a finished writer on another host
        recs = [f"s{n:02d}-r{i:04d}\n".encode() for i in range(1000)]
        (tmp_path / f"out.txt.spill.node7.{1000 + n}").write_bytes(b"".join(recs))
        expected += recs
    procs = [
        reap(
            subprocess.Popen(
                [*zotsink_cmd, "recover", str(out)],
                stderr=subprocess.PIPE,
                env=child_env(),
            )
        )
        for _ in range(4)
    ]
    total = 0
    for p in procs:
        _, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        m = re.fullmatch(
            rb"zotsink: recovered (\d+) records? from (\d+) spill files? into .*\n", err
        )
        assert m, err
        total += int(m[1])
    assert sorted(out.read_bytes().splitlines(keepends=True)) == sorted(expected)
    assert total == len(expected)
    assert not list(tmp_path.glob("out.txt.spill.*"))


def test_a_stale_journal_does_not_stop_a_recover(tmp_path: Path, zotsink) -> None:
    out = tmp_path / "out.txt"
    out.write_bytes(b"first\n")
    spill = tmp_path / "out.txt.spill.node7.1"
    spill.write_bytes(b"a\nb\n")
    # a journal of other content, or a damaged one: it proves nothing
    Path(str(spill) + JOURNAL_SUFFIX).write_text("0" * 64 + " 1 2 0 4 " + "f" * 64 + "\n")
    assert find_spills(str(out)) == [str(spill)]  # the journal is not a spill file
    r = zotsink("recover", out)
    assert r.returncode == 0, r.stderr
    assert out.read_bytes() == b"first\na\nb\n"
    assert not list(tmp_path.glob("out.txt.spill.*"))


def test_a_journal_without_its_spill_file_is_cleared(tmp_path: Path, zotsink) -> None:
    out = tmp_path / "out.txt"
    out.write_bytes(b"first\n")
    orphan = tmp_path / f"out.txt.spill.node7.1{JOURNAL_SUFFIX}"
    orphan.write_text("left by a recover that died after removing the spill file\n")
    r = zotsink("recover", out)
    assert r.returncode == 0, r.stderr
    assert out.read_bytes() == b"first\n"
    assert not orphan.exists()
