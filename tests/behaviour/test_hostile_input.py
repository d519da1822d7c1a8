"""Hostile input and hostile places: each case has its exact message and exit code.

No case may show a Python traceback; ``-v`` may add one for a developer.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from zotsink import RecordError, append_record, append_records
from zotsink._core.records import MAX_LINE
from zotsink.cli._common import exit_code

HOST = os.uname().nodename


def no_traceback(r: subprocess.CompletedProcess[bytes]) -> str:
    err = r.stderr.decode("utf-8", "replace")
    assert "Traceback" not in err
    return err


def spill_of(err: str) -> Path:
    m = re.search(r"^zotsink: \d+ records? (?:is|are) safe in (\S+);", err, re.M)
    assert m, err
    return Path(m.group(1))


def test_nul_byte_is_rejected_and_the_rest_written(tmp_path: Path, zotsink) -> None:
    out = tmp_path / "out.txt"
    r = zotsink(out, input=b"one\ntw\0o\nthree\n")
    assert r.returncode == 1
    assert no_traceback(r) == f"zotsink: 1 record refused; they are in {out}.rejects\n"
    assert out.read_bytes() == b"one\nthree\n"
    assert (tmp_path / "out.txt.rejects").read_bytes() == b"byte 5: NUL byte\ttw\0o\n"


def test_invalid_utf8_and_cr_pass_through_in_lines_mode(tmp_path: Path, zotsink) -> None:
    out = tmp_path / "out.txt"
    data = b"caf\xe9\r\n\xff\xfe\x80 raw\r\nbare\rcr\n"
    r = zotsink(out, input=data)
    assert (r.returncode, r.stderr) == (0, b"")
    assert out.read_bytes() == data


# Runs the CLI, then writes its peak memory (VmHWM, KiB) to argv[1]. Not ru_maxrss: that one
# keeps the peak of the forked test process from before the exec.
MEASURED = r"""
import atexit, sys
report = sys.argv[1]
def peak():
    with open("/proc/self/status") as s:
        hwm = next(ln.split()[1] for ln in s if ln.startswith("VmHWM:"))
    with open(report, "w") as f:
        f.write(hwm)
