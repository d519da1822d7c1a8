#!/usr/bin/env bash
# A one-host Slurm cluster (munged + slurmctld + slurmd) for zotsink's job-array tests.
#
#   slurm.sh up       install packages if missing, write slurm.conf, start the daemons,
#                     wait until the node is idle and a one-task job runs
#   slurm.sh status   what runs; exit 0 only when fully up
#   slurm.sh down     cancel every job, stop what `up` started
#
# Runs without systemd and without cgroups: processes are tracked through /proc
# (proctrack/linuxproc) and tasks are not bound (task/none). The node advertises more
# CPUs than the host has (SlurmdParameters=config_overrides) and the scheduler starts
# batch jobs at once (batch_sched_delay=0): tasks that mostly wait on I/O then run many
# at a time, and a 100-task array finishes in seconds instead of minutes.
#
# slurm.conf lives in the state dir. /etc/slurm/slurm.conf is made a symlink to it
# when there is no such file yet, so plain `sbatch` works; otherwise set SLURM_CONF
# (printed by `up`) for the client commands.
#
# Settings (environment):
#   ZOTSINK_SLURM_STATE         state dir: slurm.conf, controller state, spool, logs,
#                               pid files (default /var/tmp/zotsink-cluster/slurm)
#   ZOTSINK_SLURM_CPUS          CPUs the node advertises (default 32)
#   ZOTSINK_SLURM_SCHED_PARAMS  SchedulerParameters (default batch_sched_delay=0;
#                               Slurm's own default delay of 3 s triples array run times)
#
# Only loopback addresses are used. Only pids this script recorded are ever stopped;
# a munged that was already running is used as it is and left running.
# Exit codes: see lib.sh.
set -euo pipefail

# shellcheck disable=SC2034  # read by lib.sh
LOG_TAG=slurm
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/lib.sh"

STATE=${ZOTSINK_SLURM_STATE:-/var/tmp/zotsink-cluster/slurm}
CPUS=${ZOTSINK_SLURM_CPUS:-32}
SCHED_PARAMS=${ZOTSINK_SLURM_SCHED_PARAMS:-batch_sched_delay=0}
PACKAGES=(slurmctld slurmd slurm-client munge)

CONF=$STATE/etc/slurm.conf
SYSTEM_CONF=/etc/slurm/slurm.conf
RUN=$STATE/run
LOGS=$STATE/log
MUNGE_DIR=$STATE/munge
MUNGED_PID=$MUNGE_DIR/munged.pid
CTLD_PID=$RUN/slurmctld.pid
SLURMD_PID=$RUN/slurmd.pid
# munged's socket stays at its default path: Slurm's auth/munge looks for it there.
MUNGE_SOCKET_DIR=/run/munge

export SLURM_CONF=$CONF

our_munged() { pid_alive "$(read_pid "$MUNGED_PID")" munged; }
our_ctld() { pid_alive "$(read_pid "$CTLD_PID")" slurmctld; }
our_slurmd() { pid_alive "$(read_pid "$SLURMD_PID")" slurmd; }

node_name() { hostname -s; }

node_state() { timeout 10 sinfo -h -n "$(node_name)" -o %T 2>/dev/null | head -1 || true; }

