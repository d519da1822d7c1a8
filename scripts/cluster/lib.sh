# shellcheck shell=bash
# Helpers shared by gluster.sh, moosefs.sh and slurm.sh. Sourced, never run on its own.
#
# Both scripts use the same exit codes, so that callers (the pytest fixtures in
# tests/cluster/conftest.py) can tell "this machine cannot do it" from "it broke":
#   0  done
#   1  the service did not come up (or did not go down cleanly)
#   2  usage error
#   3  Debian packages are missing and apt-get could not install them
#   4  a precondition is not met: not root, no /dev/fuse, a foreign daemon in the way
# The last line on stderr of a failing run starts with "error: " and says why.

# shellcheck disable=SC2034  # used by the scripts that source this file
readonly EXIT_FAILED=1 EXIT_USAGE=2 EXIT_PACKAGES=3 EXIT_PRECONDITION=4

: "${LOG_TAG:=cluster}"

log() { printf '[%s %s] %s\n' "$LOG_TAG" "$(date +%H:%M:%S)" "$*" >&2; }

die() {  # die EXIT_CODE MESSAGE...
    local rc=$1
    shift
    printf 'error: %s\n' "$*" >&2
    exit "$rc"
}

now() { date +%s.%N; }

# seconds since a timestamp taken with now(), one decimal
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

need_root() {  # need_root WHAT
    local uid
    uid=$(id -u)
    [ "$uid" = 0 ] || die "$EXIT_PRECONDITION" "needs root to $1 (running as uid $uid)"
}

# Serialise every up and down of one script on one state directory, so that two
# callers (two pytest-xdist workers, a developer and a test run) never interleave.
# fd 9 holds the lock; daemons must be started with 9>&- or they would inherit it
# and keep the lock held after this script exits.
take_lock() {  # take_lock STATE_DIR
    mkdir -p "$1"
    exec 9>>"$1/.lock"
    if ! flock -w 600 9; then
        die "$EXIT_FAILED" "could not lock $1/.lock within 600 s (another run is stuck?)"
    fi
}

# pid_alive PID [COMM...]: the process exists, is not a zombie and, when names are
# given, its command name is one of them. The name check keeps a recycled pid from
# being mistaken for one of ours.
pid_alive() {
    local pid=${1:-} want state comm
    shift || true
    case "$pid" in '' | *[!0-9]*) return 1 ;; esac
    [ -r "/proc/$pid/stat" ] || return 1
    state=$(awk '{ print $3 }' "/proc/$pid/stat" 2>/dev/null) || return 1
    [ -n "$state" ] && [ "$state" != Z ] || return 1
    [ $# -eq 0 ] && return 0
    comm=$(cat "/proc/$pid/comm" 2>/dev/null) || return 1
    for want in "$@"; do [ "$comm" = "$want" ] && return 0; done
    return 1
}

pid_stopped() {  # the process is in state T (SIGSTOP)
    [ "$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null)" = T ]
}

# live_pids COMM: pids of running (not zombie) processes named exactly COMM. Zombies
# matter here: PID 1 on some machines reaps orphans late, and a dead daemon's zombie
# must not count as running.
live_pids() {
    local pid
    for pid in $(pgrep -x "$1" || true); do
        if pid_alive "$pid" "$1"; then echo "$pid"; fi
    done
}

read_pid() { cat "$1" 2>/dev/null | head -1 | tr -dc 0-9 || true; }