atexit.register(peak)
sys.argv = ["zotsink", *sys.argv[2:]]
from zotsink.cli import main
main()
"""


def test_100_mb_line_without_newline_is_rejected_whole_in_bounded_memory(
    tmp_path: Path, child_env
) -> None:
    out = tmp_path / "out.txt"
    size, chunk = 100_000_000, b"a" * 1_000_000
    proc = subprocess.Popen(
        [sys.executable, "-c", MEASURED, str(tmp_path / "peak"), str(out)],
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=child_env(),
    )

    def produce() -> None:  # streamed: the test holds no 100 MB either
        proc.stdin.write(b"first\n")
        for _ in range(size // len(chunk)):
            proc.stdin.write(chunk)
        proc.stdin.close()  # end of input, and no newline after the long line

    feeder = threading.Thread(target=produce)
    feeder.start()
    err = proc.stderr.read()
    feeder.join()
    assert proc.wait(timeout=120) == 1
    assert err == f"zotsink: 1 record refused; they are in {out}.rejects\n".encode()
    assert out.read_bytes() == b"first\n"  # not a byte of it split into OUT
    head = f"byte 7: over the {MAX_LINE}-byte line limit\t".encode()
    rejects = tmp_path / "out.txt.rejects"
    assert rejects.stat().st_size == len(head) + size + 1
    with open(rejects, "rb") as f:
        assert f.read(len(head)) == head
        left = size
        while left:
            block = f.read(min(left, 1 << 22))
            assert block.count(b"a") == len(block)
            left -= len(block)
        assert f.read() == b"\n"
    peak_mib = int((tmp_path / "peak").read_text()) / 1024
    assert peak_mib < 64, f"peak memory {peak_mib:.0f} MiB for a 100 MB line"


def test_over_long_line_between_others_leaves_them_exact(tmp_path: Path, child_env) -> None:
    """The lines read together with the end of a long line are neither lost nor padded."""
    src = tmp_path / "in"
    src.write_bytes(b"first\n" + b"y" * (MAX_LINE + 300_000) + b"\nafter\nlast")
    out = tmp_path / "out.txt"
    with open(src, "rb") as f:  # a file: the long line's end and what follows in one read
        r = subprocess.run(
            [sys.executable, "-m", "zotsink", str(out)],
            stdin=f,
            capture_output=True,
            env=child_env(),
        )
    assert r.returncode == 1
    assert no_traceback(r) == (
        f"zotsink: 1 record refused; they are in {out}.rejects\n"
        # the input ends without a newline: the last line is a record, and stderr says so
        "zotsink: note: the input did not end with a newline; one was added\n"
    )
    assert out.read_bytes() == b"first\nafter\nlast\n"
    rejects = (tmp_path / "out.txt.rejects").read_bytes()
    assert (
        rejects
        == f"byte 7: over the {MAX_LINE}-byte line limit\t".encode()
        + b"y" * (MAX_LINE + 300_000)
        + b"\n"
    )


@pytest.mark.parametrize("count", [False, True], ids=["by-byte", "by-line"])
def test_places_of_refused_lines_stay_exact_past_an_over_long_line(
    tmp_path: Path, child_env, count: bool
) -> None:
    """Each refused line is named where it is in the input, after a long line too: by its
    first byte where lines are not counted, by its number with --count-lines."""
    long = b"y" * (MAX_LINE + 10)
    src = tmp_path / "in"
    src.write_bytes(b"a\n" + long + b"\nb\0\nc\n" + b"z" * 5000 + b"\n" + b"d\0\n")
    out = tmp_path / "out.txt"
    with open(src, "rb") as f:
        r = subprocess.run(
            [sys.executable, "-m", "zotsink", *(["--count-lines"] if count else []), str(out)],
            stdin=f,
            capture_output=True,
            env=child_env(),
        )
    assert r.returncode == 1, r.stderr
    assert out.read_bytes() == b"a\nc\n" + b"z" * 5000 + b"\n"
    lines = (tmp_path / "out.txt.rejects").read_bytes().split(b"\n")[:-1]
    where = [ln.split(b":")[0].decode() for ln in lines]
    nul_b = 2 + len(long) + 1  # offset of "b\0" (0-based)
    nul_d = nul_b + 3 + 2 + 5001
    if count:
        assert where == ["line 2", "line 3", "line 6"]
    else:
        assert where == ["byte 3", f"byte {nul_b + 1}", f"byte {nul_d + 1}"]
        data = src.read_bytes()  # `tail -c +N` starts at the refused line
        assert [data[int(w.split()[1]) - 1 :][:2] for w in where] == [b"yy", b"b\0", b"d\0"]


def test_empty_stdin_succeeds_quietly(tmp_path: Path, zotsink) -> None:
    r = zotsink(tmp_path / "out.txt", input=b"")
    assert (r.returncode, r.stderr) == (0, b"")
    assert not (tmp_path / "out.txt").exists()


def test_out_is_a_directory(tmp_path: Path, zotsink) -> None:
    out = tmp_path / "results"
    out.mkdir()
    r = zotsink("results", input=b"rec\n")
    assert r.returncode == 74
    err = no_traceback(r)
    spill = tmp_path / f"results.spill.{HOST}.{spill_of(err).name.rsplit('.', 1)[1]}"
    assert err == (
        "zotsink: error: cannot open results for appending: it is a directory; name a file "
        f"inside it; the records were saved to {spill}\n"
        f"zotsink: 1 record is safe in {spill}; run `zotsink recover results` when the "
        "cause is fixed\n"
    )
    assert spill.read_bytes() == b"rec\n"


def test_out_directory_missing(tmp_path: Path, zotsink) -> None:
    spill_dir = tmp_path / "spill"
    spill_dir.mkdir()
    out = "nodir/out.txt"
    r = zotsink(out, input=b"rec\n", env={"ZOTSINK_SPILL_DIR": str(spill_dir)})
    assert r.returncode == 74
    err = no_traceback(r)
    spill = spill_of(err)
    assert spill.parent == spill_dir
    assert err == (
        f"zotsink: error: cannot open {out} for appending: its directory does not exist; "
        f"create it first; the records were saved to {spill}\n"
        f"zotsink: 1 record is safe in {spill}; run `zotsink recover {out} {spill}` when "
        "the cause is fixed\n"
    )
    assert spill.read_bytes() == b"rec\n"
    assert not (tmp_path / "nodir").exists()


def test_no_write_permission(tmp_path: Path, child_env) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    out = ro / "out.txt"
    out.write_bytes(b"old\n")
    out.chmod(0o444)
    ro.chmod(0o555)
    spill_dir = tmp_path / "spill"
    spill_dir.mkdir()
    cmd = [sys.executable, "-m", "zotsink", str(out)]
    if os.geteuid() == 0:
        # root writes anywhere: drop the capabilities that let it, for the child only
        drop = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search,-fowner"]
        if shutil.which("setpriv") is None or subprocess.run([*drop, "true"]).returncode:
            pytest.skip("running as root, and setpriv cannot drop the capabilities here")
        cmd = [*drop, *cmd]
    try:
        r = subprocess.run(
            cmd,
            input=b"rec\n",
            capture_output=True,
            env=child_env({"ZOTSINK_SPILL_DIR": str(spill_dir)}),
        )
    finally:
        ro.chmod(0o755)
    assert r.returncode == 74
    err = no_traceback(r)
    spill = spill_of(err)
    assert spill.parent == spill_dir  # nor could it go beside OUT
    assert err == (
        f"zotsink: error: cannot open {out} for appending: permission denied; choose a place "
        f"you may write to; the records were saved to {spill}\n"
        f"zotsink: 1 record is safe in {spill}; run `zotsink recover {out} {spill}` when "
        "the cause is fixed\n"
    )
    assert spill.read_bytes() == b"rec\n"
    assert out.read_bytes() == b"old\n"


def test_out_symlink_is_followed_but_side_files_stay_beside_the_link(
    tmp_path: Path, zotsink
) -> None:
    (tmp_path / "data").mkdir()
    target = tmp_path / "data" / "real.txt"
    os.symlink("data/real.txt", tmp_path / "out.txt")
    r = zotsink("out.txt", input=b"good\nbad\0\n")
    assert r.returncode == 1
    assert no_traceback(r) == "zotsink: 1 record refused; they are in out.txt.rejects\n"
    assert target.read_bytes() == b"good\n"
    rejects = tmp_path / "out.txt.rejects"
    assert stat.S_ISREG(os.lstat(rejects).st_mode)
    assert rejects.read_bytes() == b"byte 6: NUL byte\tbad\0\n"
    assert not (tmp_path / "data" / "real.txt.rejects").exists()


def test_columns_named_twice(tmp_path: Path, zotsink) -> None:
    r = zotsink("--columns", "a,b,a", "out.tsv", input=b"1\t2\t3\n")
    assert r.returncode == 2
    assert no_traceback(r) == "zotsink: error: column 'a' is named twice in 'a,b,a'\n"
    assert not (tmp_path / "out.tsv").exists()


def test_verbose_may_show_the_traceback(tmp_path: Path, zotsink) -> None:
    r = zotsink("-v", "--columns", "a,a", "out.tsv", input=b"")
    err = r.stderr.decode()
    assert r.returncode == 2
    assert err.startswith("Traceback (most recent call last):\n")
    assert err.endswith("zotsink: error: column 'a' is named twice in 'a,a'\n")


def test_kv_line_whose_first_token_has_no_separator(tmp_path: Path, zotsink) -> None:
    r = zotsink("--kv", "out.tsv", input=b"a:1 b:2\nfoo bar:1\na:3 b:4\n")
    assert r.returncode == 1
    assert no_traceback(r) == "zotsink: 1 record refused; they are in out.tsv.rejects\n"
    assert (tmp_path / "out.tsv").read_bytes() == b"a\tb\n1\t2\n3\t4\n"
    assert (tmp_path / "out.tsv.rejects").read_bytes() == (
        b"line 2: the first token 'foo' has no ':': expected key:value tokens\tfoo bar:1\n"
    )


def test_unknown_mapping_key_from_the_api_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out.tsv"
    append_record(out, {"a": 1, "b": 2})
    with pytest.raises(RecordError) as e:
        append_records(out, [{"a": 3, "b": 4}, {"a": 5, "zz": 6}])
    assert e.value.message == "unknown column 'zz': the header has a,b"
    assert exit_code(e.value) == 1
    assert out.read_bytes() == b"a\tb\n1\t2\n"
    assert not (tmp_path / "out.tsv.rejects").exists()
