#!/usr/bin/env bash
# A Slurm cluster of several compute nodes on this one host, for zotsink's job-array tests.
#
#   slurm.sh up       install packages if missing, write slurm.conf, start munged and
#                     slurmctld here and one node per namespace (see nodes.sh) with its
#                     own slurmd, wait until every node is idle and a job runs
#   slurm.sh status   what runs; exit 0 only when fully up
#   slurm.sh down     cancel every job, stop the nodes and what `up` started, delete the
#                     bridge and the veths
#   slurm.sh kill NODE
#                     a node's death: SIGKILL its PID 1, so the kernel kills every process
#                     in it at once (slurmd, job steps, jobs, its FUSE clients, Grid
#                     Engine's execd), and its mounts go with its mount namespace; then tell
#                     Slurm the node is DOWN (its jobs end as NODE_FAIL, and are requeued
#                     unless submitted with --no-requeue). Deletes nothing on disk.
#   slurm.sh revive NODE
#                     bring a killed node back: its namespaces, a client of each shared file
#                     system that is up, its slurmd, Grid Engine's execd when sge.sh is up;
#                     the node RESUMEd, and idle before this returns
#
# Each node has its own hostname (node1, node2, ...), address, slurmd and, when the
# GlusterFS volume (gluster.sh), the MooseFS file system (moosefs.sh) or the CephFS
# (ceph.sh) is up, its own FUSE client of it, mounted at the same paths as on this host:
# a job sees the paths the tests pass it, served by its node's client, as on a real
# cluster. The order does not
# matter: a file system brought up after the nodes mounts itself in them, and one taken
# down unmounts itself from them first.
# slurmctld and munged run in the host; one munged serves every node through its
# socket (one key, as on a real cluster).
#
# Runs without systemd and without cgroups: processes are tracked through /proc
# (proctrack/linuxproc) and tasks are not bound (task/none). Each node advertises more
# CPUs than the host has (SlurmdParameters=config_overrides) and the scheduler starts
# batch jobs at once (batch_sched_delay=0): tasks that mostly wait on I/O then run many
# at a time, and a 100-task array finishes in seconds instead of minutes.
#
# slurm.conf lives in the state dir. /etc/slurm/slurm.conf is made a symlink to it
# when there is no such file yet, so plain `sbatch` works; otherwise set SLURM_CONF for
# the client commands: `up` prints the line to eval (`eval "$(slurm.sh up)"`).
#
# Settings (environment):
#   ZOTSINK_SLURM_STATE         state dir: slurm.conf, controller state, spool, logs,
#                               pid files (default /var/tmp/zotsink-cluster/slurm)
#   ZOTSINK_SLURM_NODES         number of compute nodes, 1 to 9 (default 3)
#   ZOTSINK_SLURM_CPUS          CPUs each node advertises (default 12)
#   ZOTSINK_SLURM_NET           private /24 of the nodes' bridge, first three octets
#                               (default 10.231.0: host 10.231.0.1, nodeN 10.231.0.1N)
#   ZOTSINK_SLURM_SCHED_PARAMS  SchedulerParameters (default batch_sched_delay=0;
#                               Slurm's own default delay of 3 s triples array run times)
#
# The nodes' addresses exist only on this host (bridge zsbr0, veths zsv-NODE). Only pids
# this script recorded are ever stopped; a munged that was already running is used as it
# is and left running.
# Exit codes: see lib.sh.
set -euo pipefail

# shellcheck disable=SC2034  # read by lib.sh
LOG_TAG=slurm
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/lib.sh"

STATE=${ZOTSINK_SLURM_STATE:-/var/tmp/zotsink-cluster/slurm}
CPUS=${ZOTSINK_SLURM_CPUS:-12}
NODES=${ZOTSINK_SLURM_NODES:-3}
NODE_NET=${ZOTSINK_SLURM_NET:-10.231.0}
SCHED_PARAMS=${ZOTSINK_SLURM_SCHED_PARAMS:-batch_sched_delay=0}
PACKAGES=(slurmctld slurmd slurm-client munge)

