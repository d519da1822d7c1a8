"""Writers killed mid-stream: no line mixes two records, at most one fragment per kill.

Six ``zotsink`` writers stream into one OUT; a random one is SIGKILLed about every 0.2 s, 30
times, and a new one takes its place each time. A small write on a local disk is never cut by
SIGKILL, so some replacements are "tearers": a shim lets one of their writes reach OUT only in
part and then SIGKILLs the process, as a kill landing inside a large write on a slow filesystem
does. A record is ``R<slot> <gen> <seq> xx...xE`` (tab-separated): "R" appears only at its
start, so a line holding two records would show two of them.
"""

from __future__ import annotations

import fcntl
import importlib.util
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest

WRITERS = 6
KILLS = 30  # random kills per run; counted, not timed, so a loaded machine runs as many
KILL_EVERY = 0.2
PER_TICK = 4  # records sent to each writer per feeding round
HEADER = b"slot\tgen\tseq\tpad\n"
RECORD = re.compile(rb"R(\d)\t(\d+)\t(\d+)\tx+E")
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
TEAR_ODDS = 3  # one replacement in this many is a tearer

# Runs the CLI (argv: OUT N SEED ARGS...); its N-th write to OUT writes only a part of the
# data, cut inside a record, and the process SIGKILLs itself.
TEARER = r"""
import os, random, signal, sys
target, n, rng = os.path.realpath(sys.argv[1]), [int(sys.argv[2])], random.Random(sys.argv[3])
real_write = os.write

def write(fd, data):
    try:
        is_out = os.readlink(f"/proc/self/fd/{fd}") == target
    except OSError:
        is_out = False
    if is_out:
        n[0] -= 1
        if n[0] == 0:
            data = bytes(data)
            # inside a record: never just after a newline (nothing torn) nor just before
            # one (the record would be whole once the next writer ends the line)
            cuts = [i for i in range(1, len(data)) if data[i - 1] != 10 and data[i] != 10]
            real_write(fd, data[: rng.choice(cuts)])
            os.kill(os.getpid(), signal.SIGKILL)
    return real_write(fd, data)

os.write = write
sys.argv = ["zotsink", *sys.argv[4:]]
from zotsink.cli import main
main()
"""


def record(slot: int, gen: int, seq: int) -> bytes:
    head = f"R{slot}\t{gen}\t{seq}\t".encode()
    return head + b"x" * (62 - len(head)) + b"E\n"


@dataclass
class Slot:
    index: int
    args: list[str]  # zotsink's arguments
    env: dict[str, str]
    rng: random.Random
    gen: int = 0
    seq: int = 0
    tearer: bool = False
    proc: subprocess.Popen | None = None
    wfd: int = -1
    sent: dict[int, list[bytes]] = field(default_factory=dict)  # gen -> records sent

    def start(self, tearer: bool = False) -> subprocess.Popen:
        self.gen += 1
        self.seq = 0
        self.sent[self.gen] = []
        self.tearer = tearer
        r, w = os.pipe()
        fcntl.fcntl(w, F_SETPIPE_SZ, 1 << 20)  # the feeder must not block on a slow start
        cmd = [sys.executable, "-m", "zotsink", *self.args]
        if tearer:
            nth, seed = self.rng.randint(1, 3), self.rng.random()
            cmd = [sys.executable, "-c", TEARER, self.args[-1], str(nth), str(seed), *self.args]
        self.proc = subprocess.Popen(cmd, stdin=r, stderr=subprocess.PIPE, env=self.env)
        os.close(r)
        self.wfd = w
        return self.proc

    def feed(self, n: int) -> bool:
        """Send n records; False when the writer is gone (a tearer that killed itself)."""
        batch = [record(self.index, self.gen, self.seq + i) for i in range(n)]
        try:
            os.write(self.wfd, b"".join(batch))  # under PIPE_BUF: all of it or nothing
        except BrokenPipeError:
            return False
        self.seq += n
        self.sent[self.gen].extend(batch)
        return True

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()
        self.proc.stderr.close()
        os.close(self.wfd)

    def finish(self) -> tuple[int, bytes]:
        """End of input: the writer flushes and exits; its exit code and stderr."""
        assert self.proc is not None
        os.close(self.wfd)
        _, err = self.proc.communicate(timeout=60)
        return self.proc.returncode, err


def split_lines(data: bytes) -> tuple[list[bytes], list[tuple[int, bytes]]]:
    """Whole records of OUT (after its header), and fragments as (line number, bytes)."""
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()  # OUT ended with a newline
    assert lines[0] == HEADER.rstrip(b"\n")
    whole: list[bytes] = []
    fragments: list[tuple[int, bytes]] = []
    for no, line in enumerate(lines[1:], start=2):
        # No line mixes two records: one "R", at the start of the line.
        assert line.startswith(b"R") and line.count(b"R") == 1, (no, line)
        if RECORD.fullmatch(line):
            whole.append(line + b"\n")
        else:
            fragments.append((no, line))
    return whole, fragments


