"""``zotsink status`` in words: the report's lines (counts, rate, what to do next), the live
runs, the relay chain, the advice, the ``--by`` table and the ``--watch`` bar. Pure: each
takes what the API returned and gives lines; :mod:`zotsink.cli.status` prints them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from ._common import counted

if TYPE_CHECKING:
    from .. import Advice, ChainStatus, LiveRuns, StatusReport

__all__ = [
    "advice_lines",
    "by_table",
    "duration",
    "progress_bar",
    "relay_lines",
    "runs_lines",
    "status_lines",
]

#: Live runs named one by one; more are counted.
RUNS_SHOWN: Final = 10
#: A task is named slow when it took this many times the median task, or more.
SLOW: Final = 3.0


def status_lines(report: StatusReport, release: str = "") -> list[str]:
    """The report in words, one line each: counts by state, the rate and ETA, the slowest.
    ``release``: the command that releases a run (``zotsink release TASKS OUT``)."""
    c = report.counts
    # counts holds every state, in the ledger's order of states: the line keeps that order
    # (claimed: held by a live run, not begun; running: begun, no end yet)
    shown = ", ".join(f"{n} {state}" for state, n in c.items() if n)
    lines = [f"{counted(report.total, 'task')}: {shown or 'none'}"]
    if report.rate:
        from .. import rate_text

        line = f"rate {rate_text(report.rate)}"
        if report.eta is not None and not report.all_ok:
            left = counted(report.total - c["ok"], "task")
            line += f", ETA {duration(report.eta)} for the {left} left"
        lines.append(line)
    for num, secs, key in report.slowest:
        # slow against the typical task: the longest of alike tasks are no news
        if report.median is not None and secs >= SLOW * report.median and secs >= 1:
            lines.append(
                f"slow: task {num} took {duration(secs)} (median {duration(report.median)})"
                f": {key[:60]}"
            )
    if report.scheduler:
        lines.append(
            f"scheduler: {report.scheduler}; its jobs count as still queued or running "
            "(their tasks as running)"
        )
    if report.runs is not None:
        lines += runs_lines(report.runs, follow=report.follow, release=release)
    if report.relay is not None:
        lines += relay_lines(report.relay, report.to_run)
    if c["given-up"]:
        from .. import array_spec

        lines.append(
            f"given up (failed {counted(report.max_attempts or 0, 'time')}): "
            f"{array_spec(report.given_up())}; a run with a higher --max-attempts gives "
            "them another chance"
        )
    if not report.all_ok:
        lines += _next_lines(report)
    return lines


def _next_lines(report: StatusReport) -> list[str]:
    """What to do about the tasks left: fix first, let the live runs take them, or submit."""
    left = report.to_run
    if not left:
        return []
    tasks = counted(left, "task")
    failing = report.failing
    if failing is not None:
        n = failing.tasks
        if n == report.total:  # every task of the list ended, alike
            which = "the only task ended" if n == 1 else f"all {n} tasks ended alike"
        else:
            which = f"the last {n} tasks to end ended alike"
        how = f", exit {failing.exit}" if failing.exit else ""
        how += f", signal {failing.signal}" if failing.signal else ""
        return [
            f"to run again: {tasks} left; fix first: {which} ({failing.status}{how}); "
            "`zotsink status --failed` shows why"
        ]
    if report.takers:
        takes = "takes" if report.takers == 1 else "take"
        return [f"to run: {tasks} left; {counted(report.takers, 'live run')} {takes} them"]
    if report.pull:
        return [
            f"to run again: {tasks} left; submit up to "
            f"{counted(report.submit, 'more element')} of the --pull job (any element takes "
            "any task)"
        ]
    if report.settings is not None and "chunk" in report.settings:
        spec = report.resubmit()
        if spec:
            return [
                f"to run again: array indices {spec} (--chunk {report.chunk} --base "
                f"{report.base}); resubmit them when nothing runs"
            ]
    return []


def runs_lines(runs: LiveRuns, *, follow: bool = False, release: str = "") -> list[str]:
    """The live runs, the task list closed or not, a stop being obeyed: in words.
    ``follow``: the runs follow the task list (``--follow``), so whether it is open says
    what they do next; ``release``: the command that releases a run nothing can tell of."""
    from .. import rate_text

    ctl = runs.control
    lines = []
    if ctl.closed:
        at = "" if ctl.closed_lines is None else f" at {counted(ctl.closed_lines, 'line')}"
        lines.append(f"task list closed{at} ({ctl.closed_time}): no more lines will come")
    elif follow and runs.live:
        lines.append("task list open: runs that follow it wait for new lines")
    if runs.stopping:
        # a stop whose runs all ended is history: --json still has it
        n = len(runs.stopping)
        lines.append(
            f"stop at {ctl.stop_time}: {counted(n, 'run')} finishing "
            f"{'its' if n == 1 else 'their'} tasks, then exiting; runs started since proceed"
        )
    if runs.live:
        lines.append(f"{counted(len(runs.live), 'live run')}:")
    for r in runs.live[:RUNS_SHOWN]:
        where = f"{r.host} pid {r.pid}" + (f" job {r.job}" if r.job else "")
        rate = r.rate
        pace = f", {rate_text(rate)}" if rate else ""
        doing = f"{r.running} running" if r.idle is None else f"idle {duration(r.idle)}"
        stop = ", stopping" if r.stopping else ""
        lines.append(f"  {where}: {r.ok} done, {doing}{pace}{stop}")
    if len(runs.live) > RUNS_SHOWN:
        lines.append(f"  ... and {len(runs.live) - RUNS_SHOWN} more (--json lists them)")
    for r in runs.unknown[:RUNS_SHOWN]:
        held = counted(r.running, "task") + " running"
        if r.claimed:
            held += f", {r.claimed} claimed"
        gone = f"; if it is gone: {release} --run {r.id}" if release and r.id else ""
        lines.append(
            f"run {r.id or '-'} ({r.host} pid {r.pid} job {r.job or '-'}): {held}, and "
            f"nothing here can tell whether it lives (ask its scheduler){gone}"
        )
    return lines


def relay_lines(relay: ChainStatus, to_run: int) -> list[str]:
    """The relay chain in words: its elements, its submissions, a failure, its end."""
    d = relay.to_dict()
    lines = []
    if d["active"]:
        parts = []
        if relay.running:
            parts.append(f"{len(relay.running)} running ({', '.join(relay.running)})")
        if relay.queued:
            parts.append(f"{len(relay.queued)} queued ({', '.join(relay.queued)})")
        if d["submitting"]:
            parts.append(f"{d['submitting']} being submitted")
        limits = f" --relay {d['n']}" if d["n"] else ""
        if d["max_relays"] is not None:
            limits += f", --max-relays {d['max_relays']}"
        made = counted(d["submitted"], "successor")
        head = f"relay chain ({limits.strip()})" if limits else "relay chain"
        lines.append(f"{head}: {', '.join(parts) or 'no element'}; {made} submitted by it")
    last = d["last_submission"]
    if last is not None:
        lines.append(f"relay: last submission {last['job']} at {last['time']}")
    failed = d["last_failure"]
    if failed is not None and d["failures_in_row"]:
        retry = d["next_try"]
        when = f"; the next try not before {retry}" if retry and d["active"] else ""
        lines.append(
            f"relay: the last submission failed at {failed['time']} "
            f"({counted(d['failures_in_row'], 'failure')} in a row): {failed['message']}{when}"
        )
    if relay.gone:
        lines.append(
            f"relay: {', '.join(relay.gone)} no longer queued or running, with no word in "
            "the ledger (killed? cancelled?)"
        )
    ended = d["ended"]
    if ended is not None:
        lines.append(f"relay chain ended at {ended['time']}: {ended['reason']}: {ended['words']}")
    elif d["active"] and to_run and not (relay.running or relay.queued or d["submitting"]):
        lines.append(
            f"relay: {counted(to_run, 'task')} wait and no element of the chain is queued or "
            "running: its last one ended without handing on; submit one again (or `zotsink "
            "add --relay SCRIPT`)"
        )
    refused = d["refused"]
    if refused is not None:
        lines.append(
            f"relay: a run was refused at {refused['time']} (job {refused['job'] or '-'}): "
            f"{refused['message']}"
        )
    return lines


def advice_lines(advice: Advice, scheduler: str) -> list[str]:
    """How the advice was reached, in words, one line each."""
    q = f"the {advice.quantile * 100:g}th percentile"
    lines = [
        f"advice from {counted(advice.tasks, 'ended attempt')}, each figure by {q} of "
        f"the attempts (not the largest), for elements of --jobs {advice.jobs} and "
        f"{advice.per_element} tasks"
    ]
    if advice.peak_kib is None:
        lines.append(
            f"memory: not measured (no peak is known for any of the {advice.tasks} "
            "attempts): no --mem advised"
        )
    else:
        top = advice.peak_max
        largest = f"; the largest {_mib(top[0])}, task {top[1]}" if top else ""
        unmeasured = advice.tasks - advice.peak_measured
        lines.append(
            f"peak memory per task: {_mib(advice.peak_kib)} at {q}{largest}"
            + (f"; not measured for {unmeasured}" if unmeasured else "")
        )
        assert advice.memory_kib is not None
        lines.append(
            f"memory per element: {_mib(advice.peak_kib)} x {advice.jobs} at a time x "
            f"{advice.memory_margin:g} margin, rounded up: {_mib(advice.memory_kib)}"
        )
        if advice.oom:
            lines.append(
                f"{counted(advice.oom, 'attempt')} killed for memory: the memory is sized "
                f"above the largest peak among them ({_mib(advice.oom_peak_kib or 0)})"
            )
        for task, kib in advice.over:
            lines.append(
                f"task {task} peaked at {_mib(kib)}, above a task's share of that memory: "
                "it may need more when it runs beside others"
            )
        if scheduler == "sge":
            lines.append(
                "h_vmem limits virtual memory, per slot; a task's virtual size may be well "
                "above the resident peak measured here: raise it if tasks die at the limit"
            )
    if advice.cpu_per_task is None:
        lines.append("CPU: not measured: no CPUs advised")
    else:
        lines.append(
            f"CPU: a task keeps {advice.cpu_per_task:.2f} CPUs busy at {q}: "
            f"{advice.cpus} CPUs for {advice.jobs} at a time"
        )
    if advice.time_s is not None and advice.seconds_mean is not None:
        turns = -(-advice.per_element // advice.jobs)
        before = (
            f"{counted(turns - 1, 'turn')} at the mean {duration(advice.seconds_mean)}, "
            if turns > 1
            else ""
        )
        lines.append(
            f"time per element: {counted(advice.per_element, 'task')}, {advice.jobs} at a "
            f"time: {before}the last at {q} {duration(advice.seconds_q or 0)}; x "
            f"{advice.time_margin:g} margin, up to a whole minute: {duration(advice.time_s)}"
        )
    return lines


def _mib(kib: float) -> str:
    if kib >= 10 * 1024 * 1024:
        return f"{kib / (1024 * 1024):.1f} GiB"
    return f"{kib / 1024:,.0f} MiB"


def by_table(by: str, table: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """The rows of ``status --by`` as an aligned text table."""
    head = [by, "attempts", "ok", "not ok", "running", "mean", "longest"]
    rows = [
        [
            name,
            str(r["attempts"]),
            str(r["ok"]),
            str(r["not_ok"]),
            str(r["running"]),
            duration(r["mean_s"]),
            duration(r["max_s"]),
        ]
        for name, r in table
    ]
    widths = [max(len(row[i]) for row in [head, *rows]) for i in range(len(head))]
    return [
        "  ".join(
            cell.ljust(w) if i == 0 else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(row, widths))
        ).rstrip()
        for row in [head, *rows]
    ]


def duration(seconds: float) -> str:
    s = round(seconds)
    if s < 120:
        return f"{seconds:.1f} s" if seconds < 10 else f"{s} s"
    if s < 7200:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60} min"


def progress_bar(report: StatusReport, width: int = 30) -> str:
    c = report.counts
    done = c["ok"] / report.total if report.total else 1.0
    fill = int(done * width)
    bad = c["failed"] + c["killed"] + c["timeout"] + c["interrupted"] + c["lost"] + c["given-up"]
    eta = ""
    if report.eta is not None and not report.all_ok:
        eta = f" ETA {int(report.eta) // 60}:{int(report.eta) % 60:02d}"
    return (
        f"[{'#' * fill}{'.' * (width - fill)}] {c['ok']}/{report.total} ok"
        f" {done:.0%}, {c['running']} running, {bad} not ok{eta}"
    )
