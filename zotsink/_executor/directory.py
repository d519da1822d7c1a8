"""An Executor's directory: its files, its settings, and what its elements said.

The directory holds exactly these files, however many calls: the task list
(:data:`CALLS`, one line per call or chunk of calls), OUT (:data:`RESULTS`, one record per
call), the run's ledger and log beside OUT, and the settings file (:data:`SETTINGS`). The
settings file's first line is the Executor's settings (written once, by the client that
made the directory, in a file created exclusively: two clients making one directory at once
never both succeed); each later line is an event, appended under its lock: elements
submitted (their job, or their pids on this host), an element that began, ended or could
not run its run (and why: a halt names its failures), and a cancel (the tasks through
which nothing more is to run). Events are read back in order, by their index.

Invariants: a directory of another user, or one whose settings file is another user's or
not a regular file, is refused before anything is read or written; a directory with the
run's files but no settings is no Executor's and is refused, never taken over.
"""

from __future__ import annotations

import datetime
import json
import os
import socket
import stat
from collections.abc import Sequence
from typing import Any, Final, NamedTuple

from .._core.fileio import owner_problem, side_file_problem, write_all
from ..errors import UsageError
from .elements import pick_scheduler

__all__ = [
    "CALLS",
    "RESULTS",
    "SETTINGS",
    "Place",
    "Settings",
    "append_event",
    "checked_settings",
    "create",
    "now_text",
    "open_existing",
    "read_events",
]

#: The task list, OUT and the settings file, inside the directory.
CALLS: Final = "calls.jsonl"
RESULTS: Final = "results.jsonl"
SETTINGS: Final = "executor.jsonl"
#: The settings file's format: a reader refuses one of a format it does not know.
FORMAT: Final = 1


class Settings(NamedTuple):
    """How the Executor runs its elements, as the client that made it said."""

    scheduler: str  # local, slurm, sge or pbs
    elements: int
    jobs: int | str  # per element: a number, or "auto"
    submit_args: tuple[str, ...]
    idle: float | None  # seconds an element waits with nothing to do before it ends
    max_attempts: int
    created: str = ""
    host: str = ""

    def to_dict(self) -> dict[str, Any]:
        d = self._asdict()
        d["submit_args"] = list(self.submit_args)
        return {"executor": FORMAT, **d}


class Place(NamedTuple):
    """The directory's files."""

    directory: str
    calls: str
    results: str
    ledger: str
    log: str
    settings: str


def checked_settings(
    scheduler: str,
    elements: int,
    jobs: int | str,
    submit_args: Sequence[str],
    relay: int | None,
    idle: float | None,
    max_attempts: int,
) -> Settings:
    """An Executor's options, checked once into its settings; UsageError naming the first
    that cannot work."""
    picked = pick_scheduler(scheduler)
    if isinstance(elements, bool) or not isinstance(elements, int) or elements < 1:
        raise UsageError(f"elements must be a whole number, 1 or more, not {elements!r}")
    if jobs != "auto" and (isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1):
        raise UsageError(f"jobs must be a whole number, 1 or more, or 'auto', not {jobs!r}")
    if isinstance(submit_args, str) or not all(isinstance(a, str) for a in submit_args):
        raise UsageError(
            f"submit_args is a list of the scheduler's arguments (['--time=2:00:00', "
            f"'--mem=4G']), not {submit_args!r}"
        )
    if relay is not None:
        raise UsageError(
            "relay: elements that submit their own successors are not available yet; leave "
            "relay=None (the client submits new elements when calls wait and none lives)"
        )
    if idle is not None and not idle > 0:
        raise UsageError(f"idle must be a number of seconds above 0, or None, not {idle!r}")
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
        raise UsageError(f"max_attempts must be a whole number, 1 or more, not {max_attempts!r}")
    return Settings(
        scheduler=picked,
        elements=elements,
        jobs=jobs,
        submit_args=tuple(submit_args),
        idle=None if idle is None else float(idle),
        max_attempts=max_attempts,
        created=now_text(),
        host=socket.gethostname(),
    )


def _place(directory: str) -> Place:
    d = os.path.abspath(directory)
    results = os.path.join(d, RESULTS)
    return Place(
        d,
        os.path.join(d, CALLS),
        results,
        results + ".ledger",
        results + ".log",
        os.path.join(d, SETTINGS),
    )