CONF=$STATE/etc/slurm.conf
SYSTEM_CONF=/etc/slurm/slurm.conf
RUN=$STATE/run
LOGS=$STATE/log
MUNGE_DIR=$STATE/munge
MUNGED_PID=$MUNGE_DIR/munged.pid
CTLD_PID=$RUN/slurmctld.pid
NODE_RUN=$RUN/nodes
HOSTS=$STATE/etc/hosts
# munged's socket stays at its default path: Slurm's auth/munge looks for it there.
MUNGE_SOCKET_DIR=/run/munge

export SLURM_CONF=$CONF
# shellcheck source-path=SCRIPTDIR source=nodes.sh
. "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/nodes.sh"


our_munged() { pid_alive "$(read_pid "$MUNGED_PID")" munged; }
our_ctld() { pid_alive "$(read_pid "$CTLD_PID")" slurmctld; }

node_names() { seq -f 'node%g' 1 "$NODES"; }

# "NAME STATE" per node, as the controller sees them
node_states() { timeout 10 sinfo -h -N -o '%N %T' 2>/dev/null | sort -u || true; }

# all configured nodes are up (idle, or busy with jobs)
nodes_ready() {
    [ "$(node_states | grep -cE ' (idle|mixed|allocated|completing)$')" = "$NODES" ]
}

write_conf() {  # write_conf FILE
    local host mem n
    host=$(hostname -s)
    # RealMemory as slurmd measures it; the CPU count is ours (see config_overrides)
    mem=$(slurmd -C | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' | head -1)
    cat >"$1" <<CONF
# Written by scripts/cluster/slurm.sh: $NODES namespace nodes on one host.
ClusterName=zotsink
SlurmctldHost=$host($NODE_NET.1)
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
# each node advertises CPUS=$CPUS although the host has fewer
SlurmdParameters=config_overrides
ReturnToService=2
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation=$STATE/ctld
# %n: the node's name; the nodes share this host's file system
SlurmdSpoolDir=$STATE/spool/%n
SlurmctldPidFile=$CTLD_PID
SlurmdPidFile=$NODE_RUN/slurmd-%n.pid
SlurmctldLogFile=$LOGS/slurmctld.log
SlurmdLogFile=$LOGS/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true
MaxArraySize=100001
MaxJobCount=200000
# finished jobs stay visible (scontrol show job, sbatch --wait) for 5 minutes
MinJobAge=300
KillWait=5
# A node that does not answer is set DOWN after this many seconds (its jobs end as
# NODE_FAIL): Slurm's default, longer than the minute a test freezes a node for.
SlurmdTimeout=300
CONF
    for n in $(node_names); do
        echo "NodeName=$n NodeHostname=$n NodeAddr=$(node_ip "$n") CPUs=$CPUS RealMemory=$mem State=UNKNOWN"
    done >>"$1"
    echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO" >>"$1"
}

write_hosts() {
    local n
    {
        echo "127.0.0.1 localhost"
        echo "$NODE_NET.1 $(hostname -s)"
        for n in $(node_names); do echo "$(node_ip "$n") $n"; done
    } >"$HOSTS.new"
    mv -f "$HOSTS.new" "$HOSTS"
}

prepare_dirs() {
    local n
    mkdir -p "$STATE/etc" "$STATE/ctld" "$RUN" "$NODE_RUN" "$LOGS" "$MUNGE_DIR" "$MUNGE_SOCKET_DIR"
    for n in $(node_names); do mkdir -p "$STATE/spool/$n"; done
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
    # It daemonises itself; it starts as root and drops to SlurmUser.
    "/usr/sbin/$name" -f "$CONF" </dev/null >"$LOGS/$name.out" 2>&1 9>&- ||
        die "$EXIT_FAILED" "$name failed to start: $(tail -n 1 "$LOGS/$name.out" 2>/dev/null)" \
            "(log: $LOGS/$name.log)"
    if ! wait_pidfile "$pf" "$name"; then
        tail -n 20 "$LOGS/$name.log" >&2 2>/dev/null || true
        die "$EXIT_FAILED" "$name did not stay up (log: $LOGS/$name.log)"
    fi
    log "$name pid $(read_pid "$pf") in $(since "$t0") s"
}


# wait_nodes_idle: every node registered and idle (a node that was down before comes
# back on request)
wait_nodes_idle() {
    local t0 down
    t0=$(now)
    for _ in $(seq 1 300); do
        nodes_ready && break
        down=$(node_states | awk '$2 ~ /^(down|drain)/ { print $1 }')
        for n in $down; do
            scontrol update nodename="$n" state=resume >/dev/null 2>&1 || true
        done
        sleep 0.1
    done
    nodes_ready || die "$EXIT_FAILED" "nodes not idle after 30 s: $(node_states | tr '\n' ' ')(logs in $LOGS)"
    log "$NODES nodes idle after $(since "$t0") s"
}

# shared_filesystems: the shared file systems that are up now, and a line for each that is
# not (once, not once per node: either is optional, and mounts itself in the running
# nodes when it comes up later; see lib.sh ready_nodes)
shared_filesystems() {
    local fs
    for fs in gluster moosefs ceph; do
        if bash "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/$fs.sh" status >/dev/null 2>&1 9>&-; then
            echo "$fs"
        else
            log "$fs is not up: the nodes get its mounts when \`$fs.sh up\` brings it up"
        fi
    done
}

# attach_filesystems NODE FS...: each of the file systems gets a client in the node
attach_filesystems() {
    local node=$1 fs rc
    shift
    for fs in "$@"; do
        rc=0
        bash "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/$fs.sh" attach "$(node_init "$node")" 9>&- || rc=$?
        case "$rc" in
            0) ;;
            "$EXIT_PRECONDITION") log "$node: no $fs mount ($fs went down meanwhile)" ;;
            *) die "$EXIT_FAILED" "$node: $fs.sh attach exited $rc" ;;
        esac
    done
}

