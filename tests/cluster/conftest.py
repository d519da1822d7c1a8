"""Fixtures for tests that need a real cluster: a GlusterFS volume, a MooseFS file system,
a CephFS and a Slurm cluster of three nodes, all on this host.

Fixtures
--------
``gluster_mounts`` (session) -> ``GlusterMounts(node1, node2, reader)``
    The three mount points of one GlusterFS volume, each served by its own glusterfs
    FUSE client process, so they behave like separate cluster nodes: ``node1`` and
    ``node2`` for writers, ``reader`` for an independent reader. The volume keeps
    GlusterFS's default client options, write-behind included (see
    scripts/cluster/gluster.sh for why). It is a NamedTuple: ``a, b, r = gluster_mounts``.
``gluster_dirs`` (function) -> ``GlusterMounts``
    A fresh, empty directory on the volume, the same directory seen through each mount.
``moosefs_mounts`` (session) -> ``MooseFSMounts(node1, node2)``
    The two mount points of one MooseFS file system, each served by its own mfsmount
    process (scripts/cluster/moosefs.sh).
``moosefs_dirs`` (function) -> ``MooseFSMounts``
    A fresh, empty directory on it, the same directory seen through each mount.
``ceph_mounts`` (session) -> ``CephMounts(node1, node2, reader)``
    The three mount points of one CephFS, each served by its own ceph-fuse process, whose
    locks the metadata server (MDS) grants (scripts/cluster/ceph.sh).
``ceph_dirs`` (function) -> ``CephMounts``
    A fresh, empty directory on it, the same directory seen through each mount.
``fs_dirs`` (function) -> ``GlusterMounts`` or ``CephMounts``
    ``gluster_dirs`` or ``ceph_dirs``, as the test's parameter ``fs`` says
    (``@pytest.mark.parametrize("fs", ["gluster", "ceph"])``): one test, run on each
    filesystem whose mounts are (node1, node2, reader).
``slurm_cluster`` (session) -> ``SlurmCluster``
    slurmctld on this host and ``slurm_cluster.nodes`` (node1, node2, node3), each node
    a set of namespaces with its own hostname, slurmd and FUSE clients of the GlusterFS
    volume, of MooseFS and of CephFS (whether they came up before or after Slurm) at the
    same paths as here: a job can write to the paths of ``gluster_dirs``,
    ``moosefs_dirs`` and ``ceph_dirs``.
    Pass ``slurm_cluster.env`` as the
    environment of sbatch/squeue/... (it sets SLURM_CONF), or use ``slurm_cluster.run``.
    It brings the GlusterFS volume up first. ``slurm_cluster.kill_node(name)`` kills a
    node whole and sets it DOWN, ``slurm_cluster.revive_node(name)`` brings it back
    (``slurm.sh kill`` and ``revive``); a test that kills one revives it in its teardown.
``sge_cluster`` (session) -> ``SGECluster``
    Son of Grid Engine: sge_qmaster on this host and an sge_execd in each node of
    ``slurm_cluster`` (which it brings up first), one queue ``all.q`` over them. Run
    qsub, qstat, qdel and qmod through ``sge_cluster.run`` (scripts/cluster/sge.sh exec).
``zotsink_cmd`` (function) -> ``[sys.executable, "-m", "zotsink"]``
    The argv prefix for running the CLI, also from inside a Slurm job on this host.
``clusters_down`` (function) -> the services (gluster, moosefs, ceph, slurm, sge)
    Drops this process's leases, so the last user's ``down`` runs, and waits until no
    process holds one: for the test at the end that checks that nothing is left behind.
``cluster_report`` (function) -> ``report(line)``
    Adds a line (prefixed with the test's name) to the "zotsink cluster" section of the
    terminal summary, which is shown with ``-q`` and under pytest-xdist too: for figures
    a test measures but does not assert.

Lifetime
--------
A session fixture runs ``scripts/cluster/<name>.sh up`` the first time a test asks for
it and ``down`` at the end of the session: from a fixture finalizer (also when tests
fail, and after Ctrl-C, since pytest tears fixtures down on KeyboardInterrupt), on
SIGTERM and SIGHUP (turned into KeyboardInterrupt for the same teardown), and from an
atexit handler as a last resort. ``down`` is safe after a failed ``up``. Only SIGKILL
escapes all of these; the next ``up`` clears what was left.

pytest-xdist
------------
Session fixtures run once per xdist worker. The suite runs with ``--dist loadgroup`` and
every test in this directory is in the xdist group "cluster" (each module says so in
``pytestmark``; a collection hook below adds the mark if a module forgets it), so that
all cluster tests go to one worker, which brings each cluster up and down once.

The fixtures do not depend on that grouping for correctness, because it can silently
fail: with pytest 9.2 and pytest-xdist 3.8 loadgroup no longer groups anything (xdist
marks the group by rewriting node ids, which pytest 9.2 no longer lets a plugin do),
and ``--dist load`` never grouped. So:

* each process that uses a cluster holds a lease on it, a file ``leases/<pid>-<start>``
  in the script's state dir, created and removed under an fcntl.flock on
  ``leases/.lock``. The first lease runs ``up``, removing the last one runs ``down``;
  leases of dead processes are ignored, so a killed worker cannot keep a cluster up or
  pull it from under the others;
* cluster tests never run at the same time, even in different workers: each holds an
  exclusive flock on ``/var/tmp/zotsink-cluster/tests.lock`` while it runs, because tests
  that freeze a client or flood the volume would disturb each other.

With working loadgroup both locks are simply uncontended. The scripts additionally
serialise their own up/down/status with a lock file in their state dir.

Skips
-----
When not root, when apt-get cannot install the packages, or when a service does not come
up, the fixtures skip with the reason (and other workers of the same run skip with the
same reason instead of trying again). With ZOTSINK_CLUSTER_REQUIRED=1 in the environment
they fail instead, for runs where a skip would hide a broken setup. With
ZOTSINK_SKIP_CLUSTER=1 every test here skips before any fixture runs (no package is
installed, no cluster brought up), and says so; the two together are a usage error.

The scripts' settings (state dirs, mount points, node and CPU counts) come from their
ZOTSINK_GLUSTER_*, ZOTSINK_MOOSEFS_*, ZOTSINK_CEPH_* and ZOTSINK_SLURM_* environment
variables; see the scripts' headers.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import pytest

HERE = Path(__file__).resolve().parent
SCRIPTS = HERE.parent.parent / "scripts" / "cluster"
CLUSTER_BASE = Path("/var/tmp/zotsink-cluster")
TESTS_LOCK = CLUSTER_BASE / "tests.lock"
LAST_MODULE = "test_zz_nothing_left_behind.py"

# Exit codes shared by the scripts (scripts/cluster/lib.sh).
EXIT_PACKAGES = 3
EXIT_PRECONDITION = 4

# `up` from purged packages takes seconds to minutes, mostly apt-get (Grid Engine and Ceph
# the longest: docs/test-cluster.md); a slow mirror gets a generous margin, a hung one
# does not stall CI forever.
UP_TIMEOUT = 420
DOWN_TIMEOUT = 180
# longest wait for another worker's cluster test to finish
TEST_LOCK_TIMEOUT = 1800

# one id for all workers of one pytest run
RUN_ID = os.environ.get("PYTEST_XDIST_TESTRUNUID") or f"pid{os.getpid()}"

TIMINGS_KEY = "zotsink_cluster_timings"
_TIMINGS: list[str] = []


class GlusterMounts(NamedTuple):
    """One place on the GlusterFS volume as seen through each of the three mounts."""

    node1: Path
    node2: Path
    reader: Path


class MooseFSMounts(NamedTuple):
    """One place on the MooseFS file system as seen through each of its two mounts."""

    node1: Path
    node2: Path


class CephMounts(NamedTuple):
    """One place on the CephFS as seen through each of its three mounts."""

    node1: Path
    node2: Path
    reader: Path


@dataclass(frozen=True)
class SlurmCluster:
    """The running Slurm cluster."""

    conf: Path
    cpus: int  # CPUs advertised by all nodes together
    env: Mapping[str, str] = field(repr=False)
    nodes: tuple[str, ...] = ()

    def run(
        self, *argv: str, timeout: float = 120, check: bool = True, **kwargs
    ) -> subprocess.CompletedProcess:
        """Run a Slurm client command (sbatch, squeue, scancel, ...) against this cluster."""
        kwargs.setdefault("capture_output", True)
        kwargs.setdefault("text", True)
        return subprocess.run(
            list(argv), env=dict(self.env), timeout=timeout, check=check, **kwargs
        )

    def kill_node(self, name: str) -> None:
        """Kill node ``name`` whole, its mounts gone with it, and tell Slurm it is DOWN."""
        _node_action("kill", name)

    def revive_node(self, name: str) -> None:
        """Bring node ``name`` back after :meth:`kill_node`: its mounts, its slurmd (and
        Grid Engine's execd when it is up), idle in Slurm."""
        _node_action("revive", name)

    def node_pids(self, name: str) -> list[int]:
        """Every process of node ``name`` (pids as this host sees them): those in its PID
        namespace, its PID 1 included (slurmd, jobs, FUSE clients, Grid Engine's execd)."""
        state = Path(os.environ.get("ZOTSINK_SLURM_STATE") or CLUSTER_BASE / "slurm")
        init = (state / "run" / "nodes" / f"{name}.init").read_text().strip()
        ns = os.readlink(f"/proc/{init}/ns/pid")
        pids = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                with contextlib.suppress(OSError):
                    if os.readlink(f"/proc/{entry}/ns/pid") == ns:
                        pids.append(int(entry))
        return pids


def _node_action(action: str, name: str) -> None:
    """``slurm.sh ACTION NAME``; fails the test with the script's error when it fails."""
    # Output to files, not pipes: a daemon it starts must not hold our pipe open.
    with tempfile.TemporaryFile("w+") as err:
        got = subprocess.run(
            ["bash", str(SCRIPTS / "slurm.sh"), action, name],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
            timeout=DOWN_TIMEOUT,
            check=False,
        )
        err.seek(0)
        said = err.read()
    if got.returncode != 0:
        pytest.fail(f"slurm.sh {action} {name} exited {got.returncode}: {_error_lines(said)}")


@dataclass(frozen=True)
class SGECluster:
    """The running Grid Engine: its qmaster here, an execd in each Slurm node."""

    nodes: tuple[str, ...] = ()

    def run(
        self, *argv: str, timeout: float = 120, check: bool = False, **kwargs
    ) -> subprocess.CompletedProcess:
        """Run a Grid Engine client command (qsub, qstat, qdel, qmod, or a script that
        calls them) against this cluster (through ``sge.sh exec``)."""
        kwargs.setdefault("capture_output", True)
        kwargs.setdefault("text", True)
        return subprocess.run(
            ["bash", str(SCRIPTS / "sge.sh"), "exec", *argv],
            timeout=timeout,
            check=check,
            **kwargs,
        )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "cluster: needs root and a real GlusterFS/Slurm cluster on this host"
    )
    # also known without pytest-xdist installed, so the module marks do not warn
    config.addinivalue_line("markers", "xdist_group(name): run in one pytest-xdist worker")
    # the summary lines go where tests/conftest.py prints them from
    global _TIMINGS
    _TIMINGS = config.__dict__.setdefault(TIMINGS_KEY, _TIMINGS)


