"""The Python API: append_record(s), Sink, read_records, and the exception tree."""

from __future__ import annotations

import fcntl
import json
import pickle
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

import zotsink
import zotsink as zotsink_api  # the fixture `zotsink` (the command) shadows the module in tests
from zotsink import (
    HeaderMismatch,
    LockTimeout,
    RecordError,
    Sink,
    WriteError,
    ZotsinkError,
    append_record,
    append_records,
    read_records,
)


def test_mapping_records_write_the_header_once(tmp_path: Path) -> None:
    out = tmp_path / "o.tsv"
    append_record(out, {"a": 1, "b": "x y"})
    append_record(out, {"b": "z", "a": 2})
    append_record(out, [3, None])
    assert out.read_text() == "a\tb\n1\tx y\n2\tz\n3\t\n"
    assert list(read_records(out, header=True)) == [
        {"a": "1", "b": "x y"},
        {"a": "2", "b": "z"},
        {"a": "3", "b": ""},
    ]


def test_a_new_process_adopts_the_existing_header(tmp_path: Path) -> None:
    out = tmp_path / "o.csv"
    out.write_text("job,a,b\n")
    append_record(out, {"b": 2, "a": 1}, stamp="job")
    assert out.read_text().splitlines()[1] == ",1,2"


def test_unknown_key_raises_and_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "o.tsv"
    with pytest.raises(RecordError, match="unknown column 'c'"):
        append_records(out, [{"a": 1}, {"a": 2, "c": 3}], columns=["a"])
    assert not out.exists() or out.read_bytes() == b""


def test_append_records_is_one_contiguous_block(tmp_path: Path) -> None:
    out = tmp_path / "o.txt"
    assert append_records(out, (f"r{i}" for i in range(1000))) == 1000
    assert out.read_text().splitlines() == [f"r{i}" for i in range(1000)]


def test_columns_mismatch_from_api(tmp_path: Path) -> None:
    out = tmp_path / "o.tsv"
    out.write_text("x\ty\n")
    with pytest.raises(HeaderMismatch, match="starts with the header 'x\\\\ty'"):
        append_record(out, [1, 2], columns=["p", "q"])
    assert out.read_text() == "x\ty\n"


def test_sink_batches_and_flushes_on_close(tmp_path: Path) -> None:
    out = tmp_path / "o.tsv"
    with Sink(out, columns=["i", "sq"], batch_bytes=100, flush_interval=60) as s:
        for i in range(50):
            s.write([i, i * i])
        assert 0 < len(out.read_text().splitlines()) < 51  # some batches are out already
    rows = list(read_records(out, header=True))
    assert [int(r["sq"]) for r in rows] == [i * i for i in range(50)]
    assert s.records_written == 50


def test_sink_refuses_bad_records_at_write(tmp_path: Path) -> None:
    out = tmp_path / "o.txt"
    with Sink(out) as s:
        s.write("good")
        with pytest.raises(RecordError, match="NUL byte"):
            s.write("b\0d")
    assert out.read_text() == "good\n"
    with pytest.raises(ValueError, match="closed Sink"):
        s.write("late")


def test_sink_flushes_at_interpreter_exit(tmp_path: Path) -> None:
    import subprocess
    import sys

    out = tmp_path / "o.txt"
    code = f"import zotsink\ns = zotsink.Sink({str(out)!r}, flush_interval=3600)\n"
    code += "for i in range(10): s.write(f'r{i}')\n"
    subprocess.run([sys.executable, "-c", code], check=True)
    assert out.read_text().splitlines() == [f"r{i}" for i in range(10)]


def test_read_records_leaves_out_a_torn_final_fragment(tmp_path: Path) -> None:
    out = tmp_path / "o.tsv"
    out.write_bytes(b"a\\tb\tc\nfrag")
    assert list(read_records(out)) == [["a\tb", "c"]]


@pytest.mark.parametrize(
    "exc",
    [
        LockTimeout("held", path="/x", spill_path="/x.spill.h.1"),
        WriteError("full", path="/x", spill_path="/s", errno=28),
        RecordError("bad", path="/x"),
        HeaderMismatch("hdr", path="/x"),
    ],
)
def test_errors_pickle_and_derive_from_builtins(exc: ZotsinkError) -> None:
    back = pickle.loads(pickle.dumps(exc))
    assert type(back) is type(exc)
    assert (str(back), back.path, back.spill_path) == (str(exc), exc.path, exc.spill_path)
    assert isinstance(back, ZotsinkError)
    assert getattr(back, "errno", None) == getattr(exc, "errno", None)


def test_exception_tree() -> None:
    assert issubclass(LockTimeout, TimeoutError) and issubclass(LockTimeout, OSError)
    assert issubclass(RecordError, ValueError) and issubclass(WriteError, OSError)
    assert issubclass(HeaderMismatch, RecordError)
    assert set(zotsink.__all__) >= {"append_record", "Sink", "read_records", "ZotsinkError"}