start_node() {  # start_node NAME FS...
    local name=$1 t0 pf
    t0=$(now)
    pf=$NODE_RUN/slurmd-$name.pid
    if node_alive "$name" && node_exec "$name" sh -c "[ \"\$(cat /proc/\$(cat $pf)/comm)\" = slurmd ]" 2>/dev/null; then
        return 0
    fi
    node_create "$name" "$HOSTS"
    # a pid file of an earlier node names a pid of a dead PID namespace
    rm -f "$pf"
    shift
    attach_filesystems "$name" "$@"
    node_exec "$name" /usr/sbin/slurmd -f "$CONF" </dev/null >"$LOGS/slurmd-$name.out" 2>&1 9>&- ||
        die "$EXIT_FAILED" "slurmd on $name failed to start: $(tail -n 1 "$LOGS/slurmd-$name.out")" \
            "(log: $LOGS/slurmd-$name.log)"
    log "$name ($(node_ip "$name"), init pid $(node_init "$name")) up in $(since "$t0") s"
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
    local n
    { our_munged || [ -n "$(live_pids munged)" ]; } || return 1
    our_ctld || return 1
    for n in $(node_names); do node_alive "$n" || return 1; done
    nodes_ready
}

cmd_up() {
    local t0 rc=0 new n up_fs=()
    t0=$(now)
    need_root "start munged, slurmctld and the nodes"
    case "$CPUS" in
        '' | *[!0-9]* | 0) die "$EXIT_USAGE" "ZOTSINK_SLURM_CPUS must be a positive integer (got '$CPUS')" ;;
    esac
    case "$NODES" in
        [1-9]) ;;
        *) die "$EXIT_USAGE" "ZOTSINK_SLURM_NODES must be 1 to 9 (got '$NODES')" ;;
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
        # The daemons read slurm.conf at start: start everything afresh on the new one.
        if our_ctld || [ -n "$(known_nodes)" ]; then
            log "slurm.conf changed: restarting slurmctld and the nodes"
            stop_slurm
        fi
        chmod 0644 "$new"
        mv -f "$new" "$CONF"
    fi
    link_system_conf
    if healthy; then
        log "already up"
    else
        bridge_up
        write_hosts
        start_munged
        start_daemon slurmctld "$CTLD_PID"
        mapfile -t up_fs < <(shared_filesystems)
        for n in $(node_names); do start_node "$n" "${up_fs[@]}"; done
        wait_nodes_idle
        probe
    fi
    log "up in $(since "$t0") s ($NODES nodes, $CPUS CPUs each); for sbatch, squeue and the rest," \
        "eval the lines below: eval \"\$($0 up)\""
    printf 'SLURM_CONF=%s\nexport SLURM_CONF\n' "$CONF"
}

