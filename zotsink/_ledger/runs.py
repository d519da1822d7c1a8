"""A run as the ledger tells it (:class:`RunRecord`, from its ``run`` row and the rows it
wrote since), and what a view asks of the world about runs and their processes
(:class:`Judge`; :class:`zotsink._run.alive.Judge` answers it)."""

from __future__ import annotations

from typing import Protocol

from .format import Row, element_name, parse_element, parse_settings

__all__ = ["Judge", "RunRecord"]


class RunRecord:
    """One run, from its rows: who it is, what it did."""

    __slots__ = (
        "begun",
        "claimed",
        "element",
        "first_at",
        "first_time",
        "gone",
        "host",
        "hostid",
        "id",
        "index",
        "job",
        "last_at",
        "last_time",
        "not_ok",
        "ok",
        "pid",
        "released",
        "settings",
        "start",
        "superseded",
        "workers",
    )

    def __init__(self, index: int, at: int, row: Row) -> None:
        f = row.fields
        self.index = index
        self.id = row.run
        self.host, self.hostid, self.pid = f["host"], f["hostid"], f["pid"]
        self.start, self.job, self.element = f["start"], f["job"], f["element"]
        self.settings = parse_settings(f["settings"])
        self.first_at = self.last_at = at
        self.first_time = self.last_time = row.time
        self.claimed = self.begun = self.ok = self.not_ok = self.released = 0
        self.gone = False  # a user declared it gone (``zotsink release``)
        self.workers: list[tuple[int, str]] = []  # a --call run's workers: (pid, start)
        # a later start of its array element (a requeue) wrote a run row: this run is over
        self.superseded = False

    @property
    def element_name(self) -> str:
        """The array element that ran it, as ``JOB[INDEX]`` (``JOB``; ``-`` outside a job),
        with ``restart R`` when the scheduler started the element again."""
        return element_name(self.job, self.element) or "-"

    @property
    def restart(self) -> int:
        """How often the scheduler had started its element again when it began (0: never)."""
        return parse_element(self.element)[1]

    def supersede(self) -> None:
        """A later start of this run's element began: Slurm starts an element again only
        once every process of its earlier start is gone, so this run is over."""
        self.superseded = True


class Judge(Protocol):
    """What :meth:`LedgerView.settle` asks of the world (once per run)."""

    def run_alive(self, run: RunRecord) -> bool | None:
        """Whether the run's process lives (None: nothing here can tell)."""

    def task_alive(self, run: RunRecord, pid: int, start: str) -> bool | None:
        """Whether the process a begun task of a dead run ran in lives (an orphan)."""

    def workers_alive(self, run: RunRecord) -> bool:
        """Whether one of a dead run's ``--call`` workers lives: it may still begin the
        calls it was sent, any of the run's claimed tasks."""

    def claim_held(self, run: RunRecord, num: int) -> bool:
        """Whether a process of a dead run's that is task ``num``'s lives (a task started
        in the moment before its ``begin`` row); a helper another task left pins nothing."""
