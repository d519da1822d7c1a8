"""Records lost or misplaced around the core write path, and the fixes' contracts.

Each test names the way a record used to go astray: a csv line that swallows the records
after it, a field csv readers refused, a FIFO or a planted link at OUT, a file another user
planted at OUT.rejects, a comma string of columns, a Sink shared by threads or forked, a
typo taken for a file name, a silent wait on a terminal, an option value that failed only
after stdin was read.
"""

from __future__ import annotations

import os
import pty
import select
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import zotsink
from zotsink import Sink, append_record, read_records
from zotsink.errors import UsageError

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to create a second user")
OTHER = "zotsink-other"


@pytest.fixture(scope="session")
def other_user() -> tuple[int, int]:
    """(uid, gid) of a throwaway second user, created once (root only)."""
    if os.geteuid() != 0 or not shutil.which("useradd"):
        pytest.skip("needs root and useradd to create a second user")
    subprocess.run(["useradd", "-M", "-s", "/usr/sbin/nologin", OTHER], capture_output=True)
    import pwd

    pw = pwd.getpwnam(OTHER)
    return pw.pw_uid, pw.pw_gid


def as_user(user: tuple[int, int], *cmd: str) -> None:
    uid, gid = user
    subprocess.run(
        ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", *cmd], check=True
    )


@pytest.fixture
def shared() -> Iterator[Path]:
    """A sticky, world-writable directory that the second user can reach (like /tmp)."""
    d = Path(tempfile.mkdtemp(prefix="zotsink-shared-", dir="/tmp"))
    d.chmod(0o1777)
    yield d
    shutil.rmtree(d, ignore_errors=True)


# -- csv lines that are not exactly one record --------------------------------------------


@pytest.mark.parametrize("columns", [["--columns", "a,b"], []])
def test_csv_line_with_an_open_quote_is_refused(tmp_path: Path, zotsink, columns) -> None:
    out = tmp_path / "o.csv"
    if not columns:
        out.write_bytes(b"a,b\n")
    r = zotsink(*columns, out, input=b'1,2\n3,"4\n5,6\n')
    assert r.returncode == 1, r.stderr
    assert out.read_bytes() == b"a,b\n1,2\n5,6\n"
    assert b"malformed csv line" in Path(f"{out}.rejects").read_bytes()
    assert zotsink("verify", out).returncode == 0


def test_csv_field_over_128_kib_is_one_limit_everywhere(tmp_path: Path, zotsink) -> None:
    out = tmp_path / "o.csv"
    big = "x" * (300 << 10)
    tasks = tmp_path / "tasks.txt"
    tasks.write_text("t1\nt2\n")
    r = zotsink("--columns", "task,blob", out, input=f"t1,{big}\n".encode())
    assert r.returncode == 0, r.stderr
    assert zotsink("verify", out).returncode == 0
    rows = list(read_records(out, header=True))
    assert rows == [{"task": "t1", "blob": big}]
    r = zotsink("missing", tasks, out, "--key", "task")
    assert (r.returncode, r.stdout) == (0, b"t2\n"), r.stderr


# -- what OUT may be ---------------------------------------------------------------------------


