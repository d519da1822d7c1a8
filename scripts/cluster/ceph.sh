#!/usr/bin/env bash
# A real CephFS on this host, mounted three times with ceph-fuse, for zotsink's tests.
#
#   ceph.sh up        install packages if missing, start one monitor, one manager, one OSD
#                     and one metadata server (MDS), create a CephFS and mount it three
#                     times; prints the mount points
#   ceph.sh status    what runs and what is mounted; exit 0 only when fully up
#   ceph.sh down      unmount, stop what `up` started and delete the cluster's data (every
#                     file written on the CephFS)
#   ceph.sh attach PID
#                     mount the CephFS inside the namespaces of process PID (a node of
#                     slurm.sh) at the same mount points, with a client of its own; `up`
#                     does this for every running node and `down` unmounts there first,
#                     so Slurm may come up before or after Ceph
#   ceph.sh exec CMD...
#                     run a Ceph command against this cluster (`ceph.sh exec ceph -s`):
#                     it adds `-c` and the configuration file
#
# Each mount point has its own ceph-fuse process, so the mounts behave like separate
# cluster nodes: mount 1 and mount 2 for writers, mount 3 an independent reader. Locks
# are granted by the MDS to one client at a time, as a Lustre MDS grants them.
#
# The smallest Ceph that holds a file system: the OSD keeps its objects in memory
# (memstore: no disk, no loop device, nothing to format), every pool keeps one copy, and
# authentication is off (cephx keys add nothing on one host). The daemons run in the
# foreground of their own sessions with pid files of ours; every daemon and client listens
# on $ZOTSINK_CEPH_IP only, a loopback address.
#
# Settings (environment):
#   ZOTSINK_CEPH_STATE   state dir: configuration, the daemons' data, pid files, logs
#                        (default /var/tmp/zotsink-cluster/ceph)
#   ZOTSINK_CEPH_MOUNTS  three mount points (default "/mnt/zotsink-c1 /mnt/zotsink-c2
#                        /mnt/zotsink-c3")
#   ZOTSINK_CEPH_IP      the address of every daemon (default 127.0.0.3)
#   ZOTSINK_CEPH_PORT    the monitor's port; the other daemons take ports from PORT+1 to
#                        PORT+99 (default 13300: not Ceph's 3300 and 6789, so another Ceph
#                        on this host does not collide)
#   ZOTSINK_CEPH_SIZE    bytes the in-memory OSD may hold (default 4 GiB)
#
# Only pids this script recorded are ever stopped; /etc/ceph is neither read nor written.
# Exit codes: see lib.sh.
set -euo pipefail

# shellcheck disable=SC2034  # read by lib.sh
LOG_TAG=ceph
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/lib.sh"

STATE=${ZOTSINK_CEPH_STATE:-/var/tmp/zotsink-cluster/ceph}
read -r -a MOUNTS <<<"${ZOTSINK_CEPH_MOUNTS:-/mnt/zotsink-c1 /mnt/zotsink-c2 /mnt/zotsink-c3}"
IP=${ZOTSINK_CEPH_IP:-127.0.0.3}
PORT=${ZOTSINK_CEPH_PORT:-13300}
SIZE=${ZOTSINK_CEPH_SIZE:-4294967296}
PACKAGES=(ceph-mon ceph-mgr ceph-osd ceph-mds ceph-fuse)
# fixed ids: every `up` builds the same cluster
FSID=7a6f7473-696e-4b00-8000-000000000001
OSD_UUID=7a6f7473-696e-4b00-8000-000000000002
FS_NAME=zotsink

ETC=$STATE/etc
CONF=$ETC/ceph.conf
RUN=$STATE/run
LOGS=$STATE/logs
DATA=$STATE/data
MOUNTS_FILE=$RUN/mounts
# daemon -> its id, in the order they start (and stop in reverse)
DAEMONS=(mon mgr osd mds)
declare -A ID=([mon]=a [mgr]=x [osd]=0 [mds]=a)

pidfile() { echo "$RUN/$1.pid"; }
client_pidfile() { echo "$RUN/ceph-fuse$1.pid"; }
daemon_alive() { pid_alive "$(read_pid "$(pidfile "$1")")" "ceph-$1"; }
cli() { timeout 30 ceph -c "$CONF" "$@"; }