#: Why every cluster test skips when the environment says so.
SKIP_REASON = "ZOTSINK_SKIP_CLUSTER=1: the cluster tests are skipped (no packages, no clusters)"


def _skip_asked() -> bool:
    """ZOTSINK_SKIP_CLUSTER=1 (never with ZOTSINK_CLUSTER_REQUIRED=1, which CI sets)."""
    if os.environ.get("ZOTSINK_SKIP_CLUSTER") != "1":
        return False
    if os.environ.get("ZOTSINK_CLUSTER_REQUIRED") == "1":
        raise pytest.UsageError(
            "ZOTSINK_SKIP_CLUSTER=1 and ZOTSINK_CLUSTER_REQUIRED=1 ask for opposites: "
            "unset one of them"
        )
    return True


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # tryfirst: xdist's worker reads the xdist_group mark in this same hook.
    skip = _skip_asked()
    if skip and any(HERE in Path(str(it.path)).resolve().parents for it in items):
        _TIMINGS.append(f"skipped: {SKIP_REASON}")
    for item in items:
        if HERE not in Path(str(item.path)).resolve().parents:
            continue
        if skip:
            item.add_marker(pytest.mark.skip(reason=SKIP_REASON))
        if item.get_closest_marker("cluster") is None:
            item.add_marker(pytest.mark.cluster)
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group("cluster"))
    # The check that nothing is left behind runs after every other cluster test.
    last = [it for it in items if Path(str(it.path)).name == LAST_MODULE]
    items[:] = [it for it in items if it not in last] + last


