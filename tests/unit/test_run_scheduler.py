"""Asking the batch scheduler (``zotsink._run.scheduler``): one contract over the three
backends, fed what the schedulers print through stand-in commands on PATH; the runner of
scheduler commands (a deadline, the whole process group killed, no wait for EOF); the
asker that never blocks; and a job of another cluster, never judged dead here.

The Grid Engine outputs were recorded from Son of Grid Engine 8.1.9 on the test cluster
(trimmed to the parts read); the PBS ones follow the documented ``qstat -f`` layout of PBS
Pro and Torque; Slurm's are what ``squeue -h -o %T`` and ``-o %e`` print."""

from __future__ import annotations

import os
import select
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import pytest

from zotsink._core.stop import Stopper
from zotsink._run import backends, schedcmd, schedout, scheduler
from zotsink._run.backends import PBS, GridEngine, JobRef, Slurm

# -- what the schedulers print -----------------------------------------------------------------
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


# -- the parsers -------------------------------------------------------------------------------
def test_grid_engine_array_tasks_are_listed_each_on_its_line() -> None:
    tasks = schedout.sge_tasks(QSTAT_G_D)
    assert ("46", "1") in tasks and ("46", "3") in tasks
    assert ("46", "2") not in tasks  # deleted, while its siblings run
    assert {("49", "5"), ("49", "126")} <= tasks  # waiting tasks count as alive
    assert not any(job == "48" for job, _ in tasks)  # no array: asked with qstat -j


def test_grid_engine_end_is_the_tasks_start_and_its_run_time_limit() -> None:
    assert schedout.sge_end(QSTAT_J_XML, "1") == 1795713055 + 600
    assert schedout.sge_end(QSTAT_J_XML, "3") == 1795713057 + 600
    assert schedout.sge_end(QSTAT_J_XML, "2") is None  # not started
    soft = QSTAT_J_XML.replace(
        b"</JB_hard_resource_list>",
        b"</JB_hard_resource_list><JB_soft_resource_list><qstat_l_requests>"
        b"<CE_name>s_rt</CE_name><CE_doubleval>300.0</CE_doubleval>"
        b"</qstat_l_requests></JB_soft_resource_list>",
    )
    assert schedout.sge_end(soft, "1") == 1795713055 + 300  # s_rt warns first: a stop
    no_limit = QSTAT_J_XML.replace(b"<CE_name>h_rt</CE_name>", b"<CE_name>h_vmem</CE_name>")
    assert schedout.sge_end(no_limit, "1") is None
    assert schedout.sge_end(b"not xml", "1") is None


def test_pbs_job_state_and_end() -> None:
    fields = schedout.pbs_fields(PBS_PRO)
    assert fields["job_state"] == "R"
    assert fields["Variable_List"].endswith("PBS_O_SHELL=/bin/bash")  # a wrapped value
    start = datetime(2026, 11, 26, 17, 10, 1).timestamp()  # local time, as qstat prints it
    assert schedout.pbs_end(fields, now=0.0) == start + 7200
    assert schedout.pbs_end(schedout.pbs_fields(TORQUE), now=100.0) == 3100.0  # time left
    torque = schedout.pbs_fields(TORQUE.replace(b"    Walltime.Remaining = 3000\n", b""))
    assert schedout.pbs_end(torque, now=0.0) == 1795713000 + 3600
    assert schedout.pbs_end({"job_state": "R"}, now=0.0) is None  # no walltime asked for
    assert schedout.pbs_alive(0, PBS_PRO, b"") is True
    ended = PBS_PRO.replace(b"job_state = R", b"job_state = X")
    assert schedout.pbs_alive(0, ended, b"") is False
    assert schedout.pbs_alive(153, b"", b"qstat: Unknown Job Id 1234[7].pbs01\n") is False
    finished = b"qstat: 1234.pbs01 Job has finished, use -x or -H\n"
    assert schedout.pbs_alive(35, b"", finished) is False
    assert schedout.pbs_alive(1, b"", b"Connection refused\n") is None  # cannot tell


