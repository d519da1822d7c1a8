"""``zotsink doctor``: the filesystem, its locks, and what ``auto`` chooses there."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from ._common import CONTEXT, LOCK_KINDS, json_option, print_json, run_api, say, set_verbosity

if TYPE_CHECKING:
    from .. import DoctorReport


@click.command("doctor", context_settings=CONTEXT)
@click.argument("directory", default=".", type=click.Path())
@click.option(
    "--lock",
    type=click.Choice(LOCK_KINDS),
    default="auto",
    show_default=True,
    help="The --lock setting to judge.",
)
@json_option
@click.option("-q", "--quiet", is_flag=True, help="No report on stderr, only the exit code.")
def doctor_cmd(directory: str, lock: str, as_json: bool, quiet: bool) -> None:
    """Check whether zotsink can be trusted in DIRECTORY (default: here).

    \b
    Reports the filesystem type and mount options, whether flock and fcntl
    locks work (a scratch file is created, locked and removed), whether a
    lock taken here excludes writers on other nodes, and the lock kind and
    sync policy that `auto` chooses.
    Exit codes: 0 trusted, 1 not trusted (node-local or unknown locks, no
    working lock, no write permission), 2 usage.
    """
    from .. import doctor

    set_verbosity(0, quiet)
    report = run_api(lambda: doctor(directory, lock=lock))
    for line in doctor_lines(report):
        say(line)
    if as_json:
        print_json(report.to_dict())
    sys.exit(0 if report.ok else 1)


def doctor_lines(report: DoctorReport) -> list[str]:
    """The report in words, one line each, as ``zotsink doctor`` prints them on stderr."""
    kind = {
        "local": "a local filesystem",
        "network": "a network filesystem",
        "cluster": "a FUSE cluster filesystem" if report.fuse else "a cluster filesystem",
        "fuse": "a FUSE filesystem",
    }.get(report.family, "unknown")
    out = [f"directory   {report.directory}"]
    if report.fstype is not None:
        out.append(f"filesystem  {report.fstype}: {report.name}, {kind}")
        opts = ",".join(report.options)
        out.append(f"mount       {report.mount_point} from {report.source} ({opts})")
    else:
        out.append("filesystem  unknown: /proc/self/mountinfo names no mount for it")
    if not report.probes.create.ok:
        out.append(f"probe       cannot create a file here: {report.probes.create.error}")
    else:
        for k, p in (("flock", report.probes.flock), ("fcntl", report.probes.fcntl)):
            out.append(f"{k:<11} {'works' if p.ok else 'fails: ' + str(p.error)}")
    out.append(f"locks       {report.locks}: {report.locks_why}")
    label = "lock auto" if report.requested_lock == "auto" else "lock"
    out.append(f"{label} = {report.lock or 'none works'}")
    out.append(f"sync auto = {report.sync}: {report.sync_why}")
    out += [f"note: {n}" for n in report.notes]
    out += [f"warning: {w}" for w in report.warnings]
    if report.ok:
        out.append("verdict: zotsink can be trusted here")
    else:
        out.append(f"verdict: zotsink cannot be trusted here: {report.problem}")
    return out
