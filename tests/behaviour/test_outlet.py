"""The record outlet as users meet it: every command that appends waits for OUT's lock the
same way, stops the same way, and says where records went the same way, even under -q.

OUT's lock is held by a helper process (as another writer or a hung job would hold it);
tasks say they have started by creating a file, and the tests wait for those files.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.ledgers import ledger_rows
from zotsink._core.stop import STOP_LOCK_TIMEOUT

Proc = subprocess.Popen[bytes]


# Prints its record, says so with a file, then waits to be told to stop (SIGTERM or the
# forwarded signal), notes that in a file, and exits; task "quick" exits at once.
TASK = r"""
import os, signal, sys, time

item = sys.argv[1]
def stop(signum, frame):
    with open(f"stopped.{item}", "w") as f:
        f.write(signal.Signals(signum).name)
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGUSR2, stop)
print(f"{item}\t1", flush=True)
print(f"{item} says hello", file=sys.stderr, flush=True)
open(f"ready.{item}", "w").close()
if item == "quick":
    sys.exit(0)
deadline = time.monotonic() + 120
while time.monotonic() < deadline:
    time.sleep(0.05)
"""


def spills(d: Path, name: str) -> list[Path]:
    return sorted(p for p in d.iterdir() if p.name.startswith(name + ".spill."))


def wait_for(d: Path, names: list[str], proc: Proc) -> None:
    end = time.monotonic() + 60
    while time.monotonic() < end:
        if all((d / n).exists() for n in names):
            return
        if proc.poll() is not None:
            pytest.fail(f"ended early ({proc.returncode}): {proc.stderr.read().decode()}")  # type: ignore[union-attr]
        time.sleep(0.01)
    pytest.fail(f"not all of {names} appeared")


def test_run_quiet_that_spills_still_says_where_the_records_are(
    tmp_path: Path, zotsink: Callable[..., subprocess.CompletedProcess[bytes]], hold
) -> None:
    (tmp_path / "tasks.txt").write_text("echo a\necho b\n")
    out = tmp_path / "out.txt"
    holder = hold(out)
    r = zotsink("run", "tasks.txt", "out.txt", "-q", "--timeout", "1", "--shell")
    holder.communicate(b"", timeout=30)
    err = r.stderr.decode()
    assert r.returncode == 75, err
    found = spills(tmp_path, "out.txt")
    assert len(found) == 1
    # -q keeps progress quiet, never the error and the place of the records
    assert "zotsink: error: " in err and "still held by another writer" in err
    assert f"zotsink: 2 records are safe in {found[0]}" in err
    assert "run `zotsink recover out.txt` when the cause is fixed" in err


def test_append_quiet_that_spills_says_it_in_the_same_words(
    tmp_path: Path, zotsink: Callable[..., subprocess.CompletedProcess[bytes]], hold
) -> None:
    out = tmp_path / "out.txt"
    holder = hold(out)
    r = zotsink("append", "out.txt", "-q", "--timeout", "1", input=b"x\ny\n")
    holder.communicate(b"", timeout=30)
    err = r.stderr.decode()
    assert r.returncode == 75, err
    (found,) = spills(tmp_path, "out.txt")
    assert found.read_bytes() == b"x\ny\n"
    assert f"zotsink: 2 records are safe in {found}" in err


def test_run_stops_on_sigterm_while_out_is_locked_elsewhere(
    tmp_path: Path,
    zotsink_cmd: list[str],
    child_env: Callable[..., dict[str, str]],
    reap: Callable[[Proc], Proc],
    hold,
) -> None:
    (tmp_path / "task.py").write_text(TASK)
    (tmp_path / "tasks.txt").write_text("quick\nb\n")
    out = tmp_path / "out.tsv"
    holder = hold(out)
    grace = 2.0
    cmd = [*zotsink_cmd, "run", "tasks.txt", "out.tsv", "--jobs", "2", "--grace", str(grace)]
    cmd += ["--flush-interval", "0", "--", sys.executable, "task.py"]
    proc = reap(
        subprocess.Popen(
            cmd, cwd=tmp_path, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
    )
    # Task "quick" ended: the run now waits for OUT's lock (the default --timeout is 600 s)
    # to append its records, while task b runs on.
    wait_for(tmp_path, ["ready.quick", "ready.b"], proc)
    proc.send_signal(signal.SIGTERM)
    # The wait for the lock ends STOP_LOCK_TIMEOUT after the signal, then the tasks get
    # it and their grace; a run that waited out --timeout would still be waiting.
    _, err = proc.communicate(timeout=STOP_LOCK_TIMEOUT + grace + 30)
    holder.communicate(b"", timeout=30)
    assert proc.returncode == 128 + signal.SIGTERM, err.decode()
    assert (tmp_path / "stopped.b").read_text() == "SIGTERM"
    ends = [r for r in ledger_rows(tmp_path / "out.tsv.ledger") if r["event"] == "end"]
    # quick's records are not in OUT: its row does not say ok (failed, or interrupted if the
    # signal came before its exit was seen)
    status = dict(sorted((r["tasknum"], r["status"]) for r in ends))
    assert status["1"] in ("failed", "interrupted") and status["2"] == "interrupted", status
    # the records were never appended: they wait in a spill file, and the user is told
    assert out.read_bytes() == b""
    saved = b"".join(p.read_bytes() for p in spills(tmp_path, "out.tsv"))
    assert sorted(saved.splitlines()) == [b"b\t1", b"quick\t1"]
    assert "zotsink: 2 records are safe in " in err.decode()


def test_after_one_lock_timeout_later_tasks_do_not_wait_it_again(
    tmp_path: Path, zotsink: Callable[..., subprocess.CompletedProcess[bytes]], hold
) -> None:
    (tmp_path / "tasks.txt").write_text("".join(f"echo rec{i}\n" for i in range(6)))
    out = tmp_path / "out.txt"
    holder = hold(out)
    timeout = 4
    start = time.monotonic()
    r = zotsink("run", "tasks.txt", "out.txt", "--shell", "--timeout", str(timeout))
    took = time.monotonic() - start
    holder.communicate(b"", timeout=30)
    assert r.returncode == 75, r.stderr.decode()
    saved = b"".join(p.read_bytes() for p in spills(tmp_path, "out.txt"))
    assert sorted(saved.splitlines()) == [b"rec%d" % i for i in range(6)]
    # Each task's end flushes OUT: six full waits would take 24 s; after the first
    # timeout each later batch waits about a second.
    assert took < 4 * timeout, r.stderr.decode()
    ends = [r for r in ledger_rows(tmp_path / "out.txt.ledger") if r["event"] == "end"]
    assert len(ends) == 6
    # no end row may claim what a spill file holds: the tasks are not ok, and run again
    spill = spills(tmp_path, "out.txt")[0]
    for row in ends:
        assert row["status"] == "failed" and row["out_offset"] == "", row
        assert f"its records could not be appended to OUT; they are in {spill}" in row["note"]


def test_a_spilled_log_is_named_with_its_own_recover_line(
    tmp_path: Path, zotsink: Callable[..., subprocess.CompletedProcess[bytes]]
) -> None:
    (tmp_path / "tasks.txt").write_text("echo rec; echo oops >&2\n")
    (tmp_path / "out.txt.log").mkdir()  # the log cannot be appended to
    r = zotsink("run", "tasks.txt", "out.txt", "--shell", "-q")
    err = r.stderr.decode()
    assert r.returncode == 74, err
    assert (tmp_path / "out.txt").read_bytes() == b"rec\n"
    (spill,) = spills(tmp_path, "out.txt.log")
    assert spill.read_bytes() == b"1.1\toops\n"
    assert (
        f"zotsink: 1 line meant for out.txt.log is safe in {spill}; "
        "run `zotsink recover out.txt.log` when the cause is fixed"
    ) in err
    (tmp_path / "out.txt.log").rmdir()
    r = zotsink("recover", "out.txt.log")
    assert r.returncode == 0, r.stderr.decode()
    assert (tmp_path / "out.txt.log").read_bytes() == b"1.1\toops\n"


def test_run_waits_for_a_locked_ledger_no_longer_than_its_timeout(
    tmp_path: Path, zotsink: Callable[..., subprocess.CompletedProcess[bytes]], hold
) -> None:
    (tmp_path / "tasks.txt").write_text("echo rec\n")
    (tmp_path / "out.txt.ledger").write_text("")
    holder = hold(tmp_path / "out.txt.ledger")
    r = zotsink("run", "tasks.txt", "out.txt", "--shell", "--timeout", "1", timeout=120)
    holder.communicate(b"", timeout=30)
    err = r.stderr.decode()
    assert r.returncode == 75, err
    assert "out.txt.ledger" in err
    assert not (tmp_path / "out.txt").exists()  # no task ran


# Writes argv[1] MiB to stdout (or stderr with argv[2] == "err") without a newline.
LONG_TASK = r"""
import sys
out = sys.stderr.buffer if sys.argv[2] == "err" else sys.stdout.buffer
for _ in range(int(sys.argv[1])):
    out.write(b"x" * (1 << 20))
