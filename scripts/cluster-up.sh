#!/usr/bin/env bash
# Bring up a Slurm cluster of N compute nodes on this one machine, for marketsched's multi-node
# tests and benchmarks (tests/test_cluster_*.py, benchmarks/bench_cluster.py).
#
# Each node is a real slurmd with its own hostname, address and spool, in its own network, UTS
# and mount namespaces: a bridge on a private subnet (msbr0, 10.231.0.0/24; the host is
# 10.231.0.1) and one veth pair per node (node I is 10.231.0.(10+I), hostname nodeI). No second
# machine and no container image is needed: the namespaces give each slurmd what a machine of
# its own would (an address the controller reaches over a network, a hostname, a spool and pid
# file nobody else writes), and taking a node down (kill every process in its namespace, cut its
# link) looks to the controller like a machine that died.
#
# It is separate from scripts/slurm-up.sh's one-host cluster, which may keep running beside it:
# its own configuration (SLURM_CONF=/etc/slurm-cluster/slurm.conf), controller port (6827),
# state, spool and log folders (/var/spool/slurm-cluster, /var/log/slurm-cluster) and cluster
# name (msc). It reuses slurm-up.sh's installation: the packages, munged, and (when it answers)
# its slurmdbd for accounting (the cluster is registered there once as "msc").
#
# Usage:
#   bash scripts/cluster-up.sh [N]          # up with N nodes (default 4); idempotent
#   bash scripts/cluster-up.sh stop         # stop every daemon, namespace and link it made
#   bash scripts/cluster-up.sh status       # exit 0 when the controller answers and every node is up
#   bash scripts/cluster-up.sh node-down NAME   # the node dies: its processes get SIGKILL, its link is cut
#   bash scripts/cluster-up.sh node-up NAME     # the node boots again: link up, a fresh slurmd
#   bash scripts/cluster-up.sh env          # print the export line for the client commands
#
# Partitions: main (the default) has every node; with N >= 2, pa has node1..node(N/2) and pb the
# others (two providers of the exchange, each selling its own nodes).
#
# Environment:
#   CLUSTER_CPUS=2            CPUs each node declares (jobs in tests are `sleep`s)
#   CLUSTER_ACCOUNTING=auto   "dbd" (slurm-up.sh's slurmdbd, sacct works), "none", or "auto":
#                             dbd when that slurmdbd answers
#   CLUSTER_SLURMD_TIMEOUT=6  seconds without an answer before the controller sets a node DOWN
#
# Every step that fails stops the script with a message naming the step and the log to read.
set -euo pipefail
# The daemons started below must not inherit this shell's open files: run under
# `flock LOCKFILE bash scripts/...`, they would hold the lock for as long as they live (255 is
# the script bash is reading).
for fd in /proc/$$/fd/*; do
    n=${fd##*/}
    if [ "$n" -gt 2 ] 2>/dev/null && [ "$n" -lt 255 ]; then eval "exec $n>&-" 2>/dev/null || true; fi
done

HERE="$(cd "$(dirname "$0")" && pwd)"
. "$HERE/slurm-common.sh"  # alive, wait_for, slurm_conf_daemons, slurm_conf_scheduling
ETC=/etc/slurm-cluster
CONF=$ETC/slurm.conf
RUN=/run/slurm-cluster
SPOOL=/var/spool/slurm-cluster
LOGS=/var/log/slurm-cluster
BRIDGE=msbr0
NET=10.231.0
HOSTIP=$NET.1
CTLPORT=6827
SLURMDPORT=6828
CPUS="${CLUSTER_CPUS:-2}"
ACCOUNTING="${CLUSTER_ACCOUNTING:-auto}"
SLURMD_TIMEOUT="${CLUSTER_SLURMD_TIMEOUT:-6}"
export SLURM_CONF=$CONF
T0=$(date +%s.%N)

say() { echo "cluster-up: $*" >&2; }
die() { echo "cluster-up: FAILED: $*" >&2; exit 1; }
elapsed() { python3 -c "import sys, time; print(f'{time.time() - float(sys.argv[1]):.1f}')" "$T0" 2>/dev/null || echo "?"; }
need_root() { [ "$(id -u)" -eq 0 ] || die "run as root (namespaces, links and the daemons need it)"; }
node_index() {  # node_index NAME -> I for nodeI, or die
    [[ "$1" =~ ^node([1-9][0-9]*)$ ]] || die "no node named '$1' (nodes are node1 ... nodeN)"
    echo "${BASH_REMATCH[1]}"
}
nodes_configured() { [ -f "$CONF" ] && sed -n 's/^NodeName=\(node[0-9]*\) .*/\1/p' "$CONF"; }