write_conf() {  # write_conf FILE
    local host mem
    host=$(node_name)
    # RealMemory as slurmd measures it; the CPU count is ours (see config_overrides)
    mem=$(slurmd -C | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' | head -1)
    cat >"$1" <<EOF
# Written by scripts/cluster/slurm.sh: a single-host test cluster.
ClusterName=zotsink
SlurmctldHost=$host(127.0.0.1)
SlurmUser=slurm
SlurmdUser=root
AuthType=auth/munge
MpiDefault=none
# no systemd, no cgroups: follow processes through /proc, do not bind tasks
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
# no slurmdbd (so no sacct): one line per finished job in this file instead
JobCompType=jobcomp/filetxt
JobCompLoc=$LOGS/jobcomp.txt
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
SchedulerParameters=$SCHED_PARAMS
# the node advertises CPUS=$CPUS although the host has fewer
SlurmdParameters=config_overrides
ReturnToService=2
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool
SlurmctldPidFile=$CTLD_PID
SlurmdPidFile=$SLURMD_PID
SlurmctldLogFile=$LOGS/slurmctld.log
SlurmdLogFile=$LOGS/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true
MaxArraySize=100001
MaxJobCount=200000
# finished jobs stay visible (scontrol show job, sbatch --wait) for 5 minutes
MinJobAge=300
KillWait=5
NodeName=$host NodeHostname=$host NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
}

prepare_dirs() {
    mkdir -p "$STATE/etc" "$STATE/ctld" "$STATE/spool" "$RUN" "$LOGS" "$MUNGE_DIR" "$MUNGE_SOCKET_DIR"
    # slurmctld drops to SlurmUser before writing its state, log and pid file
    chown slurm:slurm "$STATE/ctld" "$RUN" "$LOGS"
    chmod 0755 "$STATE" "$RUN" "$LOGS"
    chown munge:munge "$MUNGE_DIR" "$MUNGE_SOCKET_DIR"
    chmod 0755 "$MUNGE_SOCKET_DIR"
    chmod 0700 "$MUNGE_DIR"
    # The Debian postinst creates the key; make one if it is missing.
    if [ ! -s /etc/munge/munge.key ]; then
        mungekey --create --keyfile=/etc/munge/munge.key
    fi
    chown munge:munge /etc/munge /etc/munge/munge.key
    chmod 0700 /etc/munge
    chmod 0400 /etc/munge/munge.key
}

# wait_pidfile FILE COMM: the daemons fork before writing their pid file
wait_pidfile() {
    for _ in $(seq 1 150); do
        pid_alive "$(read_pid "$1")" "$2" && return 0
        sleep 0.1
    done
    return 1
}

start_munged() {
    local t0 other
    t0=$(now)
    if our_munged; then return 0; fi
    other=$(live_pids munged | head -1)
    if [ -n "$other" ]; then
        # A munged we did not start: use it, never stop it.
        log "using the munged that was already running (pid $other); down leaves it alone"
    else
        rm -f "$MUNGED_PID"
        runuser -u munge -- /usr/sbin/munged --pid-file="$MUNGED_PID" \
            --log-file="$MUNGE_DIR/munged.log" </dev/null 9>&- ||
            die "$EXIT_FAILED" "munged failed to start (log: $MUNGE_DIR/munged.log)"
        wait_pidfile "$MUNGED_PID" munged ||
            die "$EXIT_FAILED" "munged did not write $MUNGED_PID (log: $MUNGE_DIR/munged.log)"
        log "munged pid $(read_pid "$MUNGED_PID") in $(since "$t0") s"
    fi
    munge -n </dev/null | unmunge >/dev/null ||
        die "$EXIT_FAILED" "munge credential round trip failed (log: $MUNGE_DIR/munged.log)"
}

start_daemon() {  # start_daemon NAME PIDFILE
    local name=$1 pf=$2 t0 other
    t0=$(now)
    pid_alive "$(read_pid "$pf")" "$name" && return 0
    for other in $(live_pids "$name"); do
        die "$EXIT_PRECONDITION" "a $name not started by $0 is running (pid $other); stop it first"
    done
    rm -f "$pf"
    # Both daemonise themselves; slurmctld starts as root and drops to SlurmUser.
    "/usr/sbin/$name" -f "$CONF" </dev/null >"$LOGS/$name.out" 2>&1 9>&- ||
        die "$EXIT_FAILED" "$name failed to start: $(tail -n 1 "$LOGS/$name.out" 2>/dev/null)" \
            "(log: $LOGS/$name.log)"
    if ! wait_pidfile "$pf" "$name"; then
        tail -n 20 "$LOGS/$name.log" >&2 2>/dev/null || true
        die "$EXIT_FAILED" "$name did not stay up (log: $LOGS/$name.log)"
    fi
    log "$name pid $(read_pid "$pf") in $(since "$t0") s"
}

wait_node_idle() {
    local t0 s=
    t0=$(now)
    for _ in $(seq 1 300); do
        s=$(node_state)
        case "$s" in
            idle | mixed | allocated | completing) break ;;
            down* | drain*)
                # a node that was down before this start comes back on request
                scontrol update nodename="$(node_name)" state=resume >/dev/null 2>&1 || true
                ;;
        esac
        sleep 0.1
    done
    case "$s" in
        idle | mixed | allocated | completing) ;;
        *) die "$EXIT_FAILED" "node $(node_name) not idle after 30 s (state '${s:-unknown}'; logs in $LOGS)" ;;
    esac
    log "node $(node_name) $s after $(since "$t0") s"
}

