"""What the schedulers print, read by zotsink: whether an array task is still queued or
running, and when this job must end. The Grid Engine outputs were recorded from Son of
Grid Engine 8.1.9 on the test cluster (trimmed to the parts read); the PBS ones follow the
documented ``qstat -f`` layout of PBS Pro and Torque."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from zotsink._run import alive

# `qstat -g d -u '*'`: array job 46's task 2 was deleted; 47 runs four tasks, 48 is a job
# without an array, 49's tasks 5 and 126 wait (-g d: a line each, not "5-126:121").
QSTAT_G_D = "\n".join(
    [
        "job-ID  prior   name       user         state submit/start at     queue"
        "                          slots ja-task-ID ",
        "-" * 113,
        "     46 0.75000 sleep      root         dr    11/26/2026 17:10:55 all.q@node1"
        "                        1 1",
        "     47 0.25000 sleep      root         t     11/26/2026 17:11:08 all.q@node1"
        "                        1 1",
        "     47 0.25000 sleep      root         t     11/26/2026 17:11:08 all.q@node1"
        "                        1 4",
        "     46 0.75000 sleep      root         r     11/26/2026 17:10:55 all.q@node2"
        "                        1 3",
        "     47 0.25000 sleep      root         t     11/26/2026 17:11:08 all.q@node2"
        "                        1 2",
        "     47 0.25000 sleep      root         t     11/26/2026 17:11:08 all.q@node2"
        "                        1 3",
        "     48 0.25000 one        root         r     11/26/2026 17:11:09 all.q@node3"
        "                        1",
        "     49 0.00000 wait       alice        qw    11/26/2026 17:11:10            "
        "                       16 5",
        "     49 0.00000 wait       alice        qw    11/26/2026 17:11:10            "
        "                       16 126",
        "",
    ]
).encode()

# `qstat -j 46 -xml`, the parts read: the hard limit h_rt=600, tasks 1 and 3 running.
QSTAT_J_XML = b"""<?xml version='1.0'?>
<detailed_job_info  xmlns:xsd="http://arc.liv.ac.uk/repos/darcs/sge/source/dist/util/resources/schemas/qstat/detailed_job_info.xsd">
  <djob_info>
    <element>
      <JB_job_number>46</JB_job_number>
      <JB_submission_time>1795713055</JB_submission_time>
      <JB_hard_resource_list>
        <qstat_l_requests>
          <CE_name>h_rt</CE_name>
          <CE_valtype>3</CE_valtype>
          <CE_stringval>600</CE_stringval>
          <CE_doubleval>600.000000</CE_doubleval>
          <CE_relop>0</CE_relop>
        </qstat_l_requests>
      </JB_hard_resource_list>
      <JB_ja_tasks>
        <ulong_sublist>
          <JAT_status>128</JAT_status>
          <JAT_task_number>1</JAT_task_number>
          <JAT_start_time>1795713055</JAT_start_time>
        </ulong_sublist>
        <ulong_sublist>
          <JAT_status>128</JAT_status>
          <JAT_task_number>3</JAT_task_number>
          <JAT_start_time>1795713057</JAT_start_time>
        </ulong_sublist>
      </JB_ja_tasks>
    </element>
  </djob_info>
</detailed_job_info>
"""

PBS_PRO = b"""\
Job Id: 1234[7].pbs01
    Job_Name = zotsink-pull
    Job_Owner = me@login01
    resources_used.walltime = 00:05:00
    job_state = R
    queue = workq
    Resource_List.ncpus = 4
    Resource_List.walltime = 02:00:00
    stime = Thu Nov 26 17:10:01 2026
    Variable_List = PBS_O_HOME=/home/me,PBS_O_LANG=C.UTF-8,PBS_O_LOGNAME=me,
\tPBS_O_PATH=/usr/bin:/bin,PBS_O_SHELL=/bin/bash
    array_index = 7
"""

TORQUE = b"""\
Job Id: 5678[2].torque01
    Job_Name = zotsink-pull
    job_state = R
    Resource_List.walltime = 01:00:00
    start_time = 1795713000
    Walltime.Remaining = 3000
