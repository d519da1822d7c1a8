#!/bin/bash
# Resubmit exactly the array elements of a `zotsink run` job whose chunk holds a task that
# is not ok yet (failed, killed, timed out, interrupted, lost, or never run).
#
#   scripts/jobs/resubmit-run.sh [SUBMIT-OPTION ...]
#
# `zotsink missing TASKS --ledger LEDGER --chunk CHUNK --array --max-array MAX` prints one
# line per submission, `SPEC BASE`: the array indices, and the base that makes index N of
# that submission run the right chunk (several lines when an index would exceed the site's
# MaxArraySize). This script submits the job script once per line, with ZOTSINK_BASE=BASE.
# Inside the resubmitted elements, `zotsink run` skips the tasks that are already ok.
# Run it after the array has finished (e.g. from a job with --dependency=afterany:JOBID);
# run it again until it says every task is ok. SUBMIT-OPTIONs go to sbatch/qsub as they are.
#
# Settings (environment), the same names as the job scripts:
#   TASKS      task list                                              [tasks.txt]
#   RESULTS    the shared table; the ledger is RESULTS.ledger        [results.tsv]
#   LEDGER     the ledger, when it is not RESULTS.ledger
#   CHUNK      tasks per array element, as in the job script                [100]
#   STATES     which states to resubmit (comma list)           [every state but ok]
#   SCHEDULER  slurm, sge or pbs                                          [slurm]
#   MAX_ARRAY  the site's MaxArraySize (indices stay below it)   [Slurm: from
#              `scontrol show config`, else 1001; SGE: 75001; PBS: 10001]
#   JOB        the job script           [zotsink-run.sbatch/.sge/.pbs beside this script]
#   ZOTSINK    the zotsink command                                      [zotsink]
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TASKS=${TASKS:-tasks.txt}
RESULTS=${RESULTS:-results.tsv}
LEDGER=${LEDGER:-$RESULTS.ledger}
CHUNK=${CHUNK:-100}
SCHEDULER=${SCHEDULER:-slurm}
read -r -a zotsink <<<"${ZOTSINK:-zotsink}"
case "$SCHEDULER" in
    slurm)
        JOB=${JOB:-$here/zotsink-run.sbatch}
        if [ -z "${MAX_ARRAY:-}" ]; then
            MAX_ARRAY=$(scontrol show config 2>/dev/null | awk '$1 == "MaxArraySize" { print $3 }')
        fi
        MAX_ARRAY=${MAX_ARRAY:-1001}
        ;;
    sge) JOB=${JOB:-$here/zotsink-run.sge} MAX_ARRAY=${MAX_ARRAY:-75001} ;;
    pbs) JOB=${JOB:-$here/zotsink-run.pbs} MAX_ARRAY=${MAX_ARRAY:-10001} ;;
    *)
        echo "resubmit-run.sh: SCHEDULER must be slurm, sge or pbs, not '$SCHEDULER'" >&2
        exit 2
        ;;
esac
states=()
[ -z "${STATES:-}" ] || states=(--state "$STATES")

specs=$("${zotsink[@]}" missing "$TASKS" --ledger "$LEDGER" --chunk "$CHUNK" --array \
    --max-array "$MAX_ARRAY" ${states[@]+"${states[@]}"})
if [ -z "$specs" ]; then
    echo "resubmit-run.sh: every task of $TASKS is ok in $LEDGER" >&2
    exit 0
fi
while read -r spec base; do
    echo "resubmit-run.sh: resubmitting array indices $spec (base $base)" >&2
    case "$SCHEDULER" in
        slurm) sbatch "$@" --array="$spec" --export=ALL,ZOTSINK_BASE="$base" "$JOB" ;;
        *)
            # SGE's `qsub -t` and PBS Pro's `qsub -J` take one range, not a list: one
            # submission per part (N alone becomes N-N for SGE, a plain job with
            # TASK_INDEX=N for PBS, which refuses one-index arrays).
            IFS=, read -r -a parts <<<"$spec"
            for part in "${parts[@]}"; do
                case "$SCHEDULER:$part" in
                    sge:*-*) ZOTSINK_BASE=$base qsub "$@" -t "$part" "$JOB" ;;
                    sge:*) ZOTSINK_BASE=$base qsub "$@" -t "$part-$part" "$JOB" ;;
                    pbs:*-*) ZOTSINK_BASE=$base qsub "$@" -J "$part" "$JOB" ;;
                    pbs:*) qsub "$@" -v "TASK_INDEX=$part,ZOTSINK_BASE=$base" "$JOB" ;;
                esac
            done
            ;;
    esac
done <<<"$specs"
