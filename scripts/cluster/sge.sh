#!/usr/bin/env bash
# Son of Grid Engine on the nodes of slurm.sh, for zotsink's SGE job-script tests.
#
#   sge.sh up        install Debian's gridengine packages if missing (debconf preseeded,
#                    non-interactive), start sge_qmaster here and one sge_execd in every
#                    running node of slurm.sh, a queue all.q over them; wait until a job
#                    runs; prints the SGE_ROOT and SGE_CELL lines
#   sge.sh status    what runs; exit 0 only when fully up
#   sge.sh down      delete every job, stop the execds and the qmaster, forget the
#                    queue and the hosts
#   sge.sh attach PID
#                    an sge_execd in the node of PID (slurm.sh revive calls it for a node
#                    it brings back); nothing to do when one answers there
#   sge.sh exec CMD...
#                    run a client command (qsub, qstat, qdel, qmod, qconf, or a script
#                    that calls them) against this cluster
#
# The nodes are slurm.sh's (bring it up first): each runs an sge_execd beside its slurmd,
# with the node's own hostname and address, and its own clients of the shared file
# systems. The qmaster runs in this host's network but in a mount namespace of its own
# whose /etc/hosts is the nodes' (this host as $ZOTSINK_SLURM_NET.1): Grid Engine checks
# that each host's name and address agree both ways, and this host's own /etc/hosts,
# which maps its name to 127.0.0.1, is left alone. Client commands run with the same
# /etc/hosts (`sge.sh exec`: a mount namespace of their own that ends with them), so they
# reach the qmaster under the same name.
#
# Settings (environment):
#   ZOTSINK_SGE_STATE    state dir: pid file, logs (default /var/tmp/zotsink-cluster/sge)
#   ZOTSINK_SGE_SLOTS    slots of each node in all.q (default 8)
#   ZOTSINK_SGE_NOTIFY   seconds between the -notify signal (SIGUSR1/SIGUSR2) and the
#                        stop or kill that follows it (the queue's notify; 1 to 59,
#                        default 10: time for zotsink to end its tasks on a busy host)
#
# The queue starts jobs through their #! line (shell_start_mode unix_behavior, as most
# sites set it), has no load threshold (this host's load says nothing about a node) and
# lets root submit (min_uid 0): the tests run as root.
# Only processes this script started are stopped. Exit codes: see lib.sh.
set -euo pipefail

# shellcheck disable=SC2034  # read by lib.sh
LOG_TAG=sge
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/lib.sh"
# for NODE_DETACH_FUSE
# shellcheck source-path=SCRIPTDIR source=nodes.sh
. "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/nodes.sh"

STATE=${ZOTSINK_SGE_STATE:-/var/tmp/zotsink-cluster/sge}
SLOTS=${ZOTSINK_SGE_SLOTS:-8}
NOTIFY=${ZOTSINK_SGE_NOTIFY:-10}
PACKAGES=(gridengine-master gridengine-exec gridengine-client)
# the nodes' /etc/hosts, written by slurm.sh
HOSTS=${ZOTSINK_SLURM_STATE:-/var/tmp/zotsink-cluster/slurm}/etc/hosts

export SGE_ROOT=/var/lib/gridengine SGE_CELL=default
RUN=$STATE/run
LOGS=$STATE/logs
QMASTER_PID=$RUN/qmaster.pid
# where Debian's package keeps the qmaster's and the execds' spool (bootstrap, global config)
SPOOL=/var/spool/gridengine
QUEUE=all.q

our_qmaster() { pid_alive "$(read_pid "$QMASTER_PID")" sge_qmaster; }

# in_master CMD...: CMD with the nodes' /etc/hosts, in a mount namespace of its own that
# ends with it (a copy of this host's mounts: the shared file systems are there)
in_master() {
    unshare --mount --propagation private sh -c 'mount --bind "$0" /etc/hosts && exec "$@"' "$HOSTS" "$@"
}

