#!/bin/bash
# Submit the dropbox's runner only when tasks wait and no runner is queued or running: the
# line a cron job runs every few minutes (on the login node, or over ssh from where cron
# is allowed), e.g.
#
#   */5 * * * * cd /scratch/me/dropbox && scripts/jobs/dropbox/submit-runner.sh
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
# cannot answer (squeue fails) submits nothing: the next cron run asks again. Exit codes:
# 0 submitted or nothing to do, else the failing command's.
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

[ -s "$TASKS" ] || exit 0 # an empty dropbox: nothing to do, nothing to say
"${zotsink[@]}" status "$TASKS" "$RESULTS" --waiting
waiting=$?
[ "$waiting" -ne 1 ] || exit 0        # no task waits: nothing to do
[ "$waiting" -eq 0 ] || exit "$waiting" # not an answer (usage, I/O): say so to cron
queued=$(squeue -h -u "${USER:-$(id -un)}" -n "$NAME" -o %i) || exit
[ -z "$queued" ] || exit 0 # a runner is queued or running: it takes the tasks
exec sbatch --job-name="$NAME" "$RUNNER"