out.flush()
"""


def test_run_never_holds_a_task_line_over_the_limit_in_memory(
    tmp_path: Path, zotsink_cmd: list[str], child_env: Callable[..., dict[str, str]]
) -> None:
    import resource

    (tmp_path / "task.py").write_text(LONG_TASK)
    (tmp_path / "tasks.txt").write_text("out\n")
    mib = 112
    limit = 256 << 20  # holding the line (and a copy of it) would need more than this

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    r = subprocess.run(
        [*zotsink_cmd, "run", "tasks.txt", "out.txt", "--", sys.executable, "task.py", str(mib)],
        cwd=tmp_path,
        env=child_env(),
        capture_output=True,
        preexec_fn=cap,
        timeout=300,
    )
    err = r.stderr.decode()
    assert r.returncode == 1, err  # a refused record, not a crash (70) or a lost task
    assert "zotsink: 1 record refused; they are in out.txt.rejects" in err
    rejects = tmp_path / "out.txt.rejects"
    with open(rejects, "rb") as f:
        head = f.read(200)
    reason = (
        b"task 1 line 1: over the 16777216-byte line limit; the output ended without a newline\t"
    )
    assert head.startswith(reason)
    assert rejects.stat().st_size == len(reason) + (mib << 20) + 1
    assert not (tmp_path / "out.txt").exists() or (tmp_path / "out.txt").read_bytes() == b""
    (end,) = [row for row in ledger_rows(tmp_path / "out.txt.ledger") if row["event"] == "end"]
    assert "a line over the limit refused, see out.txt.rejects" in end["note"]


def test_run_logs_the_head_of_a_stderr_line_over_the_limit(
    tmp_path: Path, zotsink: Callable[..., subprocess.CompletedProcess[bytes]]
) -> None:
    (tmp_path / "task.py").write_text(LONG_TASK)
    (tmp_path / "tasks.txt").write_text("err\n")
    r = zotsink("run", "tasks.txt", "out.txt", "--", sys.executable, "task.py", "20")
    assert r.returncode == 0, r.stderr.decode()
    log = (tmp_path / "out.txt.log").read_bytes()
    assert log == (
        b"1.1\t" + b"x" * 1024 + b"\n"
        b"1.1\tzotsink: the line above was 20971520 bytes long, cut to 1024; "
        b"the output ended without a newline\n"
    )


def catches(pid: int, signum: int) -> bool:
    """Whether process ``pid`` has a handler for ``signum`` (/proc/PID/status SigCgt)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    return False


