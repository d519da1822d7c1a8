"""``--call`` functions in contexts their authors did not expect: a script without a
``__main__`` guard (a nested run in every worker), a file named like a standard-library
module, and values of classes marshal does not carry (``str`` subclasses, ``IntEnum``,
NumPy scalars)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import zotsink as zs
from tests.ledgers import ledger_rows

ZOTSINK = [sys.executable, "-m", "zotsink"]


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("ZOTSINK_")}


def _ends(d: Path) -> dict[str, dict[str, str]]:
    rows = ledger_rows(d / "out.tsv.ledger")
    return {r["key"]: r for r in rows if r["event"] == "end"}


def test_a_run_at_a_scripts_top_level_is_refused_in_its_workers(tmp_path: Path) -> None:
    # The script notes each import of itself and gives up past a bound of its own: without
    # the refusal, every worker's import starts a run whose workers import it again.
    (tmp_path / "unguarded.py").write_text(
        textwrap.dedent(
            """
            import os, sys
            import zotsink

            with open("imports", "a") as f:
                f.write(f"{os.getpid()}\\n")
            with open("imports") as f:
                if len(f.read().split()) > 12:
                    os._exit(9)  # the test's own bound on a chain of nested runs

            def measure(line):
                return {"line": line}

            report = zotsink.run_tasks("tasks.txt", "out.tsv", function=measure, jobs=2)
            print("halted:", report.halted)
            """
        )
    )
    (tmp_path / "tasks.txt").write_text("a\nb\n")
    r = subprocess.run(
        [sys.executable, "unguarded.py"], cwd=tmp_path, capture_output=True, env=_env(),
        timeout=120, check=False,
    )  # fmt: skip
    out = r.stdout.decode()
    assert r.returncode == 0, r.stderr.decode()
    imports = (tmp_path / "imports").read_text().split()
    assert 2 <= len(imports) <= 3  # the script itself, then one import per worker at most
    assert "halted: cannot load --call" in out
    assert "a run was started inside a --call worker" in out
    assert 'under `if __name__ == "__main__":`' in (tmp_path / "out.tsv.log").read_text()
    assert not (tmp_path / "out.tsv").exists() or (tmp_path / "out.tsv").read_bytes() == b""


def test_a_run_inside_a_called_function_is_refused_and_fails_the_task(tmp_path: Path) -> None:
    (tmp_path / "nested.py").write_text(
        textwrap.dedent(
            """
            import zotsink

            def f(line):
                zotsink.run_tasks("tasks.txt", "inner.tsv", function=f)
            """
        )
    )
    (tmp_path / "tasks.txt").write_text("a\n")
    r = subprocess.run(
        [*ZOTSINK, "run", "tasks.txt", "out.tsv", "--call", "nested.py:f"],
        cwd=tmp_path, capture_output=True, env=_env(), timeout=120, check=False,
    )  # fmt: skip
    assert r.returncode == 1, r.stderr.decode()
    end = _ends(tmp_path)["a"]
    assert end["status"] == "failed"
    assert "a run was started inside a --call worker" in (tmp_path / "out.tsv.log").read_text()
    assert not (tmp_path / "inner.tsv.ledger").exists()


def test_a_process_the_function_starts_may_run(tmp_path: Path) -> None:
    # the refusal is for the worker process itself, not for programs its function starts
    (tmp_path / "outer.py").write_text(
        textwrap.dedent(
            f"""
            import subprocess

            def f(line):
                subprocess.run(
                    {ZOTSINK!r} + ["run", "inner.txt", "inner.tsv", "--", "echo"], check=True
                )
                return {{"line": line}}
            """
        )
    )
    (tmp_path / "tasks.txt").write_text("a\n")
    (tmp_path / "inner.txt").write_text("x\ny\n")
    r = subprocess.run(
        [*ZOTSINK, "run", "tasks.txt", "out.tsv", "--call", "outer.py:f"],
        cwd=tmp_path, capture_output=True, env=_env(), timeout=120, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr.decode() + (tmp_path / "out.tsv.log").read_text()
    assert sorted((tmp_path / "inner.tsv").read_bytes().splitlines()) == [b"x", b"y"]


@pytest.mark.parametrize("name", ["textwrap", "traceback", "linecache", "tokenize"])
@pytest.mark.parametrize("where", ["beside", "here"])
def test_a_file_named_like_a_stdlib_module_fails_its_task_with_the_traceback(
    tmp_path: Path, name: str, where: str
) -> None:
    # beside: the file in a directory of its own (which joins the worker's import path);
    # here: in the current directory, the run started by its console script (`python -m`
    # would put the current directory before the standard library for the run itself).
    place = tmp_path / "lib" if where == "beside" else tmp_path
    place.mkdir(exist_ok=True)
    (place / f"{name}.py").write_text(
        "def f(line):\n"
        "    if line == 'bad':\n"
        "        raise ValueError('cannot measure ' + line)\n"
        "    return {'line': line}\n"
    )
    (tmp_path / "tasks.txt").write_text("good\nbad\n")
    spec = f"lib/{name}.py:f" if where == "beside" else f"{name}.py:f"
    program = ZOTSINK if where == "beside" else [str(Path(sys.executable).parent / "zotsink")]
    r = subprocess.run(
        [*program, "run", "tasks.txt", "out.tsv", "--call", spec],
        cwd=tmp_path, capture_output=True, env=_env(), timeout=120, check=False,
    )  # fmt: skip
    assert r.returncode == 1, r.stderr.decode()
    ends = _ends(tmp_path)
    assert ends["good"]["status"] == "ok"
    assert ends["bad"]["status"] == "failed", ends["bad"]
    assert "ValueError: cannot measure bad" in ends["bad"]["note"]
    assert "ValueError: cannot measure bad" in (tmp_path / "out.tsv.log").read_text()
    assert (tmp_path / "out.tsv").read_bytes() == b"line\ngood\n"


VALUES = r"""
import enum
import numpy as np


