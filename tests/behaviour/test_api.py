"""The Python API: append_record(s), Sink, read_records, and the exception tree."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

import zotsink
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
