#!/bin/bash
# Submit the dropbox's runner only when tasks wait and no runner is queued or running: the
# line a cron job runs every few minutes (on the login node, or over ssh from where cron
# is allowed). The fallback of a site whose compute nodes may not submit jobs: where they
# may, the runner relays itself and producers restart it (RELAY=1, `zotsink add --relay`;
# see runner.sbatch), and no cron is needed.
#
# Cron runs a line with almost no environment (PATH=/usr/bin:/bin, no module loaded, none
# of the settings of your shell): print the line to install, from the dropbox directory,
# in the shell that runs zotsink, with the settings you run the runner with:
#
#   cd /scratch/me/dropbox && CALL=measure.py:measure scripts/jobs/dropbox/submit-runner.sh --cron-line
#   */5 * * * * cd '/scratch/me/dropbox' && PATH='/home/me/venv/bin:/usr/bin:/bin' ... \
#       '/scratch/me/dropbox/scripts/jobs/dropbox/submit-runner.sh' >>'results.tsv.cron.log' 2>&1
#
# It carries PATH (where zotsink, squeue and sbatch are), SLURM_CONF when set, this
# script's and the runner's absolute paths, and the runner's settings that are set (TASKS,
# RESULTS, PROCESS or CALL, ...; with neither PROCESS nor CALL set nor a dropbox.env file,
# the call the ledger recorded), and sends what cron would mail to a log beside RESULTS.
# `crontab -e` and paste it.
#
# Its one test is the same as this one line:
#
#   [ -s tasks.txt ] && zotsink status tasks.txt results.tsv --waiting &&
#       q=$(squeue -h -u "$USER" -n zotsink-dropbox -o %i) && [ -z "$q" ] &&
#       sbatch scripts/jobs/dropbox/runner.sbatch
#
# `zotsink status --waiting` exits 0 when a task of TASKS is not ok, not given up and not
# running, 1 when none is. An empty dropbox (TASKS absent or empty: no producer has added
# a line yet) is nothing to do: exit 0, silently, so cron mails nothing. A scheduler that
# cannot answer (squeue fails) submits nothing: the next cron run asks again. A task that
# always fails is given up after the runner's MAX_ATTEMPTS (3) runs of it, and then waits
# for nobody: a bounded number of runners. A runner refused for its settings (a CALL
# missing from the cron line) says so in the ledger: `zotsink status` shows it. Exit
# codes: 0 submitted or nothing to do, else the failing command's.
#
# Settings (environment): TASKS [tasks.txt], RESULTS [results.tsv], NAME, the runner's
# job name [zotsink-dropbox], RUNNER, its job script [the runner.sbatch beside this file],
# ZOTSINK [zotsink]; the runner's own settings (PROCESS or CALL, IDLE, ...) are passed on
# by sbatch.
set -uo pipefail

TASKS=${TASKS:-tasks.txt}
RESULTS=${RESULTS:-results.tsv}
NAME=${NAME:-zotsink-dropbox}
RUNNER=${RUNNER:-$(dirname "$0")/runner.sbatch}
read -r -a zotsink <<<"${ZOTSINK:-zotsink}"

if [ "${1:-}" = --cron-line ]; then
    here=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
    runner=$(cd "$(dirname "$RUNNER")" && pwd)/$(basename "$RUNNER")
    if [ -z "${CALL:-}" ] && [ -z "${PROCESS:-}" ] && [ ! -f "${DROPBOX_ENV:-dropbox.env}" ]; then
        # the call the ledger recorded: what the runs so far ran
        CALL=$("${zotsink[@]}" status "$TASKS" "$RESULTS" --json 2>/dev/null |
            "${PYTHON:-python3}" -c 'import json, sys
print((json.load(sys.stdin).get("settings") or {}).get("call", ""))' 2>/dev/null) || CALL=
        [ -n "$CALL" ] || unset CALL
    fi
    line="cd $(printf %q "$PWD") && PATH=$(printf %q "$PATH")"
    for var in SLURM_CONF TASKS RESULTS NAME ZOTSINK PROCESS CALL KV FIELDS STAMP GRACE IDLE \
        MAX_ATTEMPTS ZOTSINK_ARGS DROPBOX_ENV PYTHONPATH; do
        if [ -n "${!var+set}" ]; then line+=" $var=$(printf %q "${!var}")"; fi
    done
    line+=" RUNNER=$(printf %q "$runner") $(printf %q "$here")"
    line+=" >>$(printf %q "$RESULTS.cron.log") 2>&1"
    printf '*/5 * * * * %s\n' "$line"
    exit 0
fi

[ -s "$TASKS" ] || exit 0 # an empty dropbox: nothing to do, nothing to say
"${zotsink[@]}" status "$TASKS" "$RESULTS" --waiting
waiting=$?
[ "$waiting" -ne 1 ] || exit 0        # no task waits: nothing to do
[ "$waiting" -eq 0 ] || exit "$waiting" # not an answer (usage, I/O): say so to cron
queued=$(squeue -h -u "${USER:-$(id -un)}" -n "$NAME" -o %i) || exit
[ -z "$queued" ] || exit 0 # a runner is queued or running: it takes the tasks
exec sbatch --job-name="$NAME" "$RUNNER"