def test_dash_is_never_taken_for_a_file_named_dash(tmp_path: Path, zotsink) -> None:
    """``-`` means standard output to most tools: as OUT or ARCHIVE it used to become a file
    named ``-`` in the working directory, holding the records (exit 0)."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "f1").write_bytes(b"a:1\n")
    (tmp_path / "t.txt").write_bytes(b"task\n")
    why = (
        b"zotsink: error: OUT - would be a file named '-': zotsink appends to a named, shared "
        b"file; name it (to print a table: zotsink cat OUT)\n"
    )
    for argv in (["-"], ["append", "-", "rec"], ["run", "t.txt", "-", "--", "echo"]):
        r = zotsink(*argv, input=b"rec\n")
        assert (r.returncode, r.stderr) == (2, why), argv
    r = zotsink("collect", "src", "-o", "-")
    assert (r.returncode, r.stderr) == (2, why)
    r = zotsink("pack", "-", "src/f1")
    assert r.returncode == 2
    assert r.stderr == (
        b"zotsink: error: ARCHIVE - would be a file named '-': pack appends to a named, shared "
        b"tar; name it\n"
    )
    with pytest.raises(UsageError, match="would be a file named '-'"):
        append_record("-", "rec")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src", "t.txt"]


def test_a_device_at_out_is_refused_before_anything_is_read(tmp_path: Path, zotsink) -> None:
    """/dev/null as OUT: each batch used to be refused at open and spilled into /dev
    (beside it), with advice to remove /dev/null; now it is a usage error up front."""
    r = zotsink("/dev/null", input=b"r1\nr2\n", timeout=30)
    assert r.returncode == 2, r.stderr
    assert r.stderr == (
        b"zotsink: error: /dev/null is a character device: zotsink appends records to "
        b"regular files only; name a file as OUT\n"
    )
    assert [n for n in os.listdir("/dev") if n.startswith("null.")] == []  # no spill there
    with pytest.raises(UsageError, match="is a character device"):
        append_record("/dev/null", "r1")
    with pytest.raises(UsageError, match="is a character device"):
        Sink("/dev/null")


@pytest.mark.parametrize("kv", [False, True], ids=["lines", "kv"])
def test_a_fifo_at_out_is_refused_and_the_records_saved(tmp_path: Path, zotsink, kv: bool) -> None:
    """With --kv the header is read from OUT first: that read used to block on the FIFO,
    forever, and the stop signal only made it try again."""
    out = tmp_path / ("o.tsv" if kv else "o.txt")
    os.mkfifo(out)
    if kv:
        r = zotsink("--kv", out, input=b"a:1\na:2\n", timeout=30)
    else:
        r = zotsink(out, input=b"r1\nr2\n", timeout=30)
    err = r.stderr.decode()
    assert r.returncode == 74, err
    assert (
        "it is a FIFO, not a regular file; name another OUT "
        "(or remove it, if it was put there by mistake)"
    ) in err
    spills = list(tmp_path.glob(f"{out.name}.spill.*"))
    assert [p.read_bytes() for p in spills] == [b"a\n1\n2\n" if kv else b"r1\nr2\n"]


@ROOT_ONLY
def test_a_link_planted_at_out_by_another_user_is_not_followed(
    tmp_path: Path, zotsink, other_user, shared: Path
) -> None:
    private = tmp_path / "private.txt"
    private.write_bytes(b"mine\n")
    private.chmod(0o600)
    out = shared / "out.txt"
    as_user(other_user, "ln", "-s", str(private), str(out))
    r = zotsink(out, input=b"result\n")
    err = r.stderr.decode()
    assert r.returncode == 74, err
    assert "symbolic link in a shared sticky directory" in err
    assert private.read_bytes() == b"mine\n"
    assert [p.read_bytes() for p in shared.glob("out.txt.spill.*")] == [b"result\n"]


@ROOT_ONLY
def test_my_own_link_in_a_sticky_directory_is_followed(
    tmp_path: Path, zotsink, shared: Path
) -> None:
    target = tmp_path / "real.txt"
    (shared / "out.txt").symlink_to(target)
    assert zotsink(shared / "out.txt", input=b"r\n").returncode == 0
    assert target.read_bytes() == b"r\n"


@ROOT_ONLY
def test_rejects_planted_by_another_user_do_not_receive_records(
    zotsink, other_user, shared: Path
) -> None:
    out = shared / "out.txt"
    out.write_bytes(b"")
    rejects = shared / "out.txt.rejects"
    as_user(other_user, "sh", "-c", f"umask 000; : > {rejects}")
    r = zotsink(out, input=b"good\nbad\0line\n")
    err = r.stderr.decode()
    assert r.returncode == 74, err
    assert "a side file is only ever your own" in err
    assert rejects.read_bytes() == b""
    assert out.read_bytes() == b"good\n"
    saved = list(shared.glob("out.txt.rejects.spill.*"))
    assert [p.read_bytes() for p in saved] == [b"byte 6: NUL byte\tbad\0line\n"]


# -- the Python API ------------------------------------------------------------------------------


def test_columns_as_a_comma_string(tmp_path: Path) -> None:
    out = tmp_path / "o.tsv"
    append_record(out, ["1", "2"], columns="a,b")
    append_record(out, {"a": "3", "b": "4"}, columns="a, b")
    assert out.read_bytes() == b"a\tb\n1\t2\n3\t4\n"


def test_one_sink_shared_by_eight_threads(tmp_path: Path) -> None:
    out = tmp_path / "o.tsv"
    per = 5000
    with Sink(out, columns=["t", "n"], batch_bytes=4096) as sink:
        go = threading.Barrier(8)

        def work(t: int) -> None:
            go.wait()
            for n in range(per):
                sink.write(f"{t}\t{n}" if n % 3 else [str(t), str(n)])

        threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    lines = out.read_bytes().splitlines()
    assert lines[0] == b"t\tn"
    assert sorted(lines[1:]) == sorted(f"{t}\t{n}".encode() for t in range(8) for n in range(per))


FORK_CHILD = r"""
import os, sys
from zotsink import Sink
sink = Sink(sys.argv[1], flush_interval=3600)
sink.write("parent-1")
pid = os.fork()
if pid == 0:
    sink.write("child-1")
    os._exit(0) if sys.argv[2] == "hard" else sys.exit(0)