# Debconf answers for the packages' questions: configure a cell "default" with this host
# as its master. Set before the install, so apt-get never asks.
preseed() {
    local pkg
    for pkg in gridengine-common gridengine-master; do
        printf '%s shared/gridengineconfig boolean true\n' "$pkg"
        printf '%s shared/gridenginecell string default\n' "$pkg"
        printf '%s shared/gridenginemaster string %s\n' "$pkg" "$(hostname)"
    done | debconf-set-selections
}

# queue_states: "NODE STATES" per queue instance of all.q as qstat sees them (no states:
# up and reachable; "u": its execd does not answer)
queue_states() {
    in_master timeout 10 qstat -f -q "$QUEUE" 2>/dev/null |
        awk -v q="$QUEUE@" 'index($1, q) == 1 { sub(q, "", $1); print $1, (NF >= 6 ? $6 : "") }'
}

nodes_ready() {
    local want have
    want=$(ready_nodes | wc -l)
    have=$(queue_states | awk '$2 !~ /[uadEe]/' | wc -l)
    [ "$want" -gt 0 ] && [ "$have" = "$want" ]
}

healthy() { our_qmaster && nodes_ready; }

# edit_with SED-SCRIPT QCONF-OPTION...: qconf's "modify" through a non-interactive editor
edit_with() {
    local sed_script=$1 editor
    shift
    editor=$(mktemp "$RUN/editor.XXXXXX")
    printf '#!/bin/sh\nexec sed -i %q "$1"\n' "$sed_script" >"$editor"
    chmod 0755 "$editor"
    in_master env EDITOR="$editor" qconf "$@" >&2
    rm -f "$editor"
}

start_qmaster() {
    local t0 pid
    t0=$(now)
    for pid in $(live_pids sge_qmaster); do
        [ "$pid" = "$(read_pid "$QMASTER_PID")" ] ||
            die "$EXIT_PRECONDITION" "an sge_qmaster not started by $0 is running (pid $pid); stop it first"
    done
    our_qmaster && return 0
    [ -s "$HOSTS" ] || die "$EXIT_PRECONDITION" "no $HOSTS: bring the nodes up first (slurm.sh up)"
    rm -f "$SPOOL/qmaster/qmaster.pid"
    # A private mount namespace: /etc/hosts is the nodes' there; the copies of FUSE mounts
    # are detached, so that this namespace never keeps a file system referenced.
    unshare --mount --propagation private sh -c "mount --bind $HOSTS /etc/hosts &&
        $NODE_DETACH_FUSE && exec /usr/sbin/sge_qmaster" \
        </dev/null >"$LOGS/qmaster.out" 2>&1 9>&- ||
        die "$EXIT_FAILED" "sge_qmaster failed to start: $(tail -n 1 "$LOGS/qmaster.out") (log: $SPOOL/qmaster/messages)"
    for _ in $(seq 1 100); do
        pid=$(read_pid "$SPOOL/qmaster/qmaster.pid")
        if pid_alive "$pid" sge_qmaster; then break; fi
        sleep 0.05
    done
    pid_alive "$pid" sge_qmaster || die "$EXIT_FAILED" "sge_qmaster did not stay up (log: $SPOOL/qmaster/messages)"
    echo "$pid" >"$QMASTER_PID"
    for _ in $(seq 1 100); do
        in_master timeout 5 qconf -sh >/dev/null 2>&1 && break
        sleep 0.05
    done
    in_master timeout 5 qconf -sh >/dev/null 2>&1 || die "$EXIT_FAILED" "sge_qmaster does not answer (log: $SPOOL/qmaster/messages)"
    log "sge_qmaster pid $pid in $(since "$t0") s"
}