# stop_slurm: cancel the jobs, stop every node (its slurmd, job steps, jobs and FUSE
# clients die with it) and slurmctld.
stop_slurm() {
    local n
    if our_ctld; then
        # Cancel every job first, so that jobs end as CANCELLED rather than NODE_FAIL.
        timeout 20 squeue -h -o %A 2>/dev/null | sort -u | xargs -r timeout 20 scancel 2>/dev/null || true
        for _ in $(seq 1 150); do
            [ -z "$(timeout 10 squeue -h 2>/dev/null || echo busy)" ] && break
            sleep 0.1
        done
    fi
    for n in $(known_nodes); do node_destroy "$n"; done
    stop_pids slurmctld "$(read_pid "$CTLD_PID")"
}

cmd_down() {
    local t0 left=() pid munged_pid n
    t0=$(now)
    need_root "stop munged, slurmctld and the nodes"
    take_lock "$STATE"
    stop_slurm
    munged_pid=$(read_pid "$MUNGED_PID")
    stop_pids munged "$munged_pid"
    bridge_down
    if [ -L "$SYSTEM_CONF" ] && [ "$(readlink "$SYSTEM_CONF")" = "$CONF" ]; then
        rm -f "$SYSTEM_CONF"
    fi
    # Start the next `up` with no jobs from this one (job ids restart at 1).
    rm -rf "${STATE:?}/ctld" "${STATE:?}/spool"
    for pid in "$(read_pid "$CTLD_PID")" "$munged_pid"; do
        if pid_alive "$pid" slurmctld munged; then left+=("$(cat "/proc/$pid/comm") $pid"); fi
    done
    for n in $(known_nodes); do left+=("node $n"); done
    if ip link show "$NODE_BRIDGE" >/dev/null 2>&1; then left+=("bridge $NODE_BRIDGE"); fi
    [ ${#left[@]} -eq 0 ] || die "$EXIT_FAILED" "down incomplete, still there: ${left[*]}"
    rm -f "$MUNGED_PID" "$CTLD_PID" "$NODE_RUN"/slurmd-*.pid "$HOSTS"
    log "down in $(since "$t0") s"
}

cmd_status() {
    local name pf pid n
    for name in munged slurmctld; do
        case $name in
            munged) pf=$MUNGED_PID ;;
            slurmctld) pf=$CTLD_PID ;;
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
    for n in $(node_names); do
        if node_alive "$n"; then
            echo "$n: namespace init pid $(node_init "$n"), hostname $(node_exec "$n" hostname)," \
                "FUSE mounts: $(node_fuse_mounts "$n" | sort | tr '\n' ' ')"
        else
            echo "$n: not running"
        fi
    done
    node_states | sed 's/^/slurm: /'
    echo "SLURM_CONF=$CONF"
    healthy
}

