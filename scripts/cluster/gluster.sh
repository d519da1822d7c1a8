#!/usr/bin/env bash
# A real GlusterFS volume on this host, mounted three times, for zotsink's tests.
#
#   gluster.sh up       install packages if missing, start glusterd, create and start a
#                       one-brick volume, mount it three times; prints the mount points
#   gluster.sh status   what runs and what is mounted; exit 0 only when fully up
#   gluster.sh down     unmount, stop and delete the volume, stop what `up` started;
#                       the files written on the volume are deleted with it
#   gluster.sh attach PID
#                       mount the volume inside the namespaces of process PID (a node
#                       of slurm.sh) at the same mount points, with a client of its own;
#                       `up` does this for every running node and `down` unmounts there
#                       first, so Slurm may come up before or after the volume
#
# Each mount point gets its own glusterfs FUSE client process, so the mounts behave
# like separate cluster nodes: mount 1 and mount 2 are the writer "nodes", mount 3 an
# independent reader. Locks taken through one mount exclude the others.
#
# The volume keeps GlusterFS's default client options on purpose, write-behind
# included: with write-behind a locked O_APPEND write can still reach the brick after
# the unlock, and zotsink's `--sync auto` must fsync before unlocking to survive that.
# Turning write-behind off here would hide exactly the bug the tests are for.
#
# Settings (environment):
#   ZOTSINK_GLUSTER_STATE        state dir: brick, pid files, logs
#                                (default /var/tmp/zotsink-cluster/gluster)
#   ZOTSINK_GLUSTER_MOUNTS       three mount points, space separated
#                                (default "/mnt/zotsink-g1 /mnt/zotsink-g2 /mnt/zotsink-g3")
#   ZOTSINK_GLUSTER_VOLUME       volume name (default zotsink)
#   ZOTSINK_GLUSTER_BRICK_HOST   brick address (default 127.0.0.2; gluster refuses
#                                127.0.0.1 and localhost for bricks, any other 127.x works)
#   ZOTSINK_GLUSTER_CLIENT_ARGS  extra glusterfs client arguments for every mount
#                                (default none, e.g. "--attribute-timeout=0")
#
# Only loopback addresses are used. Only pids this script recorded are ever stopped.
# Exit codes: see lib.sh.
set -euo pipefail

# shellcheck disable=SC2034  # read by lib.sh
LOG_TAG=gluster
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/lib.sh"

STATE=${ZOTSINK_GLUSTER_STATE:-/var/tmp/zotsink-cluster/gluster}
read -r -a MOUNTS <<<"${ZOTSINK_GLUSTER_MOUNTS:-/mnt/zotsink-g1 /mnt/zotsink-g2 /mnt/zotsink-g3}"
VOLUME=${ZOTSINK_GLUSTER_VOLUME:-zotsink}
BRICK_HOST=${ZOTSINK_GLUSTER_BRICK_HOST:-127.0.0.2}
CLIENT_ARGS=${ZOTSINK_GLUSTER_CLIENT_ARGS:-}
VOLFILE_SERVER=127.0.0.1
PACKAGES=(glusterfs-server glusterfs-client)

RUN=$STATE/run
LOGS=$STATE/logs
BRICK=$STATE/brick/$VOLUME
GLUSTERD_PID=$RUN/glusterd.pid
BRICK_PIDS=$RUN/bricks.pids
MOUNTS_FILE=$RUN/mounts
# where glusterd itself keeps the volume definition and the brick pid files
GLUSTERD_VOLDIR=/var/lib/glusterd/vols/$VOLUME
GLUSTER_RUNDIR=/var/run/gluster/vols/$VOLUME

# The CLI waits up to 120 s for glusterd by default; a healthy one answers in well
# under a second, so fail sooner.
cli() { timeout 60 gluster --mode=script "$@"; }

our_glusterd() { pid_alive "$(read_pid "$GLUSTERD_PID")" glusterd; }

# The mount points of the last `up` (they may differ from the current settings if
# ZOTSINK_GLUSTER_MOUNTS changed in between), then the configured ones.
known_mounts() {
    { cat "$MOUNTS_FILE" 2>/dev/null || true; printf '%s\n' "${MOUNTS[@]}"; } | awk 'NF && !seen[$0]++'
}

client_pidfile() { echo "$RUN/client$1.pid"; }

volume_started() {
    cli volume info "$VOLUME" 2>/dev/null | grep -q '^Status: Started'
}

