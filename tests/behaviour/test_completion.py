"""Shell completion as the README sets it up, in real bash, fish and zsh.

Each case loads the script that ``_ZOTSINK_COMPLETE=<shell>_source zotsink`` prints, exactly
as a user's start-up file would, then asks the shell to complete a command line: bash through
the completion function and ``COMPREPLY``, fish through ``complete -C``. zsh cannot complete
without a terminal, so its script is checked by loading it under ``compinit`` and its answers
through the protocol the script speaks. The ``zotsink OUT`` shorthand is covered: options
after OUT and before it, and OUT itself completing as a file name.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BIN = str(Path(sys.executable).parent)  # the zotsink command of this environment


def env() -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("ZOTSINK_", "_ZOTSINK"))}
    return {**clean, "PATH": f"{BIN}{os.pathsep}{clean.get('PATH', '')}"}


@pytest.fixture
def cwd(tmp_path: Path) -> Path:
    (tmp_path / "out.tsv").write_bytes(b"")
    (tmp_path / "other.txt").write_bytes(b"")
    return tmp_path


def need(shell: str) -> str:
    path = shutil.which(shell)
    if path is None:
        pytest.skip(f"{shell} is not installed (scripts/test installs it as root)")
    return path


def bash_complete(words: list[str], cwd: Path) -> list[str]:
    """COMPREPLY for the command line ``words`` (the last one is being completed).

    A file name is completed by bash itself once the function asks for it with
    ``compopt -o default``; outside an interactive completion that builtin refuses, so a
    stand-in reports the request as the line ``<bash completes file names>``.
    """
    script = (
        'compopt() { [ "$1 $2" = "-o default" ] && echo "<bash completes file names>"; }\n'
        'eval "$(_ZOTSINK_COMPLETE=bash_source zotsink)"\n'
        'COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1))\n'
        "_zotsink_completion zotsink\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    r = subprocess.run(
        [need("bash"), "-c", script, "bash", *words], cwd=cwd, env=env(), capture_output=True,
        text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 0 and r.stderr == "", r.stderr
    return [line for line in r.stdout.splitlines() if line]


def fish_complete(line: str, cwd: Path) -> list[str]:
    script = f"_ZOTSINK_COMPLETE=fish_source zotsink | source\ncomplete -C {fish_quote(line)}\n"
    r = subprocess.run(
        [need("fish"), "--no-config", "-c", script], cwd=cwd, env=env(), capture_output=True,
        text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    return [entry.split("\t")[0] for entry in r.stdout.splitlines() if entry]


def fish_quote(s: str) -> str:
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"


def test_options_after_out_complete_in_bash(cwd: Path) -> None:
    assert bash_complete(["zotsink", "out.tsv", "--st"], cwd) == ["--stamp"]
    assert sorted(bash_complete(["zotsink", "out.tsv", "--lock", ""], cwd)) == [
        "auto", "fcntl", "flock", "lockfile",
    ]  # fmt: skip


def test_options_before_out_complete_in_bash(cwd: Path) -> None:
    """``zotsink --stamp out.tsv`` is valid, so ``zotsink --st<TAB>`` offers --stamp."""
    assert bash_complete(["zotsink", "--st"], cwd) == ["--stamp"]
    got = bash_complete(["zotsink", "--"], cwd)
    assert {"--stamp", "--columns", "--lock", "--version", "--help"} <= set(got)


def test_a_mistyped_command_is_not_reported_while_completing(cwd: Path) -> None:
    # `zotsink verfy out.tsv` is refused when run; a TAB must not print that error mid-line
    # (bash_complete asserts an empty stderr)
    assert bash_complete(["zotsink", "verfy", "--st"], cwd) == ["--stamp"]
    r = subprocess.run(
        [sys.executable, "-m", "zotsink", "verfy", "out.tsv"], cwd=cwd, capture_output=True,
        text=True, env=env(),
    )  # fmt: skip
    assert r.returncode == 2 and "did you mean `zotsink verify`" in r.stderr


def test_out_completes_as_a_file_name_beside_the_commands(cwd: Path) -> None:
    assert bash_complete(["zotsink", "ou"], cwd) == ["<bash completes file names>"]
    # a matching command name wins over file names (bash's `-o default` only applies
    # when nothing else matched)
    assert bash_complete(["zotsink", "co"], cwd) == ["<bash completes file names>", "collect"]
    # after a command name, no file name is offered for the command's place
    assert bash_complete(["zotsink", "collect", "--in"], cwd) == ["--input"]


def test_fish_completes_the_shorthand(cwd: Path) -> None:
    assert fish_complete("zotsink out.tsv --st", cwd) == ["--stamp"]
    assert fish_complete("zotsink --st", cwd) == ["--stamp"]
    assert sorted(fish_complete("zotsink out.tsv --sync ", cwd)) == ["auto", "fsync", "none"]
    assert fish_complete("zotsink ou", cwd) == ["out.tsv"]


def test_zsh_script_loads_and_answers(cwd: Path) -> None:
    zsh = need("zsh")
    load = (
        "autoload -Uz compinit && compinit -u -D\n"
        'eval "$(_ZOTSINK_COMPLETE=zsh_source zotsink)"\n'
        "whence -w _zotsink_completion\n"
    )
    r = subprocess.run(
        [zsh, "-f", "-c", load], cwd=cwd, env=env(), capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "_zotsink_completion: function"
    # what the zsh function asks zotsink, and the answer it gets (type, value, help lines)
    r = subprocess.run(
        [sys.executable, "-m", "zotsink"], cwd=cwd, capture_output=True, text=True,
        env={**env(), "_ZOTSINK_COMPLETE": "zsh_complete", "COMP_WORDS": "zotsink --st",
             "COMP_CWORD": "1"},
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[:2] == ["plain", "--stamp"]


def test_state_values_complete_as_a_comma_list(cwd: Path) -> None:
    words = ["zotsink", "missing", "tasks.txt", "--ledger", "l", "--state"]
    assert bash_complete([*words, "fa"], cwd) == ["failed"]
    assert bash_complete([*words, "failed,ne"], cwd) == ["failed,never"]
    offered = bash_complete([*words, "ok,"], cwd)
    assert offered == [
        "ok,failed", "ok,killed", "ok,timeout", "ok,oom", "ok,interrupted", "ok,given-up",
        "ok,running", "ok,claimed", "ok,lost", "ok,never",
    ]  # fmt: skip


def test_stamp_fields_complete_as_a_comma_list(cwd: Path) -> None:
    words = ["zotsink", "pack", "out.tar", "other.txt", "--stamp"]
    assert bash_complete([*words, "job,t"], cwd) == ["job,time", "job,task", "job,tasknum"]
    assert bash_complete([*words, "job,task,ho"], cwd) == ["job,task,host"]
    assert "attempt" in bash_complete([*words, ""], cwd)
    assert sorted(fish_complete("zotsink pack out.tar other.txt --stamp ti", cwd)) == ["time"]


def test_stamp_fields_of_append_and_run_complete_as_a_comma_list(cwd: Path) -> None:
    for words in (
        ["zotsink", "out.tsv", "--stamp"],
        ["zotsink", "append", "out.tsv", "--stamp"],
        ["zotsink", "run", "tasks.txt", "out.tsv", "--stamp"],
    ):
        assert bash_complete([*words, "host,ta"], cwd) == ["host,task", "host,tasknum"], words
