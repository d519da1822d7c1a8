"""``zotsink status --failed`` reads past a line of any length in the log (a crash can
leave a run of zero bytes where lines were being written) without holding it: bounded
memory, and the lines after it still count."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

# Starts argv with its address space limited, then prints its exit code and peak RSS
# (KiB): a launcher of its own, so that the child is not charged with pytest's memory.
_LAUNCH = (
    "import os, resource, subprocess, sys\n"
    "def limit():\n"
    "    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))\n"
    "p = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE, preexec_fn=limit)\n"
    "out = p.stdout.read()\n"
    "_pid, status, ru = os.wait4(p.pid, 0)\n"
    "print(os.waitstatus_to_exitcode(status), ru.ru_maxrss)\n"
    "sys.stdout.write(out.decode())\n"
)
ZEROS = 400 * 1024 * 1024


def test_a_newline_less_run_of_zeros_in_the_log_is_read_past(tmp_path: Path) -> None:
    (tmp_path / "tasks.txt").write_text("a\nbad\n")
    r = subprocess.run(
        [sys.executable, "-m", "zotsink", "run", "tasks.txt", "out.tsv", "--", "sh", "-c",
         '[ "$0" = bad ] && { echo "before the zeros" >&2; exit 3; }; echo "$0"'],
        cwd=tmp_path, capture_output=True, timeout=120, check=False,
    )  # fmt: skip
    assert r.returncode == 1, r.stderr
    log = tmp_path / "out.tsv.log"
    with open(log, "r+b") as f:
        end = f.seek(0, os.SEEK_END)
        f.truncate(end + ZEROS)  # sparse: zeros that cost no disk
        f.seek(end + ZEROS)
        f.write(b"\n2.1\tafter the zeros\n2.1\t" + b"y" * 5000 + b"\n")
    out = subprocess.run(
        [sys.executable, "-c", _LAUNCH, sys.executable, "-m", "zotsink", "status", "tasks.txt",
         "out.tsv", "--failed"],
        cwd=tmp_path, capture_output=True, check=True, timeout=300,
    )  # fmt: skip
    head, *lines = out.stdout.decode().splitlines()
    code, rss_kib = head.split()
    assert int(code) == 1, out.stderr
    assert int(rss_kib) < 60 * 1024, rss_kib  # no line held whole
    assert lines[0].startswith("task 2 failed (attempt 1, exit 3, ")
    # the run of zeros reads as no log line; a long line shows its head
    assert lines[1:3] == ["    before the zeros", "    after the zeros"]
    assert lines[3].startswith("    yyy") and 1000 < len(lines[3]) < 5000
