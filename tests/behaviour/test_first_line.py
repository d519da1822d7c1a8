"""The first line of a tsv/csv OUT is its header: what the stream and ``run`` do when the
input's lines say otherwise.

Key:value records into a new OUT without ``--kv`` would make the first record the header:
they are refused, whole. A producer that prints OUT's header itself (pandas' ``to_csv``)
would repeat it once per producer: the repeats are dropped and counted. Real processes: the
``zotsink`` CLI, and ``zotsink run`` with real shell tasks.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

Run = Callable[..., subprocess.CompletedProcess[bytes]]

KV = b"filename:img1.png min:1 max:9\nfilename:img2.png min:2 max:8\n"
REASON = "looks like key:value records: pass --kv (or --columns NAMES)"


def rejects(path: Path) -> list[tuple[str, str]]:
    lines = path.read_text().splitlines()
    return [tuple(line.split("\t", 1)) for line in lines]  # type: ignore[misc]


@pytest.mark.parametrize("name", ["out.tsv", "out.csv"])
def test_key_value_lines_into_a_new_table_are_refused_whole(
    tmp_path: Path, zotsink: Run, name: str
) -> None:
    r = zotsink(name, input=KV)
    err = r.stderr.decode()
    assert r.returncode == 1, err
    out = tmp_path / name
    assert not out.exists() or out.read_bytes() == b""
    got = rejects(tmp_path / f"{name}.rejects")
    assert [line for _, line in got] == KV.decode().splitlines()
    assert all(why.endswith(REASON) for why, _ in got), got
    assert "2 records refused" in err


def test_key_value_lines_are_fine_with_kv_or_into_a_text_file(tmp_path: Path, zotsink: Run) -> None:
    r = zotsink("--kv", "out.tsv", input=KV)
    assert r.returncode == 0, r.stderr
    assert (
        tmp_path / "out.tsv"
    ).read_text() == "filename\tmin\tmax\nimg1.png\t1\t9\nimg2.png\t2\t8\n"
    r = zotsink("out.txt", input=KV)  # lines format: no header to mistake
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "out.txt").read_bytes() == KV


def test_a_header_then_key_value_shaped_rows_is_no_refusal(tmp_path: Path, zotsink: Run) -> None:
    # only the first line of a new OUT is looked at; a real header makes the rest rows
    data = b"note\nurl:x\nk=v\n"
    r = zotsink("out.tsv", input=data)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "out.tsv").read_bytes() == data
    # a URL is no key:value token
    r = zotsink("urls.tsv", input=b"http://example.org/a\nhttp://example.org/b\n")
    assert r.returncode == 0, r.stderr


def test_a_header_printed_by_each_producer_is_in_out_once(tmp_path: Path, zotsink: Run) -> None:
    out = tmp_path / "out.tsv"
    # the first producer's header becomes OUT's; in small batches, repeats at a block's
    # start and inside blocks are found alike
    first = b"a\tb\n" + b"".join(b"%d\t%d\na\tb\n" % (i, i) for i in range(3000))
    r = zotsink(out, "--batch-bytes", "4096", input=first)
    assert r.returncode == 0, r.stderr
    assert "3000 repeated header lines dropped" in r.stderr.decode()
    r = zotsink(out, input=b"a\tb\n7\t7\n")  # the next one adopts nothing: OUT has its header
    assert r.returncode == 0, r.stderr
    assert "1 repeated header lines dropped" in r.stderr.decode()
    want = b"a\tb\n" + b"".join(b"%d\t%d\n" % (i, i) for i in range(3000)) + b"7\t7\n"
    assert out.read_bytes() == want
    assert not (tmp_path / "out.tsv.rejects").exists()


def test_a_header_named_by_columns_is_dropped_from_stamped_csv_input(
    tmp_path: Path, zotsink: Run
) -> None:
    r = zotsink("--columns", "a,b", "--stamp", "task", "out.csv", input=b"a,b\n1,2\na,b\n")
    assert r.returncode == 0, r.stderr
    assert "2 repeated header lines dropped" in r.stderr.decode()
    assert (tmp_path / "out.csv").read_text() == 'task,a,b\n"",1,2\n'


def test_text_files_keep_every_line(tmp_path: Path, zotsink: Run) -> None:
    # lines format has no header: a line equal to the first is a record like any other
    r = zotsink("out.txt", input=b"x\ny\nx\n")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "out.txt").read_bytes() == b"x\ny\nx\n"


def test_run_tasks_printing_the_columns_header_leave_it_once(tmp_path: Path, zotsink: Run) -> None:
    (tmp_path / "tasks.txt").write_text(
        "".join(f"printf 'a\\tb\\n{i}\\tx\\n'\n" for i in range(1, 6))
    )
    r = zotsink("run", "tasks.txt", "out.tsv", "--columns", "a,b", "--shell", "-q")
    assert r.returncode == 0, r.stderr
    lines = (tmp_path / "out.tsv").read_text().splitlines()
    assert lines[0] == "a\tb" and sorted(lines[1:]) == [f"{i}\tx" for i in range(1, 6)]
    r = zotsink("cat", "out.tsv")
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.decode().splitlines()[1:]) == [f"{i}\tx" for i in range(1, 6)]


def test_run_key_value_tasks_into_a_new_table_are_refused(tmp_path: Path, zotsink: Run) -> None:
    (tmp_path / "tasks.txt").write_text("img1.png\nimg2.png\n")
    r = zotsink("run", "tasks.txt", "out.tsv", "-q", "--", "sh", "-c", "echo filename:$0 min:1")
    assert r.returncode == 1, r.stderr
    out = tmp_path / "out.tsv"
    assert not out.exists() or out.read_bytes() == b""
    got = rejects(tmp_path / "out.tsv.rejects")
    assert sorted(line for _, line in got) == ["filename:img1.png min:1", "filename:img2.png min:1"]
    assert all(why.endswith(REASON) for why, _ in got), got


def test_run_tasks_printing_their_own_header_leave_it_once(tmp_path: Path, zotsink: Run) -> None:
    # no --columns, a new OUT: the header of the piece that lands first stays, the others
    # are dropped before their places are taken (Held.drop_first), and counted
    (tmp_path / "tasks.txt").write_text(
        "".join(f"printf 'a\\tb\\n{i}\\tx\\n'\n" for i in range(1, 21))
    )
    r = zotsink("run", "tasks.txt", "out.tsv", "--shell")
    assert r.returncode == 0, r.stderr
    assert "19 repeated header lines dropped" in r.stderr.decode()
    lines = (tmp_path / "out.tsv").read_text().splitlines()
    assert lines[0] == "a\tb" and sorted(lines[1:]) == sorted(f"{i}\tx" for i in range(1, 21))
    r = zotsink("cat", "out.tsv")
    assert sorted(r.stdout.decode().splitlines()[1:]) == sorted(f"{i}\tx" for i in range(1, 21))


def test_an_out_that_is_one_record_has_no_header_to_repeat(tmp_path: Path, zotsink: Run) -> None:
    # OUT's first line alone is a record (a header is only written with records after it):
    # a record equal to it is appended, as recover keeps a spilled one
    out = tmp_path / "out.tsv"
    assert zotsink(out, input=b"x\t1\n").returncode == 0
    r = zotsink(out, input=b"x\t1\ny\t2\n")
    assert r.returncode == 0 and b"repeated" not in r.stderr, r.stderr
    assert out.read_bytes() == b"x\t1\nx\t1\ny\t2\n"