os.waitpid(pid, 0)
sink.write("parent-2")
sink.close()
"""


@pytest.mark.parametrize("exit_kind", ["normal", "hard"])
def test_a_forked_child_does_not_write_its_parents_buffer(tmp_path: Path, exit_kind) -> None:
    out = tmp_path / "o.txt"
    subprocess.run([sys.executable, "-c", FORK_CHILD, out, exit_kind], check=True, timeout=60)
    lines = sorted(out.read_bytes().splitlines())
    want = (
        [b"child-1", b"parent-1", b"parent-2"]
        if exit_kind == "normal"
        else [
            b"parent-1",
            b"parent-2",
        ]
    )
    assert lines == want


# -- the command line ----------------------------------------------------------------------------


@pytest.mark.parametrize(("typo", "meant"), [("verfy", "verify"), ("colect", "collect")])
def test_a_mistyped_command_is_not_a_file_name(tmp_path: Path, zotsink, typo, meant) -> None:
    (tmp_path / "h.tsv").write_bytes(b"a\n")
    r = zotsink(typo, "h.tsv")
    assert r.returncode == 2
    assert f"did you mean `zotsink {meant}`?".encode() in r.stderr
    assert not (tmp_path / typo).exists()
    # an existing file of that name, or `append` spelled out, is still OUT
    assert zotsink("append", typo, "x").returncode == 0
    assert (tmp_path / typo).read_bytes() == b"x\n"
    assert zotsink(typo, input=b"y\n").returncode == 0
    assert (tmp_path / typo).read_bytes() == b"x\ny\n"


def test_a_terminal_on_stdin_is_told_what_zotsink_waits_for(tmp_path: Path) -> None:
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "zotsink", tmp_path / "o.txt"],
        stdin=slave,
        stderr=subprocess.PIPE,
    )
    os.close(slave)
    try:
        ready, _, _ = select.select([proc.stderr], [], [], 60)
        assert ready, "nothing said on stderr while waiting on the terminal"
        said = os.read(proc.stderr.fileno(), 4096).decode()
        assert "reading records for" in said and "Ctrl-D" in said
        os.write(master, b"typed\n\x04")
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
        proc.stderr.close()
    assert (tmp_path / "o.txt").read_bytes() == b"typed\n"


@pytest.mark.parametrize(
    "option",
    [
        ["--flush-interval", "inf"],
        ["--flush-interval", "3e6"],
        ["--flush-interval", "nan"],
        ["--timeout", "inf"],
        ["--timeout", "-1"],
        ["--batch-bytes", "0"],
    ],
)
def test_bad_numbers_are_refused_before_stdin_is_read(tmp_path: Path, option) -> None:
    out = tmp_path / "o.txt"
    r, w = os.pipe()
    proc = subprocess.Popen(
        [sys.executable, "-m", "zotsink", *option, out], stdin=r, stderr=subprocess.PIPE
    )
    os.close(r)
    try:
        # stdin stays open: a refusal must come without reading it to the end
        _, err = proc.communicate(timeout=60)
    finally:
        os.close(w)
    assert proc.returncode == 2, err
    assert b"Invalid value" in err
    assert not out.exists()


def test_public_names_of_the_readme_import(tmp_path: Path) -> None:
    import re

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    names = set()
    for m in re.finditer(r"from zotsink import (\([^)]*\)|[^\n#]+)", readme):
        names |= {n.strip(" ()\n") for n in m[1].replace("\n", ",").split(",")} - {""}
    names |= set(re.findall(r"\bzotsink\.([A-Za-z_]\w*)\(", readme))
    assert names, "the README shows no Python names"
    assert not re.search(r"from zotsink\.\w+ import", readme), "README imports a private module"
    for name in sorted(names):
        assert name in zotsink.__all__, name
        assert getattr(zotsink, name) is not None