def test_sigterm_ends_a_run_waiting_for_the_ledger_s_lock(
    tmp_path: Path,
    zotsink_cmd: list[str],
    child_env: Callable[..., dict[str, str]],
    reap: Callable[[Proc], Proc],
    hold,
) -> None:
    (tmp_path / "tasks.txt").write_text("echo rec\n")
    (tmp_path / "out.txt.ledger").write_text("")
    holder = hold(tmp_path / "out.txt.ledger")
    proc = reap(
        subprocess.Popen(
            [*zotsink_cmd, "run", "tasks.txt", "out.txt", "--shell"],  # --timeout: 600 s
            cwd=tmp_path,
            env=child_env(),
            stderr=subprocess.PIPE,
        )
    )
    # once run catches SIGTERM it is reading the ledger, or about to: the lock is held
    end = time.monotonic() + 60
    while not catches(proc.pid, signal.SIGTERM):
        assert time.monotonic() < end and proc.poll() is None, "run did not start"
        time.sleep(0.005)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    holder.communicate(b"", timeout=30)
    assert proc.returncode == 75, err.decode()
    assert "out.txt.ledger: stopped by signal 15 while waiting for its lock" in err.decode()
    assert not (tmp_path / "out.txt").exists()


def test_a_line_over_the_limit_waits_and_spills_as_every_block_does(
    tmp_path: Path, zotsink: Callable[..., subprocess.CompletedProcess[bytes]], hold
) -> None:
    """A line over the limit goes to OUT.rejects through the outlet: when that file's lock
    is held past --timeout, the line is saved whole to its spill file and counted, never
    dropped."""
    from zotsink._core.records import MAX_LINE

    (tmp_path / "out.txt.rejects").write_bytes(b"")
    holder = hold(tmp_path / "out.txt.rejects")
    long = b"x" * (MAX_LINE + 1)
    r = zotsink("append", "out.txt", "--timeout", "0.3", input=b"a\n" + long + b"\nb\n")
    holder.communicate(b"", timeout=30)
    err = r.stderr.decode()
    assert r.returncode == 75, err
    assert (tmp_path / "out.txt").read_bytes() == b"a\nb\n"
    assert (tmp_path / "out.txt.rejects").read_bytes() == b""
    [spill] = spills(tmp_path, "out.txt.rejects")
    head = f"byte 3: over the {MAX_LINE}-byte line limit\t".encode()
    assert spill.read_bytes() == head + long + b"\n"
    assert f"zotsink: 1 record refused; they are in {spill}" in err
    assert "out.txt.rejects: the lock was still held by another writer after 0.3 s" in err
