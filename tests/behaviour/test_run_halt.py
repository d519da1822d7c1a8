"""``zotsink run`` halts when its tasks fail: alike from the start (the default), or after
``--halt-after N`` failures; a resubmission of a halted run tries one task first."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

from tests.ledgers import ledger_rows

Run = Callable[..., subprocess.CompletedProcess[bytes]]
#: Every task fails alike: its file is looked for in a directory that is not there.
WRONG_PATH = ("--", "python3", "-c", "import sys; open('nope/' + sys.argv[1])")


def ends(path: Path) -> list[dict[str, str]]:
    return [r for r in ledger_rows(path) if r["event"] == "end"]


def test_tasks_failing_alike_halt_the_run_and_a_resubmission_after_one(
    tmp_path: Path, zotsink: Run
) -> None:
    (tmp_path / "tasks.txt").write_text("".join(f"img{i}.png\n" for i in range(300)))
    r = zotsink("run", "tasks.txt", "out.tsv", "--jobs", "2", *WRONG_PATH)
    err = r.stderr.decode()
    assert r.returncode == 1, err
    failed = [e for e in ends(tmp_path / "out.tsv.ledger") if e["status"] == "failed"]
    assert 5 <= len(failed) <= 6, err  # the window, and the other task then running
    assert f"300 tasks: {len(failed)} failed, {300 - len(failed)} not started (they stay" in err
    assert "zotsink: error: halted: the first 5 tasks of this run all failed alike" in err
    assert "No such file or directory" in err and "--halt-after 0: never halt" in err

    r = zotsink("run", "tasks.txt", "out.tsv", "--jobs", "2", *WRONG_PATH)
    err = r.stderr.decode()
    assert r.returncode == 1, err
    assert "300 tasks: 1 failed, 299 not started (they stay to resubmit)" in err
    assert "the ledger's last 5 ended tasks failed alike and so did the first" in err
    again = [e for e in ends(tmp_path / "out.tsv.ledger") if e["status"] == "failed"]
    assert len(again) == len(failed) + 1


def test_a_mix_of_ok_and_failures_never_halts_by_default(tmp_path: Path, zotsink: Run) -> None:
    # every task but the first fails alike: one ok is enough
    (tmp_path / "tasks.txt").write_text("true\n" + "false\n" * 40)
    r = zotsink("run", "tasks.txt", "out.txt", "--shell")
    err = r.stderr.decode()
    assert r.returncode == 1, err
    assert "41 tasks: 1 ok, 40 failed;" in err and "halted" not in err
    # failures not alike (another last line of stderr) halt nothing either
    words = ("red", "green", "blue")
    (tmp_path / "mixed.txt").write_text(
        "".join(f"echo {words[i % 3]} >&2; exit 1\n" for i in range(30))
    )
    r = zotsink("run", "mixed.txt", "mixed.out", "--shell", "--jobs", "2")
    err = r.stderr.decode()
    assert "30 tasks: 30 failed;" in err and "halted" not in err, err


def test_halt_after_n_halts_after_n_failures_and_0_never(tmp_path: Path, zotsink: Run) -> None:
    (tmp_path / "tasks.txt").write_text("true\n" * 3 + "false\n" * 20)
    r = zotsink("run", "tasks.txt", "out.txt", "--shell", "--halt-after", "3")
    err = r.stderr.decode()
    assert r.returncode == 1, err
    assert "23 tasks: 3 ok, 3 failed, 17 not started (they stay to resubmit)" in err
    assert "halted: 3 tasks failed in this run (--halt-after 3)" in err
    (tmp_path / "all.txt").write_text("false\n" * 20)
    r = zotsink("run", "all.txt", "all.out", "--shell", "--halt-after", "0")
    err = r.stderr.decode()
    assert "20 tasks: 20 failed;" in err and "halted" not in err, err