def test_a_job_key_names_its_cluster_job_and_element() -> None:
    assert backends.job_key("77", "3") == "77_3"
    assert backends.job_key("77", "3", "c2") == "c2:77_3"
    assert backends.job_key("1234.pbs01") == "1234.pbs01"
    assert backends.job_key("", "3", "c2") == ""
    assert backends.parse_job("c2:77_3") == JobRef("c2", "77", "3")
    assert backends.parse_job("1234.pbs01_7") == JobRef("", "1234.pbs01", "7")
    assert backends.parse_job("46") == JobRef("", "46", "")


# -- one contract, three backends --------------------------------------------------------------
# Each stand-in notes its arguments in `asked`, then does what the file `mode` says:
# answers from the recorded outputs, fails as a scheduler whose controller is down does, or
# hangs the way a site's wrapper around a hung client does (a child that sleeps holding
# stdout and stderr, its pid and the wrapper's noted first).
COMMON = """#!/bin/sh
echo "$*" >> "{state}/asked"
case "$(/bin/cat "{state}/mode")" in
fail) echo "error: cannot reach the controller" >&2; exit 1 ;;
hang) /bin/sleep 600 & echo "$$ $!" > "{state}/hung"; wait; exit 0 ;;
esac
"""

SQUEUE = """
while [ $# -gt 0 ]; do
  case "$1" in
  -M) cluster=$2; shift ;;
  -j) job=$2; shift ;;
  -o) fmt=$2; shift ;;
  esac
  shift
done
[ -n "$cluster" ] && echo "CLUSTER: $cluster"
if [ "$fmt" = %e ]; then
  [ "$job" = 77 ] && echo 2030-01-02T03:04:05 || echo N/A; exit 0
fi
case "$job" in
77_3) echo RUNNING ;;
77_4) ;;
*) echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1 ;;
esac
"""

QSTAT_SGE = """
case "$1" in
-g) /bin/cat "{state}/listing" ;;
-j) [ "$2" = 46 ] && {{ [ "$3" = -xml ] && /bin/cat "{state}/xml" || echo job_number: 46; exit 0; }}
    echo "Following jobs do not exist: "; echo "$2"; exit 1 ;;
esac
"""

QSTAT_PBS = """
case "$2" in
"1234[7]"|1234.here) /bin/cat "{state}/running" ;;
"1234[8]") /bin/cat "{state}/ended" ;;
*) echo "qstat: Unknown Job Id $2" >&2; exit 153 ;;
esac
"""


@dataclass(frozen=True)
class Case:
    """One scheduler as the contract sees it."""

    kind: type[Slurm | GridEngine | PBS]
    env: dict[str, str]  # the environment of a job of its own, on cluster "here"
    commands: dict[str, str]  # name -> the part of its stand-in after COMMON
    alive: str  # a key the scheduler shows queued or running
    ended: str  # one it shows ended
    unknown: str  # one it has never heard of
    end: float  # this job's end, by the recorded output
    files: dict[str, bytes] = field(default_factory=dict)


CASES = {
    "slurm": Case(
        Slurm,
        {"SLURM_JOB_ID": "77", "SLURM_CLUSTER_NAME": "here"},
        {"squeue": SQUEUE},
        alive="77_3",
        ended="77_4",
        unknown="99_1",
        end=datetime(2030, 1, 2, 3, 4, 5).timestamp(),  # local time, as squeue prints it
    ),
    "sge": Case(
        GridEngine,
        {"JOB_ID": "46", "SGE_TASK_ID": "3", "SGE_CLUSTER_NAME": "here", "SGE_CELL": "default"},
        {"qstat": QSTAT_SGE, "qconf": ""},
        alive="46_3",
        ended="46_2",
        unknown="50",
        end=1795713057 + 600,
        files={"listing": QSTAT_G_D, "xml": QSTAT_J_XML},
    ),
    "pbs": Case(
        PBS,
        {"PBS_JOBID": "1234.here"},
        {"qstat": QSTAT_PBS, "pbsnodes": ""},
        alive="1234.here_7",
        ended="1234.here_8",
        unknown="1299.here",
        end=datetime(2026, 11, 26, 17, 10, 1).timestamp() + 7200,
        files={"running": PBS_PRO, "ended": PBS_PRO.replace(b"job_state = R", b"job_state = X")},
    ),
}


