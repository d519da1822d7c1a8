#!/bin/bash
# Resubmit exactly the array elements of a `zotsink run` job whose chunk holds a task that
# is not ok yet (failed, killed, timed out, interrupted, lost, or never run). Tasks given up
# (they failed `run --max-attempts N` times) are not resubmitted: the script says which.
#
#   scripts/jobs/resubmit-run.sh [--force] [SUBMIT-OPTION ...]
#
# `zotsink missing TASKS --ledger LEDGER --array --max-array MAX` prints one
# line per submission, `SPEC BASE`: the array indices, and the base that makes index N of
# that submission run the right chunk (several lines when an index would exceed the site's
# MaxArraySize). This script submits the job script once per line, with ZOTSINK_BASE=BASE.
# Inside the resubmitted elements, `zotsink run` skips the tasks that are already ok.
# Run it after the array has finished (e.g. from a job with --dependency=afterany:JOBID);
# run it again until it says every task is ok or given up. SUBMIT-OPTIONs go to sbatch/qsub
# as they are.
#
# It refuses (exit 3, submitting nothing) while a job that ran tasks of the ledger (its
# jobs: `zotsink status --job-ids`), or one named in JOBID, still has elements queued or
# running: resubmitted now, they would run twice. It asks the scheduler (Slurm `squeue -h -j ID`, SGE
# `qstat -j ID`, PBS `qstat ID[]`); when the scheduler cannot be asked (no such command, or
# it fails for another reason than an unknown job), it says so and goes on. --force
# resubmits without asking.
#
# Settings (environment), the same names as the job scripts:
#   TASKS      task list                                              [tasks.txt]
#   RESULTS    the shared table; the ledger is RESULTS.ledger        [results.tsv]
#   LEDGER     the ledger, when it is not RESULTS.ledger
#   CHUNK      tasks per array element       [the --chunk the ledger records, else 1]
#   STATES     which states to resubmit (comma list)           [every state but ok]
#   SCHEDULER  slurm, sge or pbs                                          [slurm]
#   MAX_ARRAY  the site's MaxArraySize (indices stay below it)   [Slurm: from
#              `scontrol show config`, else 1001; SGE: 75001; PBS: 10001]
#   JOB        the job script           [zotsink-run.sbatch/.sge/.pbs beside this script]
#   JOBID      job ids to check besides the ledger's (comma list), e.g. of an array
#              whose elements are all still queued, so none has written a ledger row
#   ZOTSINK    the zotsink command                                      [zotsink]
set -euo pipefail

force=0
submit=()
for arg in "$@"; do
    if [ "$arg" = --force ]; then force=1; else submit+=("$arg"); fi
done
set -- ${submit[@]+"${submit[@]}"}

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TASKS=${TASKS:-tasks.txt}
RESULTS=${RESULTS:-results.tsv}
LEDGER=${LEDGER:-$RESULTS.ledger}
chunk=()
[ -z "${CHUNK:-}" ] || chunk=(--chunk "$CHUNK")
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

# Job ids that ran tasks of the ledger (`zotsink status --job-ids`; a job of a named cluster
# is CLUSTER:JOB there, asked here by its number), and those named in JOBID.
ledger_jobs() {
    if [ -f "$LEDGER" ]; then
        "${zotsink[@]}" status "$TASKS" --ledger "$LEDGER" --job-ids | sed 's/.*://'
    fi
    tr ',' '\n' <<<"${JOBID:-}"
}

# Whether the scheduler still has job $1 queued or running: prints "yes", "no", or why it
# cannot tell.
job_state() {
    local out rc=0
    case "$SCHEDULER" in
        slurm) out=$(squeue -h -j "$1" -o %i 2>&1) || rc=$? ;;
        sge) out=$(qstat -j "$1" 2>&1) || rc=$? ;;
        pbs) out=$(qstat "$1[]" 2>&1) || rc=$? ;;
    esac
    if [ "$rc" -eq 0 ]; then
        # squeue answers an ended job with no line; qstat with an error
        if [ "$SCHEDULER" = slurm ] && [ -z "$out" ]; then echo no; else echo yes; fi
    elif grep -qiE 'invalid job id|do not exist|unknown job|has finished' <<<"$out"; then
        echo no
    else
        echo "${out:-exit $rc}" | head -n 1
    fi
}

if [ "$force" -eq 0 ]; then
    active=()
    while read -r id; do
        [ -n "$id" ] || continue
        state=$(job_state "$id" 2>&1) || state="cannot run the scheduler's query"
        case "$state" in
            yes) active+=("$id") ;;
            no) ;;
            *) echo "resubmit-run.sh: warning: cannot ask $SCHEDULER whether job $id still" \
                "runs ($state); going on as if it did not" >&2 ;;
        esac
    done < <(ledger_jobs | sort -u)
    if [ "${#active[@]}" -gt 0 ]; then
        echo "resubmit-run.sh: job ${active[*]} still has elements queued or running; their" \
            "tasks would run twice: run this when it has ended, or give --force to" \
            "resubmit anyway" >&2
        exit 3
    fi
fi

# (missing names the given-up tasks it leaves out on stderr; so does this script, below)
specs=$("${zotsink[@]}" missing "$TASKS" --ledger "$LEDGER" ${chunk[@]+"${chunk[@]}"} --array \
    --max-array "$MAX_ARRAY" ${states[@]+"${states[@]}"})
given_up=$("${zotsink[@]}" missing "$TASKS" --ledger "$LEDGER" --state given-up --array \
    --chunk 1)
if [ -n "$given_up" ]; then
    echo "resubmit-run.sh: given up, not resubmitted (they failed --max-attempts times):" \
        "tasks $given_up; \`${zotsink[*]} status $TASKS --ledger $LEDGER --failed\` shows why" >&2
fi
if [ -z "$specs" ]; then
    if [ -n "$given_up" ]; then
        echo "resubmit-run.sh: nothing to resubmit: every other task of $TASKS is ok in $LEDGER" >&2
    else
        echo "resubmit-run.sh: every task of $TASKS is ok in $LEDGER" >&2
    fi
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
