#!/usr/bin/env python3
"""Run a command and write down what it and its whole process tree cost: for one element.

    seed_rusage.py DIR -- COMMAND [ARG...]

Writes DIR/JOB_INDEX (the scheduler's array job id and array index, from Slurm's
environment) as one line ``start end user sys`` once COMMAND has exited: wall-clock start
and end (seconds since the epoch) and the CPU seconds of COMMAND and of every descendant it
waited for (``os.wait4``, as ``/usr/bin/time`` reports them), then exits as COMMAND did.
Started with ``python -I -S`` it imports only what the interpreter has built in, so what it
adds to an element is one bare interpreter's start.
"""

from __future__ import annotations

import os
import sys
import time


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        print("usage: seed_rusage.py DIR -- COMMAND [ARG...]", file=sys.stderr)
        return 2
    start = time.time()
    pid = os.fork()
    if pid == 0:
        try:
            os.execvp(argv[3], argv[3:])
        except OSError as e:
            print(f"seed_rusage.py: {argv[3]}: {e}", file=sys.stderr)
        os._exit(127)
    _, status, usage = os.wait4(pid, 0)
    end = time.time()
    env = os.environ
    job = env.get("SLURM_ARRAY_JOB_ID") or env.get("SLURM_JOB_ID", "0")
    index = env.get("SLURM_ARRAY_TASK_ID", "")
    line = f"{start:.6f} {end:.6f} {usage.ru_utime:.6f} {usage.ru_stime:.6f}\n"
    with open(os.path.join(argv[1], f"{job}_{index}"), "w") as f:
        f.write(line)
    code = os.waitstatus_to_exitcode(status)
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv))
