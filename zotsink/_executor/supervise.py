"""What an Executor's client does about its elements, decided apart from any I/O.

:class:`Supervision` is fed what the client learns (the elements' events from the settings
file, calls done, that it started elements) and, when asked with whether any element
lives and whether calls wait, says what to do: wait, start elements, or break (the calls
cannot run: every one left gets one error).

The rules: while an element lives, wait. When none lives and calls wait: the first time,
start elements; after a start of this client, break when an element since said its run
halted or could not begin (the halt names the failures: a module the elements cannot
import, calls killed alike), or when none of them began its run at all (their Python
cannot run zotsink, or the scheduler cancelled them queued), or when
:data:`FRUITLESS_MAX` starts in a row ended without a call done; else start again (the
elements ended on their own: idle, a walltime, a stop, a node lost). What happened before
this client's first start (a client that died, an attach after a fix) never breaks: the
first start is the new try.
"""

from __future__ import annotations

from typing import Any, Final, Literal, NamedTuple

__all__ = ["FRUITLESS_MAX", "Decision", "Supervision", "trouble_of"]

#: Starts in a row that may end without a call done before the Executor breaks.
FRUITLESS_MAX: Final = 3


class Decision(NamedTuple):
    """What to do about the elements; ``why`` says it for a break."""

    action: Literal["wait", "start", "break"]
    why: str = ""


#: How the run words a halt around its cause (``halted: WHY; nothing more was claimed: ...``).
_HALT_HEAD: Final = "halted: "
_HALT_TAIL: Final = "; nothing more was claimed"


def trouble_of(event: dict[str, Any]) -> str | None:
    """What an element's event says went wrong: its run halted (why), or could not begin."""
    state = event.get("state")
    host = event.get("host", "?")
    if state == "failed":
        return f"an element on {host} could not run: {event.get('error')}"
    halted = event.get("halted")
    if state == "ended" and halted:
        why = str(halted)
        why = why[len(_HALT_HEAD) :] if why.startswith(_HALT_HEAD) else why
        why = why.split(_HALT_TAIL, 1)[0]
        return f"the elements halted, on {host}: {why}"
    return None


class Supervision:
    """The client's decisions about its elements (see the module's docstring)."""

    def __init__(self) -> None:
        self._since: int | None = None  # the first event index after our latest start
        self._began = 0  # elements that began their run since then
        self._trouble: str | None = None  # what went wrong since then, said last
        self._done = 0  # calls done since then
        self._fruitless = 0  # starts in a row that ended with no call done

    def event(self, index: int, event: dict[str, Any]) -> None:
        """An event of the settings file, at ``index`` among the events."""
        if self._since is None or index < self._since or event.get("event") != "element":
            return
        if event.get("state") == "began":
            self._began += 1
        why = trouble_of(event)
        if why is not None:
            self._trouble = why

    def done(self, calls: int) -> None:
        """``calls`` calls were done (their records committed)."""
        self._done += calls

    def started(self, next_index: int) -> None:
        """The client started elements; their events come from ``next_index`` on."""
        if self._since is not None:
            self._fruitless = 0 if self._done else self._fruitless + 1
        self._since = next_index
        self._began = 0
        self._trouble = None
        self._done = 0

    def decide(self, live: bool, waiting: bool) -> Decision:
        """What to do now that the elements do (``live``) or do not live, with calls
        ``waiting`` or not."""
        if live or not waiting:
            return Decision("wait")
        if self._since is None:
            return Decision("start")
        if self._trouble is not None:
            return Decision("break", self._trouble)
        if not self._began:
            return Decision("break", "never began")
        if not self._done and self._fruitless + 1 >= FRUITLESS_MAX:
            return Decision(
                "break",
                f"the elements ended {FRUITLESS_MAX} times in a row without finishing a call "
                "while calls waited",
            )
        return Decision("start")