def _unavailable(reason: str) -> None:
    if os.environ.get("ZOTSINK_CLUSTER_REQUIRED") == "1":
        pytest.fail(f"{reason} (ZOTSINK_CLUSTER_REQUIRED=1)", pytrace=False)
    # also in the summary section, so the reason shows without -rs
    _TIMINGS.append(f"skipped: {reason}")
    pytest.skip(reason)


def _error_lines(stderr: str, n: int = 12) -> str:
    """The script's own 'error: ...' line, else the last lines of its stderr."""
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    errors = [ln[len("error: ") :] for ln in lines if ln.startswith("error: ")]
    if errors:
        return errors[-1]
    return " | ".join(lines[-n:]) or "(no output)"


def _start_time(pid: int) -> str | None:
    """The kernel's start time of a process (tells a live pid from a reused one)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    return None if fields[0] == "Z" else fields[19]


@contextlib.contextmanager
def _flocked(path: Path, timeout: float | None = None) -> Iterator[None]:
    """Exclusive flock on a local lock file, polled so a timeout can end the wait."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(f"{path} still locked after {timeout} s") from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)


class _Service:
    """One cluster service driven by its script, shared by leases (see module docstring)."""

    def __init__(self, name: str, needs_root_for: str, state_env: str) -> None:
        self.name = name
        self.script = SCRIPTS / f"{name}.sh"
        self.needs_root_for = needs_root_for
        self.state_env = state_env
        self._mutex = threading.Lock()
        self._lease: Path | None = None

    @property
    def leases(self) -> Path:
        state = os.environ.get(self.state_env) or str(CLUSTER_BASE / self.name)
        return Path(state) / "leases"

    def _run(self, action: str, timeout: float) -> tuple[int, str, str]:
        # Output goes to files, not pipes: a daemon that kept an inherited pipe open
        # would make us wait for EOF forever.
        with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
            try:
                rc = subprocess.run(
                    ["bash", str(self.script), action],
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    timeout=timeout,
                    check=False,
                ).returncode
            except subprocess.TimeoutExpired:
                rc = -1
            out.seek(0)
            err.seek(0)
            return rc, out.read(), err.read()

    def _live_leases(self) -> list[Path]:
        """Lease files of live processes; stale ones are removed."""
        live = []
        for lease in self.leases.glob("[0-9]*-*"):
            pid, _, start = lease.name.partition("-")
            if _start_time(int(pid)) == start:
                live.append(lease)
            else:
                lease.unlink(missing_ok=True)
        return live

    def acquire(self) -> str:
        """Take a lease, bringing the service up if this is the first one; up's stdout."""
        uid = os.getuid()
        if uid != 0:
            _unavailable(f"needs root to {self.needs_root_for} (running as uid {uid})")
        failed = self.leases / f"failed-{RUN_ID}"
        with self._mutex, _flocked(self.leases / ".lock"):
            if self._lease is not None:
                return (self.leases / "up.out").read_text()
            if failed.exists():  # another worker of this run already tried
                _unavailable(failed.read_text())
            first = not self._live_leases()
            # The lease exists before `up` runs, so an interrupted `up` is still undone.
            self._lease = self.leases / f"{os.getpid()}-{_start_time(os.getpid())}"
            self._lease.touch()
            if first:
                for old in self.leases.glob("failed-*"):
                    old.unlink(missing_ok=True)
                reason = self._up()
                if reason:
                    failed.write_text(reason)
            else:
                reason = None
        if reason:
            self.release(raise_on_error=False)
            _unavailable(reason)
        return (self.leases / "up.out").read_text()

    def _up(self) -> str | None:
        """Run `up`; None on success, else why the service is unavailable."""
        t0 = time.monotonic()
        rc, out, err = self._run("up", UP_TIMEOUT)
        took = time.monotonic() - t0
        if rc == 0:
            (self.leases / "up.out").write_text(out)
            installed = re.findall(r"installed .* in [0-9.]+ s", err)
            _TIMINGS.append(
                f"{self.name} up: {took:.1f} s" + (f" ({installed[-1]})" if installed else "")
            )
            return None
        if rc == -1:
            return f"{self.name}.sh up did not finish within {UP_TIMEOUT} s"
        if rc == EXIT_PACKAGES:
            apt = [ln for ln in err.splitlines() if ln.startswith(("E: ", "Err:"))]
            return _error_lines(err) + (f"; apt-get said: {apt[-1]}" if apt else "")
        if rc == EXIT_PRECONDITION:
            return f"{self.name} cannot run here: {_error_lines(err)}"
        return f"{self.name} did not come up ({self.name}.sh up exited {rc}): {_error_lines(err)}"

    def release(self, raise_on_error: bool = True) -> None:
        """Drop our lease; the last one out runs `down`."""
        with self._mutex:
            if self._lease is None:
                return
            with _flocked(self.leases / ".lock"):
                self._lease.unlink(missing_ok=True)
                self._lease = None
                if self._live_leases():
                    return
                t0 = time.monotonic()
                rc, _out, err = self._run("down", DOWN_TIMEOUT)
                (self.leases / "up.out").unlink(missing_ok=True)
        _TIMINGS.append(
            f"{self.name} down: {time.monotonic() - t0:.1f} s"
            + ("" if rc == 0 else f" (FAILED, exit {rc})")
        )
        if rc != 0:
            msg = f"{self.name}.sh down exited {rc}: {_error_lines(err)}"
            if raise_on_error:
                raise RuntimeError(msg)
            print(msg, file=sys.__stderr__)