# End-to-end check: a batch job runs to completion. It also waits out the first
# scheduling pass, which slurmctld makes about 3 s after it starts, so the tests'
# first job does not pay for it.
probe() {
    local t0 id state=
    t0=$(now)
    id=$(timeout 30 sbatch --parsable --output=/dev/null --job-name=zotsink-probe \
        --wrap=true </dev/null) || die "$EXIT_FAILED" "sbatch of a probe job failed (logs in $LOGS)"
    id=${id%%;*}
    case "$id" in '' | *[!0-9]*) die "$EXIT_FAILED" "sbatch printed no job id for the probe job ('$id')" ;; esac
    for _ in $(seq 1 600); do
        state=$(timeout 10 scontrol show job "$id" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
        case "$state" in
            COMPLETED) break ;;
            FAILED | CANCELLED | TIMEOUT | NODE_FAIL | BOOT_FAIL | OUT_OF_MEMORY)
                die "$EXIT_FAILED" "probe job $id ended $state (logs in $LOGS)" ;;
        esac
        sleep 0.1
    done
    [ "$state" = COMPLETED ] || die "$EXIT_FAILED" "probe job $id not done after 60 s (state '${state:-unknown}'; logs in $LOGS)"
    log "probe batch job $id completed in $(since "$t0") s"
}

link_system_conf() {
    if [ -L "$SYSTEM_CONF" ] && [ "$(readlink "$SYSTEM_CONF")" = "$CONF" ]; then return 0; fi
    if [ -e "$SYSTEM_CONF" ] || [ -L "$SYSTEM_CONF" ]; then
        log "$SYSTEM_CONF exists and is not ours: client commands need SLURM_CONF=$CONF"
        return 0
    fi
    mkdir -p "$(dirname "$SYSTEM_CONF")"
    ln -s "$CONF" "$SYSTEM_CONF"
}

healthy() {
    { our_munged || [ -n "$(live_pids munged)" ]; } || return 1
    our_ctld && our_slurmd || return 1
    case "$(node_state)" in idle | mixed | allocated | completing) return 0 ;; esac
    return 1
}

cmd_up() {
    local t0 rc=0 new
    t0=$(now)
    need_root "start munged, slurmctld and slurmd"
    case "$CPUS" in
        '' | *[!0-9]* | 0) die "$EXIT_USAGE" "ZOTSINK_SLURM_CPUS must be a positive integer (got '$CPUS')" ;;
    esac
    ensure_packages "${PACKAGES[@]}" || rc=$?
    [ "$rc" = 0 ] || die "$EXIT_PACKAGES" "could not install Debian packages ${PACKAGES[*]} (apt-get failed)"
    take_lock "$STATE"
    prepare_dirs
    new=$(mktemp "$STATE/etc/slurm.conf.XXXXXX")
    write_conf "$new"
    if cmp -s "$new" "$CONF"; then
        rm -f "$new"
    else
        # The daemons read slurm.conf at start: restart them on the new one.
        if our_ctld || our_slurmd; then
            log "slurm.conf changed: restarting slurmctld and slurmd"
            stop_slurm_daemons
        fi
        chmod 0644 "$new"
        mv -f "$new" "$CONF"
    fi
    link_system_conf
    if healthy; then
        log "already up"
    else
        start_munged
        start_daemon slurmctld "$CTLD_PID"
        start_daemon slurmd "$SLURMD_PID"
        wait_node_idle
        probe
    fi
    log "up in $(since "$t0") s (SLURM_CONF=$CONF, $CPUS CPUs advertised)"
    echo "SLURM_CONF=$CONF"
}

stop_slurm_daemons() {
    stop_pids slurmd "$(read_pid "$SLURMD_PID")"
    stop_pids slurmctld "$(read_pid "$CTLD_PID")"
}

