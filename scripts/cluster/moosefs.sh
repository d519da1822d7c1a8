#!/usr/bin/env bash
# A real MooseFS file system on this host, mounted twice, for zotsink's tests.
#
#   moosefs.sh up        install packages if missing, start mfsmaster and one
#                        mfschunkserver, mount the file system twice; prints the mount points
#   moosefs.sh status    what runs and what is mounted; exit 0 only when fully up
#   moosefs.sh down      unmount, stop what `up` started, delete the file system's data
#                        (every file written on it)
#   moosefs.sh attach PID
#                        mount it inside the namespaces of process PID (a node of
#                        slurm.sh) at the same mount points, with a client of its own;
#                        `up` does this for every running node and `down` unmounts
#                        there first, so Slurm may come up before or after MooseFS
#   moosefs.sh space full|normal
#                        restart the chunkserver with a size limit that leaves no free
#                        space (writes then fail with ENOSPC, possibly only at close), or
#                        without it
#
# Each mount point has its own mfsmount process, so the two behave like two nodes.
#
# The chunkserver refuses loopback addresses (127.x) for talking to the master, so the
# master, the chunkserver and every mfsmount run in a private network namespace whose
# loopback interface also carries $ZOTSINK_MOOSEFS_IP; that address exists only there.
# The mounts themselves are in the host's mount namespace (or a node's, for attach).
# MooseFS tools that ask the master (mfssetgoal, mfsfileinfo) must run in that network
# namespace: `moosefs.sh exec mfsfileinfo FILE`.
#
# Settings (environment):
#   ZOTSINK_MOOSEFS_STATE   state dir: metadata, chunks, pid files, logs
#                           (default /var/tmp/zotsink-cluster/moosefs)
#   ZOTSINK_MOOSEFS_MOUNTS  two mount points (default "/mnt/zotsink-m1 /mnt/zotsink-m2")
#   ZOTSINK_MOOSEFS_IP      master and chunkserver address (default 10.232.0.1)
#   ZOTSINK_MOOSEFS_MOUNT_OPTS
#                           mfsmount -o options of every mount (default mfsioretries=4:
#                           the default 30 retries make a full file system answer ENOSPC
#                           only after minutes)
#   ZOTSINK_MOOSEFS_PORT    base port: master MATOCS PORT, clients PORT+1, metaloggers
#                           PORT-1, chunkserver PORT+2 (default 19420; not the 942x
#                           defaults, so another MooseFS on this host does not collide)
#
# Only pids this script recorded are ever stopped. Exit codes: see lib.sh.
set -euo pipefail

# shellcheck disable=SC2034  # read by lib.sh
LOG_TAG=moosefs
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/lib.sh"

STATE=${ZOTSINK_MOOSEFS_STATE:-/var/tmp/zotsink-cluster/moosefs}
read -r -a MOUNTS <<<"${ZOTSINK_MOOSEFS_MOUNTS:-/mnt/zotsink-m1 /mnt/zotsink-m2}"
IP=${ZOTSINK_MOOSEFS_IP:-10.232.0.1}
PORT=${ZOTSINK_MOOSEFS_PORT:-19420}
MOUNT_OPTS=${ZOTSINK_MOOSEFS_MOUNT_OPTS-mfsioretries=4}
PACKAGES=(moosefs-master moosefs-chunkserver moosefs-client)

ETC=$STATE/etc
RUN=$STATE/run
LOGS=$STATE/logs
DATA=$STATE/data
NETNS_PID=$RUN/netns.pid
MASTER_PID=$RUN/mfsmaster.pid
CHUNK_PID=$RUN/mfschunkserver.pid
MOUNTS_FILE=$RUN/mounts

netns() { echo "/proc/$(read_pid "$NETNS_PID")/ns/net"; }
in_netns() { nsenter --net="$(netns)" -- "$@"; }
netns_alive() { pid_alive "$(read_pid "$NETNS_PID")" sleep; }
mount_pidfile() { echo "$RUN/mfsmount$1.pid"; }

known_mounts() {
    { cat "$MOUNTS_FILE" 2>/dev/null || true; printf '%s\n' "${MOUNTS[@]}"; } | awk 'NF && !seen[$0]++'
}

