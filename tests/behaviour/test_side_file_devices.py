"""A side file named as a device (``--log /dev/null``, ``--ledger /dev/null``) is refused
before any task runs, as OUT is; and nothing meant for a device is ever spilled beside it,
into ``/dev``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import zotsink as zs
from zotsink._core.sidefiles import spill

ZOTSINK = [sys.executable, "-m", "zotsink"]


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZOTSINK_")}
    env["ZOTSINK_SPILL_DIR"] = str(tmp_path / "spills")
    return env


def _remove_spills_in_dev(pid: int) -> None:
    """What an older zotsink spilled into /dev for process ``pid``: not left there."""
    for name in os.listdir("/dev"):
        if ".spill." in name and name.split(".spill.")[1].split(".")[-1] == str(pid):
            os.unlink(os.path.join("/dev", name))


def _spills_in_dev() -> set[str]:
    return {n for n in os.listdir("/dev") if ".spill." in n}


@pytest.mark.parametrize("option", ["--log", "--ledger"])
def test_run_refuses_a_device_as_a_side_file_before_any_task(tmp_path: Path, option: str) -> None:
    (tmp_path / "spills").mkdir()
    (tmp_path / "tasks.txt").write_text("a\nb\n")
    before = _spills_in_dev()
    p = subprocess.Popen(
        [*ZOTSINK, "run", "tasks.txt", "out.tsv", option, os.devnull, "--", "sh", "-c",
         'touch "ran.$0"; echo "stderr of $0" >&2; echo "rec $0"'],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(tmp_path),
    )  # fmt: skip
    try:
        _, stderr = p.communicate(timeout=120)
    finally:
        _remove_spills_in_dev(p.pid)
    r = subprocess.CompletedProcess(p.args, p.returncode, b"", stderr)
    err = r.stderr.decode()
    assert r.returncode == 2, err
    assert f"{os.devnull} is a character device" in err
    assert "name a file instead" in err
    assert "spill" not in err and "recover" not in err
    assert not list(tmp_path.glob("ran.*"))  # no task ran
    assert not (tmp_path / "out.tsv").exists()
    assert not list((tmp_path / "spills").iterdir())
    assert _spills_in_dev() <= before


def test_run_tasks_refuses_a_device_log(tmp_path: Path) -> None:
    (tmp_path / "tasks.txt").write_text("a\n")
    try:
        with pytest.raises(zs.UsageError, match="is a character device"):
            zs.run_tasks(
                tmp_path / "tasks.txt", tmp_path / "out.tsv", ["touch", str(tmp_path / "ran")],
                log=os.devnull,
            )  # fmt: skip
    finally:
        _remove_spills_in_dev(os.getpid())
    assert not (tmp_path / "ran").exists()
    assert not (tmp_path / "out.tsv").exists()


def test_lines_meant_for_a_device_are_never_spilled_beside_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ZOTSINK_SPILL_DIR", str(tmp_path))
    path = spill(os.devnull, b"a line\n")
    try:
        assert os.path.dirname(path) == str(tmp_path)
        assert Path(path).read_bytes() == b"a line\n"
        assert os.stat(path).st_mode & 0o777 == 0o600
    finally:
        if os.path.dirname(path) == "/dev":  # the old tree spilled into /dev: clean it up
            os.unlink(path)


@pytest.mark.skipif(os.geteuid() != 0, reason="making a device node needs root")
def test_a_device_at_out_rejects_keeps_the_refused_lines(tmp_path: Path) -> None:
    """OUT.rejects is made only when a line is refused: a device planted there refuses it
    at open, and the refused line is saved beside OUT, never lost."""
    out = tmp_path / "out.tsv"
    out.write_text("a\tb\n")
    rejects = tmp_path / "out.tsv.rejects"
    os.mknod(rejects, 0o600 | 0o020000, os.makedev(1, 3))  # a character device, as /dev/null
    (tmp_path / "spills").mkdir()
    r = subprocess.run(
        [*ZOTSINK, "--columns", "a,b", str(out)],
        input=b"1\t2\nonly-one-field\n",
        capture_output=True,
        env=_env(tmp_path),
        timeout=60,
    )
    assert r.returncode != 0, r.stderr
    assert out.read_bytes() == b"a\tb\n1\t2\n"
    saved = [p for p in tmp_path.iterdir() if ".spill." in p.name]
    saved += list((tmp_path / "spills").iterdir())
    assert any(b"only-one-field" in p.read_bytes() for p in saved), (saved, r.stderr)
    assert b"only-one-field" not in out.read_bytes()
