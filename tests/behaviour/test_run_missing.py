"""``zotsink missing --ledger``: resubmission specs from the ledger, chunked and split."""

from __future__ import annotations

import random
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.ledgers import Book

Run = Callable[..., subprocess.CompletedProcess[bytes]]
N = 27000


def expand(spec: str) -> list[int]:
    out: list[int] = []
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


@pytest.fixture
def ledger(tmp_path: Path) -> tuple[Path, Path, dict[int, str]]:
    """27,000 tasks, all ok but 50 scattered ones: failed, lost, interrupted or never run."""
    tasks = tmp_path / "images.txt"
    tasks.write_text("".join(f"img_{i:05d}.jpg\n" for i in range(1, N + 1)))
    rng = random.Random(2026)
    kinds = ["failed", "lost", "interrupted", "never"]
    bad = {n: rng.choice(kinds) for n in rng.sample(range(1, N + 1), 50)}
    path = tmp_path / "out.tsv.ledger"
    book = Book(path, job="4242")
    dead = Book(path, job="4242", pid=999999999, start="1")  # a run process that is gone
    for n in range(1, N + 1):
        key = f"img_{n:05d}.jpg"
        state = bad.get(n, "ok")
        if state == "never":
            continue
        if state == "lost":  # claimed and begun by the run that is gone: no end
            dead.claim(n, 1, key).begin(n, 1, pid=999999999, start="1")
            continue
        book.claim(n, 1, key).begin(n, 1).end(
            n, 1, status=state, code="0" if state == "ok" else "1"
        )
    book.write()
    dead.write()
    return tasks, path, bad


def test_chunked_spec_names_the_chunks_with_non_ok_tasks(ledger, zotsink: Run) -> None:
    tasks, path, bad = ledger
    r = zotsink(
        "missing", tasks, "--ledger", path, "--chunk", "100", "--array", "--max-array", "1001"
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.decode().splitlines()
    assert len(lines) == 1
    spec, base = lines[0].split(" ")
    assert base == "1"
    assert expand(spec) == sorted({(n - 1) // 100 + 1 for n in bad})

    only = zotsink(
        "missing", tasks, "--ledger", path, "--chunk", "100", "--array", "--state", "failed,never"
    )
    want = {(n - 1) // 100 + 1 for n, s in bad.items() if s in ("failed", "never")}
    assert expand(only.stdout.decode().strip()) == sorted(want)


def test_unchunked_spec_is_split_under_max_array(ledger, zotsink: Run) -> None:
    tasks, path, bad = ledger
    r = zotsink("missing", tasks, "--ledger", path, "--array", "--max-array", "1001")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.decode().splitlines()
    assert len(lines) > 1
    got = []
    for line in lines:
        spec, base = line.split(" ")
        for index in expand(spec):
            assert 1 <= index <= 1000  # what sbatch --array accepts under MaxArraySize=1001
            got.append(index - int(base) + 1)  # the task that `run --base BASE` runs for it
    assert sorted(got) == sorted(bad)


def test_run_with_the_printed_base_runs_the_missing_task(ledger, zotsink: Run) -> None:
    tasks, path, bad = ledger
    r = zotsink("missing", tasks, "--ledger", path, "--array", "--max-array", "1001")
    spec, base = r.stdout.decode().splitlines()[-1].split(" ")
    index = expand(spec)[-1]
    done = zotsink("run", tasks, "out.tsv", "--index", str(index), "--base", base, "--", "echo")
    assert done.returncode == 0, done.stderr
    assert (tasks.parent / "out.tsv").read_text() == f"img_{max(bad):05d}.jpg\n"


def test_lines_mode_lists_the_task_lines(ledger, zotsink: Run) -> None:
    tasks, path, bad = ledger
    r = zotsink("missing", tasks, "--ledger", path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.decode().splitlines() == [f"img_{n:05d}.jpg" for n in sorted(bad)]


def test_a_split_with_bases_below_one_says_why_they_are_right(ledger, zotsink: Run) -> None:
    tasks, path, _bad = ledger
    r = zotsink("missing", tasks, "--ledger", path, "--array", "--max-array", "1001")
    bases = [int(line.split(" ")[1]) for line in r.stdout.decode().splitlines()]
    assert min(bases) < 1
    err = b" ".join(r.stderr.split())
    assert b"do not fit under --max-array 1001: each line is SPEC BASE" in err
    assert b"index I runs chunk I-BASE+1" in err
    # a spec that fits needs no word
    r = zotsink(
        "missing", tasks, "--ledger", path, "--chunk", "100", "--array", "--max-array", "1001"
    )
    assert r.returncode == 0 and r.stderr == b""