class Label(str):
    def __str__(self):
        return "not the value"


class Level(enum.IntEnum):
    HIGH = 3


def values(line):
    return {
        "sub": Label("img" + line), "level": Level.HIGH, "f64": np.float64(0.5),
        "i64": np.int64(7), "flag": np.bool_(True), "name": np.str_("héllo"),
        "f32": np.float32(0.1), "mean": np.array([1.0, 2.0]).mean(),
    }


def lines(line):
    return [np.str_(f"{line}\tx"), Label(f"{line}\ty")]
"""


def test_call_values_of_numpy_and_subclasses_are_written_as_plain_values(tmp_path: Path) -> None:
    pytest.importorskip("numpy")
    (tmp_path / "vals.py").write_text(VALUES)
    (tmp_path / "tasks.txt").write_text("1\n2\n")
    r = subprocess.run(
        [*ZOTSINK, "run", "tasks.txt", "out.tsv", "--call", "vals.py:values"],
        cwd=tmp_path, capture_output=True, env=_env(), timeout=120, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr.decode() + (tmp_path / "out.tsv.log").read_text()
    header, *rows = (tmp_path / "out.tsv").read_text("utf-8").splitlines()
    assert header == "sub\tlevel\tf64\ti64\tflag\tname\tf32\tmean"
    assert sorted(rows) == [f"img{n}\t3\t0.5\t7\tTrue\théllo\t0.1\t1.5" for n in (1, 2)]
    assert {e["status"] for e in _ends(tmp_path).values()} == {"ok"}


def test_call_lines_of_str_subclasses_are_written_as_their_text(tmp_path: Path) -> None:
    pytest.importorskip("numpy")
    (tmp_path / "vals.py").write_text(VALUES)
    (tmp_path / "tasks.txt").write_text("1\n")
    r = subprocess.run(
        [*ZOTSINK, "run", "tasks.txt", "out.tsv", "--call", "vals.py:lines", "--columns", "n,w"],
        cwd=tmp_path, capture_output=True, env=_env(), timeout=120, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr.decode() + (tmp_path / "out.tsv.log").read_text()
    assert (tmp_path / "out.tsv").read_bytes() == b"n\tw\n1\tx\n1\ty\n"


def test_append_and_sink_write_numpy_and_subclass_values_as_plain_values(tmp_path: Path) -> None:
    np = pytest.importorskip("numpy")
    import enum

    class Level(enum.IntEnum):
        HIGH = 3

    class Label(str):
        def __str__(self) -> str:
            return "not the value"

    row = {
        "sub": Label("img"), "level": Level.HIGH, "f64": np.float64(0.5), "i64": np.int64(7),
        "flag": np.bool_(False), "name": np.str_("x"), "f32": np.float32(0.1),
    }  # fmt: skip
    want = b"sub\tlevel\tf64\ti64\tflag\tname\tf32\nimg\t3\t0.5\t7\tFalse\tx\t0.1\n"
    zs.append_record(tmp_path / "one.tsv", row)
    assert (tmp_path / "one.tsv").read_bytes() == want
    zs.append_records(tmp_path / "many.tsv", [row])
    assert (tmp_path / "many.tsv").read_bytes() == want
    with zs.Sink(tmp_path / "sink.tsv") as sink:
        sink.write(row)
    assert (tmp_path / "sink.tsv").read_bytes() == want
    zs.append_record(tmp_path / "row.csv", [np.float64(0.25), Level.HIGH], columns=["a", "b"])
    assert (tmp_path / "row.csv").read_bytes() == b"a,b\n0.25,3\n"
