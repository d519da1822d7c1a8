"""recover in a shared sticky directory, as real users: it appends only spill files of OUT,
removes only what it appended, and trusts no side file another user could have planted.

Every test runs zotsink as a throwaway user (``useradd``, ``setpriv``) in a ``1777``
directory under ``/tmp``; a second throwaway user plays the attacker. A "remote" writer runs
in its own UTS namespace with another host name, as a writer on another node would.
"""

from __future__ import annotations

import glob
import hashlib
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from realusers import User, child_env, make_users, needs_root, remove_tree, sticky_dir

pytestmark = needs_root

HOST = os.uname().nodename
JOURNAL = ".recovering"

# Holds an exclusive flock on argv[1] until its stdin closes (root may open anyone's file).
HOLDER = r"""
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def users() -> tuple[User, User]:
    return make_users()


@pytest.fixture
def shared() -> Iterator[str]:
    d = sticky_dir()
    yield d
    remove_tree(d)


class Holder:
    """A root process holding OUT's lock until :meth:`release`."""

    def __init__(self, path: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", HOLDER, path], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        assert self.proc.stdout is not None and self.proc.stdout.readline() == b"held\n"

    def release(self) -> None:
        if self.proc.poll() is None:
            self.proc.communicate(b"", timeout=30)


@pytest.fixture
def hold() -> Iterator[Callable[[str], Holder]]:
    made: list[Holder] = []

    def make(path: str) -> Holder:
        h = Holder(path)
        made.append(h)
        return h

    yield make
    for h in made:
        if h.proc.poll() is None:
            h.proc.kill()
        h.proc.wait()


def wait_for(what: str, check: Callable[[], Any], timeout: float = 60.0) -> Any:
    """Poll ``check()`` until it returns something true (an event: a file, an open fd)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


def spills_of(out: str) -> list[str]:
    return sorted(p for p in glob.glob(glob.escape(out) + ".spill.*") if not p.endswith(JOURNAL))


def spill_by_lock_timeout(user: User, out: str, rows: bytes, hold: Callable[[str], Holder]) -> str:
    """A real writer, run as ``user``, times out on OUT's lock and saves ``rows``."""
    h = hold(out)
    r = user.run("--timeout", "0.2", out, input=rows, cwd=os.path.dirname(out))
    h.release()
    assert r.returncode == 75, r.stderr
    (spill,) = spills_of(out)
    assert Path(spill).read_bytes() == rows
    return spill


def opened_by(pid: int, path: str) -> bool:
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except FileNotFoundError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == path:
                return True
        except OSError:
            pass
    return False


def tree(d: str) -> dict[str, bytes]:
    """Every name in ``d`` with its bytes (b"<fifo>" for a FIFO)."""
    out = {}
    for name in sorted(os.listdir(d)):
        p = os.path.join(d, name)
        out[name] = Path(p).read_bytes() if os.path.isfile(p) else b"<other>"
    return out


# -- item 7: a remote writer that is still alive --------------------------------------------


def test_recover_never_removes_what_a_live_remote_writer_added_after_it_read(
    users: tuple[User, User], shared: str, hold
) -> None:
    victim, _ = users
    out = os.path.join(shared, "out.txt")
    assert victim.run(out, input=b"first\n", cwd=shared).returncode == 0
    holder = hold(out)
    # A writer on "node-b" (its own UTS namespace) whose appends time out on OUT's lock:
    # each line it reads goes to its spill file, and it keeps running.
    cmd = victim.zotsink_argv("--timeout", "0.2", "--batch-bytes", "1", out)
    writer = subprocess.Popen(
        ["unshare", "--uts", "sh", "-c", 'hostname node-b && exec "$@"', "sh", *cmd],
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=shared,
        env=child_env(),
    )
    try:
        assert writer.stdin is not None
        writer.stdin.write(b"a\n")
        writer.stdin.flush()
        spill = wait_for(
            "the remote writer's first spill",
            lambda: [p for p in spills_of(out) if Path(p).read_bytes() == b"a\n"],
        )[0]
        assert ".spill.node-b." in spill
        # recover reads the spill file, then waits for OUT's lock (the holder has it) ...
        rec = victim.popen("recover", out, cwd=shared, stderr=subprocess.PIPE)
        wait_for("recover to open OUT", lambda: opened_by(rec.pid, out))
        # ... while the remote writer, still alive, saves one more batch
        writer.stdin.write(b"b\n")
        writer.stdin.flush()
        wait_for(
            "the remote writer's second spill",
            lambda: any(b"b\n" in Path(p).read_bytes() for p in spills_of(out)),
        )
        holder.release()
        _, err = rec.communicate(timeout=60)
        assert rec.returncode == 0, err
        writer.stdin.close()
        assert writer.wait(60) == 75
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait()
    # the writer has ended: what it saved after recover read its file is still there
    r = victim.run("recover", out, cwd=shared)
    assert r.returncode == 0, r.stderr
    assert Path(out).read_bytes() == b"first\na\nb\n"
    assert spills_of(out) == []


# -- item 8: only spill files of OUT -------------------------------------------------------


def test_recover_with_a_glob_refuses_everything_that_is_not_a_spill_file_of_out(
    users: tuple[User, User], shared: str
) -> None:
    victim, _ = users
    out = os.path.join(shared, "out.tsv")
    files = {
        "out.tsv": b"n\tv\n1\ta\n",
        "out.tsv.rejects": b"line 2: NUL byte\tx\0\n",
        "out.tsv.spill.node-b.7": b"n\tv\n2\tb\n",
        "out.tsv.spill.node-b.8" + JOURNAL: b"left by a recover that died\n",
        "out.tsv.rejects.spill.node-b.9": b"line 3: NUL byte\ty\0\n",
        "out.tsv.notes": b"my notes\n",
        "other.tsv.spill.node-b.7": b"n\tv\n3\tc\n",
    }
    for name, data in files.items():
        r = victim.python(
            "import sys; open(sys.argv[1], 'wb').write(sys.stdin.buffer.read())",
            os.path.join(shared, name),
            input=data,
            cwd=shared,
        )
        assert r.returncode == 0, r.stderr
    before = tree(shared)
    names = [
        *sorted(glob.glob(glob.escape(out) + "*")),
        os.path.join(shared, "other.tsv.spill.node-b.7"),
    ]
    r = victim.run("recover", out, *names, cwd=shared)
    err = r.stderr.decode()
    assert r.returncode == 2, err
    assert "Traceback" not in err
    for name in (
        "out.tsv ",
        "out.tsv.rejects ",
        "out.tsv.spill.node-b.8.recovering ",
        "out.tsv.rejects.spill.node-b.9 ",
        "out.tsv.notes ",
        "other.tsv.spill.node-b.7 ",
    ):
        assert os.path.join(shared, name.strip()) in err, (name, err)
    assert "out.tsv.spill.node-b.7 " not in err  # the one real spill file is not blamed
    assert tree(shared) == before  # nothing was done at all
    # the spill file alone is taken
    r = victim.run("recover", out, os.path.join(shared, "out.tsv.spill.node-b.7"), cwd=shared)
    assert r.returncode == 0, r.stderr
    assert Path(out).read_bytes() == b"n\tv\n1\ta\n2\tb\n"


# -- items 9 and 10: journals are validated before they are trusted -------------------------

FORGE = r"""
import hashlib, os, sys
spill, out = sys.argv[1], sys.argv[2]
data = open(spill, "rb").read()
body = open(out, "rb").read()
st = os.stat(out)
note = (f"{hashlib.sha256(data).hexdigest()} {st.st_dev} {st.st_ino} 0 {len(body)} "
        f"{hashlib.sha256(body).hexdigest()}\n")
with open(spill + ".recovering", "w") as f:
    f.write(note)
os.chmod(spill + ".recovering", 0o644)
"""


def test_a_journal_forged_by_another_user_never_removes_the_spill_unread(
    users: tuple[User, User], shared: str, hold
) -> None:
    victim, attacker = users
    out = os.path.join(shared, "out.txt")
    assert victim.run(out, input=b"first\n", cwd=shared).returncode == 0
    spill = spill_by_lock_timeout(victim, out, b"precious-1\nprecious-2\n", hold)
    # the attacker reads both files (0644, like OUT) and writes a journal saying the spill's
    # records already are in OUT, at its first bytes
    r = attacker.python(FORGE, spill, out, cwd=shared)
    assert r.returncode == 0, r.stderr
    assert os.stat(spill + JOURNAL).st_uid == attacker.uid
    r = victim.run("recover", out, cwd=shared)
    err = r.stderr.decode()
    assert r.returncode == 1, err
    assert f"{spill}{JOURNAL}" in err and attacker.name in err and "Traceback" not in err
    assert Path(spill).read_bytes() == b"precious-1\nprecious-2\n"
    assert Path(out).read_bytes() == b"first\n"
    # what the message advises: move the spill file to a directory of one's own, name it
    private = os.path.join(shared, "mine")
    assert (
        victim.python(
            "import os, sys; os.mkdir(sys.argv[1], 0o700)", private, cwd=shared
        ).returncode
        == 0
    )
    moved = os.path.join(private, os.path.basename(spill))
    assert (
        victim.python(
            "import os, sys; os.rename(*sys.argv[1:])", spill, moved, cwd=shared
        ).returncode
        == 0
    )
    r = victim.run("recover", out, moved, cwd=shared)
    assert r.returncode == 0, r.stderr
    assert Path(out).read_bytes() == b"first\nprecious-1\nprecious-2\n"
    assert not os.path.exists(moved)


def test_a_fifo_at_the_journal_name_does_not_hang_recover_or_writers(
    users: tuple[User, User], shared: str, hold
) -> None:
    victim, attacker = users
    out = os.path.join(shared, "out.txt")
    assert victim.run(out, input=b"first\n", cwd=shared).returncode == 0
    spill = spill_by_lock_timeout(victim, out, b"precious\n", hold)
    r = attacker.python(
        "import os, sys; os.mkfifo(sys.argv[1], 0o666)", spill + JOURNAL, cwd=shared
    )
    assert r.returncode == 0, r.stderr
    rec = victim.popen("recover", out, cwd=shared, stderr=subprocess.PIPE)
    writer = victim.popen(
        "--timeout", "30", out, cwd=shared, stdin=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        _, werr = writer.communicate(b"late\n", timeout=60)
        _, err = rec.communicate(timeout=60)  # the old recover hung here, holding OUT's lock
    finally:
        for p in (rec, writer):
            if p.poll() is None:
                p.kill()
                p.wait()
    assert writer.returncode == 0, werr
    assert rec.returncode == 1, err
    assert f"{spill}{JOURNAL}".encode() in err and b"Traceback" not in err
    assert Path(spill).read_bytes() == b"precious\n"
    assert sorted(Path(out).read_bytes().splitlines()) == [b"first", b"late"]


def test_a_spill_file_planted_by_another_user_is_not_appended(
    users: tuple[User, User], shared: str
) -> None:
    victim, attacker = users
    out = os.path.join(shared, "out.txt")
    assert victim.run(out, input=b"first\n", cwd=shared).returncode == 0
    planted = os.path.join(shared, "out.txt.spill.node-b.99")
    r = attacker.python(
        "import sys; open(sys.argv[1], 'wb').write(b'forged\\n')", planted, cwd=shared
    )
    assert r.returncode == 0, r.stderr
    r = victim.run("recover", out, cwd=shared)
    err = r.stderr.decode()
    assert r.returncode == 1, err
    assert planted in err and attacker.name in err and "Traceback" not in err
    assert Path(out).read_bytes() == b"first\n"
    assert Path(planted).read_bytes() == b"forged\n"
    # naming it does not help either
    r = victim.run("recover", out, planted, cwd=shared)
    assert r.returncode == 1 and Path(out).read_bytes() == b"first\n"


def test_journal_digest_is_still_checked(users: tuple[User, User], shared: str, hold) -> None:
    """The victim's own stale journal (other content) proves nothing: the spill is appended."""
    victim, _ = users
    out = os.path.join(shared, "out.txt")
    assert victim.run(out, input=b"first\n", cwd=shared).returncode == 0
    spill = spill_by_lock_timeout(victim, out, b"rec\n", hold)
    stale = f"{hashlib.sha256(b'other').hexdigest()} 1 2 0 4 {'f' * 64}\n"
    r = victim.python(
        "import sys; open(sys.argv[1], 'w').write(sys.argv[2])", spill + JOURNAL, stale, cwd=shared
    )
    assert r.returncode == 0
    r = victim.run("recover", out, cwd=shared)
    assert r.returncode == 0, r.stderr
    assert Path(out).read_bytes() == b"first\nrec\n"
    assert not os.path.exists(spill) and not os.path.exists(spill + JOURNAL)


def test_a_spill_file_whose_journal_cannot_be_written_is_left_whole(
    users: tuple[User, User], shared: str
) -> None:
    """Without its journal, a recover killed after the append would append it again: a
    spill file in a directory the user may not write to is left, with what to do."""
    victim, _ = users
    out = os.path.join(shared, "out.txt")
    assert victim.run(out, input=b"first\n", cwd=shared).returncode == 0
    locked = os.path.join(shared, "readonly")
    os.mkdir(locked, 0o755)  # root's: the victim may read here, not create files
    spill = os.path.join(locked, "out.txt.spill.node-b.5")
    Path(spill).write_bytes(b"rec\n")
    os.chown(spill, victim.uid, victim.gid)
    r = victim.run("recover", out, spill, cwd=shared)
    err = r.stderr.decode()
    assert r.returncode == 1, err
    assert f"left {spill}: cannot write its journal {spill}{JOURNAL}" in err
    assert "Traceback" not in err
    assert Path(out).read_bytes() == b"first\n"
    assert Path(spill).read_bytes() == b"rec\n"
    # moved where the user may write, it goes in
    mine = os.path.join(shared, "out.txt.spill.node-b.5")
    r = victim.python("import shutil, sys; shutil.copy(*sys.argv[1:])", spill, mine, cwd=shared)
    assert r.returncode == 0, r.stderr
    assert victim.run("recover", out, mine, cwd=shared).returncode == 0
    assert Path(out).read_bytes() == b"first\nrec\n"
