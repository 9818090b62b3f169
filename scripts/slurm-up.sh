#!/usr/bin/env bash
# Bring up a one-host Slurm cluster on this machine for marketsched's Slurm tests and benchmarks.
#
# The recipe is the one measured when this was built: Debian's Slurm 22.05 (no PySlurm),
# munge, slurmctld + slurmd on one node called "localhost" (declaring SLURM_CPUS CPUs, more
# than the hardware has if asked: SlurmdParameters=config_overrides), multifactor priority with
# every weight 0 (so the market's priority= values alone decide the order), no Slurm-native
# preemption (the market suspends and resumes), and accounting through slurmdbd + MariaDB so
# that `sacct --json` works.
#
# Usage:
#   bash scripts/slurm-up.sh            # install if needed, (re)start what is not running, check
#   bash scripts/slurm-up.sh stop       # stop every daemon this script starts
#   bash scripts/slurm-up.sh status     # exit 0 when the cluster answers (sinfo shows the node)
#
# Environment:
#   SLURM_CPUS=8             CPUs the node declares (jobs in tests are `sleep`s, so 2 real cores do)
#   SLURM_ACCOUNTING=dbd     "dbd" (slurmdbd + MariaDB, sacct works) or "none" (no sacct)
#   SLURM_CLEAN=0            1: start slurmctld with empty job state even if it was running
#
# Idempotent: packages are installed only when missing, daemons started only when not running,
# and a changed slurm.conf restarts slurmctld and slurmd. Every step that fails stops the script
# with a message naming the step and the log to read (set -e plus explicit checks); exit code 0
# means `srun hostname` ran on the cluster.
set -euo pipefail
# The daemons started below must not inherit this shell's open files: run under
# `flock LOCKFILE bash scripts/...`, they would hold the lock for as long as they live (255 is
# the script bash is reading).
for fd in /proc/$$/fd/*; do
    n=${fd##*/}
    if [ "$n" -gt 2 ] 2>/dev/null && [ "$n" -lt 255 ]; then eval "exec $n>&-" 2>/dev/null || true; fi
done

CPUS="${SLURM_CPUS:-8}"
ACCOUNTING="${SLURM_ACCOUNTING:-dbd}"
CLEAN="${SLURM_CLEAN:-0}"
CONF=/etc/slurm/slurm.conf
. "$(dirname "$0")/slurm-common.sh"  # alive, wait_for, slurm_conf_daemons, slurm_conf_scheduling
DBDCONF=/etc/slurm/slurmdbd.conf
T0=$(date +%s.%N)

say() { echo "slurm-up: $*" >&2; }
die() { echo "slurm-up: FAILED: $*" >&2; exit 1; }
elapsed() { python3 - "$T0" <<'EOF' 2>/dev/null || echo "?"
import sys, time; print(f"{time.time() - float(sys.argv[1]):.1f}")
EOF
}

stop_all() {
    local f
    for f in /run/slurm/slurmd.pid /run/slurm/slurmctld.pid /run/slurm/slurmdbd.pid /run/mysqld/mariadb.pid \
             /run/munge/munged.pid; do
        if alive "$f"; then
            kill "$(cat "$f")" 2>/dev/null || true
            for _ in $(seq 100); do alive "$f" || break; sleep 0.1; done
            alive "$f" && kill -9 "$(cat "$f")" 2>/dev/null || true
        fi
        rm -f "$f"
    done
}

case "${1:-up}" in
    stop) stop_all; say "stopped"; exit 0 ;;
    status) sinfo -h -o %t 2>/dev/null | grep -Eq 'idle|mix|alloc'; exit $? ;;
    up) ;;
    *) die "unknown command '$1' (up, stop or status)" ;;
esac

[ "$(id -u)" -eq 0 ] || die "run as root (the daemons and the market's scontrol calls need it)"
[[ "$CPUS" =~ ^[1-9][0-9]*$ ]] || die "SLURM_CPUS must be a positive integer, got '$CPUS'"
case "$ACCOUNTING" in dbd|none) ;; *) die "SLURM_ACCOUNTING must be 'dbd' or 'none', got '$ACCOUNTING'" ;; esac

# ---------------------------------------------------------------- 1. packages
PKGS=(slurmctld slurmd slurm-client munge)
[ "$ACCOUNTING" = dbd ] && PKGS+=(slurmdbd slurm-wlm-mysql-plugin mariadb-server)
missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
    say "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq || die "apt-get update"
    apt-get install -y -qq --no-install-recommends "${PKGS[@]}" >/dev/null || die "apt-get install ${PKGS[*]}"
    say "packages installed ($(elapsed) s)"
fi

# ---------------------------------------------------------------- 2. munge
install -d -o munge -g munge -m 0755 /run/munge
if [ ! -s /etc/munge/munge.key ]; then
    say "creating /etc/munge/munge.key"
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
    chown munge:munge /etc/munge/munge.key
    chmod 400 /etc/munge/munge.key
fi
if ! alive /run/munge/munged.pid; then
    runuser -u munge -- /usr/sbin/munged || die "munged did not start (see /var/log/munge/munged.log)"
fi
wait_for 10 "munge answers" sh -c 'munge -n | unmunge' || die "munge -n | unmunge fails (see /var/log/munge/munged.log)"