# The cluster's settings, before any execd starts (an execd reads the global
# configuration when it starts).
configure() {
    local names qfile
    edit_with 's/^min_uid .*/min_uid 0/; s/^min_gid .*/min_gid 0/; s/^load_report_time .*/load_report_time 00:00:01/' -mconf
    # one scheduling pass a second instead of every 15 s
    edit_with 's/^schedule_interval .*/schedule_interval 0:0:1/; s/^flush_submit_sec .*/flush_submit_sec 1/; s/^flush_finish_sec .*/flush_finish_sec 1/' -msconf
    names=$(ready_nodes | awk '{ print $1 }' | paste -sd, -)
    in_master qconf -ah "$names" >/dev/null 2>&1 || true # already admin hosts: fine
    in_master qconf -as "$(hostname)" >/dev/null 2>&1 || true
    qfile=$RUN/$QUEUE.conf
    in_master env EDITOR=cat qconf -aq "$QUEUE" 2>/dev/null |
        sed -e "s/^hostlist .*/hostlist ${names//,/ }/" -e 's/^load_thresholds .*/load_thresholds NONE/' \
            -e 's/^pe_list .*/pe_list NONE/' -e "s/^slots .*/slots $SLOTS/" \
            -e 's/^shell_start_mode .*/shell_start_mode unix_behavior/' \
            -e "s/^notify .*/notify 00:00:$(printf %02d "$NOTIFY")/" >"$qfile" || true
    # (qconf -aq fails after printing the template: the editor changed nothing it accepts)
    grep -q '^qname' "$qfile" || die "$EXIT_FAILED" "qconf gave no queue template"
    if in_master qconf -sq "$QUEUE" >/dev/null 2>&1; then
        in_master qconf -Mq "$qfile" >&2
    else
        in_master qconf -Aq "$qfile" >&2
    fi
}

# start_execd NAME PID: an sge_execd in the node NAME whose PID 1 is PID, unless one
# runs there and qmaster hears from it
start_execd() {
    local name=$1 pid=$2
    if [ -n "$(awk -v n="$name" '$1 == n && $2 !~ /u/' <<<"$(queue_states)")" ] &&
        nsenter --target "$pid" --pid --mount -- pgrep -x sge_execd >/dev/null; then
        return 0
    fi
    # the pid file of an execd of a node that was killed names a pid of a dead namespace
    if ! nsenter --target "$pid" --pid --mount -- pgrep -x sge_execd >/dev/null; then
        rm -f "$SPOOL/execd/$name/execd.pid"
    fi
    nsenter --target "$pid" --net --uts --mount --pid -- /usr/sbin/sge_execd \
        </dev/null >"$LOGS/execd-$name.out" 2>&1 9>&- ||
        die "$EXIT_FAILED" "sge_execd on $name failed to start: $(tail -n 1 "$LOGS/execd-$name.out")" \
            "(log: $SPOOL/execd/$name/messages)"
}

# wait_execds T0: every ready node's execd answers
wait_execds() {
    for _ in $(seq 1 300); do
        nodes_ready && break
        sleep 0.1
    done
    nodes_ready || die "$EXIT_FAILED" "execds not answering after 30 s: $(queue_states | tr '\n' ' ')(logs in $SPOOL/execd)"
    log "$(ready_nodes | wc -l) execds answering after $(since "$1") s"
}

# start_execds: one sge_execd in each ready node that has none answering
start_execds() {
    local name pid t0
    t0=$(now)
    while read -r name pid; do
        [ -n "$pid" ] || continue
        start_execd "$name" "$pid"
    done < <(ready_nodes)
    wait_execds "$t0"
}

# An execd in one node, for a node slurm.sh brought back after the rest were up.
cmd_attach() {
    local pid=${1:-} t0 name
    t0=$(now)
    case "$pid" in '' | *[!0-9]*) die "$EXIT_USAGE" "usage: $0 attach PID" ;; esac
    need_root "start an sge_execd"
    take_lock "$STATE"
    our_qmaster || die "$EXIT_PRECONDITION" "sge_qmaster is not running (sge.sh up)"
    name=$(nsenter --target "$pid" --uts hostname) || die "$EXIT_FAILED" "no process $pid"
    start_execd "$name" "$pid"
    wait_execds "$t0"
}

# End-to-end check: a job runs to completion.
probe() {
    local t0
    t0=$(now)
    (cd /tmp && in_master timeout 60 qsub -sync y -b y -o /dev/null -j y -N zotsink-probe true) >/dev/null ||
        die "$EXIT_FAILED" "the probe job did not complete (logs in $SPOOL)"
    log "probe job completed in $(since "$t0") s"
}