kill_node() {  # kill_node NAME: SIGKILL every process in the node's network namespace
    local name=$1 pids
    ip netns list 2>/dev/null | grep -qw "ms-$name" || return 0
    pids=$(ip netns pids "ms-$name" 2>/dev/null || true)
    [ -n "$pids" ] && kill -9 $pids 2>/dev/null || true
    for _ in $(seq 50); do [ -z "$(ip netns pids "ms-$name" 2>/dev/null)" ] && break; sleep 0.1; done
}

start_node() {  # start_node NAME: a slurmd in the node's namespaces (network: ms-NAME; UTS, mount: new)
    local name=$1 i
    i=$(node_index "$name")
    ip link set "veth-$name" up
    install -d "$SPOOL/nodes/$name" "$SPOOL/node"
    # Its own UTS namespace (hostname NAME) and mount namespace, in which the node's own folder
    # is mounted over $SPOOL/node: the spool and pid file of every node have the same path inside
    # its namespace, and no other node sees them. slurmd daemonizes and keeps the namespaces.
    # (nsenter, not `ip netns exec`: that mounts a new /sys without the cgroup folder slurmd reads)
    nsenter --net="/run/netns/ms-$name" unshare --uts --mount --propagation private sh -c "
        hostname '$name' && mount --bind '$SPOOL/nodes/$name' '$SPOOL/node' &&
        exec slurmd -N '$name' -f '$CONF'" \
        || die "slurmd of $name did not start (see $LOGS/slurmd-$name.log)"
}

node_pid() { cat "$SPOOL/nodes/$1/slurmd.pid" 2>/dev/null; }
node_alive() { local p; p=$(node_pid "$1") && [ -n "$p" ] && kill -0 "$p" 2>/dev/null; }

stop_all() {
    local n
    for n in $(ip netns list 2>/dev/null | sed -n 's/^ms-\(node[0-9]*\).*/\1/p'); do
        kill_node "$n"
        ip netns del "ms-$n" 2>/dev/null || true
        ip link del "veth-$n" 2>/dev/null || true
    done
    if alive "$RUN/slurmctld.pid"; then
        kill "$(cat "$RUN/slurmctld.pid")" 2>/dev/null || true
        for _ in $(seq 100); do alive "$RUN/slurmctld.pid" || break; sleep 0.1; done
        alive "$RUN/slurmctld.pid" && kill -9 "$(cat "$RUN/slurmctld.pid")" 2>/dev/null || true
    fi
    rm -f "$RUN/slurmctld.pid"
    ip link del "$BRIDGE" 2>/dev/null || true
}

node_state() { sinfo -h -N -n "$1" -o %t 2>/dev/null | head -1; }
all_up() {  # every configured node is usable (no '*': the controller reaches it)
    local n s
    for n in $(nodes_configured); do
        s=$(node_state "$n")
        [[ "$s" =~ ^(idle|mix|alloc|comp)$ ]] || return 1
    done
}

case "${1:-4}" in
    stop) need_root; stop_all; say "stopped"; exit 0 ;;
    status) all_up; exit $? ;;
    env) echo "export SLURM_CONF=$CONF"; exit 0 ;;
    node-down)
        need_root; [ $# -eq 2 ] || die "usage: cluster-up.sh node-down NAME"
        node_index "$2" >/dev/null
        kill_node "$2"
        ip link set "veth-$2" down 2>/dev/null || die "no link veth-$2: is the cluster up?"
        say "$2 is down (processes killed, link cut); the controller sets it DOWN within ${SLURMD_TIMEOUT} s or so"
        exit 0 ;;
    node-up)
        need_root; [ $# -eq 2 ] || die "usage: cluster-up.sh node-up NAME"
        node_index "$2" >/dev/null
        ip netns list | grep -qw "ms-$2" || die "no namespace ms-$2: is the cluster up (bash scripts/cluster-up.sh)?"
        node_alive "$2" || start_node "$2"
        node_ok() { [[ "$(node_state "$1")" =~ ^(idle|mix|alloc|comp)$ ]]; }
        wait_for 30 "$2 is up" node_ok "$2" \
            || die "$2 not usable: sinfo says '$(sinfo -h -N -n "$2" -o '%t %E' 2>&1)' (see $LOGS/slurmd-$2.log)"
        exit 0 ;;
    [1-9]|[1-9][0-9]) N=$1 ;;
    *) die "unknown command '$1' (a node count 1-99, stop, status, node-down NAME, node-up NAME, env)" ;;
