"""``zotsink.pyz`` (scripts/build-pyz) end to end under the oldest and newest supported Python.

The archive is built once for the module and run as a user would, ``python3.X zotsink.pyz``:
append from stdin and arguments, collect a directory of tiny files, verify a clean and a
damaged file. The interpreters come from ``scripts/find-python``; one that is missing skips
its tests, and fails them when ``ZOTSINK_PYTHONS_REQUIRED=1`` (CI).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VERSIONS = ("3.9", "3.13")

pytestmark = pytest.mark.xdist_group("pyz")


def find_python(version: str) -> str | None:
    out = subprocess.run(
        [str(ROOT / "scripts" / "find-python"), version], capture_output=True, text=True
    )
    return out.stdout.strip() if out.returncode == 0 else None


def need_python(version: str) -> str:
    python = find_python(version)
    if python is None:
        if os.environ.get("ZOTSINK_PYTHONS_REQUIRED") == "1":
            pytest.fail(f"Python {version} is required here (ZOTSINK_PYTHONS_REQUIRED=1)")
        pytest.skip(f"no Python {version} on this machine (scripts/find-python {version})")
    return python


def build(out: Path, *pythons: str) -> Path:
    args = [a for p in pythons for a in ("--python", p)]
    r = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "build-pyz"), "-o", str(out), *args],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    return out


@pytest.fixture(scope="module")
def pyz(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An archive compiled for every one of VERSIONS found here."""
    pythons = [p for p in map(find_python, VERSIONS) if p is not None]
    return build(tmp_path_factory.mktemp("pyz") / "zotsink.pyz", *pythons)


def clean_env() -> dict[str, str]:
    # the archive must stand on its own: no venv, no PYTHONPATH, no ZOTSINK_* settings
    drop = ("ZOTSINK_", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")
    return {k: v for k, v in os.environ.items() if not k.startswith(drop)}


Run = Callable[..., "subprocess.CompletedProcess[bytes]"]


def runner(python: str, pyz: Path, cwd: Path) -> Run:
    def run(*args: str, input: bytes = b"") -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [python, str(pyz), *args],
            input=input,
            capture_output=True,
            cwd=cwd,
            env=clean_env(),
            timeout=120,
        )

    return run


@pytest.mark.parametrize("version", VERSIONS)
def test_append_collect_verify_through_the_archive(version: str, pyz: Path, tmp_path: Path) -> None:
    run = runner(need_python(version), pyz, tmp_path)

    r = run("--columns", "k,v", "out.tsv", input=b"a\t1\nb\t2\n")
    assert (r.returncode, r.stderr) == (0, b"")
    r = run("append", "out.tsv", "c\t3")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "out.tsv").read_bytes() == b"k\tv\na\t1\nb\t2\nc\t3\n"

    (tmp_path / "zot" / "a").mkdir(parents=True)
    (tmp_path / "zot" / "a" / "r1.txt").write_bytes(b"id:1 val:x\n")
    (tmp_path / "zot" / "r2.txt").write_bytes(b"id:2 val:y")  # no final newline
    r = run("collect", "zot", "-o", "all.tsv")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "all.tsv").read_bytes() == (
        b"source\tid\tval\na/r1.txt\t1\tx\nr2.txt\t2\ty\n"
    )
    assert b"2 files, 2 records" in r.stderr

    r = run("verify", "out.tsv")
    assert r.returncode == 0, r.stderr
    assert b"3 records, no problems" in r.stderr
    with open(tmp_path / "out.tsv", "ab") as f:
        f.write(b"torn")  # a fragment: no newline, one field of two
    r = run("verify", "out.tsv")
    assert r.returncode == 1
    assert b"out.tsv:5:" in r.stderr


@pytest.mark.parametrize("version", VERSIONS)
def test_each_python_loads_its_own_compiled_tree(version: str, pyz: Path) -> None:
    """The byte-compiled tree, not the sources, serves the run: that is the fast start-up."""
    python = need_python(version)
    # click >= 8.2 finds its __version__ through package metadata, which the archive
    # does not carry: ask 8.1's attribute on 3.9 only
    code = (
        "import runpy, sys; runpy.run_path(sys.argv[1]); import click, zotsink.cli;"
        "print(zotsink.cli.__spec__.origin, click.__spec__.origin);"
        "sys.version_info < (3, 10) and print(click.__version__)"
    )
    r = subprocess.run(
        [python, "-c", code, str(pyz)], capture_output=True, text=True, env=clean_env()
    )
    assert r.returncode == 0, r.stderr
    tag = "cpython-" + version.replace(".", "")
    origins = r.stdout.split()
    assert origins[:2] == [
        f"{pyz}/{tag}/zotsink/cli/__init__.pyc",
        f"{pyz}/{tag}/click/__init__.pyc",
    ]
    if version == "3.9":
        assert origins[2].startswith("8.1.")  # click 8.2 and later need Python 3.10
    with zipfile.ZipFile(pyz) as zf:
        assert not [n for n in zf.namelist() if n.startswith(tag) and n.endswith(".py")]


