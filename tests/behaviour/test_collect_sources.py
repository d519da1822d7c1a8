"""collect's sources: walks, path lists, tar archives, exclusions and the reader paths."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

import zotsink._collect.read as collect_read
from zotsink import collect

ZOTSINK = [sys.executable, "-m", "zotsink"]


def rows(path: Path) -> list[list[str]]:
    """Lines of a TSV OUT split on TAB (no escapes in these tests), header first."""
    text = path.read_text()
    assert text.endswith("\n")
    return [ln.split("\t") for ln in text.split("\n")[:-1]]


def sources(path: Path) -> list[str]:
    return [r[0] for r in rows(path)[1:]]


def tree(root: Path, names: list[str]) -> Path:
    for i, rel in enumerate(names):
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(f"i:{i}")
    return root


def test_walk_is_sorted_by_path_components(tmp_path: Path) -> None:
    d = tree(tmp_path / "d", ["a.txt", "a/b.txt", "B", "a/c/d", "a-b", "Z/z"])
    collect([d], tmp_path / "o.tsv")
    # "a/..." before "a-b" and "a.txt": a directory's contents follow its name, as in a walk
    assert sources(tmp_path / "o.tsv") == ["B", "Z/z", "a/b.txt", "a/c/d", "a-b", "a.txt"]


def test_symlinks_in_a_walk_are_not_followed(tmp_path: Path) -> None:
    outside = tree(tmp_path / "outside", ["x.txt", "sub/y.txt"])
    d = tree(tmp_path / "d", ["real.txt"])
    os.symlink(outside / "x.txt", d / "file-link.txt")
    os.symlink(outside / "sub", d / "dir-link")
    os.symlink(d / "nowhere", d / "dangling")
    os.mkfifo(d / "pipe")
    rep = collect([d], tmp_path / "o.tsv", strict=True)  # deliberate skips are no error
    assert sources(tmp_path / "o.tsv") == ["real.txt"]
    assert dict(rep.skipped) == {
        "dangling": "symbolic link, not followed",
        "dir-link": "symbolic link, not followed",
        "file-link.txt": "symbolic link, not followed",
        "pipe": "not a regular file (fifo, socket or device)",
    }


def test_a_symlinked_source_is_followed(tmp_path: Path) -> None:
    d = tree(tmp_path / "d", ["x.txt"])
    os.symlink(d, tmp_path / "results")
    collect([tmp_path / "results"], tmp_path / "o.tsv")
    assert sources(tmp_path / "o.tsv") == ["x.txt"]


def test_several_sources_are_named_with_their_source(tmp_path: Path) -> None:
    a = tree(tmp_path / "a", ["x.txt"])
    b = tree(tmp_path / "b", ["x.txt", "y.txt"])
    (tmp_path / "one.txt").write_text("i:9")
    rep = subprocess.run(
        [*ZOTSINK, "collect", "a/", "./b", "one.txt", "-o", "o.tsv", "--dedup", "none"],
        cwd=tmp_path, capture_output=True,
    )  # fmt: skip
    assert rep.returncode == 0, rep.stderr
    assert a.exists() and b.exists()
    assert sources(tmp_path / "o.tsv") == ["a/x.txt", "b/x.txt", "b/y.txt", "one.txt"]


def test_out_and_its_side_files_inside_the_source_are_not_read(tmp_path: Path) -> None:
    d = tree(tmp_path / "d", ["x.txt"])
    out = d / "all.tsv"
    (d / "all.tsv.rejects").write_text("i:99")
    (d / "all.tsv.spill.host.1").write_text("i:98")
    collect([d], out)
    collect([d], out, skip_collected=True)  # OUT exists now: still not a source
    assert sources(out) == ["x.txt"]
    r = subprocess.run(
        [*ZOTSINK, "collect", "-", "-o", "d/all.tsv", "--skip-collected", "--dedup", "none"],
        cwd=tmp_path,
        input=b"d/x.txt\nd/all.tsv\nd/all.tsv.rejects\n", capture_output=True,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert sources(out) == ["x.txt", "d/x.txt"]


def test_path_list_on_stdin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = tree(tmp_path / "d", ["b/1.txt", "a.txt", "b/2.txt"])
    os.symlink(d / "a.txt", d / "link.txt")
    listing = subprocess.run(["find", "d"], cwd=tmp_path, capture_output=True).stdout
    r = subprocess.run(
        [*ZOTSINK, "collect", "-", "-o", "o.tsv"], cwd=tmp_path, input=listing,
        capture_output=True,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    # sorted like a walk, directories passed over (and said so), links not followed
    assert sources(tmp_path / "o.tsv") == ["d/a.txt", "d/b/1.txt", "d/b/2.txt"]
    assert b"2 directories in the path list were not walked" in r.stderr
    assert b"skipped d/link.txt: symbolic link, not followed" in r.stderr
    # the same through the API, and a missing path is an unreadable file
    monkeypatch.chdir(tmp_path)
    rep = collect(["-"], tmp_path / "p.tsv", stdin=io.StringIO("d/a.txt\nd/gone.txt\n"))
    assert sources(tmp_path / "p.tsv") == ["d/a.txt"]
    assert rep.skipped == [("d/gone.txt", "unreadable: No such file or directory")]


def _tar(path: Path, mode: str, members: list[tuple[str, bytes | None, bytes]]) -> Path:
    with tarfile.open(path, mode) as t:
        for name, kind, data in members:
            ti = tarfile.TarInfo(name)
            if kind is None:
                ti.size = len(data)
                t.addfile(ti, io.BytesIO(data))
            else:
                ti.type = kind
                ti.linkname = "x.txt"
                t.addfile(ti)
    return path


@pytest.mark.parametrize("ending,mode", [(".tar", "w"), (".tar.bz2", "w:bz2"), (".tar.xz", "w:xz"),
                                         (".tgz", "w:gz")])  # fmt: skip
def test_tar_members_links_and_odd_names(tmp_path: Path, ending: str, mode: str) -> None:
    arch = _tar(tmp_path / f"a{ending}", mode, [
        ("./z/x.txt", None, b"i:1"),
        ("../evil.txt", None, b"i:2"),
        ("/etc/abs.txt", None, b"i:3"),
        ("z/sym", tarfile.SYMTYPE, b""),
        ("z/hard", tarfile.LNKTYPE, b""),
        ("z/dev", tarfile.CHRTYPE, b""),
        ("z/fifo", tarfile.FIFOTYPE, b""),
    ])  # fmt: skip
    before = sorted(p.name for p in tmp_path.iterdir())
    rep = collect([arch], tmp_path / "o.tsv")
    # member names are data: nothing is created outside (or inside) the directory
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*before, "o.tsv"])
    assert not Path("/evil.txt").exists() and not (tmp_path.parent / "evil.txt").exists()
    assert rows(tmp_path / "o.tsv") == [
        ["source", "i"], ["/etc/abs.txt", "3"], ["../evil.txt", "2"], ["z/x.txt", "1"],
    ]  # fmt: skip
    assert dict(rep.skipped) == {
        "z/dev": "device or fifo in an archive, not followed",
        "z/fifo": "device or fifo in an archive, not followed",
        "z/hard": "hard link in an archive, not followed",
        "z/sym": "symbolic link in an archive, not followed",
    }


def test_a_corrupt_archive_is_skipped_whole_or_fails_under_strict(tmp_path: Path) -> None:
    good = _tar(
        tmp_path / "g.tar.gz", "w:gz", [(f"f{i}.txt", None, b"i:%d" % i) for i in range(50)]
    )
    data = good.read_bytes()
    bad = tmp_path / "b.tar.gz"
    bad.write_bytes(data[: len(data) // 2])  # a copy cut short
    rep = collect([bad], tmp_path / "o.tsv")
    assert rep.records == 0 and not (tmp_path / "o.tsv").exists()
    assert len(rep.skipped) == 1 and rep.skipped[0][1].startswith("unreadable archive")
    r = subprocess.run([*ZOTSINK, "collect", "b.tar.gz", "-o", "o.tsv", "--strict"],
                       cwd=tmp_path, capture_output=True)  # fmt: skip
    assert r.returncode == 1 and b"unreadable archive" in r.stderr
    assert b"Traceback" not in r.stderr


@pytest.mark.parametrize("fork,jobs", [(False, 1), (False, 4), (True, 1), (True, 4)])
def test_reader_paths_give_the_same_table(tmp_path: Path, fork: bool, jobs: int) -> None:
    d = tree(tmp_path / "d", [f"c{i % 7}/f{i:04d}.txt" for i in range(700)])
    os.symlink("c0", d / "link")
    (d / "c3" / "bin.dat").write_bytes(b"\0\1")
    env = {**os.environ, "FORK_READER": "1" if fork else "0"}
    prog = (
        "import os, sys, zotsink._collect.read as r; r.FORK = os.environ['FORK_READER'] == '1';"
        "from zotsink.cli import main; main(sys.argv[1:])"
    )
    out = tmp_path / f"o{fork}{jobs}.tsv"
    r = subprocess.run(
        [sys.executable, "-c", prog, "collect", str(d), "-o", str(out), "--jobs", str(jobs)],
        env=env, capture_output=True,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    collect_read.FORK = False
    try:
        collect([d], tmp_path / "ref.tsv")
    finally:
        collect_read.FORK = True
    assert out.read_bytes() == (tmp_path / "ref.tsv").read_bytes()
    assert len(rows(out)) == 701
    assert b"skipped c3/bin.dat: binary" in r.stderr and b"skipped link: symbolic" in r.stderr


FORK_PROBE = r"""
import _thread, os, sys
from zotsink import collect
forks = []
real_fork = os.fork
def counting_fork():
    forks.append(1)
    return real_fork()
