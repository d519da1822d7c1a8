#!/bin/bash
# Resubmit exactly the array tasks that left no record in the results table.
#
#   scripts/jobs/resubmit.sh [SUBMIT-OPTION ...]
#
# `zotsink missing TASKS RESULTS --key KEY --array` names the lines of the task list whose
# item has no row in RESULTS yet, as an array spec (3,7-9,15); this script submits the job
# script again for just those. Run it after the array has finished (e.g. from a job with
# --dependency=afterany:JOBID); run it again until it says nothing is missing.
# SUBMIT-OPTIONs go to sbatch/qsub as they are (e.g. --wait, --time=2:00:00).
#
# Settings (environment), the same names as the job scripts:
#   TASKS      task list                        (default tasks.txt)
#   RESULTS    the shared table                 (default results.tsv)
#   KEY        RESULTS column that holds the item (default item)
#   MATCH      how items are compared: exact, basename or stem (default exact)
#   SCHEDULER  slurm, sge or pbs                (default slurm)
#   JOB        the job script (default zotsink-array.sbatch/.sge/.pbs beside this script)
#   ZOTSINK    the zotsink command              (default zotsink)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TASKS=${TASKS:-tasks.txt}
RESULTS=${RESULTS:-results.tsv}
KEY=${KEY:-item}
MATCH=${MATCH:-exact}
SCHEDULER=${SCHEDULER:-slurm}
read -r -a zotsink <<<"${ZOTSINK:-zotsink}"
case "$SCHEDULER" in
    slurm) JOB=${JOB:-$here/zotsink-array.sbatch} ;;
    sge) JOB=${JOB:-$here/zotsink-array.sge} ;;
    pbs) JOB=${JOB:-$here/zotsink-array.pbs} ;;
    *)
        echo "resubmit.sh: SCHEDULER must be slurm, sge or pbs, not '$SCHEDULER'" >&2
        exit 2
        ;;
esac

if [ -e "$RESULTS" ]; then
    spec=$("${zotsink[@]}" missing "$TASKS" "$RESULTS" --key "$KEY" --match "$MATCH" --array)
else
    # no task has written anything yet: all of them
    spec="1-$(awk 'END { print NR }' "$TASKS")"
fi
if [ -z "$spec" ] || [ "$spec" = 1-0 ]; then
    echo "resubmit.sh: every task of $TASKS has a record in $RESULTS" >&2
    exit 0
fi
echo "resubmit.sh: resubmitting tasks $spec of $TASKS" >&2

case "$SCHEDULER" in
    slurm) exec sbatch "$@" --array="$spec" "$JOB" ;;
    *)
        # SGE's `qsub -t` and PBS Pro's `qsub -J` take one range, not a list: one
        # submission per part of the spec (N alone becomes N-N for SGE, a plain job
        # with TASK_INDEX=N for PBS, which refuses one-index arrays).
        IFS=, read -r -a parts <<<"$spec"
        for part in "${parts[@]}"; do
            case "$SCHEDULER:$part" in
                sge:*-*) qsub "$@" -t "$part" "$JOB" ;;
                sge:*) qsub "$@" -t "$part-$part" "$JOB" ;;
                pbs:*-*) qsub "$@" -J "$part" "$JOB" ;;
                pbs:*) qsub "$@" -v "TASK_INDEX=$part" "$JOB" ;;
            esac
        done
        ;;
esac