esac

need_root
[[ "$CPUS" =~ ^[1-9][0-9]*$ ]] || die "CLUSTER_CPUS must be a positive integer, got '$CPUS'"
[[ "$SLURMD_TIMEOUT" =~ ^[1-9][0-9]*$ ]] || die "CLUSTER_SLURMD_TIMEOUT must be a positive integer, got '$SLURMD_TIMEOUT'"
command -v unshare >/dev/null && command -v ip >/dev/null || die "needs ip (iproute2) and unshare (util-linux)"

# ---------------------------------------------------------------- 1. the installation of slurm-up.sh
for c in slurmctld slurmd sinfo munge; do
    command -v "$c" >/dev/null || die "$c not installed: run \`bash $HERE/slurm-up.sh\` first (it installs Slurm and munge)"
done
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    die "munge does not answer: run \`bash $HERE/slurm-up.sh\` first (see /var/log/munge/munged.log)"
fi
if [ "$ACCOUNTING" = auto ]; then
    if env -u SLURM_CONF sacctmgr -n show cluster >/dev/null 2>&1; then ACCOUNTING=dbd; else ACCOUNTING=none; fi
fi
case "$ACCOUNTING" in dbd|none) ;; *) die "CLUSTER_ACCOUNTING must be auto, dbd or none, got '$ACCOUNTING'" ;; esac

# ---------------------------------------------------------------- 2. network: bridge + veth + namespaces
ip link show "$BRIDGE" >/dev/null 2>&1 || ip link add "$BRIDGE" type bridge \
    || die "cannot create bridge $BRIDGE (are network namespaces and bridges allowed here? ip link add ... type bridge)"
ip -4 addr show dev "$BRIDGE" | grep -q "inet $HOSTIP/24" || ip addr add "$HOSTIP/24" dev "$BRIDGE"
ip link set "$BRIDGE" up
for i in $(seq "$N"); do
    n=node$i
    if ! ip netns list | grep -qw "ms-$n"; then
        ip netns add "ms-$n" || die "ip netns add ms-$n (network namespaces not allowed?)"
    fi
    if ! ip link show "veth-$n" >/dev/null 2>&1; then
        ip link add "veth-$n" type veth peer name eth0 netns "ms-$n" || die "veth pair for $n"
        ip link set "veth-$n" master "$BRIDGE"
        ip -n "ms-$n" addr add "$NET.$((10 + i))/24" dev eth0
        ip -n "ms-$n" link set eth0 up
        ip -n "ms-$n" link set lo up
        ip -n "ms-$n" route add default via "$HOSTIP"
    fi
    ip link set "veth-$n" up
done
# nodes of an earlier, larger cluster
for n in $(ip netns list | sed -n 's/^ms-\(node[0-9]*\).*/\1/p'); do
    if [ "${n#node}" -gt "$N" ]; then kill_node "$n"; ip netns del "ms-$n"; ip link del "veth-$n" 2>/dev/null || true; fi
done
say "network: bridge $BRIDGE $HOSTIP/24, $N nodes at $NET.11-$NET.$((10 + N)) ($(elapsed) s)"

# ---------------------------------------------------------------- 3. configuration
install -d "$ETC" "$RUN" "$SPOOL/ctld" "$SPOOL/nodes" "$SPOOL/node" "$LOGS"
if [ "$ACCOUNTING" = dbd ]; then
    ACCT="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=6819"
else
    ACCT="AccountingStorageType=accounting_storage/none"
fi
NODES=""
for i in $(seq "$N"); do
    NODES+="NodeName=node$i NodeAddr=$NET.$((10 + i)) NodeHostname=node$i CPUs=$CPUS RealMemory=8000 State=UNKNOWN
"
done
# two more partitions, one per half of the nodes (pa: node1..node(N/2), pb: the rest), for tests
# of two exchange providers that each sell their own nodes; main, the default, keeps every node
HALVES=""
if [ "$N" -ge 2 ]; then
    H=$((N / 2))
    HALVES="PartitionName=pa Nodes=node[1-$H] Default=NO MaxTime=INFINITE State=UP OverSubscribe=NO