os.fork = counting_fork
if sys.argv[3] == "thread":  # a thread Python's threading module does not know of
    hold = _thread.allocate_lock()
    hold.acquire()
    _thread.start_new_thread(hold.acquire, ())
collect([sys.argv[1]], sys.argv[2])
print(len(forks))
"""


@pytest.mark.parametrize("thread", [False, True], ids=["alone", "with-a-thread"])
def test_the_reader_is_forked_only_from_a_single_threaded_process(
    tmp_path: Path, thread: bool
) -> None:
    """Forking a process with another thread can leave a lock held for ever in the child:
    a thread started outside Python's threading module counts too."""
    d = tree(tmp_path / "d", [f"f{i}.txt" for i in range(20)])
    out = tmp_path / "o.tsv"
    kind = "thread" if thread else "alone"
    r = subprocess.run(
        [sys.executable, "-c", FORK_PROBE, str(d), str(out), kind],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == ("0" if thread else "1")
    assert len(rows(out)) == 21  # the header and one row a file


def test_a_reader_that_dies_is_an_error_not_a_short_table(tmp_path: Path) -> None:
    d = tree(tmp_path / "d", [f"f{i}.txt" for i in range(10)])
    prog = (
        "import os, signal, sys\n"
        "real = os.open\n"
        "def fake_open(path, *a, **k):\n"
        "    if str(path).endswith('f5.txt'): os.kill(os.getpid(), signal.SIGKILL)\n"
        "    return real(path, *a, **k)\n"
        "os.open = fake_open\n"
        "from zotsink.cli import main; main(sys.argv[1:])\n"
    )
    r = subprocess.run([sys.executable, "-c", prog, "collect", str(d), "-o", str(tmp_path / "o")],
                       capture_output=True)  # fmt: skip
    assert r.returncode == 1, r.stderr
    assert b"ended with status -9" in r.stderr and b"Traceback" not in r.stderr
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("how", ["at a header", "garbage", "in a member", "gzip trailer"])
def test_an_archive_cut_where_tarfile_would_not_notice(tmp_path: Path, how: str) -> None:
    members = [(f"f{i}.txt", None, b"i:%d" % i) for i in range(5)]
    if how != "gzip trailer":
        data = _tar(tmp_path / "g.tar", "w", members).read_bytes()
        # three whole members (header + data block each), then no end marker, or junk
        cut = data[: 512 * 2 * 3]
        if how == "garbage":
            cut += b"\xff" * 1024
        elif how == "in a member":
            cut += data[len(cut) : len(cut) + 600]
    else:
        data = _tar(tmp_path / "g.tar.gz", "w:gz", members).read_bytes()
        cut = data[:-4]  # the tar inside is whole; the gzip length field is gone
    bad = tmp_path / ("b.tar.gz" if how == "gzip trailer" else "b.tar")
    bad.write_bytes(cut)
    rep = collect([bad], tmp_path / "o.tsv")
    assert rep.records == 0 and len(rep.skipped) == 1
    assert rep.skipped[0][1].startswith("unreadable archive")