# Fully up: our glusterd, the volume started, every mount a glusterfs mount served
# by the client process we recorded for it, and each one answering.
healthy() {
    local i=0 m
    our_glusterd || return 1
    volume_started || return 1
    for m in "${MOUNTS[@]}"; do
        i=$((i + 1))
        pid_alive "$(read_pid "$(client_pidfile "$i")")" glusterfs || return 1
        ! pid_stopped "$(read_pid "$(client_pidfile "$i")")" || return 1
        [ "$(mount_fstype "$m")" = fuse.glusterfs ] || return 1
        timeout 10 stat -f "$m" >/dev/null 2>&1 || return 1
    done
}

start_glusterd() {
    local other t0
    t0=$(now)
    # A glusterd we did not start owns port 24007 and /var/lib/glusterd: we must not
    # use or stop it.
    for other in $(live_pids glusterd); do
        if [ "$other" != "$(read_pid "$GLUSTERD_PID")" ]; then
            die "$EXIT_PRECONDITION" "a glusterd not started by $0 is running (pid $other); stop it first"
        fi
    done
    mkdir -p "$RUN" "$LOGS"
    if ! our_glusterd; then
        # -N keeps it in the foreground so $! is its pid; setsid keeps a Ctrl-C in
        # the calling terminal from killing it before `down` can clean up.
        setsid /usr/sbin/glusterd -N --log-file="$LOGS/glusterd.log" \
            </dev/null >>"$LOGS/glusterd.out" 2>&1 9>&- &
        echo $! >"$GLUSTERD_PID"
    fi
    for _ in $(seq 1 200); do
        cli volume list >/dev/null 2>&1 && break
        our_glusterd || break
        sleep 0.1
    done
    if ! cli volume list >/dev/null 2>&1; then
        tail -n 20 "$LOGS/glusterd.log" >&2 2>/dev/null || true
        die "$EXIT_FAILED" "glusterd did not answer within 20 s (log: $LOGS/glusterd.log)"
    fi
    log "glusterd pid $(read_pid "$GLUSTERD_PID") answering after $(since "$t0") s"
}