cmd_up() {
    local t0 rc=0
    t0=$(now)
    need_root "start sge_qmaster and the execds"
    [ -n "$(ready_nodes)" ] || die "$EXIT_PRECONDITION" "no running nodes: bring them up first (slurm.sh up)"
    case "$SLOTS$NOTIFY" in *[!0-9]*) die "$EXIT_USAGE" "ZOTSINK_SGE_SLOTS and ZOTSINK_SGE_NOTIFY must be numbers" ;; esac
    [ "$NOTIFY" -ge 1 ] && [ "$NOTIFY" -le 59 ] || die "$EXIT_USAGE" "ZOTSINK_SGE_NOTIFY must be 1 to 59 seconds"
    preseed
    ensure_packages "${PACKAGES[@]}" || rc=$?
    [ "$rc" = 0 ] || die "$EXIT_PACKAGES" "could not install Debian packages ${PACKAGES[*]} (apt-get failed)"
    take_lock "$STATE"
    mkdir -p "$RUN" "$LOGS"
    if healthy; then
        log "already up"
    else
        start_qmaster
        configure
        start_execds
        probe
    fi
    log "up in $(since "$t0") s; for qsub, qstat and the rest: $0 exec CMD..."
    printf 'SGE_ROOT=%s\nSGE_CELL=%s\n' "$SGE_ROOT" "$SGE_CELL"
}

cmd_down() {
    local t0 hosts left=() pid
    t0=$(now)
    need_root "stop sge_qmaster and the execds"
    take_lock "$STATE"
    if our_qmaster; then
        in_master timeout 20 qdel -f -u '*' >/dev/null 2>&1 || true
        hosts=$(in_master timeout 10 qconf -sel 2>/dev/null || true)
        in_master timeout 20 qconf -ke all >/dev/null 2>&1 || true
        # forget the queue and the hosts: the next `up` starts from the same state
        in_master timeout 10 qconf -dq "$QUEUE" >/dev/null 2>&1 || true
        for h in $hosts; do
            in_master timeout 10 qconf -de "$h" >/dev/null 2>&1 || true
            in_master timeout 10 qconf -dh "$h" >/dev/null 2>&1 || true
        done
        in_master timeout 20 qconf -km >/dev/null 2>&1 || true
    fi
    # An execd ends with its node (slurm.sh down) or with `qconf -ke`; the qmaster with
    # `qconf -km`. What is left after 10 s is stopped by its pid: no other Grid Engine
    # runs here (up refuses a foreign qmaster).
    for _ in $(seq 1 100); do
        [ -z "$(live_pids sge_qmaster)$(live_pids sge_execd)$(live_pids sge_shepherd)" ] && break
        sleep 0.1
    done
    stop_pids sge_shepherd $(live_pids sge_shepherd)
    stop_pids sge_execd $(live_pids sge_execd)
    stop_pids sge_qmaster $(live_pids sge_qmaster)
    rm -rf "$SPOOL"/execd/node*
    for pid in $(live_pids sge_qmaster) $(live_pids sge_execd); do left+=("$(cat "/proc/$pid/comm") $pid"); done
    [ ${#left[@]} -eq 0 ] || die "$EXIT_FAILED" "down incomplete, still there: ${left[*]}"
    rm -f "$QMASTER_PID"
    log "down in $(since "$t0") s"
}

cmd_status() {
    if our_qmaster; then echo "sge_qmaster: running, pid $(read_pid "$QMASTER_PID")"; else echo "sge_qmaster: not running"; fi
    our_qmaster && queue_states | sed 's/^/all.q: /'
    printf 'SGE_ROOT=%s\nSGE_CELL=%s\n' "$SGE_ROOT" "$SGE_CELL"
    healthy
}

case "${1:-}" in
    up) cmd_up ;;
    down) cmd_down ;;
    status) cmd_status ;;
    attach) cmd_attach "${2:-}" ;;
    exec)
        shift
        our_qmaster || die "$EXIT_PRECONDITION" "sge_qmaster is not running (sge.sh up)"
        in_master "$@"
        ;;
    *)
        echo "usage: $0 up|down|status|attach PID|exec CMD..." >&2
        exit "$EXIT_USAGE"
        ;;
esac