GLUSTER = _Service("gluster", "mount GlusterFS", "ZOTSINK_GLUSTER_STATE")
MOOSEFS = _Service("moosefs", "mount MooseFS", "ZOTSINK_MOOSEFS_STATE")
CEPH = _Service("ceph", "start Ceph and mount CephFS", "ZOTSINK_CEPH_STATE")
SLURM = _Service("slurm", "start munged, slurmctld and the nodes", "ZOTSINK_SLURM_STATE")
SGE = _Service("sge", "start sge_qmaster and the execds", "ZOTSINK_SGE_STATE")
# In the order they go down: the schedulers first (Grid Engine's execds run in Slurm's
# nodes), so that jobs and the nodes' clients stop before the file systems they use go away.
SERVICES = (SGE, SLURM, CEPH, MOOSEFS, GLUSTER)


def _release_all_at_exit() -> None:
    for service in SERVICES:
        try:
            service.release(raise_on_error=False)
        except BaseException as exc:  # never let one failure keep the other service up
            print(f"{service.name} down at exit: {exc!r}", file=sys.__stderr__)


atexit.register(_release_all_at_exit)

_signals_installed = False


def _install_signal_handlers() -> None:
    """Make SIGTERM/SIGHUP behave like Ctrl-C, so pytest's teardown runs `down`."""
    global _signals_installed
    if _signals_installed or threading.current_thread() is not threading.main_thread():
        return
    _signals_installed = True

    def interrupt(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) in (signal.SIG_DFL, None):
            signal.signal(sig, interrupt)


