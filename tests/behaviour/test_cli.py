"""The command line: shorthand, options, exit codes and messages."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.ledgers import Book

ZOTSINK = [sys.executable, "-m", "zotsink"]


def run(*args: str, input: bytes = b"", env: dict[str, str] | None = None, cwd=None):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run(
        [*ZOTSINK, *args], input=input, capture_output=True, env=e, cwd=cwd, timeout=60
    )


def test_shorthand_and_literal_subcommand_names(tmp_path: Path) -> None:
    r = run(str(tmp_path / "o.txt"), input=b"a\nb")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "o.txt").read_bytes() == b"a\nb\n"  # the final newline is added
    r = run("append", "collect", "rec", cwd=tmp_path)
    assert r.returncode == 0 and (tmp_path / "collect").read_bytes() == b"rec\n"
    r = run("--timeout", "5", str(tmp_path / "o.txt"), "c")
    assert r.returncode == 0 and (tmp_path / "o.txt").read_bytes() == b"a\nb\nc\n"


@pytest.mark.parametrize("word", ["cancel", "results", "Run2"])
def test_a_first_word_that_is_no_command_nor_file_is_refused(tmp_path: Path, word: str) -> None:
    (tmp_path / "tasks.txt").write_text("a\n")
    r = run(word, "tasks.txt", "out.tsv", cwd=tmp_path)
    assert r.returncode == 2
    assert f"no command {word!r}".encode() in r.stderr
    assert f"`zotsink append {word}`".encode() in r.stderr
    assert sorted(os.listdir(tmp_path)) == ["tasks.txt"]  # nothing written
    # the way out it names, a name with an extension, and an existing file are OUT
    assert run("append", word, "x", cwd=tmp_path).returncode == 0
    assert run(word, "y", cwd=tmp_path).returncode == 0
    assert (tmp_path / word).read_bytes() == b"x\ny\n"
    assert run("out.tsv", input=b"z\n", cwd=tmp_path).returncode == 0
    assert (tmp_path / "out.tsv").read_bytes() == b"z\n"


def test_help_and_version() -> None:
    r = run("--help")
    assert r.returncode == 0 and b"append" in r.stdout and b"recover" in r.stdout
    r = run("append", "-h")
    assert r.returncode == 0 and b"--batch-bytes" in r.stdout
    r = run("--version")
    assert r.returncode == 0 and r.stdout.startswith(b"zotsink, version ")


def test_stamp_job_and_task_from_slurm(tmp_path: Path) -> None:
    out = tmp_path / "o.tsv"
    env = {"SLURM_ARRAY_JOB_ID": "777", "SLURM_ARRAY_TASK_ID": "5"}
    r = run("--stamp", "job,task", "--columns", "x", str(out), input=b"r1\nr2\n", env=env)
    assert r.returncode == 0, r.stderr
    assert out.read_text() == "job\ttask\tx\n777\t5\tr1\n777\t5\tr2\n"


def test_bare_stamp_does_not_swallow_out(tmp_path: Path) -> None:
    out = tmp_path / "o.txt"
    r = run("--stamp", str(out), input=b"v\n", env={"SLURM_JOB_ID": "3"})
    assert r.returncode == 0, r.stderr
    time_, host, job, task, v = out.read_text().rstrip("\n").split("\t")
    assert (host, job, task, v) == (os.uname().nodename, "3", "", "v")
    assert time_.endswith("Z")


def test_kv_lines_become_columns(tmp_path: Path) -> None:
    out = tmp_path / "o.tsv"
    r = run("--kv", str(out), input=b"filename:a b.jpg min:1 max:9\nfilename:c.jpg min:2 max:8\n")
    assert r.returncode == 0, r.stderr
    assert out.read_text() == "filename\tmin\tmax\na b.jpg\t1\t9\nc.jpg\t2\t8\n"
    r = run("--kv", "=", str(tmp_path / "e.csv"), input=b"a=1 b=2\n")
    assert (tmp_path / "e.csv").read_text() == "a,b\n1,2\n"


def test_kv_line_without_separator_is_rejected(tmp_path: Path) -> None:
    out = tmp_path / "o.tsv"
    r = run("--kv", str(out), input=b"a:1 b:2\nnosep c:3\na:4 b:5\n")
    assert r.returncode == 1
    assert out.read_text() == "a\tb\n1\t2\n4\t5\n"
    assert (tmp_path / "o.tsv.rejects").read_text() == (
        "line 2: the first token 'nosep' has no ':': expected key:value tokens\tnosep c:3\n"
    )
    assert b"1 record refused; they are in" in r.stderr and b"Traceback" not in r.stderr


def test_columns_differ_from_existing_header(tmp_path: Path) -> None:
    out = tmp_path / "o.tsv"
    out.write_bytes(b"a\tb\n1\t2\n")
    r = run("--columns", "a,c", str(out), input=b"3\t4\n")
    assert r.returncode == 1
    assert out.read_bytes() == b"a\tb\n1\t2\n"  # unchanged
    msg = r.stderr.decode()
    assert "starts with the header 'a\\tb', not 'a\\tc'; nothing was written" in msg
    assert (tmp_path / "o.tsv.rejects").read_bytes() == b"header mismatch\t3\t4\n"


def test_field_count_checked_against_columns(tmp_path: Path) -> None:
    out = tmp_path / "o.tsv"
    r = run("--columns", "a,b", str(out), input=b"1\t2\n3\n4\t5\t6\n")
    assert r.returncode == 1
    assert out.read_bytes() == b"a\tb\n1\t2\n"
    assert (tmp_path / "o.tsv.rejects").read_text().splitlines() == [
        "line 2: 1 fields where the header has 2\t3",
        "line 3: 3 fields where the header has 2\t4\t5\t6",
    ]


def test_lines_pass_bytes_through_and_refuse_nul(tmp_path: Path) -> None:
    out = tmp_path / "o.txt"
    data = b"caf\xe9 \xff\r\nok\nnul\0here\nlast"
    r = run(str(out), input=data)
    assert r.returncode == 1
    assert out.read_bytes() == b"caf\xe9 \xff\r\nok\nlast\n"
    # Plain lines are not counted as they pass: the refused one is named by its first byte.
    assert (tmp_path / "o.txt.rejects").read_bytes() == b"byte 12: NUL byte\tnul\0here\n"
    r = run("--count-lines", "-v", str(out), input=b"a\nb\0\n")
    assert r.returncode == 1
    assert (tmp_path / "o.txt.rejects").read_bytes().endswith(b"\nline 2: NUL byte\tb\0\n")
    assert b"1 record appended to" in r.stderr
    r = run("-v", str(out), input=b"a\nb\n")
    assert r.returncode == 0 and b"4 bytes appended to" in r.stderr


def test_empty_stdin_writes_nothing_and_succeeds(tmp_path: Path) -> None:
    r = run(str(tmp_path / "o.txt"))
    assert r.returncode == 0 and r.stderr == b""
    assert (tmp_path / "o.txt").exists() is False


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--lock", "posix", "o"], "Invalid value for '--lock'"),
        (["--format", "json", "o"], "Invalid value for '-f' / '--format'"),
        (["--stamp", "job,node", "o"], "unknown --stamp field"),
        (["--columns", "a,a", "o.tsv"], "column 'a' is named twice"),
        (["--kv=;", "o"], "kv (--kv) separator must be"),
    ],
)
def test_usage_errors_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    r = run(*args, input=b"x\n", cwd=tmp_path)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert message in r.stderr.decode()
    assert b"Traceback" not in r.stderr


def test_lock_timeout_spills_then_recover_moves_it_in(tmp_path: Path) -> None:
    out = tmp_path / "o.txt"
    out.write_bytes(b"first\n")
    holder = subprocess.Popen(
        ["flock", str(out), "-c", "echo held; read x"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert holder.stdout.readline() == b"held\n"
    t0 = time.monotonic()
    r = run("--timeout", "0.5", str(out), input=b"rec\n")
    elapsed = time.monotonic() - t0
    holder.communicate(b"\n", timeout=10)
    assert r.returncode == 75
    assert elapsed < 5  # about a second: 0.5 s of waiting plus start-up
    spills = list(tmp_path.glob("o.txt.spill.*"))
    assert len(spills) == 1 and spills[0].read_bytes() == b"rec\n"
    assert spills[0].name.startswith(f"o.txt.spill.{os.uname().nodename}.")
    assert f"1 record is safe in {spills[0]}" in r.stderr.decode()
    assert out.read_bytes() == b"first\n"
    r = run("recover", str(out))
    assert r.returncode == 0, r.stderr
    assert out.read_bytes() == b"first\nrec\n"
    assert not list(tmp_path.glob("o.txt.spill.*"))
    assert b"recovered 1 record from 1 spill file" in r.stderr


def test_recover_skips_the_repeated_header(tmp_path: Path) -> None:
    out = tmp_path / "o.tsv"
    (tmp_path / "o.tsv.spill.h.1").write_bytes(b"a\tb\n1\t2\n")
    r = run("recover", str(out))  # empty OUT: the spill's header becomes OUT's header
    assert r.returncode == 0 and out.read_bytes() == b"a\tb\n1\t2\n"
    (tmp_path / "o.tsv.spill.h.2").write_bytes(b"a\tb\n3\t4\n")
    assert run("recover", str(out)).returncode == 0
    assert out.read_bytes() == b"a\tb\n1\t2\n3\t4\n"


def test_cat_prints_a_snapshot(tmp_path: Path) -> None:
    out = tmp_path / "o.txt"
    out.write_bytes(b"x\ny\n")
    r = run("cat", str(out))
    assert (r.returncode, r.stdout) == (0, b"x\ny\n")
    r = run("cat", str(tmp_path / "none"))
    assert r.returncode == 1 and b"does not exist" in r.stderr


def test_csv_line_with_a_bare_cr_is_refused_not_a_crash(tmp_path: Path) -> None:
    out = tmp_path / "o.csv"
    r = run("--columns", "x", str(out), input=b"ok\na\rb\nfine\n")
    assert r.returncode == 1 and b"Traceback" not in r.stderr
    assert out.read_bytes() == b"x\nok\nfine\n"
    rejects = (tmp_path / "o.csv.rejects").read_bytes()
    assert rejects.startswith(b"line 2: malformed csv line (") and rejects.endswith(b"\ta\rb\n")


def test_stamped_blocks_match_line_by_line_stamping(tmp_path: Path) -> None:
    # the whole-block stamping path and the per-line path (taken when a line is refused)
    # must produce the same bytes for the good lines
    env = {"SLURM_ARRAY_JOB_ID": "9", "SLURM_ARRAY_TASK_ID": "4"}
    lines = b"".join(b"rec %d\tx\r\n" % i for i in range(500))
    fast, slow = tmp_path / "fast.txt", tmp_path / "slow.txt"
    assert run("--stamp", "job,task", str(fast), input=lines, env=env).returncode == 0
    r = run("--stamp", "job,task", str(slow), input=lines + b"bad\0\n", env=env)
    assert r.returncode == 1
    assert fast.read_bytes() == slow.read_bytes()
    assert fast.read_bytes().split(b"\n")[7] == b"9\t4\trec 7\tx\r"


def test_a_big_stamped_or_counted_stream_keeps_every_line_and_its_count(tmp_path: Path) -> None:
    # Past 16 MiB a rewriting stream pads the heap and stamps whole batches: every line is
    # still there once, stamped, in order; counted lines (long ones, counted by deleting
    # newlines) are the true count.
    env = {"SLURM_ARRAY_JOB_ID": "9", "SLURM_ARRAY_TASK_ID": "4"}
    lines = [b"%08d %s" % (i, b"v" * (i % 97)) for i in range(400_000)]
    data = b"\n".join(lines) + b"\n"
    assert len(data) > 20 << 20
    out = tmp_path / "o.txt"
    r = run("-v", "--stamp", "job,task", str(out), input=data, env=env)
    assert r.returncode == 0, r.stderr
    assert b"400000 records appended" in r.stderr
    assert out.read_bytes() == b"".join(b"9\t4\t" + ln + b"\n" for ln in lines)
    counted = tmp_path / "c.txt"
    r = run("-v", "--count-lines", str(counted), input=data)
    assert r.returncode == 0, r.stderr
    assert b"400000 records appended" in r.stderr
    assert counted.read_bytes() == data


def test_stamp_into_a_headerless_tsv_is_refused_with_the_way_out(tmp_path: Path) -> None:
    out = tmp_path / "o.tsv"
    r = run("--stamp", "host", str(out), input=b"v\n")
    assert r.returncode == 2
    assert b"give --columns NAME" in r.stderr and b".txt" in r.stderr
    assert not out.exists()
    # an OUT whose header starts with the stamp fields names the data columns itself
    out.write_text("host\tv\n")
    r = run("--stamp", "host", str(out), input=b"w\n")
    assert r.returncode == 0, r.stderr
    assert out.read_text() == f"host\tv\n{os.uname().nodename}\tw\n"


# -- help that tells the truth ------------------------------------------------------------------

#: Commands that append what they are given, and spill it when OUT cannot take it; recover
#: takes spill files, so its help names them too.
WRITERS = {"append", "run", "collect", "pack"}
TAKES_SPILLS = {"recover"}


def _commands() -> list[str]:
    from zotsink.cli import COMMANDS

    return list(COMMANDS)


@pytest.mark.parametrize("command", _commands())
def test_only_commands_that_write_speak_of_spilling(command: str) -> None:
    r = run(command, "--help")
    assert r.returncode == 0, r.stderr
    text = b" ".join(r.stdout.split()).lower()  # help wraps lines: join them again
    if command in WRITERS:
        assert b"spill" in text  # the check can see the word where it belongs
    elif command not in TAKES_SPILLS:
        assert b"spill" not in text, text
    if b"--timeout" in text and command not in WRITERS:
        assert b"longest wait for the lock (s); then exit 75." in text


def test_cat_output_help_names_its_metavar() -> None:
    r = run("cat", "--help")
    text = b" ".join(r.stdout.split())
    assert b"-o, --output FILE Write the snapshot to FILE instead" in text
    assert b"DEST" not in text


def _ledger(path: Path, tasks: int, not_ok: set[int]) -> None:
    book = Book(path)
    for n in range(1, tasks + 1):
        if n not in not_ok:
            book.claim(n, 1, f"t{n}").begin(n, 1).end(n, 1, status="ok")
    book.write()


def test_missing_with_a_ledger_in_outs_place_says_to_use_ledger(tmp_path: Path) -> None:
    (tmp_path / "tasks.txt").write_text("".join(f"t{n}\n" for n in range(1, 6)))
    _ledger(tmp_path / "results.tsv.ledger", 5, {2, 3})
    r = run("missing", "tasks.txt", "results.tsv.ledger", "--array", cwd=tmp_path)
    assert r.returncode == 2 and b"Missing option '-k'" not in r.stderr
    assert b"results.tsv.ledger looks like the ledger of `zotsink run`" in r.stderr
    # the command it suggests is the one that works
    told = r.stderr.decode().split("(zotsink missing ", 1)[1].split(")", 1)[0].split()
    assert told == ["tasks.txt", "--ledger", "results.tsv.ledger", "--array"]
    done = run("missing", *told, cwd=tmp_path)
    assert (done.returncode, done.stdout) == (0, b"2-3\n"), done.stderr
    # an OUT of another name: the usual message, and the way to a ledger beside it
    r = run("missing", "tasks.txt", "results.tsv", cwd=tmp_path)
    assert r.returncode == 2
    assert b"Missing option '-k' / '--key': OUT's column holding the task line" in r.stderr
    assert b"zotsink missing tasks.txt --ledger results.tsv" in r.stderr


def test_status_with_one_file_says_how_it_was_taken(tmp_path: Path) -> None:
    (tmp_path / "tasks.txt").write_text("t1\n")
    _ledger(tmp_path / "results.tsv.ledger", 1, set())
    r = run("status", "results.tsv", cwd=tmp_path)
    assert r.returncode == 2
    err = b" ".join(r.stderr.split())
    assert b"results.tsv was taken as TASKS, the task list, but it is an OUT" in err
    assert b"`zotsink status TASKS results.tsv`" in err
    assert run("status", "tasks.txt", "results.tsv", cwd=tmp_path).returncode == 0
    r = run("status", "tasks.txt", cwd=tmp_path)
    assert r.returncode == 2
    assert b"tasks.txt was taken as TASKS, the task list; give OUT or --ledger PATH too" in r.stderr
    r = run("status", "tasks.txt", "results.tsv", "--ledger", "x", cwd=tmp_path)
    assert r.returncode == 2 and b"not both" in r.stderr


def test_max_array_bases_are_explained_and_the_example_is_true(tmp_path: Path) -> None:
    help_text = b" ".join(run("missing", "--help").stdout.split())
    assert b"Index I runs chunk I-BASE+1" in help_text
    assert b"BASE is 0 or negative, and right" in help_text
    # docs/missing.md shows a split with a negative base: its numbers are real
    doc = (Path(__file__).resolve().parents[2] / "docs" / "missing.md").read_text()
    assert (
        "$ zotsink missing tasks.txt --ledger results.tsv.ledger --array --max-array 100\n" in doc
    )
    shown = doc.split("--array --max-array 100\n", 1)[1].split("```", 1)[0]
    assert shown == "3,50 1\n16,39,41,62,85 -98\n"
    (tmp_path / "tasks.txt").write_text("".join(f"t{n}\n" for n in range(1, 201)))
    _ledger(tmp_path / "results.tsv.ledger", 200, {3, 50, 115, 138, 140, 161, 184})
    args = ["--ledger", "results.tsv.ledger", "--array", "--max-array", "100"]
    r = run("missing", "tasks.txt", *args, cwd=tmp_path)
    assert r.stdout.decode() == shown, r.stderr
    # index 16 under base -98 runs task 16 + 98 + 1 = 115, as the text says
    r = run(
        "run", "tasks.txt", "out.txt", "--index", "16", "--base", "-98", "--", "echo", cwd=tmp_path
    )
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "out.txt").read_text() == "t115\n"


@pytest.mark.parametrize("array", [[], ["--array"]], ids=["lines", "array"])
def test_missing_from_a_ledger_keeps_to_its_timeout(tmp_path: Path, array: list[str]) -> None:
    import fcntl

    (tmp_path / "tasks.txt").write_text("t1\nt2\n")
    _ledger(tmp_path / "l", 2, {2})
    with open(tmp_path / "l", "rb") as holder:
        fcntl.flock(holder, fcntl.LOCK_EX)  # a run appending to the ledger, for ever
        r = subprocess.run(
            [*ZOTSINK, "missing", "tasks.txt", "--ledger", "l", *array, "--timeout", "0.2"],
            capture_output=True,
            cwd=tmp_path,
            timeout=30,  # the default wait is 600 s: a run that ignores --timeout fails here
        )
    assert r.returncode == 75, r.stderr
    assert b"the lock was still held by another writer after 0.2 s" in r.stderr
    assert r.stdout == b""


def test_run_index_help_names_no_value_it_refuses() -> None:
    help_text = b" ".join(run("run", "--help").stdout.split())
    assert b"outside an array job, every task" in help_text
    assert b"none:" not in help_text
    r = run("run", "--index", "none", "tasks.txt", "out.txt", "--", "echo")
    assert r.returncode == 2 and b"'none' is not a valid integer" in r.stderr