# wait_gone TICKS: wait up to TICKS tenths of a second for the caller's "${live[@]}"
# (named $comm) to exit; leaves the survivors in the caller's "left". Bash locals are
# dynamically scoped, so this reads and sets stop_pids' own variables.
wait_gone() {
    local pid
    for _ in $(seq 1 "$1"); do
        left=()
        for pid in "${live[@]}"; do
            if pid_alive "$pid" "$comm"; then left+=("$pid"); fi
        done
        [ ${#left[@]} -eq 0 ] && return 0
        sleep 0.1
    done
    return 1
}

# stop_pids COMM PID...: SIGTERM the given pids that are alive and named COMM,
# wait up to 10 s, then SIGKILL what is left and wait for it to go.
stop_pids() {
    local comm=$1 pid left=() live=()
    shift
    for pid in "$@"; do
        if pid_alive "$pid" "$comm"; then live+=("$pid"); fi
    done
    [ ${#live[@]} -gt 0 ] || return 0
    for pid in "${live[@]}"; do
        if pid_stopped "$pid"; then kill -CONT "$pid" 2>/dev/null || true; fi
        kill -TERM "$pid" 2>/dev/null || true
    done
    wait_gone 100 && return 0
    log "$comm ${left[*]} ignored SIGTERM for 10 s: SIGKILL"
    kill -KILL "${left[@]}" 2>/dev/null || true
    wait_gone 50 && return 0
    log "$comm ${left[*]} survived SIGKILL"
    return 1
}

# gluster.sh and slurm.sh may install at the same time (two pytest-xdist workers):
# apt-get waits for the dpkg lock (DPkg::Lock::Timeout) but fails at once on the
# package lists lock that `apt-get update` takes, and the policy-rc.d below must stay
# in place until the other install is done too. So installs queue on this lock.
APT_LOCK=/var/tmp/zotsink-cluster/apt.lock

apt_get() { apt-get -q -o DPkg::Lock::Timeout=300 "$@"; }

package_installed() {
    dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q ' ok installed$'
}

# ensure_packages PKG...: install the Debian packages that are missing. Runs
# `apt-get update` once, only when something has to be installed. Returns
# EXIT_PACKAGES when apt-get fails.
ensure_packages() {
    local missing=() pkg t0
    for pkg in "$@"; do
        package_installed "$pkg" || missing+=("$pkg")
    done
    if [ ${#missing[@]} -eq 0 ]; then
        log "packages present: $*"
        return 0
    fi
    t0=$(now)
    log "installing ${missing[*]}"
    # Subshell: its EXIT trap removes a policy-rc.d we add, whatever happens, and its
    # fd 8 holds APT_LOCK until it ends.
    # policy-rc.d exit 101 stops the packages' postinst from starting the daemons
    # through init.d (munge's does); we start and stop our own instances instead.
    # `update` is tried three times: another apt-get (not ours) may hold the lists
    # lock for a moment, or a mirror may fail once.
    mkdir -p "$(dirname "$APT_LOCK")"
    if ! (
        exec 8>>"$APT_LOCK"
        flock -w 900 8 || exit 1
        if [ ! -e /usr/sbin/policy-rc.d ]; then
            printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
            chmod 0755 /usr/sbin/policy-rc.d
            trap 'rm -f /usr/sbin/policy-rc.d' EXIT
        fi
        export DEBIAN_FRONTEND=noninteractive
        updated=no
        for attempt in 1 2 3; do
            if apt_get update >&2; then
                updated=yes
                break
            fi
            log "apt-get update failed (attempt $attempt of 3)"
            sleep 5
        done
        [ "$updated" = yes ] &&
            apt_get install -y --no-install-recommends "${missing[@]}" >&2
    ); then
        return "$EXIT_PACKAGES"
    fi
    log "installed ${missing[*]} in $(since "$t0") s"
}

# mount_fstype PATH: file system type of the topmost mount exactly at PATH, read from
# mountinfo (never stat the path: a frozen FUSE client would hang the stat).
mount_fstype() {
    awk -v m="$1" '$5 == m { for (i = 7; i <= NF; i++) if ($i == "-") { t = $(i + 1); break } }
                   END { print t }' /proc/self/mountinfo
}

prepare_fuse_service() {  # prepare_fuse_service WHAT VAR COUNT MOUNT...: the checks before `up`
    local what=$1 var=$2 count=$3 rc=0
    shift 3
    need_root "$what"
    [ $# = "$count" ] ||
        die "$EXIT_USAGE" "$var must name exactly $count mount points (got: $*)"
    if [ ! -c /dev/fuse ]; then
        mknod -m 0666 /dev/fuse c 10 229 2>/dev/null ||
            die "$EXIT_PRECONDITION" "no /dev/fuse and it cannot be created"
    fi
    ensure_packages "${PACKAGES[@]}" || rc=$?
    [ "$rc" = 0 ] || die "$EXIT_PACKAGES" "could not install Debian packages ${PACKAGES[*]} (apt-get failed)"
}

# ready_nodes: "NAME PID" of every running node of slurm.sh that is ready for mounts
# (its network and mount namespace set up: nodes.sh writes NAME.ready last), PID being
# the node's PID 1. A file system brought up after the nodes mounts itself in these, and
# one going down unmounts itself from them first, so the order of the scripts' `up` and
# `down` does not matter. The path is slurm.sh's (ZOTSINK_SLURM_STATE, run/nodes).
ready_nodes() {
    local run=${ZOTSINK_SLURM_STATE:-/var/tmp/zotsink-cluster/slurm}/run/nodes f name pid
    for f in "$run"/node*.ready; do
        [ -e "$f" ] || continue
        name=${f##*/}
        name=${name%.ready}
        pid=$(read_pid "$run/$name.init")
        if pid_alive "$pid" python3; then echo "$name $pid"; fi
    done
}

# node_has_mount PID PATH: PATH is a mount point in the mount namespace of process PID
node_has_mount() {
    [ -n "$(awk -v m="$2" '$5 == m' "/proc/$1/mountinfo" 2>/dev/null)" ]
}

# unmount_in_node PID PATH...: unmount PATHs (deepest first) inside the node of PID; its
# FUSE client then exits by itself
unmount_in_node() {
    local pid=$1 m
    shift
    for m in $(printf '%s\n' "$@" | sort -r); do
        node_has_mount "$pid" "$m" || continue
        nsenter --target "$pid" --mount -- timeout 10 umount "$m" 2>/dev/null ||
            nsenter --target "$pid" --mount -- umount -l "$m" 2>/dev/null || true
    done
}