known_mounts() {
    { cat "$MOUNTS_FILE" 2>/dev/null || true; printf '%s\n' "${MOUNTS[@]}"; } | awk 'NF && !seen[$0]++'
}

is_ceph_mount() { [ "$(mount_fstype "$1")" = fuse.ceph-fuse ]; }

# Fully up: our four daemons, and every mount a ceph-fuse mount served by the client
# process we recorded for it, answering.
healthy() {
    local i=0 d m
    for d in "${DAEMONS[@]}"; do daemon_alive "$d" || return 1; done
    for m in "${MOUNTS[@]}"; do
        i=$((i + 1))
        pid_alive "$(read_pid "$(client_pidfile "$i")")" ceph-fuse || return 1
        ! pid_stopped "$(read_pid "$(client_pidfile "$i")")" || return 1
        is_ceph_mount "$m" || return 1
        timeout 10 stat -f "$m" >/dev/null 2>&1 || return 1
    done
}

write_config() {
    mkdir -p "$ETC" "$RUN" "$LOGS" "$DATA"
    # Clients get their log file and admin socket on the command line: several run at
    # once, some in the nodes' PID namespaces, where $pid would not tell them apart.
    cat >"$CONF" <<EOF
[global]
fsid = $FSID
mon host = [v2:$IP:$PORT]
mon initial members = ${ID[mon]}
public addr = $IP
ms bind msgr1 = false
ms bind ipv6 = false
ms bind port min = $((PORT + 1))
ms bind port max = $((PORT + 99))
auth cluster required = none
auth service required = none
auth client required = none
run dir = $RUN
log file = $LOGS/\$name.log
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
mon warn on insecure global id reclaim allowed = false
mon data avail warn = 1
mon data = $DATA/mon.\$id
mgr data = $DATA/mgr.\$id
osd data = $DATA/osd.\$id
mds data = $DATA/mds.\$id
osd objectstore = memstore
memstore device bytes = $SIZE
# the monitor promotes a standby MDS on its beacon (4 s by default)
mds beacon interval = 1

[mon]
admin socket = $RUN/\$name.asok
[mgr]
admin socket = $RUN/\$name.asok
[osd]
admin socket = $RUN/\$name.asok
[mds]
admin socket = $RUN/\$name.asok
EOF
}

# start_daemon NAME ARGS...: ceph-NAME in the foreground of a session of its own, so $!
# is its pid and a Ctrl-C in the caller's terminal does not reach it
start_daemon() {
    local name=$1 pf
    shift
    pf=$(pidfile "$name")
    mkdir -p "$DATA/$name.${ID[$name]}"
    setsid "/usr/bin/ceph-$name" -c "$CONF" -i "${ID[$name]}" -f "$@" \
        </dev/null >>"$LOGS/$name.out" 2>&1 9>&- &
    echo $! >"$pf"
}

# wait_for WHAT TENTHS CMD...: until CMD succeeds; each named daemon must stay alive
wait_for() {
    local what=$1 tenths=$2 d
    shift 2
    for _ in $(seq 1 "$tenths"); do
        "$@" >/dev/null 2>&1 && return 0
        for d in "${DAEMONS[@]}"; do
            if [ -e "$(pidfile "$d")" ] && ! pid_alive "$(read_pid "$(pidfile "$d")")"; then
                tail -n 20 "$LOGS/$d.out" "$LOGS/$d.${ID[$d]}.log" >&2 2>/dev/null || true
                die "$EXIT_FAILED" "ceph-$d exited while waiting for $what (logs in $LOGS)"
            fi
        done
        sleep 0.1
    done
    die "$EXIT_FAILED" "$what: not within $((tenths / 10)) s (logs in $LOGS)"
}

osd_up() { cli osd stat | grep -q '1 up'; }
mds_active() { cli mds stat | grep -q 'up:active'; }