PartitionName=pb Nodes=node[$((H + 1))-$N] Default=NO MaxTime=INFINITE State=UP OverSubscribe=NO"
fi
NEWCONF=$(cat <<EOF
# Written by marketsched's scripts/cluster-up.sh ($N nodes in namespaces on one machine)
ClusterName=msc
SlurmctldHost=localhost($HOSTIP)
$(slurm_conf_daemons)
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$SPOOL/node/slurmd.pid
SlurmctldPort=$CTLPORT
SlurmdPort=$SLURMDPORT
StateSaveLocation=$SPOOL/ctld
SlurmdSpoolDir=$SPOOL/node/spool
SlurmctldLogFile=$LOGS/slurmctld.log
SlurmdLogFile=$LOGS/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
$(slurm_conf_scheduling)
$ACCT
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=30
JobCompType=jobcomp/filetxt
JobCompLoc=$LOGS/jobcomp.log
InactiveLimit=0
KillWait=5
MinJobAge=300
MessageTimeout=5
SlurmctldTimeout=30
SlurmdTimeout=$SLURMD_TIMEOUT
Waittime=0
SlurmdParameters=config_overrides
${NODES}PartitionName=main Nodes=node[1-$N] Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
${HALVES}
EOF
)
RESTART=0
if [ ! -f "$CONF" ] || [ "$(cat "$CONF")" != "$NEWCONF" ]; then
    printf '%s\n' "$NEWCONF" > "$CONF"
    RESTART=1
    say "wrote $CONF ($N nodes x $CPUS CPUs, accounting $ACCOUNTING)"
fi
if [ "$ACCOUNTING" = dbd ] && ! sacctmgr -n -P show cluster format=cluster | grep -qx msc; then
    sacctmgr -i add cluster msc >/dev/null || die "sacctmgr add cluster msc (see /var/log/slurm/slurmdbd.log)"
fi

# ---------------------------------------------------------------- 4. slurmctld and one slurmd per node
if [ "$RESTART" = 1 ]; then
    for i in $(seq "$N"); do kill_node "node$i"; done
    if alive "$RUN/slurmctld.pid"; then
        kill "$(cat "$RUN/slurmctld.pid")"
        for _ in $(seq 100); do alive "$RUN/slurmctld.pid" || break; sleep 0.1; done
    fi
fi
if ! alive "$RUN/slurmctld.pid"; then
    # a new configuration starts with empty job state (-c); the same one recovers the jobs the
    # controller had (a controller restarted mid-run, as after a crash)
    clean=(); [ "$RESTART" = 1 ] && clean=(-c)
    slurmctld "${clean[@]}" -f "$CONF" || die "slurmctld did not start (see $LOGS/slurmctld.log)"
fi
wait_for 30 "slurmctld answers on $HOSTIP:$CTLPORT" scontrol ping || die "scontrol ping fails (see $LOGS/slurmctld.log)"
for i in $(seq "$N"); do
    node_alive "node$i" || start_node "node$i"
done
if ! wait_for 30 "all $N nodes are up" all_up; then
    # nodes left down by an earlier run (node-down, a crash): return them to service once
    for n in $(nodes_configured); do scontrol update nodename="$n" state=resume >/dev/null 2>&1 || true; done
    wait_for 15 "all $N nodes are up (after state=resume)" all_up \
        || die "nodes not idle: sinfo says '$(sinfo -h -N -o '%N %t %E' 2>&1 | tr '\n' ';')' (see $LOGS/slurmd-NODE.log and $LOGS/slurmctld.log)"
fi

# ---------------------------------------------------------------- 5. smoke test: a job on every node
if [ -n "$(squeue -h -t R,S -o %i)" ]; then  # jobs kept from before (a controller restart): no room to test
    say "ready (jobs are running: no smoke test); $(sinfo -h -o '%P %D %C %t' | paste -sd, -); SLURM_CONF=$CONF ($(elapsed) s)"
    exit 0
fi
out=$(timeout 30 srun -t 1 -N "$N" -J cluster-up-check hostname 2>&1 | sort | tr '\n' ' ') \
    || die "srun -N $N hostname: $out (see $LOGS/slurmctld.log)"
say "ready: srun -N $N hostname -> $out; $(sinfo -h -o '%P %D %C %t' | paste -sd, -); SLURM_CONF=$CONF ($(elapsed) s)"