def _start(service: _Service, request: pytest.FixtureRequest) -> str:
    workeroutput = getattr(request.config, "workeroutput", None)
    if workeroutput is not None:
        # the same list object: down timings added later still reach the controller
        workeroutput[TIMINGS_KEY] = _TIMINGS
    _install_signal_handlers()
    request.addfinalizer(service.release)
    return service.acquire()


@pytest.fixture(scope="session")
def gluster_mounts(request: pytest.FixtureRequest) -> GlusterMounts:
    """The three mounts of the test volume (see the module docstring)."""
    out = _start(GLUSTER, request)
    paths = [Path(line) for line in out.split() if line.startswith("/")]
    if len(paths) != 3:
        pytest.fail(f"gluster.sh up printed {len(paths)} mount points, expected 3: {out!r}")
    return GlusterMounts(*paths)


@pytest.fixture(scope="session")
def moosefs_mounts(request: pytest.FixtureRequest) -> MooseFSMounts:
    """The two mounts of the MooseFS file system (see the module docstring)."""
    out = _start(MOOSEFS, request)
    paths = [Path(line) for line in out.split() if line.startswith("/")]
    if len(paths) != 2:
        pytest.fail(f"moosefs.sh up printed {len(paths)} mount points, expected 2: {out!r}")
    return MooseFSMounts(*paths)