# ceph-fuse prints to its terminal, not only to its log: keep both
mount_one() {  # mount_one INDEX MOUNTPOINT
    local i=$1 m=$2 pf t0
    t0=$(now)
    pf=$(client_pidfile "$i")
    mkdir -p "$m"
    if [ -n "$(mount_fstype "$m")" ]; then
        die "$EXIT_PRECONDITION" "$m is already a $(mount_fstype "$m") mount not made by $0; unmount it or set ZOTSINK_CEPH_MOUNTS"
    fi
    setsid /usr/bin/ceph-fuse -c "$CONF" -f --log-file="$LOGS/client$i.log" \
        --admin-socket="$RUN/client$i.asok" "$m" </dev/null >"$LOGS/client$i.out" 2>&1 9>&- &
    echo $! >"$pf"
    for _ in $(seq 1 300); do
        is_ceph_mount "$m" && timeout 5 stat -f "$m" >/dev/null 2>&1 && break
        pid_alive "$(read_pid "$pf")" || break
        sleep 0.05
    done
    is_ceph_mount "$m" ||
        die "$EXIT_FAILED" "mount $m did not come up: $(tail -n 1 "$LOGS/client$i.out") (log: $LOGS/client$i.log)"
    log "mounted $m (client pid $(read_pid "$pf")) in $(since "$t0") s"
}

# End-to-end check: a file written and fsynced through mount 1 reads back through every
# other mount.
probe() {
    local first=${MOUNTS[0]} m name got
    name=.zotsink-probe-$$
    printf 'probe %s\n' "$$" >"$first/$name"
    sync "$first/$name"
    for m in "${MOUNTS[@]}"; do
        got=
        for _ in $(seq 1 100); do
            got=$(timeout 5 cat "$m/$name" 2>/dev/null || true)
            [ "$got" = "probe $$" ] && break
            sleep 0.05
        done
        [ "$got" = "probe $$" ] || die "$EXIT_FAILED" "a file written through $first is not readable through $m"
    done
    rm -f "$first/$name"
}