class Stand:
    """The stand-in commands of one case, and what they were asked."""

    def __init__(self, state: Path) -> None:
        self.state = state

    def mode(self, mode: str) -> None:
        (self.state / "mode").write_text(mode)

    def asked(self) -> list[str]:
        p = self.state / "asked"
        return p.read_text().splitlines() if p.exists() else []


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A process that has asked no scheduler yet (the backend is chosen once per process)."""
    scheduler.reset()
    yield
    scheduler.reset()


def stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: Case) -> Stand:
    bin_dir, state = tmp_path / "bin", tmp_path / "state"
    bin_dir.mkdir()
    state.mkdir()
    for name, data in case.files.items():
        (state / name).write_bytes(data)
    for name, body in case.commands.items():
        script = bin_dir / name
        script.write_text(COMMON.format(state=state) + body.format(state=state))
        script.chmod(0o755)
    # nothing else on this PATH: the stand-ins are the only scheduler commands here
    monkeypatch.setenv("PATH", str(bin_dir))
    stand = Stand(state)
    stand.mode("answer")
    return stand


@pytest.fixture(params=sorted(CASES))
def case(request: pytest.FixtureRequest) -> Case:
    return CASES[request.param]


def gone(pid: int, within: float) -> bool:
    """Whether process ``pid`` has ended (or ends within ``within`` seconds): told by its
    pidfd, which becomes readable when it exits."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([fd], [], [], within)[0])
    finally:
        os.close(fd)


def test_each_backend_answers_alive_ended_unknown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: Case, fresh: None
) -> None:
    stand_in(tmp_path, monkeypatch, case)
    backend = backends.choose({**case.env, "PATH": os.environ["PATH"]})
    assert isinstance(backend, case.kind)
    assert backend.cluster == "here"
    parse = backends.parse_job
    assert backend.alive(parse(case.alive)) is True
    assert backend.alive(parse(case.ended)) is False
    assert backend.alive(parse(case.unknown)) is False  # the scheduler's "no such job"
    assert backend.alive(parse("here:" + case.alive)) is True  # its own cluster, named
    assert backend.alive(parse("x7_1")) is None  # no job id of its kind
    assert backend.end() == case.end
    # the same from a process with the job's environment (run --deadline's default)
    assert scheduler.job_end({**case.env, "PATH": os.environ["PATH"]}) == case.end


def test_a_failing_command_is_no_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: Case, fresh: None
) -> None:
    stand = stand_in(tmp_path, monkeypatch, case)
    stand.mode("fail")
    backend = case.kind(case.env)
    for key in (case.alive, case.ended, case.unknown):
        assert backend.alive(backends.parse_job(key)) is None
    assert backend.end() is None
    assert stand.asked()  # it was asked, and said nothing that counts


def test_a_hanging_command_is_no_answer_by_its_deadline_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: Case, fresh: None
) -> None:
    stand = stand_in(tmp_path, monkeypatch, case)
    stand.mode("hang")
    monkeypatch.setattr(schedcmd, "COMMAND_TIMEOUT", 2.0)
    backend = case.kind(case.env)
    for ask in (lambda: backend.alive(backends.parse_job(case.alive)), backend.end):
        (stand.state / "hung").unlink(missing_ok=True)
        t0 = time.monotonic()
        assert ask() is None
        # the deadline, and a margin for a loaded machine: never the sleep's 600 s
        assert time.monotonic() - t0 < schedcmd.COMMAND_TIMEOUT + 8
        wrapper, sleeper = map(int, (stand.state / "hung").read_text().split())
        assert gone(wrapper, 10) and gone(sleeper, 10), "a process of the command was left"


def test_a_job_of_another_cluster_is_never_called_dead_by_this_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: Case, fresh: None
) -> None:
    stand = stand_in(tmp_path, monkeypatch, case)
    backend = case.kind(case.env)
    got = {
        key: backend.alive(backends.parse_job("there:" + key))
        for key in (case.alive, case.ended, case.unknown)
    }
    if case.kind is not Slurm:
        # another cell or server: this scheduler's "no such job" would be no answer
        assert set(got.values()) == {None}
        assert stand.asked() == []
        return
    # Slurm asks the cluster named, whose own listing is its word about its jobs
    assert stand.asked() == [f"-M there -h -j {k} -o %T" for k in got]
    assert got == {case.alive: True, case.ended: False, case.unknown: None}
    stand.mode("fail")  # a cluster that cannot be reached, or is no cluster
    for key in got:
        assert backend.alive(backends.parse_job("there:" + key)) is None