def test_killed_writers_leave_at_most_one_fragment_per_kill(
    tmp_path: Path, child_env, reap
) -> None:
    out = tmp_path / "out.tsv"
    out.write_bytes(HEADER)
    args = ["--columns", "slot,gen,seq,pad", "--batch-bytes", "256"]
    args += ["--flush-interval", "0.01", str(out)]
    rng = random.Random(4)
    slots = [Slot(i, args, child_env(), random.Random(i)) for i in range(WRITERS)]
    killed: list[tuple[int, int]] = []  # (slot, generation) of every writer killed
    tears = 0
    try:
        for s in slots:
            reap(s.start())
        next_kill = time.monotonic() + KILL_EVERY
        kills = 0
        while kills < KILLS:
            for s in slots:
                if s.proc.poll() is not None or not s.feed(PER_TICK):
                    # Only a tearer ends on its own, killed by itself in mid-write.
                    assert s.tearer and s.proc.wait() == -signal.SIGKILL, s.proc.returncode
                    s.proc.stderr.close()
                    os.close(s.wfd)
                    killed.append((s.index, s.gen))
                    tears += 1
                    reap(s.start())
            if time.monotonic() >= next_kill:
                # A tearer is never the victim: killed before its torn write (likely on a
                # loaded machine, where its start-up alone can take a second) it would tear
                # nothing, and the run would prove nothing about torn writes.
                victim = rng.choice([s for s in slots if not s.tearer] or slots)
                victim.kill()
                killed.append((victim.index, victim.gen))
                reap(victim.start(tearer=rng.randrange(TEAR_ODDS) == 0))
                kills += 1
                next_kill += KILL_EVERY
            time.sleep(0.005)  # pacing the feed, not waiting for anything
        # A tearer still running at the end is fed until it has made its torn write and
        # killed itself: its exit is the event waited for, however slow the machine is.
        for s in slots:
            if s.tearer:
                deadline = time.monotonic() + 120
                while s.feed(PER_TICK) and s.proc.poll() is None:
                    assert time.monotonic() < deadline, "a tearer never wrote"
                    time.sleep(0.005)
                assert s.proc.wait(timeout=60) == -signal.SIGKILL, s.proc.returncode
                s.proc.stderr.close()
                os.close(s.wfd)
                killed.append((s.index, s.gen))
                tears += 1
                reap(s.start())
        finished = {s.index: s.finish() for s in slots}
    finally:
        for s in slots:
            if s.proc is not None and s.proc.poll() is None:
                s.proc.kill()
    assert len(killed) >= KILLS
    assert tears >= 1  # otherwise the run proved nothing about torn writes
    for index, (code, err) in finished.items():
        assert (code, err) == (0, b""), f"writer {index}: exit {code}: {err!r}"

    whole, fragments = split_lines(out.read_bytes())
    assert tears <= len(fragments) <= len(killed), fragments
    sent = {r for s in slots for recs in s.sent.values() for r in recs}
    counts = Counter(whole)
    assert all(n == 1 for n in counts.values()), "a record was written twice"
    assert set(counts) <= sent
    # Each fragment is the start of a record a killed writer was given.
    killed_records = [r for i, g in killed for r in slots[i].sent[g]]
    for _, frag in fragments:
        assert any(r.startswith(frag) for r in killed_records), frag
    # Every record of every writer that ended normally is there.
    for s in slots:
        missing = [r for r in s.sent[s.gen] if r not in counts]
        assert not missing, f"writer {s.index} lost {len(missing)} records"

    if importlib.util.find_spec("zotsink._check.verify") is not None:
        check_verify_agrees(out, fragments)


def check_verify_agrees(out: Path, fragments: list[tuple[int, bytes]]) -> None:
    """``zotsink verify`` reports exactly the fragments a format check can see.

    A fragment cut inside its last field keeps the header's field count and is, to any
    checker that does not know the record's own shape, a record; all others must be named.
    """
    from zotsink import verify

    report = verify(out)
    data = out.read_bytes()
    # A fragment at the very end, with no newline after it (the last write was a torn one
    # and nobody wrote since), is always visible: verify sees the missing newline.
    last = data.count(b"\n") + 1 if not data.endswith(b"\n") else -1
    visible = {no for no, frag in fragments if frag.count(b"\t") != 3 or no == last}
    assert {p.line for p in report.problems} == visible, report.problems
    assert report.found == len(visible)


@pytest.mark.parametrize("cut", [1, 9, 61])
def test_verify_agrees_with_the_fragment_helper(tmp_path: Path, cut: int) -> None:
    """The helper above on a hand-made OUT: a torn record, then the next writer's line."""
    out = tmp_path / "out.tsv"
    torn = record(1, 1, 7)[:cut]
    out.write_bytes(HEADER + record(0, 1, 1) + torn + b"\n" + record(2, 1, 1))
    whole, fragments = split_lines(out.read_bytes())
    assert whole == [record(0, 1, 1), record(2, 1, 1)]
    assert fragments == [(3, torn)]
    if importlib.util.find_spec("zotsink._check.verify") is not None:
        check_verify_agrees(out, fragments)