@pytest.fixture(scope="session")
def ceph_mounts(request: pytest.FixtureRequest) -> CephMounts:
    """The three mounts of the CephFS (see the module docstring)."""
    out = _start(CEPH, request)
    paths = [Path(line) for line in out.split() if line.startswith("/")]
    if len(paths) != 3:
        pytest.fail(f"ceph.sh up printed {len(paths)} mount points, expected 3: {out!r}")
    return CephMounts(*paths)


@pytest.fixture(scope="session")
def slurm_cluster(gluster_mounts: GlusterMounts, request: pytest.FixtureRequest) -> SlurmCluster:
    """The Slurm cluster (see the module docstring). Most of its tests write to the
    GlusterFS volume, so the volume comes up first (and, being set up first, goes down
    last); MooseFS and CephFS mount themselves in the running nodes whenever they come up."""
    out = _start(SLURM, request)
    match = re.search(r"^SLURM_CONF=(.+)$", out, re.M)
    if not match:
        pytest.fail(f"slurm.sh up did not print SLURM_CONF: {out!r}")
    conf = Path(match.group(1).strip())
    nodes = re.findall(r"^NodeName=(\S+) .*\bCPUs=(\d+)", conf.read_text(), re.M)
    env = dict(os.environ, SLURM_CONF=str(conf))
    return SlurmCluster(
        conf=conf,
        cpus=sum(int(cpus) for _, cpus in nodes),
        env=env,
        nodes=tuple(name for name, _ in nodes),
    )


@pytest.fixture(scope="session")
def sge_cluster(slurm_cluster: SlurmCluster, request: pytest.FixtureRequest) -> SGECluster:
    """Son of Grid Engine (scripts/cluster/sge.sh): its qmaster here and an execd in each
    node of ``slurm_cluster``, one queue over them; client commands through ``run``."""
    out = _start(SGE, request)
    if "SGE_ROOT=" not in out:
        pytest.fail(f"sge.sh up did not print SGE_ROOT: {out!r}")
    return SGECluster(nodes=slurm_cluster.nodes)


@pytest.fixture(autouse=True)
def _one_cluster_test_at_a_time(request: pytest.FixtureRequest) -> Iterator[None]:
    # Session fixtures are set up before this function-scoped one, so the lock is
    # taken only once the clusters a test needs are up (or the test was skipped).
    names = set(request.fixturenames)
    if "fs" in names:
        # A test parametrized with its filesystem asks for the mounts only through
        # fs_dirs; bring them up here, before the lock, as for the others.
        request.getfixturevalue(f"{request.getfixturevalue('fs')}_mounts")
    cluster = {"gluster_mounts", "moosefs_mounts", "ceph_mounts", "slurm_cluster", "sge_cluster"}
    if not (cluster | {"fs"}) & names:
        yield
        return
    with _flocked(TESTS_LOCK, timeout=TEST_LOCK_TIMEOUT):
        yield