def test_the_backend_is_the_one_the_job_came_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh: None
) -> None:
    stand_in(tmp_path, monkeypatch, CASES["sge"])
    squeue = tmp_path / "bin" / "squeue"  # Slurm knows no such job: no answer for Grid Engine's
    squeue.write_text("#!/bin/sh\necho 'Invalid job id specified' >&2\nexit 1\n")
    squeue.chmod(0o755)
    path = os.environ["PATH"]
    assert isinstance(
        backends.choose({"PATH": path, "JOB_ID": "47", "SGE_TASK_ID": "1"}), GridEngine
    )
    assert isinstance(backends.choose({"PATH": path, "SGE_ROOT": "/opt/sge"}), GridEngine)
    assert isinstance(backends.choose({"PATH": path}), Slurm)  # squeue is here, no job says
    assert backends.choose({"PATH": path, "PBS_JOBID": "1.s"}) is not None  # qstat is here
    assert backends.choose({"PATH": str(tmp_path)}) is None  # no scheduler command at all
    cells = {"SGE_CELL": "default"}
    assert GridEngine(cells).cluster == "default"  # no cluster name: the cell
    assert PBS({"PBS_JOBID": "1234[7].pbs01.example.org"}).cluster == "pbs01.example.org"
    assert PBS({"PBS_SERVER": "pbs02"}).cluster == "pbs02"
    assert Slurm({}).cluster == ""


def test_grid_engine_is_asked_once_for_many_array_tasks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh: None
) -> None:
    stand = stand_in(tmp_path, monkeypatch, CASES["sge"])
    backend = GridEngine({})
    for key, want in (("46_3", True), ("46_2", False), ("46", True), ("50", False)):
        assert backend.alive(backends.parse_job(key)) is want
    # one listing answered both tasks
    assert stand.asked() == ["-g d -u *", "-j 46", "-j 50"]


# -- the runner of commands --------------------------------------------------------------------
def test_the_runner_gives_the_commands_words(tmp_path: Path) -> None:
    script = tmp_path / "say"
    script.write_text('#!/bin/sh\nread x && echo got "$x"\necho on stderr >&2\nexit 3\n')
    script.chmod(0o755)
    got = schedcmd.run_command([str(script)])
    # stdin is /dev/null: the read finds its end at once
    assert got == schedcmd.Answer(3, b"", b"on stderr\n")
    assert schedcmd.run_command([str(tmp_path / "none")]) is None


def test_the_runner_does_not_wait_for_a_grandchild_that_holds_the_pipes(tmp_path: Path) -> None:
    script = tmp_path / "wrapper"
    script.write_text(
        f'#!/bin/sh\necho partial\n/bin/sleep 600 &\necho "$$ $!" > {tmp_path}/hung\nexit 0\n'
    )
    script.chmod(0o755)
    t0 = time.monotonic()
    # the wrapper exits at once; its child keeps stdout and stderr open
    assert schedcmd.run_command([str(script)], timeout=1.0) is None
    assert time.monotonic() - t0 < 1.0 + 8
    for pid in map(int, (tmp_path / "hung").read_text().split()):
        assert gone(pid, 10)


# -- the asker: answers at once, asks in a thread ----------------------------------------------
GATED_SQUEUE = """#!/bin/sh
echo "$*" >> "{state}/asked"
[ -p "{state}/asked.fifo" ] && : > "{state}/asked.fifo"
read go < "{state}/gate"
echo RUNNING
"""


@pytest.fixture
def gated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh: None) -> Path:
    """An squeue that answers RUNNING once the FIFO ``gate`` is written to (and opens the
    FIFO ``asked.fifo`` first, when there is one: a test waits on it)."""
    bin_dir, state = tmp_path / "bin", tmp_path / "state"
    bin_dir.mkdir()
    state.mkdir()
    os.mkfifo(state / "gate")
    (bin_dir / "squeue").write_text(GATED_SQUEUE.format(state=state))
    (bin_dir / "squeue").chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    for var in ("SLURM_JOB_ID", "JOB_ID", "SGE_TASK_ID", "PBS_JOBID", "SGE_ROOT"):
        monkeypatch.delenv(var, raising=False)
    return state