# An mfsmount shows in mountinfo as plain "fuse" with the source mfs#HOST:PORT; the
# kernel escapes "#" as \043.
is_mfs_mount() {
    awk -v m="$1" '$5 == m { for (i = 7; i <= NF; i++) if ($i == "-") { s = $(i + 2); break } }
                   END { exit !(s ~ /^mfs(#|\\043)/) }' /proc/self/mountinfo
}

has_space() { [ "$(timeout 10 stat -f -c %a "$1" 2>/dev/null || echo 0)" -gt 0 ] 2>/dev/null; }

healthy() {
    local i=0 m
    netns_alive || return 1
    pid_alive "$(read_pid "$MASTER_PID")" mfsmaster || return 1
    pid_alive "$(read_pid "$CHUNK_PID")" mfschunkserver || return 1
    for m in "${MOUNTS[@]}"; do
        i=$((i + 1))
        pid_alive "$(read_pid "$(mount_pidfile "$i")")" mfsmount || return 1
        is_mfs_mount "$m" || return 1
        timeout 10 stat -f "$m" >/dev/null 2>&1 || return 1
    done
}

write_config() {  # write_config [HDD_LIMIT]
    mkdir -p "$ETC" "$RUN" "$LOGS" "$DATA/master" "$DATA/cs" "$DATA/chunks"
    chown mfs:mfs "$DATA/master" "$DATA/cs" "$DATA/chunks"
    if [ ! -e "$DATA/master/metadata.mfs" ] && [ ! -e "$DATA/master/metadata.mfs.back" ]; then
        install -o mfs -g mfs -m 0644 /var/lib/mfs/metadata.mfs.empty "$DATA/master/metadata.mfs"
    fi
    cat >"$ETC/mfsmaster.cfg" <<EOF
WORKING_USER = mfs
WORKING_GROUP = mfs
SYSLOG_IDENT = zotsink-mfsmaster
DATA_PATH = $DATA/master
EXPORTS_FILENAME = $ETC/mfsexports.cfg
TOPOLOGY_FILENAME = $ETC/mfstopology.cfg
MATOML_LISTEN_HOST = $IP
MATOML_LISTEN_PORT = $((PORT - 1))
MATOCS_LISTEN_HOST = $IP
MATOCS_LISTEN_PORT = $PORT
MATOCL_LISTEN_HOST = $IP
MATOCL_LISTEN_PORT = $((PORT + 1))
EOF
    echo '*  /  rw,alldirs,admin,maproot=0:0' >"$ETC/mfsexports.cfg"
    : >"$ETC/mfstopology.cfg"
    cat >"$ETC/mfschunkserver.cfg" <<EOF
WORKING_USER = mfs
WORKING_GROUP = mfs
SYSLOG_IDENT = zotsink-mfschunkserver
DATA_PATH = $DATA/cs
HDD_CONF_FILENAME = $ETC/mfshdd.cfg
BIND_HOST = $IP
MASTER_HOST = $IP
MASTER_PORT = $PORT
CSSERV_LISTEN_HOST = $IP
CSSERV_LISTEN_PORT = $((PORT + 2))
EOF
    # With a size limit the chunkserver counts the whole disk's used space against it:
    # a limit below that leaves the file system with no free space at all.
    echo "$DATA/chunks${1:+ $1}" >"$ETC/mfshdd.cfg"
}

# start_daemon NAME PIDFILE READY_REGEX ARGS...: a foreground daemon in the network
# namespace. nsenter and setsid exec, so $! is the daemon's own pid.
start_daemon() {
    local name=$1 pf=$2 ready=$3
    shift 3
    pid_alive "$(read_pid "$pf")" "$name" && return 0
    : >"$LOGS/$name.log"
    nsenter --net="$(netns)" -- setsid "/usr/sbin/$name" -f "$@" </dev/null >>"$LOGS/$name.log" 2>&1 9>&- &
    echo $! >"$pf"
    for _ in $(seq 1 300); do
        grep -qE "$ready" "$LOGS/$name.log" && return 0
        # no name check: until nsenter and setsid have exec'd, the pid has their names
        pid_alive "$(read_pid "$pf")" || break
        sleep 0.1
    done
    tail -n 20 "$LOGS/$name.log" >&2
    die "$EXIT_FAILED" "$name did not start (log: $LOGS/$name.log)"
}

start_chunkserver() {
    start_daemon mfschunkserver "$CHUNK_PID" 'connected to Master' -c "$ETC/mfschunkserver.cfg" start
}

# wait_space MOUNTPOINT: until the chunkserver has registered, the file system reports
# no space and every write fails
wait_space() {
    for _ in $(seq 1 300); do
        has_space "$1" && return 0
        sleep 0.1
    done
    die "$EXIT_FAILED" "$1 reports no free space after 30 s (logs in $LOGS)"
}

mount_one() {  # mount_one INDEX MOUNTPOINT
    local i=$1 m=$2 pf
    pf=$(mount_pidfile "$i")
    mkdir -p "$m"
    if [ -n "$(mount_fstype "$m")" ]; then
        die "$EXIT_PRECONDITION" "$m is already a $(mount_fstype "$m") mount not made by $0; unmount it or set ZOTSINK_MOOSEFS_MOUNTS"
    fi
    nsenter --net="$(netns)" -- setsid /usr/bin/mfsmount -f -H "$IP" -P $((PORT + 1)) \
        ${MOUNT_OPTS:+-o "$MOUNT_OPTS"} "$m" \
        </dev/null >"$LOGS/mfsmount$i.log" 2>&1 9>&- &
    echo $! >"$pf"
    # mfsmount measures its clock before it mounts: seconds on a busy machine
    for _ in $(seq 1 600); do
        is_mfs_mount "$m" && return 0
        pid_alive "$(read_pid "$pf")" || break
        sleep 0.05
    done
    die "$EXIT_FAILED" "mount $m did not come up: $(tail -n 1 "$LOGS/mfsmount$i.log") (log: $LOGS/mfsmount$i.log)"
}

cmd_up() {
    local t0 i m
    t0=$(now)
    prepare_fuse_service "mount MooseFS" ZOTSINK_MOOSEFS_MOUNTS 2 "${MOUNTS[@]}"
    take_lock "$STATE"
    if healthy; then
        attach_ready_nodes
        log "already up"
        printf '%s\n' "${MOUNTS[@]}"
        return 0
    fi
    teardown
    write_config
    # argv[0] names the holder for a reader of ps; its command name stays "sleep"
    setsid unshare --net bash -c "ip link set lo up && ip addr add $IP/32 dev lo &&
        exec -a zotsink-moosefs-netns sleep infinity" </dev/null >/dev/null 2>&1 9>&- &
    echo $! >"$NETNS_PID"
    for _ in $(seq 1 100); do
        netns_alive && in_netns ip -4 addr show lo 2>/dev/null | grep -q "$IP/" && break
        sleep 0.02
    done
    netns_alive || die "$EXIT_FAILED" "the network namespace did not start"
    start_daemon mfsmaster "$MASTER_PID" 'initialized properly' -c "$ETC/mfsmaster.cfg" start
    start_chunkserver
    printf '%s\n' "${MOUNTS[@]}" >"$MOUNTS_FILE"
    i=0
    for m in "${MOUNTS[@]}"; do
        i=$((i + 1))
        mount_one "$i" "$m"
    done
    for m in "${MOUNTS[@]}"; do wait_space "$m"; done
    # One chunkserver: keep one copy of each chunk (the default goal 2 cannot be met).
    for _ in $(seq 1 50); do
        in_netns mfssetgoal -r 1 "${MOUNTS[0]}" >/dev/null 2>&1 && break
        sleep 0.1
    done
    attach_ready_nodes
    log "up in $(since "$t0") s"
    printf '%s\n' "${MOUNTS[@]}"
}

teardown() {
    local m pf pids=() name pid
    # the nodes' clients first: a node keeps running after its file system went away
    while read -r name pid; do
        # shellcheck disable=SC2046  # mount points have no blanks (see ZOTSINK_MOOSEFS_MOUNTS)
        [ -n "$pid" ] && unmount_in_node "$pid" $(known_mounts)
    done < <(ready_nodes)
    for m in $(known_mounts); do
        is_mfs_mount "$m" || continue
        timeout 20 umount "$m" 2>/dev/null || umount -l "$m"
    done
    for pf in "$RUN"/mfsmount*.pid; do
        [ -e "$pf" ] && pids+=("$(read_pid "$pf")")
    done
    # mfsmount exits by itself shortly after its unmount
    stop_pids mfsmount "${pids[@]}"
    stop_pids mfschunkserver "$(read_pid "$CHUNK_PID")"
    # the master saves its metadata on SIGTERM (a few seconds): its data must stay until then
    stop_pids mfsmaster "$(read_pid "$MASTER_PID")"
    stop_pids sleep "$(read_pid "$NETNS_PID")"
    rm -f "$RUN"/*.pid
    rm -rf "$DATA"
}

cmd_down() {
    local t0 m left=()
    t0=$(now)
    need_root "unmount MooseFS"
    take_lock "$STATE"
    teardown
    for m in $(known_mounts); do
        if is_mfs_mount "$m"; then left+=("$m still mounted"); else rmdir "$m" 2>/dev/null || true; fi
    done
    rm -f "$MOUNTS_FILE"
    [ ${#left[@]} -eq 0 ] || die "$EXIT_FAILED" "down incomplete: ${left[*]}"
    log "down in $(since "$t0") s; the file system and every file written on it are deleted"
}

# Like gluster.sh attach: the client runs in the node's mount and PID namespaces (it
# mounts only there and ends with the node) and in our private network namespace.
cmd_attach() {
    local pid=${1:-}
    case "$pid" in '' | *[!0-9]*) die "$EXIT_USAGE" "usage: $0 attach PID" ;; esac
    need_root "mount MooseFS"
    take_lock "$STATE"
    healthy || die "$EXIT_PRECONDITION" "MooseFS is not up (moosefs.sh up)"
    attach_node "$pid"
}

# attach_node PID: MooseFS mounted in the node of PID; nothing to do when it is
attach_node() {
    local pid=$1 first m node t0
    t0=$(now)
    node=$(nsenter --target "$pid" --uts hostname) || die "$EXIT_FAILED" "no process $pid"
    first=${MOUNTS[0]}
    in_node() { nsenter --net="$(netns)" --mount="/proc/$pid/ns/mnt" --pid="/proc/$pid/ns/pid" -- "$@"; }
    if in_node bash -c "$(declare -f is_mfs_mount); is_mfs_mount $first"; then return 0; fi
    in_node mkdir -p "${MOUNTS[@]}"
    in_node /usr/bin/mfsmount -H "$IP" -P $((PORT + 1)) ${MOUNT_OPTS:+-o "$MOUNT_OPTS"} "$first" </dev/null >"$LOGS/mfsmount-$node.log" 2>&1 9>&- ||
        die "$EXIT_FAILED" "mfsmount in $node failed: $(tail -n 1 "$LOGS/mfsmount-$node.log")"
    for _ in $(seq 1 600); do
        if in_node bash -c "$(declare -f is_mfs_mount has_space); is_mfs_mount $first && has_space $first"; then
            for m in "${MOUNTS[@]:1}"; do
                in_node mount --bind "$first" "$m" || die "$EXIT_FAILED" "bind mount of $m in $node failed"
            done
            log "mounted in $node in $(since "$t0") s"
            return 0
        fi
        sleep 0.05
    done
    die "$EXIT_FAILED" "mount in $node did not come up within 30 s (log: $LOGS/mfsmount-$node.log)"
}

# Every running node of slurm.sh gets its client, whichever of the two came up first.
attach_ready_nodes() {
    local name pid
    while read -r name pid; do
        [ -n "$pid" ] && attach_node "$pid"
    done < <(ready_nodes)
}

cmd_space() {  # cmd_space full|normal
    local limit
    case "${1:-}" in
        full) limit=1MiB ;;
        normal) limit= ;;
        *) die "$EXIT_USAGE" "usage: $0 space full|normal" ;;
    esac
    need_root "restart the chunkserver"
    take_lock "$STATE"
    healthy || die "$EXIT_PRECONDITION" "MooseFS is not up (moosefs.sh up)"
    stop_pids mfschunkserver "$(read_pid "$CHUNK_PID")"
    write_config "$limit"
    start_chunkserver
    if [ "$1" = normal ]; then
        wait_space "${MOUNTS[0]}"
    else
        for _ in $(seq 1 300); do
            has_space "${MOUNTS[0]}" || break
            sleep 0.1
        done
        ! has_space "${MOUNTS[0]}" || die "$EXIT_FAILED" "${MOUNTS[0]} still reports free space"
    fi
    log "space $1: $(stat -f -c '%a free blocks of %b' "${MOUNTS[0]}")"
}

cmd_status() {
    local i=0 m pid name pf
    for name in mfsmaster mfschunkserver; do
        pf=$MASTER_PID
        [ "$name" = mfsmaster ] || pf=$CHUNK_PID
        pid=$(read_pid "$pf")
        if pid_alive "$pid" "$name"; then echo "$name: running, pid $pid"; else echo "$name: not running"; fi
    done
    for m in "${MOUNTS[@]}"; do
        i=$((i + 1))
        pid=$(read_pid "$(mount_pidfile "$i")")
        if pid_alive "$pid" mfsmount; then echo "mount $i $m: client pid $pid"; else echo "mount $i $m: no client"; fi
    done
    healthy
}

case "${1:-}" in
    up) cmd_up ;;
    down) cmd_down ;;
    status) cmd_status ;;
    attach) cmd_attach "${2:-}" ;;
    space) cmd_space "${2:-}" ;;
    exec)
        shift
        in_netns "$@"
        ;;
    *)
        echo "usage: $0 up|down|status|attach PID|space full|normal|exec CMD..." >&2
        exit "$EXIT_USAGE"
        ;;
esac
