"""One element of an Executor: the process a scheduler (or the client, on this machine)
starts. It runs ``run_tasks(CALLS, OUT, follow=True, call=SERVE)`` with the Executor's
settings, and says in the settings file that it began and how it ended.

Invariants: the element depends on nothing of the client (it reads the directory only);
stop signals reach its run as they reach ``zotsink run`` (a :class:`~zotsink.Stopper`:
what was done is committed, the tasks not begun stay for others); every way it ends is an
event in the settings file (``began``, then ``ended`` with the run's halt, signal and
error, or ``failed`` with why the run could not begin), since its stdout and stderr go
nowhere; a cancel recorded there before it began is passed to its workers
(:data:`~zotsink._executor.serve.CANCELLED_VAR`), so that the cancelled calls it finds
never run.
"""

from __future__ import annotations

import os
import sys
import traceback
from typing import Any, Final

from .._core.stamp import job_id, task_id
from .directory import Place, append_event, open_existing, read_events
from .serve import CANCELLED_VAR

__all__ = ["SERVE", "cancelled_through", "main"]

#: The ``--call`` spec of every Executor's run.
SERVE: Final = "zotsink._executor.serve:call"


def cancelled_through(events: list[dict[str, Any]]) -> int:
    """The task number through which the Executor cancelled its calls (0: none)."""
    through = 0
    for event in events:
        if event.get("event") == "cancel" and isinstance(event.get("through"), int):
            through = max(through, event["through"])
    return through


def main(directory: str) -> int:
    """Run the element; its exit code (0 when every task it began is ok)."""
    from .. import Stopper, ZotsinkError, run_tasks

    place, settings = open_existing(directory)
    env = dict(os.environ)
    through = cancelled_through(read_events(place))
    if through:
        env[CANCELLED_VAR] = str(through)
    me: dict[str, Any] = {
        "event": "element",
        "pid": os.getpid(),
        "job": job_id(env),
        "index": task_id(env),
    }
    _say(place, {**me, "state": "began"})
    with Stopper() as stopper:
        try:
            report = run_tasks(
                place.calls,
                place.results,
                call=SERVE,
                follow=True,
                jobs=settings.jobs,
                idle=settings.idle,
                max_attempts=settings.max_attempts,
                retries=settings.max_attempts - 1,
                env=env,
                stopper=stopper,
            )
        except ZotsinkError as e:
            _say(place, {**me, "state": "failed", "error": str(e)})
            return 2
        except Exception as e:  # not zotsink's word: say it where the client looks
            tail = traceback.format_exception(type(e), e, e.__traceback__)[-3:]
            _say(place, {**me, "state": "failed", "error": "".join(tail).strip()})
            raise
    _say(
        place,
        {
            **me,
            "state": "ended",
            "halted": report.halted,
            "signal": report.signal,
            "idled_out": report.idled_out,
            "error": None if report.error is None else str(report.error),
            "given_up": report.given_up,
        },
    )
    if report.signal is not None:
        return 128 + report.signal
    return 0 if not report.halted and all(s == "ok" for s in report.states.values()) else 1


def _say(place: Place, event: dict[str, Any]) -> None:
    try:
        append_event(place, event)
    except Exception as e:  # the run's work stands; only its word is lost, and said here
        print(f"zotsink executor element: cannot record {event}: {e}", file=sys.stderr)
