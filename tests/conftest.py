"""Shared fixtures for the unit-level suite.

``zotsink_cmd`` -> ``[sys.executable, "-m", "zotsink"]``
    The argv prefix that runs the CLI with this interpreter (for ``subprocess.Popen``).
``child_env`` -> ``make(extra=None) -> dict``
    The environment for a child process: ``os.environ`` without ``ZOTSINK_*`` settings,
    plus ``extra`` (a ``None`` value removes a name). For ``subprocess.Popen(env=...)``.
``reap`` -> ``reap(proc) -> proc``
    Registers a ``subprocess.Popen``; at teardown any still running is killed and waited
    for, so a failing test leaves no writer or lock holder behind.
``zotsink`` -> ``run(*args, input=b"", env=None, cwd=tmp_path, timeout=60)``
    Runs the CLI to completion and returns the ``subprocess.CompletedProcess`` with
    ``stdout`` and ``stderr`` as bytes. ``input`` may be bytes or str; ``env`` adds to (or,
    with a ``None`` value, removes from) the environment.

Children never inherit the developer's ``ZOTSINK_*`` settings, so a test sees the defaults
unless it sets them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

# Property tests run on a loaded machine too (``-n 8`` beside other work): a wall-clock
# deadline per example would make them fail by timing, not by a property.
settings.register_profile(
    "zotsink", deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
settings.load_profile("zotsink")

ZOTSINK = [sys.executable, "-m", "zotsink"]


def _child_env(extra: Mapping[str, str | None] | None = None) -> dict[str, str]:
    """os.environ without ZOTSINK_* settings, plus ``extra`` (a None value removes a name)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZOTSINK_")}
    for k, v in (extra or {}).items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


@pytest.fixture(name="child_env")
def child_env_fixture() -> Callable[..., dict[str, str]]:
    """The environment for a child process (see the module docstring)."""
    return _child_env


@pytest.fixture
def reap() -> Iterator[Callable[[subprocess.Popen[Any]], subprocess.Popen[Any]]]:
    """Kill (and wait for) the registered child processes that are still running."""
    procs: list[subprocess.Popen[Any]] = []

    def register(proc: subprocess.Popen[Any]) -> subprocess.Popen[Any]:
        procs.append(proc)
        return proc

    yield register
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


# Holds an exclusive flock on argv[1] (made if missing) until its stdin closes: another
# writer, a recover at work, or a hung job holding the lock.
_HOLDER = r"""
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_CREAT, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def hold(
    reap: Callable[[subprocess.Popen[Any]], subprocess.Popen[Any]],
) -> Iterator[Callable[[str | os.PathLike[str]], subprocess.Popen[bytes]]]:
    """``hold(path)``: a process that holds ``path``'s exclusive flock (the call returns once
    it does) until its stdin is closed (``proc.communicate(b"")``), or the test ends."""
    procs: list[subprocess.Popen[bytes]] = []

    def take(path: str | os.PathLike[str]) -> subprocess.Popen[bytes]:
        p = reap(
            subprocess.Popen(
                [sys.executable, "-c", _HOLDER, os.fspath(path)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
            )
        )
        assert p.stdout is not None and p.stdout.readline() == b"held\n"
        procs.append(p)
        return p

    yield take
    for p in procs:
        if p.poll() is None:
            p.communicate(b"", timeout=30)


@pytest.fixture
def zotsink_cmd() -> list[str]:
    """argv prefix that runs the zotsink CLI with this interpreter."""
    return list(ZOTSINK)


@pytest.fixture
def zotsink(tmp_path: Path) -> Callable[..., subprocess.CompletedProcess[bytes]]:
    """Run ``zotsink ARGS`` in a child process (cwd: the test's tmp_path)."""

    def run(
        *args: str | os.PathLike[str],
        input: bytes | str = b"",
        env: Mapping[str, str | None] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        timeout: float = 60,
    ) -> subprocess.CompletedProcess[bytes]:
        data = input.encode() if isinstance(input, str) else input
        return subprocess.run(
            [*ZOTSINK, *map(os.fspath, args)],
            input=data,
            capture_output=True,
            env=_child_env(env),
            cwd=tmp_path if cwd is None else cwd,
            timeout=timeout,
        )

    return run


# -- the "zotsink cluster" summary section ------------------------------------------------
# tests/cluster/conftest.py collects lines (cluster up/down timings, skip reasons, figures a
# test reports without asserting) on the config object; these hooks run in the process that
# prints the summary, which under pytest-xdist never loads that conftest.
CLUSTER_LINES = "zotsink_cluster_timings"


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    lines = node.config.__dict__.setdefault(CLUSTER_LINES, [])
    lines.extend(getattr(node, "workeroutput", {}).get(CLUSTER_LINES, []))


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    lines = config.__dict__.get(CLUSTER_LINES)
    if lines:
        terminalreporter.section("zotsink cluster")
        for line in dict.fromkeys(lines):  # each worker reports the same skip
            terminalreporter.write_line(line)