# known_node NAME: NAME is one of the configured nodes
known_node() {
    case " $(node_names | tr '\n' ' ')" in
        *" $1 "*) return 0 ;;
    esac
    die "$EXIT_USAGE" "no node '$1' (the nodes: $(node_names | tr '\n' ' '))"
}

# pids_in_pid_ns NS: the processes (host pids) whose PID namespace is NS (as readlink
# shows /proc/PID/ns/pid)
pids_in_pid_ns() {
    local p
    for p in /proc/[0-9]*; do
        [ "$(readlink "$p/ns/pid" 2>/dev/null)" = "$1" ] && echo "${p#/proc/}"
    done
    return 0
}

cmd_kill() {
    local name=$1 t0 init ns
    t0=$(now)
    need_root "kill a node"
    known_node "$name"
    take_lock "$STATE"
    our_ctld || die "$EXIT_PRECONDITION" "slurmctld is not running (slurm.sh up)"
    node_alive "$name" || die "$EXIT_PRECONDITION" "$name is not running"
    init=$(node_init "$name")
    ns=$(readlink "/proc/$init/ns/pid") || die "$EXIT_FAILED" "$name: no PID namespace of pid $init"
    # The death of a PID namespace's PID 1 makes the kernel SIGKILL every other process
    # in it, stopped ones too: nothing of the node gets a chance to clean up, as when a
    # machine loses power. Its FUSE clients die with it, so its mounts are gone for good.
    kill -KILL "$init"
    for _ in $(seq 1 100); do
        [ -z "$(pids_in_pid_ns "$ns")" ] && break
        sleep 0.1
    done
    [ -z "$(pids_in_pid_ns "$ns")" ] ||
        die "$EXIT_FAILED" "$name: processes left after its PID 1 was killed: $(pids_in_pid_ns "$ns" | tr '\n' ' ')"
    # its veth and pid files (nothing of it runs any more: node_destroy stops nothing)
    node_destroy "$name"
    # Slurm would notice only after SlurmdTimeout: tell it now, as a site's health check
    # or an administrator does.
    timeout 20 scontrol update nodename="$name" state=down reason="killed by slurm.sh kill" ||
        die "$EXIT_FAILED" "scontrol could not set $name DOWN (log: $LOGS/slurmctld.log)"
    log "$name killed and set DOWN in $(since "$t0") s; \`$0 revive $name\` brings it back"
}

# attach_sge NODE: Grid Engine's execd in the node, when sge.sh is up
attach_sge() {
    local rc=0
    bash "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/sge.sh" attach "$(node_init "$1")" 9>&- || rc=$?
    case "$rc" in
        0) ;;
        "$EXIT_PRECONDITION") log "$1: no sge_execd (Grid Engine is not up)" ;;
        *) die "$EXIT_FAILED" "$1: sge.sh attach exited $rc" ;;
    esac
}

cmd_revive() {
    local name=$1 t0 up_fs=()
    t0=$(now)
    need_root "start a node"
    known_node "$name"
    take_lock "$STATE"
    our_ctld || die "$EXIT_PRECONDITION" "slurmctld is not running (slurm.sh up)"
    mapfile -t up_fs < <(shared_filesystems)
    start_node "$name" "${up_fs[@]}"
    attach_sge "$name"
    # RESUME, and wait until every node is idle (wait_nodes_idle resumes a DOWN node)
    timeout 20 scontrol update nodename="$name" state=resume >/dev/null 2>&1 || true
    wait_nodes_idle
    log "$name revived in $(since "$t0") s"
}

case "${1:-}" in
    up) cmd_up ;;
    down) cmd_down ;;
    status) cmd_status ;;
    kill | revive)
        [ $# = 2 ] || die "$EXIT_USAGE" "usage: $0 $1 NODE"
        "cmd_$1" "$2"
        ;;
    *)
        echo "usage: $0 up|down|status|kill NODE|revive NODE" >&2
        exit "$EXIT_USAGE"
        ;;
esac
