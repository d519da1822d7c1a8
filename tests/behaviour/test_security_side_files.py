"""Side files planted by another user, as real users in a shared sticky directory.

In a sticky world-writable directory (``/tmp``, a shared scratch) anyone may create a file
at the name of someone else's ``OUT.rejects`` before its owner does. zotsink never writes
records into such a file: the refused records go to a spill file of the user's own, and the
error names the planted file and its owner. Where the directory is not sticky, whoever can
create a file there can also replace OUT itself, so a side file owned by a colleague (a
shared project directory) is used as before.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from realusers import User, make_users, needs_root, remove_tree, sticky_dir

pytestmark = needs_root

HOST = os.uname().nodename


@pytest.fixture
def users() -> tuple[User, User]:
    return make_users()


@pytest.fixture
def shared() -> Iterator[str]:
    d = sticky_dir()
    yield d
    remove_tree(d)


def plant(user: User, path: str, cwd: str) -> None:
    r = user.python(
        "import os, sys; os.close(os.open(sys.argv[1], os.O_CREAT | os.O_WRONLY, 0o666));"
        "os.chmod(sys.argv[1], 0o666)",
        path,
        cwd=cwd,
    )
    assert r.returncode == 0, r.stderr


def test_a_rejects_file_planted_by_another_user_never_receives_records(
    users: tuple[User, User], shared: str
) -> None:
    victim, attacker = users
    out = os.path.join(shared, "out.txt")
    rejects = out + ".rejects"
    plant(attacker, rejects, shared)
    r = victim.run(out, input=b"good\nsecret\0\n", cwd=shared)
    err = r.stderr.decode()
    assert r.returncode == 74, err
    assert "Traceback" not in err
    assert rejects in err and attacker.name in err
    assert Path(rejects).read_bytes() == b""  # the attacker received nothing
    m = re.search(r"saved to (\S+)\n", err)
    assert m, err
    saved = m[1]
    assert re.fullmatch(re.escape(rejects) + rf"\.spill\.{re.escape(HOST)}\.\d+(\.\d+)?", saved)
    st = os.lstat(saved)
    assert st.st_uid == victim.uid
    assert Path(saved).read_bytes() == b"line 2: NUL byte\tsecret\0\n"
    assert Path(out).read_bytes() == b"good\n"


def test_a_rejects_file_of_a_colleague_in_a_shared_project_directory_is_used(
    users: tuple[User, User], shared: str
) -> None:
    victim, colleague = users
    project = os.path.join(shared, "project")
    os.mkdir(project)
    os.chmod(project, 0o777)  # not sticky: anyone here may replace any file, OUT included
    out = os.path.join(project, "out.txt")
    rejects = out + ".rejects"
    plant(colleague, rejects, project)
    r = victim.run(out, input=b"good\nbad\0\n", cwd=project)
    assert r.returncode == 1, r.stderr
    assert Path(rejects).read_bytes() == b"line 2: NUL byte\tbad\0\n"
    assert Path(out).read_bytes() == b"good\n"


def test_own_rejects_file_in_a_sticky_directory_is_used(
    users: tuple[User, User], shared: str
) -> None:
    victim, _ = users
    out = os.path.join(shared, "out.txt")
    for n in (1, 2):
        r = victim.run(out, input=b"ok\nbad%d\0\n" % n, cwd=shared)
        assert r.returncode == 1, r.stderr
    assert Path(out + ".rejects").read_bytes() == (
        b"line 2: NUL byte\tbad1\0\nline 2: NUL byte\tbad2\0\n"
    )
    assert os.stat(out + ".rejects").st_uid == victim.uid
