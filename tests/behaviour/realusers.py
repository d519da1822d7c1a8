"""Real users for tests where ownership matters: two throwaway accounts and a sticky directory.

``needs_root``       skip mark, with the reason, for a run that is not root.
``make_users()``     creates a victim and an attacker with ``useradd`` (once per test process)
                     and removes them with ``userdel`` at exit.
``sticky_dir()``     a fresh ``1777`` directory under ``/tmp``, like ``/tmp`` or a shared scratch.
``group_dir()``      a fresh project directory (``2770``, the victim's, of a group that both
                     users are members of: ``shared_group()``), like a group's share.
``User.run(...)``    runs ``zotsink ARGS`` as that user (``setpriv --reuid --regid
                     --init-groups``): a real process with the user's own credentials, under
                     ``umask`` (022 unless given; 002 is usual in group directories).
``User.popen(...)``  the same, left running.
``User.python(...)`` runs a small Python program as that user.
``child_env()``      the environment those children get.

The children see only the environment given here (no ``ZOTSINK_*`` of the developer, no
``TMPDIR`` of root's), and never the repository's working directory as ``cwd``.
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

needs_root = pytest.mark.skipif(
    os.geteuid() != 0,
    reason="needs root: creates throwaway users (useradd) and runs zotsink as them (setpriv)",
)


@functools.cache
def _python() -> tuple[str, str]:
    """An interpreter other users may run, and the PYTHONPATH that finds zotsink with it.

    This interpreter may live where other users cannot go (a venv made from a Python under
    root's home): then the same minor version from the system runs instead, with the source
    tree and this environment's (pure Python) dependencies on its path.
    """
    import site

    import zotsink

    source = os.path.dirname(os.path.dirname(os.path.abspath(zotsink.__file__)))
    path = os.pathsep.join([source, *site.getsitepackages()])
    exe = os.path.realpath(sys.executable)
    if all(os.stat(d).st_mode & 0o001 for d in _parents(exe)):
        return sys.executable, path
    minor = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    other = shutil.which(minor, path="/usr/local/bin:/usr/bin:/bin")
    if other is None:
        pytest.skip(f"no {minor} that other users may run")
    return other, path


def _parents(path: str) -> list[str]:
    out = []
    while True:
        path = os.path.dirname(path)
        out.append(path)
        if path == "/":
            return out


def child_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    keep = ("PATH", "LANG", "LC_ALL")
    env = {k: v for k, v in os.environ.items() if k in keep}
    env.update({"HOME": "/tmp", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": _python()[1]})
    env.update(extra or {})
    return env


@dataclass(frozen=True)
class User:
    name: str
    uid: int
    gid: int

    def argv(self, cmd: Sequence[str], umask: str = "022") -> list[str]:
        return [
            "setpriv",
            f"--reuid={self.uid}",
            f"--regid={self.gid}",
            "--init-groups",
            "sh",
            "-c",
            f'umask {umask} && exec "$@"',
            "sh",
            *cmd,
        ]

    def popen(
        self,
        *args: str | os.PathLike[str],
        cwd: str,
        env: Mapping[str, str] | None = None,
        **kw: Any,
    ) -> subprocess.Popen[bytes]:
        cmd = [_python()[0], "-m", "zotsink", *map(os.fspath, args)]
        return subprocess.Popen(self.argv(cmd), cwd=cwd, env=child_env(env), **kw)

    def run(
        self,
        *args: str | os.PathLike[str],
        cwd: str,
        input: bytes = b"",
        env: Mapping[str, str] | None = None,
        timeout: float = 60,
        umask: str = "022",
    ) -> subprocess.CompletedProcess[bytes]:
        cmd = [_python()[0], "-m", "zotsink", *map(os.fspath, args)]
        return subprocess.run(
            self.argv(cmd, umask),
            cwd=cwd,
            env=child_env(env),
            input=input,
            capture_output=True,
            timeout=timeout,
        )

    def zotsink_argv(self, *args: str, umask: str = "022") -> list[str]:
        """The argv that runs ``zotsink ARGS`` as this user (for a caller's own Popen)."""
        return self.argv(zotsink_command(*args), umask)

    def python(
        self, code: str, *args: str, cwd: str, input: bytes = b"", timeout: float = 60
    ) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            self.argv([_python()[0], "-c", code, *args]),
            cwd=cwd,
            env=child_env(),
            input=input,
            capture_output=True,
            timeout=timeout,
        )


def zotsink_command(*args: str) -> list[str]:
    """``zotsink ARGS`` with an interpreter other users may run (for :meth:`User.argv`)."""
    return [_python()[0], "-m", "zotsink", *args]


_made: dict[str, User] = {}


def _user(role: str) -> User:
    if role not in _made:
        import pwd

        name = f"zs{role[0]}{os.getpid()}"  # short: useradd takes at most 32 characters
        subprocess.run(
            ["useradd", "--no-create-home", "--user-group", "--shell", "/bin/false", name],
            check=True,
            capture_output=True,
        )
        atexit.register(subprocess.run, ["userdel", name], capture_output=True)
        pw = pwd.getpwnam(name)
        _made[role] = User(name, pw.pw_uid, pw.pw_gid)
    return _made[role]


def make_users() -> tuple[User, User]:
    """``(victim, attacker)``: two throwaway users of this test process."""
    return _user("victim"), _user("attacker")


def shared_group() -> str:
    """The name of a group that the victim and the attacker both belong to (made once per
    test process, removed at exit); each keeps its own primary group."""
    if "group" not in _groups:
        victim, attacker = make_users()
        name = f"zsg{os.getpid()}"
        subprocess.run(["groupadd", name], check=True, capture_output=True)
        atexit.register(subprocess.run, ["groupdel", name], capture_output=True)
        for user in (victim, attacker):
            subprocess.run(["usermod", "-aG", name, user.name], check=True, capture_output=True)
        _groups["group"] = name
    return _groups["group"]


_groups: dict[str, str] = {}


def group_dir() -> str:
    """A new project directory under /tmp (``2770``: the victim's, of :func:`shared_group`;
    its members may create files in it, nobody else may look): the caller removes it."""
    import grp

    victim, _ = make_users()
    d = tempfile.mkdtemp(prefix="zotsink-group-", dir="/tmp")
    os.chown(d, victim.uid, grp.getgrnam(shared_group()).gr_gid)
    os.chmod(d, 0o2770)
    return d


def sticky_dir() -> str:
    """A new world-writable sticky directory under /tmp (the caller removes it)."""
    d = tempfile.mkdtemp(prefix="zotsink-sticky-", dir="/tmp")
    os.chmod(d, 0o1777)
    return d


def remove_tree(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)
