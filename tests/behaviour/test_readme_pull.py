"""The README's pull route, run as written: its ``measure.py``, the ``sbatch`` line of the
pull template and its Grid Engine and PBS twins, and the command line each element runs,
followed by the README's ``status`` and ``cat -o`` lines.

The README's command blocks (``<!-- job recipe: pull -->``, ``pull-sge-pbs``, ``pull-run``) run
in bash, line by line as a user types them, in a directory holding images the way the
EuroSAT set lays them out. ``sbatch`` and ``qsub`` are stand-ins that start every element
of the array at once, here, with the variables their scheduler sets (and one CPU each);
``squeue`` answers nothing, as a scheduler that cannot be asked.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

import zotsink as zs
from tests.ledgers import ledger_rows

ROOT = Path(__file__).resolve().parents[2]
IN_CI = os.environ.get("CI", "").lower() not in ("", "0", "false")

#: sbatch --array=A-B SCRIPT: every element at once, as Slurm starts them (its variables).
SBATCH = r"""#!/bin/bash
spec= script=
for a; do case $a in --array=*) spec=${a#--array=} ;; -*) ;; *) script=$a ;; esac; done
pids=()
for ((i = ${spec%-*}; i <= ${spec#*-}; i++)); do
    SLURM_ARRAY_JOB_ID=77 SLURM_ARRAY_TASK_ID=$i SLURM_JOB_ID=$((100 + i)) \
        SLURM_CPUS_PER_TASK=1 bash "$script" &
    pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=$?; done
echo "Submitted batch job 77"
exit $rc
"""

#: qsub -t A-B SCRIPT (Grid Engine) or qsub -J A-B SCRIPT (PBS): every element at once.
QSUB = r"""#!/bin/bash
kind= spec= script=
while [ $# -gt 0 ]; do
    case $1 in -t) kind=sge spec=$2; shift ;; -J) kind=pbs spec=$2; shift ;; *) script=$1 ;; esac
    shift
done
pids=()
for ((i = ${spec%-*}; i <= ${spec#*-}; i++)); do
    if [ "$kind" = sge ]; then
        JOB_ID=88 SGE_TASK_ID=$i NSLOTS=1 bash "$script" &
    else
        PBS_JOBID="99[$i].pbs01" PBS_ARRAY_INDEX=$i NCPUS=1 PBS_O_WORKDIR=$PWD bash "$script" &
    fi
    pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=$?; done
echo "99[].pbs01"
exit $rc
"""


def need(module: str) -> None:
    """The README's route needs Pillow and pyarrow (both in the test extra: in CI they are
    there, and a missing one fails)."""
    try:
        __import__(module)
    except ImportError as e:
        if IN_CI:
            pytest.fail(f"could not import {module} ({e})", pytrace=False)
        pytest.skip(f"could not import {module} ({e})")


def recipe(name: str) -> list[str]:
    """The command lines of the README's block after ``<!-- job recipe: NAME -->``,
    without their comments."""
    text = (ROOT / "README.md").read_text()
    block = re.search(rf"<!-- job recipe: {name} -->\n```sh\n(.*?)```", text, re.S)
    assert block is not None, f"README.md has no recipe {name}"
    return [re.sub(r"\s+#.*", "", line) for line in block[1].splitlines()]


def measure_py() -> str:
    text = (ROOT / "README.md").read_text()
    return text.split("```python\n# measure.py\n", 1)[1].split("```", 1)[0]


@pytest.fixture
def site(tmp_path: Path, child_env: Callable[..., dict[str, str]]) -> tuple[Path, dict[str, str]]:
    """A directory as the README's user has it (images, measure.py, the repository's
    scripts/), and the environment with the stand-ins first on PATH."""
    from PIL import Image

    for n, (kind, shade) in enumerate([("Forest", 20), ("River", 90), ("SeaLake", 200)] * 4):
        folder = tmp_path / "EuroSAT_RGB" / kind
        folder.mkdir(parents=True, exist_ok=True)
        image = Image.new("RGB", (8, 8), (shade, shade + n, 40))
        image.putpixel((0, 0), (255, 255, 255))
        image.save(folder / f"{kind}_{n}.jpg", quality=95)
    (tmp_path / "measure.py").write_text(measure_py())
    (tmp_path / "scripts").symlink_to(ROOT / "scripts")
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    stand_ins = {
        "sbatch": SBATCH,
        "qsub": QSUB,
        "squeue": "#!/bin/sh\nexit 1\n",
        "zotsink": f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m zotsink "$@"\n',
    }
    for name, text in stand_ins.items():
        (bin_ / name).write_text(text)
        (bin_ / name).chmod(0o755)
    drop = ("SLURM_", "SGE_", "PBS_", "JOB_ID", "NSLOTS", "NCPUS", "LSB_")
    env = {k: v for k, v in child_env().items() if not k.startswith(drop)}
    env["PATH"] = f"{bin_}:{env['PATH']}"
    return tmp_path, env


def run_lines(lines: list[str], cwd: Path, env: dict[str, str]) -> None:
    for line in lines:  # as typed: each must succeed before the next
        r = subprocess.run(
            ["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
        )
        assert r.returncode == 0, f"{line}\n{r.stdout}{r.stderr}"


@pytest.mark.parametrize(
    ("submit", "job"),
    [
        ("sbatch", "77"),
        ("qsub -t", "88"),
        ("qsub -J", "99"),
        ("zotsink run", ""),
    ],
)
def test_the_readme_pull_route_runs_as_written(
    site: tuple[Path, dict[str, str]], submit: str, job: str
) -> None:
    need("PIL")
    need("pyarrow")
    from PIL import Image

    cwd, env = site
    ls, sbatch, status, cat = recipe("pull")
    assert sbatch == (
        "TASKS=images.txt CALL=measure.py:measure sbatch --array=1-20 "
        "scripts/jobs/zotsink-pull.sbatch"
    )
    sge, pbs = recipe("pull-sge-pbs")
    assert " qsub -t 1-20 scripts/jobs/zotsink-pull.sge" in sge
    assert " qsub -J 1-20 scripts/jobs/zotsink-pull.pbs" in pbs
    [command] = recipe("pull-run")
    assert command == (
        "zotsink run images.txt results.tsv --pull --jobs auto --call measure.py:measure"
    )
    line = {"sbatch": sbatch, "qsub -t": sge, "qsub -J": pbs, "zotsink run": command}[submit]
    run_lines([ls, line, status, cat], cwd, env)

    images = sorted(str(p.relative_to(cwd)) for p in cwd.glob("EuroSAT_RGB/*/*.jpg"))
    assert (cwd / "images.txt").read_text().splitlines() == images
    rows = list(zs.read_records(cwd / "results.tsv", header=True))
    assert sorted(r["filename"] for r in rows) == images  # each image once
    for r in rows:
        grey = list(Image.open(cwd / r["filename"]).convert("L").tobytes())
        assert (int(r["min"]), int(r["max"])) == (min(grey), max(grey))
        assert abs(float(r["mean"]) - sum(grey) / len(grey)) < 1e-9
        # the templates stamp the array job and the task's line number in front
        assert (r.get("job"), r.get("tasknum")) == (
            (job, str(images.index(r["filename"]) + 1)) if job else (None, None)
        )
    import pyarrow.parquet as pq

    table = pq.read_table(cwd / "results.parquet").to_pylist()
    assert sorted(x["filename"] for x in table) == images
    ledger = ledger_rows(cwd / "results.tsv.ledger", cwd / "images.txt")
    ends = Counter(r["key"] for r in ledger if r["event"] == "end" and r["status"] == "ok")
    assert ends == Counter(images)  # every task ok, once
    # the elements of the one array job ran them (the scheduler's job on every start row)
    starts = [r for r in ledger if r["event"] == "start"]
    assert {r["job"] for r in starts} == {job}
    assert all(r["array_task"].isdigit() for r in starts) == bool(job)
    assert sorted(p.name for p in cwd.iterdir() if p.name.startswith("results")) == [
        "results.parquet", "results.tsv", "results.tsv.ledger",
    ]  # fmt: skip
