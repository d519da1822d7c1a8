"""``zotsink collect`` acceptance: 27,000 tiny files, copies, tar, resume, archive, binary.

Every check reads OUT and the tiny files with the small parsers below, not with zotsink's
own (``parse_kv``, ``decode_row``), so a bug shared by writer and reader cannot hide.
"""

from __future__ import annotations

import fcntl
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
ZOTSINK = [sys.executable, "-m", "zotsink"]
N = 27000


def _load_maker() -> Any:
    spec = importlib.util.spec_from_file_location("make_zot_dir", ROOT / "scripts/make_zot_dir.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


mzd = _load_maker()

# -- independent readers -----------------------------------------------------------------


def read_table(path: Path) -> tuple[list[str], list[list[str]]]:
    """Header and rows of a TSV file: TAB-split lines, PostgreSQL text escapes undone."""
    data = path.read_bytes()
    assert data.endswith(b"\n"), "OUT must end with a newline"
    lines = data.decode("utf-8").split("\n")[:-1]

    def unesc(v: str) -> str:
        out, i = [], 0
        while i < len(v):
            if v[i] == "\\" and i + 1 < len(v):
                out.append({"t": "\t", "n": "\n", "r": "\r", "\\": "\\"}[v[i + 1]])
                i += 2
            else:
                out.append(v[i])
                i += 1
        return "".join(out)

    rows = [[unesc(c) for c in ln.split("\t")] for ln in lines]
    return rows[0], rows[1:]


def kv_file(path: Path) -> dict[str, str]:
    """The record of one seed-style file: space-separated key:value tokens."""
    text = path.read_text()
    assert not text.endswith("\n")  # the legacy writer's habit this test is about
    return dict(tok.split(":", 1) for tok in text.split(" "))


def run(
    *args: str | os.PathLike[str], cwd: Path, input: bytes = b""
) -> subprocess.CompletedProcess:
    r = subprocess.run(
        [*ZOTSINK, "collect", *map(str, args)], cwd=cwd, capture_output=True, input=input,
        timeout=120,
    )  # fmt: skip
    assert b"Traceback" not in r.stderr, r.stderr.decode()
    return r


@pytest.fixture(scope="module")
def seed_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """27,000 seed-style files in 27 class folders (made once per test worker).

    On tmpfs when there is one: creating 27,000 inodes on a busy disk takes tens of
    seconds, on tmpfs a fraction of one.
    """
    shm = "/dev/shm"
    if os.path.isdir(shm) and os.access(shm, os.W_OK):
        base = Path(tempfile.mkdtemp(prefix="zotsink-test-", dir=shm))
    else:
        base = tmp_path_factory.mktemp("seed")
    d = base / "images"
    mzd.make(str(d), N, "seed")
    yield d
    shutil.rmtree(base, ignore_errors=True)


def _expected(d: Path) -> dict[str, dict[str, str]]:
    return {str(p.relative_to(d)): kv_file(p) for p in sorted(d.rglob("*.txt")) if p.is_file()}


# -- 1. 27,000 kv files --------------------------------------------------------------------


def test_27000_kv_files_become_27000_rows(seed_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "stats.tsv"
    r = run(seed_dir, "-o", out, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    header, rows = read_table(out)
    assert header == ["source", "filename", "min", "max", "mean"]
    assert len(rows) == N
    want = _expected(seed_dir)
    assert len(want) == N
    got = {row[0]: dict(zip(header[1:], row[1:])) for row in rows}
    assert got == want  # each file named once, its values exactly
    assert [row[0] for row in rows] == sorted(got)  # sorted path order
    assert b"27000 files, 27000 records, 0 duplicates dropped" in r.stderr


# -- 2. copies in a second folder ----------------------------------------------------------


def _copies(seed_dir: Path, dest: Path, count: int) -> list[Path]:
    made = []
    for i in range(count):
        src = seed_dir / mzd.seed_path(i * 27)  # spread over every class folder
        target = dest / src.relative_to(seed_dir)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target)
        made.append(target)
    return made


def test_copies_are_dropped_and_counted(seed_dir: Path, tmp_path: Path) -> None:
    copies = tmp_path / "copies"
    _copies(seed_dir, copies, 1000)
    out = tmp_path / "all.tsv"
    r = run(seed_dir, copies, "-o", out, "--dedup", "exact", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    _header, rows = read_table(out)
    assert len(rows) == N
    assert len({tuple(row[1:]) for row in rows}) == N
    assert b"1000 duplicates dropped" in r.stderr
    # the first in path order is kept: the original folder was named first
    assert all(row[0].startswith(str(seed_dir)) for row in rows)


def test_key_mode_keeps_the_newest_by_mtime(seed_dir: Path, tmp_path: Path) -> None:
    newer = tmp_path / "rerun"
    made = _copies(seed_dir, newer, 1000)
    for p in made:  # a rerun with other values, written later
        rec = kv_file(p)
        rec["min"] = "999"
        p.write_text(" ".join(f"{k}:{v}" for k, v in rec.items()))
        st = os.stat(p)
        os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 10**10))
    out = tmp_path / "keyed.tsv"
    r = run(newer, seed_dir, "-o", out, "--dedup", "key", "--key", "filename", "--keep", "last",
            cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr
    header, rows = read_table(out)
    assert len(rows) == N
    by_name = {row[1]: dict(zip(header, row)) for row in rows}
    assert len(by_name) == N
    rerun = {kv_file(p)["filename"] for p in made}
    for fn, row in by_name.items():
        assert (row["min"] == "999") == (fn in rerun)
        assert row["source"].startswith(str(newer if fn in rerun else seed_dir))
    assert b"1000 key conflicts" in r.stderr
    # with the rerun older than the originals, the originals win
    for p in made:
        st = os.stat(p)
        os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns - 10**11))
    out2 = tmp_path / "keyed2.tsv"
    r = run(newer, seed_dir, "-o", out2, "--dedup", "key", "--key", "filename", "--keep", "last",
            cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr
    _h, rows2 = read_table(out2)
    assert len(rows2) == N and not any(row[2] == "999" for row in rows2)


# -- 3. the same directory as a .tar.gz, read in place -------------------------------------


def test_tar_gz_in_place_gives_the_same_rows(seed_dir: Path, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    archive = work / "images.tar.gz"
    # GNU tar stores members in directory order (unsorted): collect must sort them
    subprocess.run(["tar", "-C", str(seed_dir), "-czf", str(archive), "."], check=True)
    from_dir = tmp_path / "from_dir.tsv"
    assert run(seed_dir, "-o", from_dir, cwd=tmp_path).returncode == 0
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir()
    before = sorted(os.listdir(work))
    r = subprocess.run(
        [*ZOTSINK, "collect", "images.tar.gz", "-o", "from_tar.tsv"], cwd=work,
        capture_output=True, env={**os.environ, "TMPDIR": str(tmpdir)}, timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(work)) == sorted([*before, "from_tar.tsv"])  # nothing extracted
    assert os.listdir(tmpdir) == []  # no staging left behind (27,000 tiny files stay in memory)
    assert (work / "from_tar.tsv").read_bytes() == from_dir.read_bytes()


# -- 4. name patterns, resume after kill -9, archive and remove ----------------------------


def test_name_pattern_groups_become_columns(tmp_path: Path) -> None:
    d = tmp_path / "runs"
    mzd.make(str(d), 30, "params")
    r = run(d, "-o", tmp_path / "runs.tsv",
            "--name-pattern", r"run_(?P<run>\d+)_alpha_(?P<alpha>[^_]+)_seed_(?P<seed>\d+)\.dat",
            cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr
    header, rows = read_table(tmp_path / "runs.tsv")
    assert header == ["source", "run", "alpha", "seed", "loss", "acc"]
    assert len(rows) == 30
    for row in rows:
        rec = dict(zip(header, row))
        assert rec["source"] == (
            f"runs/run_{rec['run']}_alpha_{rec['alpha']}_seed_{rec['seed']}.dat"
        )
        i = int(rec["run"])
        assert rec["alpha"] == str((0.1, 0.5, 0.9)[i % 3]) and rec["seed"] == str(i % 5)
        assert rec["loss"] == repr(i / 1000)


def test_kill_9_mid_collect_then_skip_collected_gives_each_record_once(
    tmp_path: Path, reap: Any
) -> None:
    d = tmp_path / "images"
    n = 3000
    mzd.make(str(d), n, "seed")
    out = tmp_path / "stats.tsv"
    fd = os.open(out, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)  # the collect will read everything, then wait for this
    # one file per batch: thousands of appends, so the kill lands between two of them
    p = reap(subprocess.Popen(
        [*ZOTSINK, "collect", str(d), "-o", str(out), "--batch-bytes", "1"],
        stderr=subprocess.PIPE,
    ))  # fmt: skip
    fcntl.flock(fd, fcntl.LOCK_UN)
    while os.fstat(fd).st_size == 0:  # wait for its first batch
        assert p.poll() is None, p.stderr.read()
    fcntl.flock(fd, fcntl.LOCK_EX)  # now it is between batches, not inside a write
    p.send_signal(signal.SIGKILL)
    p.wait()
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)
    _h, partial = read_table(out)
    assert 0 < len(partial) < n, "the kill came too late to test a resume"
    r = run(d, "-o", out, "--skip-collected", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    header, rows = read_table(out)
    assert header == ["source", "filename", "min", "max", "mean"]
    assert sorted(row[0] for row in rows) == sorted(_expected(d))  # each file exactly once
    assert {row[0]: dict(zip(header[1:], row[1:])) for row in rows} == _expected(d)
    # the last source of the first run is read again, but its row is not written twice
    if len(partial) > 1:
        assert f"{len(partial) - 1} already collected".encode() in r.stderr


def test_torn_last_write_is_completed_by_skip_collected(tmp_path: Path) -> None:
    d = tmp_path / "images"
    mzd.make(str(d), 200, "seed")
    out = tmp_path / "stats.tsv"
    assert run(d, "-o", out, cwd=tmp_path).returncode == 0
    whole = out.read_bytes()
    # a kill inside write(): the last batch stops in the middle of a row
    cut = whole.rindex(b"\n", 0, len(whole) // 2) + 1
    out.write_bytes(whole[: cut + 25])
    r = run(d, "-o", out, "--skip-collected", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert b"torn line" in r.stderr and b"verify --repair" in r.stderr
    lines = out.read_bytes().split(b"\n")[:-1]
    fragment = whole[cut : cut + 25]
    assert lines.count(fragment) == 1  # the fragment stays a line of its own, for verify
    good = [ln for ln in lines if ln != fragment]
    assert sorted(good) == sorted(whole.split(b"\n")[:-1])  # every row exactly once


def test_archive_then_remove_sources(tmp_path: Path) -> None:
    d = tmp_path / "mess"
    kept_rel = mzd.make_binary(str(d), 4)
    made = mzd.make(str(d), 300, "seed")
    empty = mzd.make_empty(str(d), 3)  # never removed: a task may not have written them yet
    (d / "bad.txt").write_text("no separator here\nmin:1")  # a line that is not key:value
    kept_rel.append("bad.txt")
    os.symlink(d / made[0], d / "link.txt")
    content = {rel: (d / rel).read_bytes() for rel in made + empty}
    out, archive = tmp_path / "all.tsv", tmp_path / "mess.tar.gz"
    r = run(d, "-o", out, "--remove-sources", cwd=tmp_path)
    assert r.returncode == 2 and b"--archive" in r.stderr and b"--yes" in r.stderr
    assert not out.exists() and all((d / rel).exists() for rel in made)
    # --min-age 0: these files were written a moment ago and no task is writing them
    r = run(d, "-o", out, "--archive", archive, "--remove-sources", "--input", "kv",
            "--min-age", "0", cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr
    _h, rows = read_table(out)
    assert len(rows) == 300
    for rel in made:  # exactly the collected files are gone ...
        assert not (d / rel).exists(), rel
    for rel in kept_rel + empty:  # ... binary, undecodable, unparsable and empty ones stay
        assert (d / rel).exists(), rel
    assert (d / "link.txt").is_symlink()  # never followed, never removed
    with tarfile.open(archive) as tar:  # the archive reads back with every collected file
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    assert members == content
    assert b"removed 300 collected files; kept 3" in r.stderr


# -- 5. binary and undecodable files --------------------------------------------------------


def test_binary_and_undecodable_files_are_skipped_counted_listed(tmp_path: Path) -> None:
    d = tmp_path / "mess"
    mzd.make(str(d), 20, "seed")
    bad = mzd.make_binary(str(d), 4)
    out = tmp_path / "o.tsv"
    r = run(d, "-o", out, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    _h, rows = read_table(out)
    assert len(rows) == 20
    err = r.stderr.decode()
    assert "20 files, 20 records, 0 duplicates dropped, 0 key conflicts, 4 skipped" in err
    for rel in bad:
        line = next(ln for ln in err.splitlines() if rel in ln)
        assert ("binary" in line) if rel.endswith(".png") else ("undecodable" in line)
    out.unlink()
    r = run(d, "-o", out, "--strict", cwd=tmp_path)
    assert r.returncode == 1
    assert r.stderr.decode().startswith("zotsink: error: ")
    assert "binary/latin_1.txt" in r.stderr.decode() or "binary/thumb_0.png" in r.stderr.decode()
    assert not out.exists()