def release(state: Path) -> None:
    with open(state / "gate", "w") as f:  # blocks until the stand-in reads: it is asking
        f.write("go\n")


def test_ask_answers_at_once_and_asks_once_per_job(gated: Path) -> None:
    ask = scheduler.asker()
    assert isinstance(ask.backend, Slurm)
    t0 = time.monotonic()
    assert ask.ask("77_3") is None  # nothing known yet: asked in a thread
    assert ask.ask("77_3") is None  # the question is out: not asked twice
    assert time.monotonic() - t0 < 5  # no wait for the scheduler (it waits on the gate)
    assert ask.pending() == frozenset({"77_3"})
    assert ask.answers() == {}
    release(gated)
    assert ask.wait("77_3", 60) is True
    assert ask.pending() == frozenset()
    assert ask.answers() == {"77_3": True}
    assert ask.ask("77_3") is True  # the answer serves
    assert (gated / "asked").read_text().splitlines() == ["-h -j 77_3 -o %T"]
    ask.forget()  # a watch's next redraw: asked again, the old answer meanwhile
    assert ask.ask("77_3") is True
    assert ask.pending() == frozenset({"77_3"})
    release(gated)
    assert ask.wait("77_3", 60) is True
    assert len((gated / "asked").read_text().splitlines()) == 2


def test_answers_expire(gated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ask = scheduler.asker()
    ask.ask("77_3")
    release(gated)
    assert ask.wait("77_3", 60) is True
    ttl = scheduler.ANSWER_TTL
    monkeypatch.setattr(scheduler, "ANSWER_TTL", 0.0)
    assert ask.answers() == {}
    assert ask.ask("77_3") is True  # the latest answer, while it is asked again
    assert ask.pending() == frozenset({"77_3"})
    # back to serving answers, and none is left out: the question out is waited for
    monkeypatch.setattr(scheduler, "ANSWER_TTL", ttl)
    ask.forget()
    release(gated)
    assert ask.wait("77_3", 60) is True
    assert ask.pending() == frozenset()


def test_a_stop_signal_ends_the_wait_for_the_scheduler(gated: Path) -> None:
    def stop_once_asked() -> None:
        with open(gated / "asked.fifo"):  # opened by the stand-in as it runs
            pass
        os.kill(os.getpid(), signal.SIGUSR1)

    os.mkfifo(gated / "asked.fifo")
    threading.Thread(target=stop_once_asked, daemon=True).start()
    with Stopper() as stopper:
        t0 = time.monotonic()
        assert scheduler.job_alive("77_3") is None  # no answer: the run stops
        assert time.monotonic() - t0 < schedcmd.COMMAND_TIMEOUT
        assert stopper.signum == signal.SIGUSR1
    release(gated)  # the question still out gets its answer, for whoever asks next
    assert scheduler.asker().wait("77_3", 60) is True


def test_status_waits_a_while_and_names_what_was_not_answered(gated: Path) -> None:
    with scheduler.scheduler_wait(0.2) as late:
        assert scheduler.job_alive("77_3") is None
    assert late == {"77_3"}
    release(gated)
    with scheduler.scheduler_wait(60) as late:
        assert scheduler.job_alive("77_3") is True
    assert late == set()


# -- the one asker -----------------------------------------------------------------------------
SCHEDULER_COMMANDS = frozenset({"squeue", "scontrol", "sacct", "qstat", "qconf", "pbsnodes"})


def test_scheduler_commands_are_named_only_by_the_backends_module() -> None:
    """A second way of asking the scheduler (another ``subprocess`` of ``squeue``, with
    its own deadline, or none) would have to name the command: this fails when one does."""
    import ast

    import zotsink

    package = Path(zotsink.__file__).parent
    found = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and node.value in SCHEDULER_COMMANDS:
                found.append(rel)
    assert found and set(found) == {"_run/backends.py"}, found


def test_a_wait_for_an_answer_that_came_already_returns_it_under_a_stopper() -> None:
    """The run waits under its Stopper; a question answered before the wait began is no
    wait at all (and no error: nothing was registered to take back)."""
    from zotsink._core.stop import Stopper

    question = scheduler._Question("answered", lambda: True)
    assert question.wait(10)
    with Stopper():
        assert question.wait(10) and question.wait(0)
        assert question.answer is True