def _wait_for(predicate, timeout: float = 10.0, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


@pytest.fixture
def gluster_dirs(gluster_mounts: GlusterMounts, request: pytest.FixtureRequest) -> GlusterMounts:
    """A fresh empty directory on the volume, seen through node1, node2 and reader."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)[:80] + "-" + uuid.uuid4().hex[:8]
    (gluster_mounts.node1 / name).mkdir()
    dirs = GlusterMounts(*(m / name for m in gluster_mounts))
    # the other clients learn about the new entry on their next lookup; make sure they have
    if not _wait_for(lambda: all(d.is_dir() for d in dirs)):
        pytest.fail(
            f"{name} made through {gluster_mounts.node1} did not appear"
            " through the other mounts within 10 s"
        )
    return dirs


@pytest.fixture
def moosefs_dirs(moosefs_mounts: MooseFSMounts, request: pytest.FixtureRequest) -> MooseFSMounts:
    """A fresh empty directory on MooseFS, seen through both mounts."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)[:80] + "-" + uuid.uuid4().hex[:8]
    (moosefs_mounts.node1 / name).mkdir()
    dirs = MooseFSMounts(*(m / name for m in moosefs_mounts))
    if not _wait_for(lambda: all(d.is_dir() for d in dirs)):
        pytest.fail(f"{name} made through {moosefs_mounts.node1} did not appear through node2")
    return dirs


@pytest.fixture
def ceph_dirs(ceph_mounts: CephMounts, request: pytest.FixtureRequest) -> CephMounts:
    """A fresh empty directory on the CephFS, seen through node1, node2 and reader."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)[:80] + "-" + uuid.uuid4().hex[:8]
    (ceph_mounts.node1 / name).mkdir()
    dirs = CephMounts(*(m / name for m in ceph_mounts))
    if not _wait_for(lambda: all(d.is_dir() for d in dirs)):
        pytest.fail(f"{name} made through {ceph_mounts.node1} did not appear through the others")
    return dirs


@pytest.fixture
def fs_dirs(fs: str, request: pytest.FixtureRequest) -> GlusterMounts | CephMounts:
    """``gluster_dirs`` or ``ceph_dirs``, as the test's parameter ``fs`` names it."""
    if fs not in ("gluster", "ceph"):
        pytest.fail(f"fs_dirs: no filesystem {fs!r} with three mounts (gluster, ceph)")
    return request.getfixturevalue(f"{fs}_dirs")


@pytest.fixture
def zotsink_cmd() -> list[str]:
    """argv prefix that runs the zotsink CLI with this interpreter."""
    return [sys.executable, "-m", "zotsink"]


@pytest.fixture
def clusters_down() -> tuple[_Service, ...]:
    """Every cluster service down: our leases dropped, and no other process holding one."""
    if os.getuid() != 0:
        _unavailable(f"needs root to check what the clusters left (running as uid {os.getuid()})")
    for service in SERVICES:
        service.release()

    def nobody_holds_one() -> bool:
        for service in SERVICES:
            with _flocked(service.leases / ".lock"):
                if service._live_leases():
                    return False
        return True

    # Other pytest-xdist workers drop theirs when their sessions end.
    if not _wait_for(nobody_holds_one, timeout=TEST_LOCK_TIMEOUT, interval=0.5):
        pytest.fail(f"cluster leases still held by live processes after {TEST_LOCK_TIMEOUT} s")
    return SERVICES


@pytest.fixture
def cluster_report(request: pytest.FixtureRequest):
    """report(line): a line for the "zotsink cluster" summary section (see the docstring)."""
    workeroutput = getattr(request.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput[TIMINGS_KEY] = _TIMINGS

    def report(line: str) -> None:
        print(line)
        _TIMINGS.append(f"{request.node.name}: {line}")

    return report


# The xdist controller never loads this file when the whole suite runs (conftests below the
# initial paths are loaded only where tests are collected, i.e. in the workers), so the
# hooks that gather and print the summary live in tests/conftest.py; they share the list
# through the config object.