def now_text() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _check_directory(d: str) -> None:
    try:
        st = os.stat(d)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        raise UsageError(f"{d} is not a directory: give an Executor a directory", path=d)
    problem = owner_problem(st)
    if problem is not None:
        raise UsageError(
            f"{d} is not yours ({problem}): an Executor keeps its calls and results in a "
            "directory of your own; give one",
            path=d,
        )


def create(directory: str | os.PathLike[str], settings: Settings) -> Place:
    """Make the Executor's directory (and its parents) and its settings file; UsageError
    when the directory is another user's, or holds another Executor (or a run's files)."""
    place = _place(os.fspath(directory))
    _check_directory(place.directory)
    if os.path.lexists(place.settings):
        raise UsageError(_taken(place), path=place.settings)
    found = [p for p in (place.calls, place.results, place.ledger) if os.path.lexists(p)]
    if found:
        raise UsageError(
            f"{place.directory} holds {os.path.basename(found[0])} but no {SETTINGS}: "
            "not an Executor's directory (a run's files, or a copy); give an Executor a "
            "new directory",
            path=found[0],
        )
    os.makedirs(place.directory, exist_ok=True)
    _check_directory(place.directory)  # made now, or by another at the same moment
    data = (json.dumps(settings.to_dict(), sort_keys=True) + "\n").encode()
    try:
        fd = os.open(
            place.settings,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o666,  # as the other files: the umask decides
        )
    except FileExistsError:
        raise UsageError(_taken(place), path=place.settings) from None
    try:
        write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    return place


def _taken(place: Place) -> str:
    return (
        f"{place.directory} holds an Executor already ({SETTINGS}): take it up with "
        f"zotsink.Executor.attach({place.directory!r}), or give a new Executor another "
        "directory"
    )


def open_existing(directory: str | os.PathLike[str]) -> tuple[Place, Settings]:
    """The directory of an Executor, and its settings; UsageError when it is none, or not
    this user's."""
    place = _place(os.fspath(directory))
    _check_directory(place.directory)
    try:
        fd = os.open(place.settings, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        raise UsageError(
            f"{place.directory} holds no Executor (no {SETTINGS}): check the path, or make "
            "one with zotsink.Executor(directory)",
            path=place.settings,
        ) from None
    except OSError as e:
        raise UsageError(
            f"{place.settings} cannot be read ({e.strerror}): an Executor's settings file is "
            "a regular file of your own",
            path=place.settings,
        ) from None
    try:
        problem = side_file_problem(os.fstat(fd), place.settings)
        if problem is not None:
            raise UsageError(
                f"{place.settings} is not to be trusted ({problem}): an Executor's settings "
                "file is a regular file of your own",
                path=place.settings,
            )
        with os.fdopen(os.dup(fd), "rb") as f:
            first = f.readline()
    finally:
        os.close(fd)
    return place, _settings_of(place, first)


def _settings_of(place: Place, first: bytes) -> Settings:
    try:
        data = json.loads(first)
        if data.get("executor") != FORMAT:
            raise UsageError(
                f"{place.settings} is of an Executor format this zotsink does not know "
                f"({data.get('executor')!r}): use the zotsink release that made it",
                path=place.settings,
            )
        return Settings(
            scheduler=str(data["scheduler"]),
            elements=int(data["elements"]),
            jobs=data["jobs"],
            submit_args=tuple(str(a) for a in data["submit_args"]),
            idle=None if data["idle"] is None else float(data["idle"]),
            max_attempts=int(data["max_attempts"]),
            created=str(data.get("created", "")),
            host=str(data.get("host", "")),
        )
    except (ValueError, KeyError, TypeError, AttributeError):
        raise UsageError(
            f"{place.settings} does not begin with an Executor's settings: not an "
            "Executor's directory, or its settings file was changed",
            path=place.settings,
        ) from None


def append_event(place: Place, event: dict[str, Any]) -> None:
    """One event appended to the settings file, under its lock, with the time and host."""
    from .. import append_record

    line = json.dumps({"time": now_text(), "host": socket.gethostname(), **event})
    append_record(place.settings, line, format="lines")


def read_events(place: Place) -> list[dict[str, Any]]:
    """The events of the settings file, in order (its first line, the settings, is not
    one); a line that is no JSON object (a torn write) is passed over."""
    from .. import read_records

    events = []
    for n, (line,) in enumerate(read_records(place.settings, format="lines")):
        if n == 0:
            continue
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict):
            events.append(event)
    return events