cmd_up() {
    local t0 t1 i m other d
    t0=$(now)
    prepare_fuse_service "mount CephFS" ZOTSINK_CEPH_MOUNTS 3 "${MOUNTS[@]}"
    take_lock "$STATE"
    if healthy; then
        attach_ready_nodes
        log "already up"
        printf '%s\n' "${MOUNTS[@]}"
        return 0
    fi
    # Anything half there (an earlier `up` that failed, a crashed run) is removed first,
    # so that every `up` builds the same cluster from scratch.
    teardown
    for d in "${DAEMONS[@]}"; do
        for other in $(ours "ceph-$d"); do
            die "$EXIT_FAILED" "ceph-$d $other of this state dir survived the teardown"
        done
    done
    rm -f "$LOGS"/*
    write_config
    t1=$(now)
    monmaptool --create --clobber --fsid "$FSID" --addv "${ID[mon]}" "[v2:$IP:$PORT]" "$RUN/monmap" >/dev/null
    mkdir -p "$DATA/mon.${ID[mon]}"
    ceph-mon -c "$CONF" --mkfs -i "${ID[mon]}" --monmap "$RUN/monmap" >>"$LOGS/mon.out" 2>&1 ||
        die "$EXIT_FAILED" "ceph-mon --mkfs failed: $(tail -n 1 "$LOGS/mon.out")"
    start_daemon mon
    wait_for "the monitor to answer" 300 cli mon stat
    log "monitor answering after $(since "$t1") s"
    start_daemon mgr
    # a standby until the file system exists; it checks in with the monitor every beacon
    start_daemon mds
    t1=$(now)
    [ "$(cli osd new "$OSD_UUID")" = "${ID[osd]}" ] || die "$EXIT_FAILED" "ceph osd new did not give osd.${ID[osd]}"
    mkdir -p "$DATA/osd.${ID[osd]}"
    ceph-osd -c "$CONF" -i "${ID[osd]}" --mkfs --osd-uuid "$OSD_UUID" >>"$LOGS/osd.out" 2>&1 ||
        die "$EXIT_FAILED" "ceph-osd --mkfs failed: $(tail -n 1 "$LOGS/osd.out")"
    start_daemon osd
    wait_for "the OSD to be up" 600 osd_up
    log "OSD up after $(since "$t1") s"
    t1=$(now)
    cli osd pool create cephfs_metadata 8 >/dev/null 2>&1 || die "$EXIT_FAILED" "cannot create the metadata pool"
    cli osd pool create cephfs_data 8 >/dev/null 2>&1 || die "$EXIT_FAILED" "cannot create the data pool"
    cli fs new "$FS_NAME" cephfs_metadata cephfs_data >/dev/null 2>&1 || die "$EXIT_FAILED" "ceph fs new failed"
    wait_for "the MDS to be active" 600 mds_active
    wait_for "the manager to be active" 600 bash -c "timeout 30 ceph -c '$CONF' mgr stat | grep -q '\"available\": true'"
    log "MDS active after $(since "$t1") s"
    printf '%s\n' "${MOUNTS[@]}" >"$MOUNTS_FILE"
    i=0
    for m in "${MOUNTS[@]}"; do
        i=$((i + 1))
        mount_one "$i" "$m"
    done
    probe
    attach_ready_nodes
    log "up in $(since "$t0") s"
    printf '%s\n' "${MOUNTS[@]}"
}

# ours COMM: pids of the live processes named COMM whose command lines name our
# configuration file: the nodes' clients, whose pids no file of ours records, and a daemon
# that re-executed itself (an MDS does when the monitor drops it) while its pid file's
# name check looked
ours() {
    local pid
    for pid in $(live_pids "$1"); do
        if tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "-c $CONF "; then echo "$pid"; fi
    done
}

teardown() {
    local m pf pid pids=() name d i
    # A client whose OSD or MDS is gone cannot flush what it holds, and its unmount would
    # wait for it forever (in state D, deaf to timeout's signals): kill such clients first,
    # which ends their FUSE connections, so the unmounts below return at once.
    if ! daemon_alive mon || ! daemon_alive osd || ! daemon_alive mds; then
        for pid in $(ours ceph-fuse); do
            if pid_stopped "$pid"; then kill -CONT "$pid" 2>/dev/null || true; fi
            kill -KILL "$pid" 2>/dev/null || true
        done
    fi
    # the nodes' clients first: a node keeps running after its file system went away
    while read -r name pid; do
        # shellcheck disable=SC2046  # mount points have no blanks (see ZOTSINK_CEPH_MOUNTS)
        [ -n "$pid" ] && unmount_in_node "$pid" $(known_mounts)
    done < <(ready_nodes)
    # A SIGSTOPped client would make umount and all I/O on its mount hang: resume it first.
    for pf in "$RUN"/ceph-fuse*.pid; do
        [ -e "$pf" ] || continue
        pid=$(read_pid "$pf")
        if pid_alive "$pid" ceph-fuse && pid_stopped "$pid"; then kill -CONT "$pid" || true; fi
        pids+=("$pid")
    done
    for m in $(known_mounts); do
        is_ceph_mount "$m" || continue
        timeout 20 umount "$m" 2>/dev/null || umount -l "$m"
    done
    # ceph-fuse exits by itself shortly after its unmount
    stop_pids ceph-fuse "${pids[@]}"
    # On SIGTERM an MDS spends seconds handing its rank to a standby there is none of;
    # its journal is deleted with the data below anyway, so it is killed outright.
    # (`ceph fs fail` first would make it re-execute itself instead of stopping.)
    for pid in $(read_pid "$(pidfile mds)") $(ours ceph-mds); do
        if pid_alive "$pid" ceph-mds; then kill -KILL "$pid" 2>/dev/null || true; fi
    done
    for ((i = ${#DAEMONS[@]} - 1; i >= 0; i--)); do
        d=${DAEMONS[$i]}
        # shellcheck disable=SC2046  # pids
        stop_pids "ceph-$d" "$(read_pid "$(pidfile "$d")")" $(ours "ceph-$d")
    done
    rm -f "$RUN"/*.pid "$RUN"/*.asok "$RUN/monmap"
    rm -rf "$DATA"
}

cmd_down() {
    local t0 m left=()
    t0=$(now)
    need_root "unmount CephFS"
    take_lock "$STATE"
    teardown
    for m in $(known_mounts); do
        case "$(mount_fstype "$m")" in
            fuse.ceph-fuse) left+=("$m still mounted") ;;
            '') rmdir "$m" 2>/dev/null || true ;;
            *) ;; # some other file system mounted there: not ours to touch
        esac
    done
    rm -f "$MOUNTS_FILE"
    [ ${#left[@]} -eq 0 ] || die "$EXIT_FAILED" "down incomplete: ${left[*]}"
    log "down in $(since "$t0") s; the CephFS $FS_NAME, its pools and every file written on it are deleted ($DATA)"
}

# Like gluster.sh attach: the client runs in the node's mount and PID namespaces (it
# mounts only there and ends with the node) but in this host's network namespace, where
# the daemons listen. One client serves every mount point (bind mounts), like the one
# client of a real node.
cmd_attach() {
    local pid=${1:-}
    case "$pid" in '' | *[!0-9]*) die "$EXIT_USAGE" "usage: $0 attach PID" ;; esac
    need_root "mount CephFS"
    take_lock "$STATE"
    healthy || die "$EXIT_PRECONDITION" "CephFS is not up (ceph.sh up)"
    attach_node "$pid"
}

# attach_node PID: the CephFS mounted in the node of PID; nothing to do when it is
attach_node() {
    local pid=$1 first m node t0
    t0=$(now)
    node=$(nsenter --target "$pid" --uts hostname) || die "$EXIT_FAILED" "no process $pid"
    first=${MOUNTS[0]}
    in_node() { nsenter --target "$pid" --mount --pid -- "$@"; }
    case "$(in_node bash -c "$(declare -f mount_fstype); mount_fstype $first")" in
        fuse.ceph-fuse) return 0 ;;
        '') ;;
        *) die "$EXIT_FAILED" "$first is already a mount point in $node" ;;
    esac
    in_node mkdir -p "${MOUNTS[@]}"
    # without -f ceph-fuse returns once the mount is there, its daemon in the node
    in_node /usr/bin/ceph-fuse -c "$CONF" --log-file="$LOGS/client-$node.log" \
        --admin-socket="$RUN/client-$node.asok" "$first" </dev/null >"$LOGS/client-$node.out" 2>&1 9>&- ||
        die "$EXIT_FAILED" "ceph-fuse in $node failed: $(tail -n 1 "$LOGS/client-$node.out") (log: $LOGS/client-$node.log)"
    for _ in $(seq 1 200); do
        if [ "$(in_node bash -c "$(declare -f mount_fstype); mount_fstype $first")" = fuse.ceph-fuse ] &&
            in_node timeout 5 ls "$first" >/dev/null 2>&1; then
            for m in "${MOUNTS[@]:1}"; do
                in_node mount --bind "$first" "$m" || die "$EXIT_FAILED" "bind mount of $m in $node failed"
            done
            log "mounted in $node in $(since "$t0") s"
            return 0
        fi
        sleep 0.05
    done
    die "$EXIT_FAILED" "mount in $node did not come up within 10 s (log: $LOGS/client-$node.log)"
}

# Every running node of slurm.sh gets its client, whichever of the two came up first.
attach_ready_nodes() {
    local name pid
    while read -r name pid; do
        [ -n "$pid" ] && attach_node "$pid"
    done < <(ready_nodes)
}

cmd_status() {
    local i=0 d m pid state
    for d in "${DAEMONS[@]}"; do
        pid=$(read_pid "$(pidfile "$d")")
        if pid_alive "$pid" "ceph-$d"; then echo "ceph-$d: running, pid $pid"; else echo "ceph-$d: not running"; fi
    done
    if daemon_alive mon; then
        echo "mds: $(cli mds stat 2>/dev/null || echo 'no answer')"
    fi
    for m in "${MOUNTS[@]}"; do
        i=$((i + 1))
        pid=$(read_pid "$(client_pidfile "$i")")
        state="no client"
        if pid_alive "$pid" ceph-fuse; then
            state="client pid $pid"
            if pid_stopped "$pid"; then state="$state (STOPPED)"; fi
        fi
        echo "mount $i $m: ${state}, fs type $(mount_fstype "$m" | sed 's/^$/none/')"
    done
    healthy
}

case "${1:-}" in
    up) cmd_up ;;
    down) cmd_down ;;
    status) cmd_status ;;
    attach) cmd_attach "${2:-}" ;;
    exec)
        shift
        [ $# -gt 0 ] || die "$EXIT_USAGE" "usage: $0 exec CMD..."
        cmd=$1
        shift
        exec "$cmd" -c "$CONF" "$@"
        ;;
    *)
        echo "usage: $0 up|down|status|attach PID|exec CMD..." >&2
        exit "$EXIT_USAGE"
        ;;
esac