"""


def test_grid_engine_array_tasks_are_listed_each_on_its_line() -> None:
    tasks = alive.sge_tasks(QSTAT_G_D)
    assert ("46", "1") in tasks and ("46", "3") in tasks
    assert ("46", "2") not in tasks  # deleted, while its siblings run
    assert {("49", "5"), ("49", "126")} <= tasks  # waiting tasks count as alive
    assert not any(job == "48" for job, _ in tasks)  # no array: asked with qstat -j


def test_grid_engine_end_is_the_tasks_start_and_its_run_time_limit() -> None:
    assert alive.sge_end(QSTAT_J_XML, "1") == 1795713055 + 600
    assert alive.sge_end(QSTAT_J_XML, "3") == 1795713057 + 600
    assert alive.sge_end(QSTAT_J_XML, "2") is None  # not started
    soft = QSTAT_J_XML.replace(
        b"</JB_hard_resource_list>",
        b"</JB_hard_resource_list><JB_soft_resource_list><qstat_l_requests>"
        b"<CE_name>s_rt</CE_name><CE_doubleval>300.0</CE_doubleval>"
        b"</qstat_l_requests></JB_soft_resource_list>",
    )
    assert alive.sge_end(soft, "1") == 1795713055 + 300  # s_rt warns first: a stop
    no_limit = QSTAT_J_XML.replace(b"<CE_name>h_rt</CE_name>", b"<CE_name>h_vmem</CE_name>")
    assert alive.sge_end(no_limit, "1") is None
    assert alive.sge_end(b"not xml", "1") is None


def test_pbs_job_state_and_end() -> None:
    fields = alive.pbs_fields(PBS_PRO)
    assert fields["job_state"] == "R"
    assert fields["Variable_List"].endswith("PBS_O_SHELL=/bin/bash")  # a wrapped value
    start = datetime(2026, 11, 26, 17, 10, 1).timestamp()  # local time, as qstat prints it
    assert alive.pbs_end(fields, now=0.0) == start + 7200
    assert alive.pbs_end(alive.pbs_fields(TORQUE), now=100.0) == 3100.0  # the time left
    torque = alive.pbs_fields(TORQUE.replace(b"    Walltime.Remaining = 3000\n", b""))
    assert alive.pbs_end(torque, now=0.0) == 1795713000 + 3600
    assert alive.pbs_end({"job_state": "R"}, now=0.0) is None  # no walltime asked for
    assert alive.pbs_alive(0, PBS_PRO, b"") is True
    assert alive.pbs_alive(0, PBS_PRO.replace(b"job_state = R", b"job_state = X"), b"") is False
    assert alive.pbs_alive(153, b"", b"qstat: Unknown Job Id 1234[7].pbs01\n") is False
    assert alive.pbs_alive(35, b"", b"qstat: 1234.pbs01 Job has finished, use -x or -H\n") is False
    assert alive.pbs_alive(1, b"", b"Connection refused\n") is None  # cannot tell


QSTAT = """#!/bin/sh
echo "$@" >> "{log}"
case "$1" in
-g) /bin/cat "{listing}" ;;
-j) [ "$2" = 46 ] && {{ [ "$3" = -xml ] && /bin/cat "{xml}" || echo job_number: 46; exit 0; }}
    echo "Following jobs do not exist: "; echo "$2"; exit 1 ;;
esac
"""


@pytest.fixture
def qstat(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "listing").write_bytes(QSTAT_G_D)
    (tmp_path / "xml").write_bytes(QSTAT_J_XML)
    for name, text in {
        "qstat": QSTAT.format(
            log=tmp_path / "asked", listing=tmp_path / "listing", xml=tmp_path / "xml"
        ),
        "qconf": "#!/bin/sh\nexit 0\n",
    }.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    # nothing else on this PATH (no squeue), no job's variables: Grid Engine answers
    monkeypatch.setenv("PATH", str(bin_dir))
    for var in ("SLURM_JOB_ID", "JOB_ID", "SGE_TASK_ID", "PBS_JOBID", "SGE_ROOT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(alive, "_job_answers", {})
    monkeypatch.setattr(alive, "_last_answers", {})
    monkeypatch.setattr(alive, "_sge_last", (-alive.SGE_LISTING_TTL, None))
    return tmp_path


def test_grid_engine_is_asked_about_the_array_task(qstat: Path) -> None:
    assert alive.run_alive("far", "1", "", "46", "here", "3") is True
    assert alive.run_alive("far", "1", "", "46", "here", "2") is False  # a sibling lives
    assert alive.run_alive("far", "1", "", "46", "here", "") is True  # the job, with qstat -j
    assert alive.run_alive("far", "1", "", "50", "here", "") is False  # unknown to it
    asked = (qstat / "asked").read_text().splitlines()
    # one listing answered both tasks
    assert asked == ["-g d -u *", "-j 46", "-j 50"]


def test_grid_engine_that_cannot_answer_is_no_answer(qstat: Path) -> None:
    (qstat / "bin" / "qstat").write_text("#!/bin/sh\necho 'error: commlib error' >&2\nexit 1\n")
    assert alive.run_alive("far", "1", "", "46", "here", "3") is None
    assert alive.run_alive("far", "1", "", "46", "here", "") is None


def test_grid_engine_job_end_from_its_environment(qstat: Path) -> None:
    env = {"JOB_ID": "46", "SGE_TASK_ID": "3"}
    assert alive.job_end(env) == 1795713057 + 600
    assert alive.job_end({"JOB_ID": "46", "SGE_TASK_ID": "undefined"}) == 1795713055 + 600
    assert alive.job_end({"JOB_ID": "50", "SGE_TASK_ID": "1"}) is None


def test_a_grid_engine_job_asks_grid_engine_where_slurm_is_installed_too(
    qstat: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    squeue = qstat / "bin" / "squeue"  # Slurm knows no such job: no answer for Grid Engine's
    squeue.write_text("#!/bin/sh\necho 'Invalid job id specified' >&2\nexit 1\n")
    squeue.chmod(0o755)
    monkeypatch.setenv("JOB_ID", "47")
    monkeypatch.setenv("SGE_TASK_ID", "1")
    assert alive.run_alive("far", "1", "", "46", "here", "3") is True
    assert alive.run_alive("far", "1", "", "46", "here", "2") is False
    assert (qstat / "asked").read_text().splitlines() == ["-g d -u *"]