def test_lazy_names_stay_functions_after_their_modules_are_imported() -> None:
    import subprocess
    import sys

    code = (
        "import zotsink._check.verify, zotsink._collect.collect, zotsink._check.missing\n"
        "import zotsink._doctor.doctor\n"
        "from zotsink import verify, collect, missing, doctor, VerifyReport\n"
        "import types\n"
        "assert not any(isinstance(f, types.ModuleType) for f in (verify, collect, missing,"
        " doctor)), (verify, collect)\n"
        "assert isinstance(VerifyReport, type)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# -- what the CLI can do, Python can: each public function against its command --------------

Run = Callable[..., subprocess.CompletedProcess[bytes]]
NO_ARRAY = {"SLURM_ARRAY_JOB_ID": None, "SLURM_ARRAY_TASK_ID": None, "SLURM_JOB_ID": None}


def _members(archive: Path) -> list[tuple[str, int, str]]:
    return [(r.name, r.size, r.sha256) for r in zotsink.list_members(archive)]


def test_pack_files_packs_what_pack_packs(tmp_path: Path, zotsink: Run) -> None:
    (tmp_path / "a.bin").write_bytes(bytes(range(256)) * 3)
    (tmp_path / "b.txt").write_bytes(b"two\n")
    files = [str(tmp_path / "a.bin"), str(tmp_path / "b.txt")]
    rows = zotsink_api.pack_files(tmp_path / "api.tar", files, prefix="p")
    r = zotsink("pack", "cli.tar", *files, "--prefix", "p", env=NO_ARRAY)
    assert (r.returncode, r.stderr) == (0, b"")
    assert [(x.name, x.size) for x in rows] == [("p/a.bin", 768), ("p/b.txt", 4)]
    assert _members(tmp_path / "api.tar") == _members(tmp_path / "cli.tar")
    assert rows[1].to_dict() == {**rows[1]._asdict(), "name": "p/b.txt", "size": 4}
    assert isinstance(rows[0], zotsink_api.MemberRow)


def test_list_and_read_members_give_the_bytes_of_cat(tmp_path: Path, zotsink: Run) -> None:
    (tmp_path / "a.bin").write_bytes(b"\0\xff" * 700)
    assert zotsink("pack", "x.tar", "a.bin", "--prefix", "", env=NO_ARRAY).returncode == 0
    archive = tmp_path / "x.tar"
    assert zotsink_api.is_pack_archive(archive) and not zotsink_api.is_pack_archive("o.tsv")
    listing = zotsink("cat", "x.tar", "--list")
    assert listing.returncode == 0, listing.stderr
    assert listing.stdout == zotsink_api.format_listing(zotsink_api.list_members(archive))
    assert listing.stdout.count(b"\n") == 2  # the header and one member
    member = zotsink("cat", "x.tar", "a.bin")
    assert member.stdout == zotsink_api.read_member(archive, "a.bin") == b"\0\xff" * 700


def test_verify_archive_reports_what_verify_reports(tmp_path: Path, zotsink: Run) -> None:
    (tmp_path / "a.bin").write_bytes(b"data" * 100)
    assert zotsink("pack", "x.tar", "a.bin", env=NO_ARRAY).returncode == 0
    archive = tmp_path / "x.tar"
    with open(archive, "ab") as f:
        f.write(b"torn" * 50)  # a writer that died mid-member
    r = zotsink("verify", archive, "--json")
    assert r.returncode == 1
    report = zotsink_api.verify_archive(archive)
    assert isinstance(report, zotsink_api.ArchiveReport)
    assert not report.ok and (report.members, report.indexed) == (1, 1)
    assert json.loads(r.stdout) == report.to_dict()
    fixed = zotsink_api.verify_archive(archive, repair=True)
    assert fixed.repaired and zotsink("verify", "x.tar").returncode == 0
    assert archive.stat().st_size == fixed.size


def _spill_a_pack(tmp_path: Path, zotsink: Run, name: str) -> None:
    (tmp_path / "m.txt").write_bytes(b"member\n")
    archive = tmp_path / name
    assert zotsink("pack", name, "m.txt", "--prefix", "first", env=NO_ARRAY).returncode == 0
    with open(archive, "rb") as holder:
        fcntl.flock(holder, fcntl.LOCK_EX)
        r = zotsink("pack", name, "m.txt", "--prefix", "late", "--timeout", "0.1", env=NO_ARRAY)
    assert r.returncode == 75, r.stderr
    assert len(list(tmp_path.glob(f"{name}.spill.*"))) == 1


def test_recover_archive_recovers_what_recover_recovers(tmp_path: Path, zotsink: Run) -> None:
    _spill_a_pack(tmp_path, zotsink, "api.tar")
    _spill_a_pack(tmp_path, zotsink, "cli.tar")
    report = zotsink_api.recover_archive(tmp_path / "api.tar")
    r = zotsink("recover", "cli.tar")
    assert r.returncode == 0, r.stderr
    assert b"recovered 1 member from 1 spill tar" in r.stderr
    assert isinstance(report, zotsink_api.ArchiveRecoverReport)
    assert report.to_dict() == {
        "files": [str(next(iter(report.files)))],
        "members": 1,
        "skipped": 0,
        "left": [],
        "ok": True,
    }
    assert report.files[0].startswith(str(tmp_path / "api.tar.spill."))
    assert _members(tmp_path / "api.tar") == _members(tmp_path / "cli.tar")
    assert [n for n, _s, _h in _members(tmp_path / "api.tar")] == ["first/m.txt", "late/m.txt"]
    assert not list(tmp_path.glob("*.spill.*"))


def test_recover_report_has_to_dict(tmp_path: Path, zotsink: Run) -> None:
    out = tmp_path / "o.txt"
    out.write_bytes(b"r1\n")
    with open(out, "rb") as holder:
        fcntl.flock(holder, fcntl.LOCK_EX)
        r = zotsink("append", "o.txt", "--timeout", "0.1", input=b"r2\nr3\n")
    assert r.returncode == 75, r.stderr
    report = zotsink_api.recover(out)
    assert out.read_bytes() == b"r1\nr2\nr3\n"
    d = report.to_dict()
    assert (d["records"], d["bytes"], d["busy"], d["refused"], d["ok"]) == (2, 6, [], [], True)
    assert json.loads(json.dumps(d)) == d


def test_iter_snapshot_gives_the_bytes_of_cat(tmp_path: Path, zotsink: Run) -> None:
    out = tmp_path / "o.tsv"
    out.write_bytes(b"a\tb\n" + b"1\t2\n" * 5000 + b"torn")
    fd, size = zotsink_api.snapshot(out)
    data = b"".join(zotsink_api.iter_snapshot(fd, size))
    assert data == out.read_bytes() == zotsink("cat", "o.tsv").stdout


@pytest.fixture
def ran(tmp_path: Path, zotsink: Run) -> tuple[Path, Path]:
    """A ledger of `zotsink run`: tasks 2 and 4 failed, 1 and 3 ok, 5 never ran."""
    tasks = tmp_path / "tasks.txt"
    tasks.write_text("echo a\nexit 3\necho c\nexit 4\n")
    r = zotsink("run", "tasks.txt", "out.txt", "--shell", env=NO_ARRAY)
    assert r.returncode == 1, r.stderr
    with open(tasks, "a") as f:
        f.write("echo e\n")
    return tasks, tmp_path / "out.txt.ledger"


def test_task_status_reports_what_status_reports(ran: tuple[Path, Path], zotsink: Run) -> None:
    tasks, ledger = ran
    r = zotsink("status", "tasks.txt", "out.txt", "--json")
    assert r.returncode == 1, r.stderr
    report = zotsink_api.task_status(tasks, ledger)
    assert isinstance(report, zotsink_api.StatusReport)
    assert (report.total, report.counts["ok"], report.counts["failed"]) == (5, 2, 2)
    assert report.counts["never"] == 1 and not report.all_ok
    assert json.loads(r.stdout) == report.to_dict()
    assert report.to_dict()["not_ok"] == "2,4-5"


def test_tasks_in_and_resubmit_specs_give_what_missing_gives(
    ran: tuple[Path, Path], zotsink: Run
) -> None:
    tasks, ledger = ran
    lines = zotsink("missing", "tasks.txt", "--ledger", ledger)
    assert lines.stdout.decode().splitlines() == ["exit 3", "exit 4", "echo e"]
    assert [(t.num, t.line) for t in zotsink_api.tasks_in(tasks, ledger)] == [
        (2, "exit 3"),
        (4, "exit 4"),
        (5, "echo e"),
    ]
    assert [t.num for t in zotsink_api.tasks_in(tasks, ledger, states="never")] == [5]
    spec = zotsink("missing", "tasks.txt", "--ledger", ledger, "--array", "--max-array", "3")
    assert spec.stdout == b"2 1\n2 -1\n1 -3\n"  # index a under base b runs task a - b + 1
    want = [("2", 1), ("2", -1), ("1", -3)]
    assert zotsink_api.resubmit_specs(tasks, ledger, max_array=3) == want
    assert zotsink_api.resubmit_specs(tasks, ledger) == [("2,4-5", 1)]


def test_ledger_readers_take_a_timeout(ran: tuple[Path, Path]) -> None:
    tasks, ledger = ran
    with open(ledger, "rb") as holder:
        fcntl.flock(holder, fcntl.LOCK_EX)
        for read in (zotsink_api.tasks_in, zotsink_api.resubmit_specs, zotsink_api.task_status):
            with pytest.raises(LockTimeout, match=r"after 0\.1 s"):
                read(tasks, ledger, timeout=0.1)
