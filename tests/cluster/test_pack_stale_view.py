"""pack on GlusterFS with its client caches as shipped: many small archives, every client
appending to each at once (scripts/bench/pack_stress.py). A client may serve a small
archive from content it cached before another client appended while it reports the new
size; an append must wait that out instead of refusing a whole archive as damaged."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.cluster, pytest.mark.xdist_group("cluster")]

STRESS = Path(__file__).resolve().parents[2] / "scripts" / "bench" / "pack_stress.py"


def test_pack_appends_from_three_clients_are_never_refused_as_damaged(gluster_dirs, cluster_report):
    # 3 clients x 2 writers x 40 archives x 2 members: 480 appends, a few seconds.
    res = subprocess.run(
        [sys.executable, str(STRESS), *map(str, gluster_dirs), "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert res.stdout, res.stderr
    r = json.loads(res.stdout)
    assert r["appends"] == 480
    assert r["damaged"] == 0, r["said"]
    assert r["other"] == 0, r["said"]
    assert r["acked"] == 480
    assert (r["lost"], r["extra"], r["verify_problems"]) == (0, 0, 0), r
    assert res.returncode == 0, res.stderr
    cluster_report(f"pack stress: {r['appends']} appends on 3 clients, none refused, {r}")