create_volume() {
    local t0 pf pid
    t0=$(now)
    # A brick directory cannot be reused: it carries the old volume's xattrs.
    rm -rf "$BRICK"
    mkdir -p "$BRICK"
    # "force": the brick sits on the root file system, which gluster warns about.
    cli volume create "$VOLUME" "$BRICK_HOST:$BRICK" force >&2 ||
        die "$EXIT_FAILED" "gluster volume create failed (log: $LOGS/glusterd.log)"
    cli volume start "$VOLUME" >&2 ||
        die "$EXIT_FAILED" "gluster volume start failed (log: $LOGS/glusterd.log)"
    # Record the brick process now, while we know it is ours.
    : >"$BRICK_PIDS"
    for _ in $(seq 1 100); do
        for pf in "$GLUSTER_RUNDIR"/*.pid; do
            [ -e "$pf" ] || continue
            pid=$(read_pid "$pf")
            if pid_alive "$pid" glusterfsd; then echo "$pid" >>"$BRICK_PIDS"; fi
        done
        [ -s "$BRICK_PIDS" ] && break
        sleep 0.1
    done
    [ -s "$BRICK_PIDS" ] || die "$EXIT_FAILED" "no brick process for $VOLUME after 10 s (logs: /var/log/glusterfs/bricks/)"
    log "volume $VOLUME started, brick $BRICK_HOST:$BRICK pid $(tr '\n' ' ' <"$BRICK_PIDS")in $(since "$t0") s" \
        "(performance.write-behind: $(cli volume get "$VOLUME" performance.write-behind | awk '$1 == "performance.write-behind" { print $2 }'))"
}

# After teardown, anything still mounted at one of our mount points is not ours.
check_mountpoint() {
    local fstype
    fstype=$(mount_fstype "$1")
    if [ -n "$fstype" ]; then
        die "$EXIT_PRECONDITION" "$1 is already a $fstype mount not made by $0; unmount it or set ZOTSINK_GLUSTER_MOUNTS"
    fi
}

mount_one() {  # mount_one INDEX MOUNTPOINT
    local i=$1 m=$2 t0 pf
    t0=$(now)
    pf=$(client_pidfile "$i")
    mkdir -p "$m"
    check_mountpoint "$m"
    # The same as `mount -t glusterfs 127.0.0.1:/VOLUME m`, but with a pid file of
    # our own, so that `down` knows exactly which client process belongs to us.
    # shellcheck disable=SC2086  # CLIENT_ARGS is a list of words on purpose
    /usr/sbin/glusterfs --process-name fuse --volfile-server="$VOLFILE_SERVER" \
        --volfile-id="/$VOLUME" --pid-file="$pf" --log-file="$LOGS/client$i.log" \
        $CLIENT_ARGS "$m" </dev/null >"$LOGS/client$i.out" 2>&1 9>&- ||
        die "$EXIT_FAILED" "glusterfs client for $m failed to start:" \
            "$(head -n 1 "$LOGS/client$i.out" 2>/dev/null) (log: $LOGS/client$i.log)"
    # The client daemonises before the mount is ready: wait for it to answer.
    for _ in $(seq 1 200); do
        if [ "$(mount_fstype "$m")" = fuse.glusterfs ] && timeout 5 ls "$m" >/dev/null 2>&1; then
            break
        fi
        sleep 0.05
    done
    if [ "$(mount_fstype "$m")" != fuse.glusterfs ] || ! timeout 5 ls "$m" >/dev/null 2>&1; then
        tail -n 20 "$LOGS/client$i.log" >&2 2>/dev/null || true
        die "$EXIT_FAILED" "mount $m did not come up within 10 s (log: $LOGS/client$i.log)"
    fi
    log "mounted $m (client pid $(read_pid "$pf")) in $(since "$t0") s"
}

# End-to-end check: a file written and fsynced through mount 1 reads back through
# every other mount.
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
    local t0 t1 i m
    t0=$(now)
    prepare_fuse_service "mount GlusterFS" ZOTSINK_GLUSTER_MOUNTS 3 "${MOUNTS[@]}"
    take_lock "$STATE"
    if healthy; then
        attach_ready_nodes
        log "already up"
        printf '%s\n' "${MOUNTS[@]}"
        return 0
    fi
    # Anything half there (an earlier `up` that failed, a crashed run) is removed
    # first, so that every `up` builds the same thing from scratch.
    t1=$(now)
    teardown
    log "cleared leftovers in $(since "$t1") s"
    for m in "${MOUNTS[@]}"; do
        check_mountpoint "$m"
    done
    start_glusterd
    # glusterd reloads volume definitions it still has on disk: drop ours.
    if cli volume info "$VOLUME" >/dev/null 2>&1; then
        log "deleting leftover volume $VOLUME"
        cli volume stop "$VOLUME" force >/dev/null 2>&1 || true
        cli volume delete "$VOLUME" >/dev/null || die "$EXIT_FAILED" "cannot delete leftover volume $VOLUME"
    fi
    create_volume
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

teardown() {
    local m pf pid fstype pids name
    # the nodes' clients first: a node keeps running after its file system went away
    while read -r name pid; do
        # shellcheck disable=SC2046  # mount points have no blanks (see ZOTSINK_GLUSTER_MOUNTS)
        [ -n "$pid" ] && unmount_in_node "$pid" $(known_mounts)
    done < <(ready_nodes)
    # A SIGSTOPped client (a "frozen node" test) would make umount and all I/O on its
    # mount hang: resume it first.
    for pf in "$RUN"/client*.pid; do
        [ -e "$pf" ] || continue
        pid=$(read_pid "$pf")
        if pid_alive "$pid" glusterfs && pid_stopped "$pid"; then
            log "resuming stopped client $pid"
            kill -CONT "$pid" || true
        fi
    done
    for m in $(known_mounts); do
        fstype=$(mount_fstype "$m")
        [ "$fstype" = fuse.glusterfs ] || continue
        if timeout 20 umount "$m" 2>/dev/null; then
            log "unmounted $m"
        else
            # busy (a process has its cwd there) or the client hangs: detach it now,
            # the kernel finishes when the last user goes away
            umount -l "$m" && log "lazily unmounted $m"
        fi
    done
    pids=()
    for pf in "$RUN"/client*.pid; do
        [ -e "$pf" ] && pids+=("$(read_pid "$pf")")
    done
    stop_pids glusterfs "${pids[@]}"
    rm -f "$RUN"/client*.pid
    if our_glusterd; then
        if cli volume info "$VOLUME" >/dev/null 2>&1; then
            cli volume stop "$VOLUME" force >/dev/null 2>&1 || true
            cli volume delete "$VOLUME" >/dev/null 2>&1 || log "could not delete volume $VOLUME"
        fi
    fi
    # Brick processes: the ones recorded at `up`, and any that glusterd's own pid
    # files for this volume still name (both are ours: the volume name is ours).
    pids=()
    if [ -s "$BRICK_PIDS" ]; then
        while read -r pid; do pids+=("$pid"); done <"$BRICK_PIDS"
    fi
    for pf in "$GLUSTER_RUNDIR"/*.pid; do
        [ -e "$pf" ] && pids+=("$(read_pid "$pf")")
    done
    stop_pids glusterfsd "${pids[@]}"
    rm -f "$BRICK_PIDS"
    pid=$(read_pid "$GLUSTERD_PID")
    if pid_alive "$pid" glusterd; then
        # let hook scripts run by the volume delete finish before stopping glusterd
        for _ in $(seq 1 100); do
            pgrep -P "$pid" >/dev/null || break
            sleep 0.1
        done
        stop_pids glusterd "$pid"
        log "stopped glusterd $pid"
    fi
    rm -f "$GLUSTERD_PID"
    # With no glusterd running, a definition of our volume left on disk (glusterd died
    # before the delete) would come back with the next glusterd: remove it.
    if [ -z "$(live_pids glusterd)" ] && [ -d "$GLUSTERD_VOLDIR" ]; then
        rm -rf "$GLUSTERD_VOLDIR" "$GLUSTER_RUNDIR"
        log "removed leftover volume definition $GLUSTERD_VOLDIR"
    fi
    rm -rf "$BRICK"
    rmdir "$STATE/brick" 2>/dev/null || true
}

cmd_down() {
    local t0 m left=()
    t0=$(now)
    need_root "unmount GlusterFS"
    take_lock "$STATE"
    teardown
    for m in $(known_mounts); do
        case "$(mount_fstype "$m")" in
            fuse.glusterfs) left+=("$m still mounted") ;;
            '') rmdir "$m" 2>/dev/null || true ;;
            *) ;; # some other file system mounted there: not ours to touch
        esac
    done
    rm -f "$MOUNTS_FILE"
    [ ${#left[@]} -eq 0 ] || die "$EXIT_FAILED" "down incomplete: ${left[*]}"
    # The brick is deleted with the volume: so is every file the tests or a user wrote.
    log "down in $(since "$t0") s; the volume $VOLUME and every file written on it are deleted"
}

# The node's client runs in the node's mount and PID namespaces, so it mounts only there
# and ends with the node, but in this host's network namespace, where glusterd and the
# brick listen on loopback addresses. One client serves all the mount points (bind
# mounts), like the one client of a real node.
cmd_attach() {
    local pid=${1:-}
    case "$pid" in '' | *[!0-9]*) die "$EXIT_USAGE" "usage: $0 attach PID" ;; esac
    need_root "mount GlusterFS"
    take_lock "$STATE"
    healthy || die "$EXIT_PRECONDITION" "the volume is not up (gluster.sh up)"
    attach_node "$pid"
}

# attach_node PID: the volume mounted in the node of PID; nothing to do when it is
attach_node() {
    local pid=$1 first m node t0
    t0=$(now)
    node=$(nsenter --target "$pid" --uts hostname) || die "$EXIT_FAILED" "no process $pid"
    first=${MOUNTS[0]}
    in_node() { nsenter --target "$pid" --mount --pid -- "$@"; }
    case "$(in_node bash -c "$(declare -f mount_fstype); mount_fstype $first")" in
        fuse.glusterfs) return 0 ;;
        '') ;;
        *) die "$EXIT_FAILED" "$first is already a mount point in $node" ;;
    esac
    in_node mkdir -p "${MOUNTS[@]}"
    # shellcheck disable=SC2086  # CLIENT_ARGS is a list of words on purpose
    in_node /usr/sbin/glusterfs --process-name fuse --volfile-server="$VOLFILE_SERVER" \
        --volfile-id="/$VOLUME" --log-file="$LOGS/client-$node.log" \
        $CLIENT_ARGS "$first" </dev/null >"$LOGS/client-$node.out" 2>&1 9>&- ||
        die "$EXIT_FAILED" "glusterfs client for $node failed to start:" \
            "$(head -n 1 "$LOGS/client-$node.out" 2>/dev/null) (log: $LOGS/client-$node.log)"
    for _ in $(seq 1 200); do
        if [ "$(in_node bash -c "$(declare -f mount_fstype); mount_fstype $first")" = fuse.glusterfs ] &&
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
    local i=0 m pf pid state
    pid=$(read_pid "$GLUSTERD_PID")
    if pid_alive "$pid" glusterd; then echo "glusterd: running, pid $pid"; else echo "glusterd: not running"; fi
    if [ -s "$BRICK_PIDS" ]; then
        while read -r pid; do
            if pid_alive "$pid" glusterfsd; then echo "brick: running, pid $pid"; else echo "brick: gone (pid $pid)"; fi
        done <"$BRICK_PIDS"
    fi
    if our_glusterd; then
        echo "volume $VOLUME: $(cli volume info "$VOLUME" 2>/dev/null | awk -F': ' '$1 == "Status" { print $2 }')"
        cli volume get "$VOLUME" performance.write-behind 2>/dev/null | awk '$1 == "performance.write-behind"' || true
    fi
    for m in "${MOUNTS[@]}"; do
        i=$((i + 1))
        pf=$(client_pidfile "$i")
        pid=$(read_pid "$pf")
        state="no client"
        if pid_alive "$pid" glusterfs; then
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
    *)
        echo "usage: $0 up|down|status|attach PID" >&2
        exit "$EXIT_USAGE"
        ;;
esac