# slurmstepd processes (one per running job step) are started by our slurmd and keep
# its log file in the state dir open; that is how we know they are ours.
our_stepds() {
    local pid fd
    for pid in $(live_pids slurmstepd); do
        for fd in "/proc/$pid/fd/"*; do
            case "$(readlink "$fd" 2>/dev/null)" in
                "$STATE"/*)
                    echo "$pid"
                    break
                    ;;
            esac
        done
    done
}

descendants() {  # descendants PID...: every process below the given ones
    local pid child
    for pid in "$@"; do
        for child in $(pgrep -P "$pid" || true); do
            echo "$child"
            descendants "$child"
        done
    done
}

# kill_steps STEPD_PID...: a slurmstepd ignores SIGTERM, and the job's processes
# (its descendants) outlive it, so SIGKILL the job's processes, then the stepd.
kill_steps() {
    local tasks=()
    mapfile -t tasks < <(descendants "$@")
    log "killing leftover slurmstepd $* and their job processes ${tasks[*]:-(none)}"
    if [ ${#tasks[@]} -gt 0 ]; then kill -KILL "${tasks[@]}" 2>/dev/null || true; fi
    kill -KILL "$@" 2>/dev/null || true
    stop_pids slurmstepd "$@"
}

cmd_down() {
    local t0 left=() pid munged_pid
    t0=$(now)
    need_root "stop munged, slurmctld and slurmd"
    take_lock "$STATE"
    if our_ctld; then
        # Cancel every job first, so that no job step outlives slurmd.
        timeout 20 squeue -h -o %A 2>/dev/null | sort -u | xargs -r timeout 20 scancel 2>/dev/null || true
        for _ in $(seq 1 150); do
            [ -z "$(timeout 10 squeue -h 2>/dev/null || echo busy)" ] && break
            sleep 0.1
        done
    fi
    stop_slurm_daemons
    # job steps that survived (slurmctld was already gone, so scancel could not reach them)
    mapfile -t left < <(our_stepds)
    if [ ${#left[@]} -gt 0 ]; then
        kill_steps "${left[@]}"
    fi
    munged_pid=$(read_pid "$MUNGED_PID")
    stop_pids munged "$munged_pid"
    if [ -L "$SYSTEM_CONF" ] && [ "$(readlink "$SYSTEM_CONF")" = "$CONF" ]; then
        rm -f "$SYSTEM_CONF"
    fi
    # Start the next `up` with no jobs from this one (job ids restart at 1).
    rm -rf "${STATE:?}/ctld" "${STATE:?}/spool"
    left=()
    for pid in "$(read_pid "$SLURMD_PID")" "$(read_pid "$CTLD_PID")" "$munged_pid"; do
        if pid_alive "$pid" slurmd slurmctld munged; then left+=("$(cat "/proc/$pid/comm") $pid"); fi
    done
    for pid in $(our_stepds); do left+=("slurmstepd $pid"); done
    [ ${#left[@]} -eq 0 ] || die "$EXIT_FAILED" "down incomplete, still running: ${left[*]}"
    rm -f "$MUNGED_PID" "$CTLD_PID" "$SLURMD_PID"
    log "down in $(since "$t0") s"
}

cmd_status() {
    local name pf pid state
    for name in munged slurmctld slurmd; do
        case $name in
            munged) pf=$MUNGED_PID ;;
            slurmctld) pf=$CTLD_PID ;;
            slurmd) pf=$SLURMD_PID ;;
        esac
        pid=$(read_pid "$pf")
        if pid_alive "$pid" "$name"; then
            echo "$name: running, pid $pid"
        elif [ "$name" = munged ] && [ -n "$(live_pids munged)" ]; then
            echo "munged: not ours, pid $(live_pids munged | head -1)"
        else
            echo "$name: not running"
        fi
    done
    state=$(node_state)
    echo "node $(node_name): ${state:-unknown}"
    echo "SLURM_CONF=$CONF"
    healthy
}

case "${1:-}" in
    up) cmd_up ;;
    down) cmd_down ;;
    status) cmd_status ;;
    *)
        echo "usage: $0 up|down|status" >&2
        exit "$EXIT_USAGE"
        ;;
esac