# ---------------------------------------------------------------- 3. configuration
install -d /etc/slurm /run/slurm /var/log/slurm /var/spool/slurmctld /var/spool/slurmd
if [ "$ACCOUNTING" = dbd ]; then
    ACCT="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=6819"
else
    ACCT="AccountingStorageType=accounting_storage/none"
fi
NEWCONF=$(cat <<EOF
# Written by marketsched's scripts/slurm-up.sh (one-host cluster for tests)
ClusterName=ci
SlurmctldHost=localhost
$(slurm_conf_daemons)
SlurmctldPidFile=/run/slurm/slurmctld.pid
SlurmdPidFile=/run/slurm/slurmd.pid
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
$(slurm_conf_scheduling)
$ACCT
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=30
JobCompType=jobcomp/filetxt
JobCompLoc=/var/log/slurm/jobcomp.log
InactiveLimit=0
KillWait=5
MinJobAge=300
SlurmctldTimeout=30
SlurmdTimeout=60
Waittime=0
# let the node declare more CPUs than the hardware has
SlurmdParameters=config_overrides
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=8000 State=UNKNOWN
PartitionName=main Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
)
RESTART=0
if [ ! -f "$CONF" ] || [ "$(cat "$CONF")" != "$NEWCONF" ]; then
    printf '%s\n' "$NEWCONF" > "$CONF"
    RESTART=1
    say "wrote $CONF ($CPUS CPUs, accounting $ACCOUNTING)"
fi

# ---------------------------------------------------------------- 4. accounting: MariaDB + slurmdbd
if [ "$ACCOUNTING" = dbd ]; then
    install -d -o mysql -g mysql /run/mysqld
    if [ ! -d /var/lib/mysql/mysql ]; then
        mariadb-install-db --user=mysql --datadir=/var/lib/mysql >/dev/null || die "mariadb-install-db"
    fi
    if ! alive /run/mysqld/mariadb.pid; then
        if mariadb-admin ping >/dev/null 2>&1; then
            die "a MariaDB server not started by this script is running; stop it or use SLURM_ACCOUNTING=none"
        fi
        nohup /usr/sbin/mariadbd --user=mysql --bind-address=127.0.0.1 --pid-file=/run/mysqld/mariadb.pid \
            >>/var/log/slurm/mariadb.log 2>&1 </dev/null &
    fi
    wait_for 30 "MariaDB answers" mariadb-admin ping || die "MariaDB did not answer (see /var/log/slurm/mariadb.log)"
    mariadb -e "CREATE DATABASE IF NOT EXISTS slurm_acct_db;
                CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'slurmpw';
                GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';" || die "creating the accounting database"
    NEWDBD="AuthType=auth/munge
DbdHost=localhost
DbdPort=6819
SlurmUser=root
DebugLevel=info
LogFile=/var/log/slurm/slurmdbd.log
PidFile=/run/slurm/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=slurmpw
StorageLoc=slurm_acct_db"
    if [ ! -f "$DBDCONF" ] || [ "$(cat "$DBDCONF")" != "$NEWDBD" ]; then
        (umask 077; printf '%s\n' "$NEWDBD" > "$DBDCONF")
    fi
    chmod 600 "$DBDCONF"
    if ! alive /run/slurm/slurmdbd.pid; then
        slurmdbd || die "slurmdbd did not start (see /var/log/slurm/slurmdbd.log)"
    fi
    wait_for 30 "slurmdbd answers" sacctmgr -n show cluster || die "slurmdbd does not answer (see /var/log/slurm/slurmdbd.log)"
    if ! sacctmgr -n -P show cluster format=cluster | grep -qx ci; then
        sacctmgr -i add cluster ci >/dev/null || die "sacctmgr add cluster ci"
    fi
fi

# ---------------------------------------------------------------- 5. slurmctld and slurmd
if [ "$RESTART" = 1 ] || [ "$CLEAN" = 1 ]; then
    for f in /run/slurm/slurmd.pid /run/slurm/slurmctld.pid; do
        if alive "$f"; then
            kill "$(cat "$f")"
            for _ in $(seq 100); do alive "$f" || break; sleep 0.1; done
        fi
    done
fi
if ! alive /run/slurm/slurmctld.pid; then
    slurmctld -c || die "slurmctld did not start (see /var/log/slurm/slurmctld.log)"
fi
wait_for 30 "slurmctld answers" scontrol ping || die "scontrol ping fails (see /var/log/slurm/slurmctld.log)"
if ! alive /run/slurm/slurmd.pid; then
    slurmd -N localhost || die "slurmd did not start (see /var/log/slurm/slurmd.log)"
fi
node_up() { sinfo -h -o %t | grep -Eq '^(idle|mix|alloc)'; }
if ! wait_for 20 "node localhost is up" node_up; then
    # a node left down or drained by an earlier run: return it to service once
    scontrol update nodename=localhost state=resume >/dev/null 2>&1 || true
    wait_for 10 "node localhost is up (after state=resume)" node_up \
        || die "node not idle: sinfo says '$(sinfo -h -o '%t %E' 2>&1)' (see /var/log/slurm/slurmd.log)"
fi

# ---------------------------------------------------------------- 6. smoke test
out=$(timeout 30 srun -t 1 -J slurm-up-check hostname 2>&1) || die "srun hostname: $out"
say "ready: srun hostname -> $out; $(sinfo -h -o '%P %D %c %t') ($(elapsed) s)"
