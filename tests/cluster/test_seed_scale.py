"""The seed workload at CI scale: 2,700 EuroSAT-like images, one record each, written by a
Slurm array of 27 elements x ``zotsink run --chunk 100 --jobs auto`` spread over the three
nodes into ONE table, with one ledger and no per-task file anywhere; once on GlusterFS and
once on MooseFS and once on CephFS, each node writing through its own client.

Needs ``zotsink run`` and ``zotsink status``; skipped while the CLI has no ``run``. The
27,000-image version of the same run is the benchmark of scripts/bench.
"""

from __future__ import annotations

import collections
import subprocess
import sys
from pathlib import Path

import pytest

from tests.ledgers import ledger_rows
from zotsink import ZotsinkError

pytestmark = [pytest.mark.cluster, pytest.mark.xdist_group("cluster")]

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts" / "cluster"
IMAGES, CHUNK = 2700, 100


def has_command(name: str) -> bool:
    # Not `zotsink NAME --help`: an unknown NAME is taken for append's OUT.
    from zotsink.cli import COMMANDS

    return name in COMMANDS


@pytest.fixture(scope="module")
def seed_images(tmp_path_factory) -> tuple[Path, list[str]]:
    """The images (on this host's disk, which every node shares) and their task list."""
    if not has_command("run"):
        pytest.skip("zotsink has no `run` command yet")
    d = tmp_path_factory.mktemp("seed")
    subprocess.run(
        [sys.executable, str(SCRIPTS / "seed_images.py"), str(d / "images"), str(IMAGES)],
        check=True,
        timeout=600,
    )
    tasks = d / "images" / "tasks.txt"
    return tasks, tasks.read_text().splitlines()


@pytest.fixture(params=["gluster", "moosefs", "ceph"])
def shared_dirs(request: pytest.FixtureRequest, slurm_cluster) -> tuple[Path, Path]:
    """(where the nodes write, a mount that reads it back) on each shared filesystem.
    MooseFS and CephFS come up after the Slurm nodes here: they mount themselves in them."""
    dirs = request.getfixturevalue(f"{request.param}_dirs")
    return dirs.node1, dirs[-1]  # GlusterFS's and CephFS's reader, MooseFS's node2


def test_seed_array_writes_one_table_one_ledger_and_no_task_files(
    seed_images, shared_dirs, slurm_cluster, zotsink_cmd, tmp_path, cluster_report
):
    tasks, images = seed_images
    written, reader = shared_dirs
    out = written / "stats.tsv"
    zotsink = " ".join(zotsink_cmd)
    job = (
        f"{zotsink} run {tasks} {out} --chunk {CHUNK} --jobs auto"
        " --kv --columns filename,min,max,mean --stamp host,tasknum"
        f" -- {sys.executable} {SCRIPTS / 'seed_step.py'} {{}}"
    )
    # What the tasks say goes beside the job's directory, not into it (which must stay
    # empty) and not to /dev/null as in the templates: a failure here must say why.
    said = tmp_path.parent / f"{tmp_path.name}-slurm"
    said.mkdir()
    res = slurm_cluster.run(
        "sbatch",
        "--wait",
        "--parsable",
        f"--array=1-{IMAGES // CHUNK}",
        f"--chdir={tmp_path}",
        f"--output={said}/task-%a.out",
        f"--wrap={job}",
        timeout=1800,
        check=False,
    )
    assert res.returncode == 0, res.stderr + _what_went_wrong(said, reader)

    lines = (reader / "stats.tsv").read_text().splitlines()
    header, rows = lines[0].split("\t"), [ln.split("\t") for ln in lines[1:]]
    assert header == ["host", "tasknum", "filename", "min", "max", "mean"]
    assert sorted(r[2] for r in rows) == sorted(Path(p).name for p in images)
    assert sorted(int(r[1]) for r in rows) == list(range(1, IMAGES + 1))
    hosts = collections.Counter(r[0] for r in rows)
    assert set(hosts) == set(slurm_cluster.nodes), hosts

    status = subprocess.run(
        [*zotsink_cmd, "status", str(tasks), str(reader / "stats.tsv")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert status.returncode == 0, status.stdout + status.stderr
    verify = subprocess.run(
        [*zotsink_cmd, "verify", str(reader / "stats.tsv")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert verify.returncode == 0, verify.stderr
    # The ledger: one ok end row per task.
    ends = ledger_rows(reader / "stats.tsv.ledger")
    ok = {e["tasknum"] for e in ends if e["event"] == "end" and e["status"] == "ok"}
    assert len(ok) == IMAGES
    # No file per task: the table, its ledger and its log (if a task wrote to stderr)
    # only, and nothing from Slurm.
    names = {p.name for p in reader.iterdir()}
    assert (
        {"stats.tsv", "stats.tsv.ledger"}
        <= names
        <= {
            "stats.tsv",
            "stats.tsv.ledger",
            "stats.tsv.log",
        }
    )
    assert list(tmp_path.iterdir()) == []
    spread = dict(sorted(hosts.items()))
    cluster_report(f"{IMAGES} images over {len(hosts)} nodes on {written.parent}: {spread}")


def _what_went_wrong(said: Path, reader: Path) -> str:
    """The tasks' own words and zotsink's side files, for a failed array."""
    parts = [f"{p.name}: {p.read_text(errors='replace')[-2000:]}" for p in sorted(said.iterdir())]
    parts = [t for t in parts if not t.endswith(": ")]
    for name in ("stats.tsv.rejects", "stats.tsv.log"):
        if (reader / name).exists():
            parts.append(f"{name}: {(reader / name).read_text(errors='replace')[-2000:]}")
    if (reader / "stats.tsv.ledger").exists():
        try:
            rows = ledger_rows(reader / "stats.tsv.ledger")
        except ZotsinkError as e:
            parts.append(f"ledger: {e}")
        else:
            bad = [
                " ".join((r["tasknum"], r["key"], r["status"], r["exit"] or r["signal"], r["note"]))
                for r in rows
                if r["event"] == "end" and r["status"] != "ok"
            ]
            parts.append("ledger, not ok: " + "\n".join(bad)[-2000:])
    parts.append(f"files beside OUT: {sorted(p.name for p in reader.iterdir())}")
    return "\n" + "\n".join(parts)
