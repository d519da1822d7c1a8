# shellcheck shell=bash
# Compute "nodes" as Linux namespaces on this one host, for slurm.sh. Sourced after lib.sh.
#
# A node is a process tree in its own network, UTS, mount and PID namespaces:
#   - hostname nodeN, interface eth0 with $NODE_NET.(10+N) on the bridge $NODE_BRIDGE
#     (host side $NODE_NET.1), its own /etc/hosts;
#   - PID 1 is a tiny Python loop that reaps orphans and exits on SIGTERM. When it exits
#     the kernel kills everything else in the node, so stopping a node cannot leave a
#     daemon, a job step or a FUSE client behind, and its veth goes with its network
#     namespace.
# The node's mount namespace starts as a copy of the host's; copies of FUSE mounts are
# detached at once (a copy would keep the host's file system referenced after the host
# unmounts it, and the node must use clients of its own: see `gluster.sh attach`).
#
# Pid files (host pids): $NODE_RUN/NAME.holder (the unshare process) and NAME.init
# (the node's PID 1 seen from the host); NAME.ready once the node can take mounts.

: "${NODE_NET:=10.231.0}"
: "${NODE_BRIDGE:=zsbr0}"

# PID 1 of a node. SIGTERM is in the sigwait set: a PID 1 gets no default signal
# actions, so a handler-less SIGTERM would be ignored and the node could not be stopped.
NODE_INIT_PY='import os, signal
wanted = {signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
signal.pthread_sigmask(signal.SIG_BLOCK, wanted)
while signal.sigwait(wanted) == signal.SIGCHLD:
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass'

node_ip() { echo "$NODE_NET.$((10 + ${1#node}))"; }
node_init() { read_pid "$NODE_RUN/$1.init"; }
node_alive() { pid_alive "$(node_init "$1")" python3; }

# node_exec NAME CMD...: run CMD in every namespace of the node
node_exec() {
    local name=$1
    shift
    nsenter --target "$(node_init "$name")" --net --uts --mount --pid -- "$@"
}

bridge_up() {
    if ip link show "$NODE_BRIDGE" >/dev/null 2>&1; then return 0; fi
    if ip -4 route show | grep -q "^$NODE_NET\."; then
        die "$EXIT_PRECONDITION" "$NODE_NET.0/24 is already routed on this host; set ZOTSINK_SLURM_NET"
    fi
    ip link add "$NODE_BRIDGE" type bridge
    ip addr add "$NODE_NET.1/24" dev "$NODE_BRIDGE"
    ip link set "$NODE_BRIDGE" up
}

bridge_down() {
    if ip link show "$NODE_BRIDGE" >/dev/null 2>&1; then
        ip link del "$NODE_BRIDGE"
    fi
}

# Detach the copies of FUSE mounts this mount namespace got from the host. Runs inside
# the node. Paths in mountinfo escape blanks as octal (\040), printf %b undoes it.
NODE_DETACH_FUSE='awk '\''{ for (i = 7; i <= NF; i++) if ($i == "-") { if ($(i + 1) ~ /^fuse/) print $5; break } }'\'' /proc/self/mountinfo |
    sort -r | while read -r m; do umount -l "$(printf "%b" "$m")" || exit 1; done'

node_create() {  # node_create NAME HOSTS_FILE
    local name=$1 hosts=$2 holder init ip
    node_alive "$name" && return 0
    ip=$(node_ip "$name")
    node_destroy "$name"
    ip link add "zsv-$name" type veth peer name "zsp-$name"
    ip link set "zsv-$name" master "$NODE_BRIDGE" up
    # setsid: a Ctrl-C in the caller's terminal must not reach the node. unshare forks
    # the node's PID 1 and stays as its parent (the holder); --kill-child ends PID 1 if
    # the holder is killed.
    setsid unshare --net --uts --mount --pid --fork --kill-child=SIGKILL --mount-proc \
        --propagation private /usr/bin/python3 -c "$NODE_INIT_PY" zotsink-node "$name" \
        </dev/null >/dev/null 2>&1 9>&- &
    holder=$!
    echo "$holder" >"$NODE_RUN/$name.holder"
    init=
    for _ in $(seq 1 200); do
        init=$(pgrep -P "$holder" || true)
        [ -n "$init" ] && break
        sleep 0.01
    done
    [ -n "$init" ] || die "$EXIT_FAILED" "node $name: namespace did not start"
    echo "$init" >"$NODE_RUN/$name.init"
    ip link set "zsp-$name" netns "$init"
    node_exec "$name" sh -c "hostname $name && ip link set lo up && ip link set zsp-$name name eth0 &&
        ip addr add $ip/24 dev eth0 && ip link set eth0 up" ||
        die "$EXIT_FAILED" "node $name: network setup failed"
    node_exec "$name" sh -c "$NODE_DETACH_FUSE" ||
        die "$EXIT_FAILED" "node $name: could not detach the host's FUSE mounts"
    node_exec "$name" mount --bind "$hosts" /etc/hosts
    # From now on a file system brought up later mounts itself here (lib.sh ready_nodes).
    : >"$NODE_RUN/$name.ready"
}

# node_fuse_mounts NAME: the node's FUSE mount points, deepest first
node_fuse_mounts() {
    node_exec "$1" awk '{ for (i = 7; i <= NF; i++) if ($i == "-") { if ($(i + 1) ~ /^fuse/) print $5; break } }' \
        /proc/self/mountinfo 2>/dev/null | sort -r
}

node_destroy() {  # node_destroy NAME
    local name=$1 init holder m
    init=$(node_init "$name")
    holder=$(read_pid "$NODE_RUN/$name.holder")
    rm -f "$NODE_RUN/$name.ready"
    if node_alive "$name"; then
        # Unmount first, so each FUSE client sees a clean unmount rather than a kill
        # with requests in flight; the kernel would detach the mounts anyway.
        for m in $(node_fuse_mounts "$name"); do
            node_exec "$name" timeout 10 umount "$(printf '%b' "$m")" 2>/dev/null ||
                node_exec "$name" umount -l "$(printf '%b' "$m")" 2>/dev/null || true
        done
        stop_pids python3 "$init"
    fi
    # The holder exits when its child does; only a holder whose PID 1 never started
    # is left to stop here.
    if pid_alive "$holder" unshare; then stop_pids unshare "$holder"; fi
    # The veth goes with the node's network namespace, a moment after PID 1 exits.
    for _ in $(seq 1 50); do
        ip link show "zsv-$name" >/dev/null 2>&1 || break
        sleep 0.02
    done
    ip link del "zsv-$name" 2>/dev/null || true
    rm -f "$NODE_RUN/$name.holder" "$NODE_RUN/$name.init"
}

# Every node that has pid files, whatever the node count is now.
known_nodes() {
    local f
    for f in "$NODE_RUN"/node*.holder "$NODE_RUN"/node*.init "$NODE_RUN"/node*.ready; do
        [ -e "$f" ] || continue
        f=${f##*/}
        echo "${f%.*}"
    done | sort -u
}
