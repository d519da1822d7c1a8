"""How the suite is run: the Debian packages ``scripts/test`` names before it installs any,
and ``ZOTSINK_SKIP_CLUSTER=1``, which skips the cluster tests with its reason.

The cluster tests themselves never run here: their conftest is copied beside a test that
uses no cluster fixture, and run by pytest in a child process.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SWITCH = "ZOTSINK_SKIP_CLUSTER"


def cluster_packages() -> list[str]:
    """Every Debian package the cluster scripts install, in the order they come up."""
    out: list[str] = []
    for name in ("gluster", "moosefs", "ceph", "slurm", "sge"):
        text = (ROOT / "scripts" / "cluster" / f"{name}.sh").read_text()
        out += re.search(r"^PACKAGES=\((.*)\)$", text, re.M).group(1).split()  # type: ignore[union-attr]
    return out


def test_the_clusters_packages_are_named_unless_the_clusters_are_skipped(tmp_path: Path) -> None:
    # a dpkg-query that knows one package installed, and no other
    (tmp_path / "dpkg-query").write_text(
        "#!/bin/sh\nfor pkg; do :; done\n"
        '[ "$pkg" = glusterfs-client ] && echo "install ok installed"\nexit 0\n'
    )
    (tmp_path / "dpkg-query").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != SWITCH}
    env["PATH"] = f"{tmp_path}:{env['PATH']}"
    script = str(ROOT / "scripts" / "test-packages")
    r = subprocess.run([script, "clusters"], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    wanted = [p for p in cluster_packages() if p != "glusterfs-client"]
    assert "glusterfs-server" in wanted and "slurmctld" in wanted
    assert r.stdout == " ".join(wanted) + "\n"
    r = subprocess.run([script, "clusters"], env={**env, SWITCH: "1"}, capture_output=True)
    assert (r.returncode, r.stdout) == (0, b"\n")
    r = subprocess.run([script, "everything"], env=env, capture_output=True, text=True)
    assert (r.returncode, r.stderr) == (2, f"usage: {script} suite|clusters\n")
    # scripts/test names both lists before it installs anything, and says how to skip
    text = (ROOT / "scripts" / "test").read_text()
    assert text.index("scripts/test-packages clusters") < text.index(". scripts/env.sh")
    assert text.index("apt-get install") > text.index(". scripts/env.sh")


def _pytest_on_a_copy(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """pytest over a copy of tests/cluster/conftest.py and one test that needs no cluster."""
    here = tmp_path / "cluster"
    here.mkdir(exist_ok=True)
    shutil.copyfile(ROOT / "tests" / "cluster" / "conftest.py", here / "conftest.py")
    (here / "test_one.py").write_text("def test_one() -> None:\n    pass\n")
    base = {
        k: v
        for k, v in os.environ.items()
        if k not in (SWITCH, "ZOTSINK_CLUSTER_REQUIRED") and not k.startswith("PYTEST_")
    }
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rs", "-q", str(here)],
        cwd=tmp_path,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_cluster_tests_skip_with_the_switch_and_say_why(tmp_path: Path) -> None:
    r = _pytest_on_a_copy(tmp_path)
    assert r.returncode == 0 and "1 passed" in r.stdout, r.stdout + r.stderr
    r = _pytest_on_a_copy(tmp_path, **{SWITCH: "1"})
    assert r.returncode == 0 and "1 skipped" in r.stdout, r.stdout + r.stderr
    assert (
        "SKIPPED [1] cluster/test_one.py: ZOTSINK_SKIP_CLUSTER=1: the cluster tests are "
        "skipped (no packages, no clusters)"
    ) in r.stdout
    r = _pytest_on_a_copy(tmp_path, **{SWITCH: "1", "ZOTSINK_CLUSTER_REQUIRED": "1"})
    assert r.returncode == 4, r.stdout + r.stderr  # a usage error: nothing ran
    assert (
        "ZOTSINK_SKIP_CLUSTER=1 and ZOTSINK_CLUSTER_REQUIRED=1 ask for opposites: unset one of them"
    ) in r.stderr


def test_ci_never_skips_the_clusters_and_the_readme_says_how(tmp_path: Path) -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    assert SWITCH not in ci and "ZOTSINK_CLUSTER_REQUIRED=1" in ci
    readme = (ROOT / "README.md").read_text()
    setup = readme.split("## Set-up: two commands", 1)[1].split("\n## ", 1)[0]
    assert f"{SWITCH}=1 scripts/test" in setup