def test_an_interpreter_without_a_tree_runs_from_the_sources(tmp_path: Path) -> None:
    """Built for 3.13 only, the archive still runs on 3.9 (from its sources, slower)."""
    old, new = need_python("3.9"), need_python("3.13")
    pyz = build(tmp_path / "only313.pyz", new)
    with zipfile.ZipFile(pyz) as zf:
        assert not [n for n in zf.namelist() if n.startswith("cpython-39/")]
    r = runner(old, pyz, tmp_path)("out.txt", "hello")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "out.txt").read_bytes() == b"hello\n"


def test_a_python_older_than_3_9_is_told_what_to_do(pyz: Path, tmp_path: Path) -> None:
    old = find_python("3.8") or find_python("3.7") or find_python("3.6")
    if old is None:
        pytest.skip("no Python older than 3.9 on this machine")
    r = runner(old, pyz, tmp_path)("out.txt", "hello")
    assert r.returncode == 2
    assert b"zotsink.pyz needs Python 3.9 or newer" in r.stderr
    assert b"Traceback" not in r.stderr
    assert not (tmp_path / "out.txt").exists()


# -- importing zotsink from the archive: the one line of the README and docs/install.md ------

#: What the task does after the documented line: both record writers, and where it all came
#: from. Running the line again must not stack a second copy onto sys.path.
TASK = """
import sys
runpy.run_path(PYZ)
import zotsink, zotsink._pack.append
append_record("out.tsv", ["a b", 7, 2.5], columns=["name", "n", "x"])
append_record("out.tsv", ["tab\\there", -1, 0.0], columns=["name", "n", "x"])
append_member("plots.tar", "task-7/hist.png", b"\\x89PNG fake")
print(zotsink.__spec__.origin)
print(zotsink._pack.append.__spec__.origin)
print(*[p for p in sys.path if p.startswith(PYZ)])
print(sys.argv)
"""


def documented_import(name: str) -> str:
    """The ``<!-- pyz-import -->`` block of README.md or docs/install.md."""
    text = (ROOT / name).read_text(encoding="utf-8")
    found = re.findall(r"<!-- pyz-import -->\n```python\n(.*?)```", text, re.S)
    assert len(found) == 1, f"{name}: no (or more than one) pyz-import block"
    return found[0]


def test_the_readme_and_install_guide_show_the_same_import() -> None:
    assert documented_import("README.md") == documented_import("docs/install.md")


@pytest.mark.parametrize("version", VERSIONS)
def test_a_python_task_imports_zotsink_from_the_archive(
    version: str, pyz: Path, tmp_path: Path
) -> None:
    python = need_python(version)
    placeholder = '"/path/to/zotsink.pyz"'
    code = documented_import("README.md")
    assert placeholder in code
    script = tmp_path / "task.py"
    # the documented lines as written, with this archive's path; then the task's own work
    script.write_text(code.replace(placeholder, repr(str(pyz))) + f"PYZ = {str(pyz)!r}" + TASK)
    r = subprocess.run(
        [python, str(script)], capture_output=True, text=True, cwd=tmp_path, env=clean_env(),
        timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""  # no command ran: nothing said
    tag = "cpython-" + version.replace(".", "")
    # this Python's byte-compiled copy, not the sources; on sys.path once; argv untouched
    assert r.stdout.splitlines() == [
        f"{pyz}/{tag}/zotsink/__init__.pyc",
        f"{pyz}/{tag}/zotsink/_pack/append.pyc",
        f"{pyz}/{tag}",
        repr([str(script)]),
    ]
    assert (tmp_path / "out.tsv").read_bytes() == (
        b"name\tn\tx\na b\t7\t2.5\ntab\\there\t-1\t0.0\n"
    )
    with tarfile.open(tmp_path / "plots.tar") as tar:
        assert tar.getnames() == ["task-7/hist.png"]
        member = tar.extractfile("task-7/hist.png")
        assert member is not None and member.read() == b"\x89PNG fake"
    # and the archive's own commands find both files whole
    run = runner(python, pyz, tmp_path)
    for out in ("out.tsv", "plots.tar"):
        v = run("verify", out)
        assert v.returncode == 0, v.stderr
