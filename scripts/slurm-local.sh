#!/usr/bin/env bash
# A one-node SLURM cluster on 127.0.0.1 for the tests (Debian's slurm-wlm, slurmdbd, MariaDB and munge):
#   scripts/slurm-local.sh start   # install if missing, write slurm.conf, start munge + slurmctld + slurmd, wait idle
#   scripts/slurm-local.sh stop
#   scripts/slurm-local.sh env     # the SLURM_CONF line to export for sbatch/sinfo/submitit
# State, logs, the config and a private MariaDB (port 3307) live under $BENCH_SLURM_DIR (default
# /tmp/bench-slurm); the system's own /etc/slurm and databases are not touched. Needs root (apt, munge,
# the daemons). Accounting (slurmdbd) is on because submitit asks sacct for a job's state: without it a
# cancelled job is never seen to end.
set -euo pipefail
DIR=${BENCH_SLURM_DIR:-/tmp/bench-slurm}
CONF="$DIR/slurm.conf"
cmd=${1:-start}

fail() { echo "slurm-local: $*" >&2; exit 1; }

install() {
    if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null || ! command -v slurmdbd >/dev/null \
            || ! command -v mariadbd >/dev/null; then
        command -v apt-get >/dev/null || fail "no slurmctld/slurmdbd/munged/mariadbd and no apt-get to install them"
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm slurmdbd munge \
            mariadb-server; } >"$DIR/apt.log" 2>&1 || fail "apt-get install slurm-wlm slurmdbd munge mariadb-server failed (see $DIR/apt.log)"
    fi
}

write_conf() {
    local cpus mem host
    cpus=$(nproc)
    mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024 ))
    host=$(hostname -s)
    mkdir -p "$DIR/state" "$DIR/spool" "$DIR/log"
    cat >"$CONF" <<CONFEOF
ClusterName=bench
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
JobCompType=jobcomp/none
ReturnToService=2
SchedulerType=sched/backfill
MaxArraySize=1000
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=local Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
CONFEOF
}

start_munge() {
    if ! pgrep -x munged >/dev/null; then
        [ -s /etc/munge/munge.key ] || { mungekey --create --force >/dev/null 2>&1 || \
            dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 2>/dev/null; }
        chown -R munge:munge /etc/munge /var/lib/munge /var/log/munge 2>/dev/null || true
        mkdir -p /run/munge && chown munge:munge /run/munge
        chmod 400 /etc/munge/munge.key
        runuser -u munge -- munged || munged --force
    fi
    munge -n | unmunge >/dev/null || fail "munge does not work (a credential round trip failed)"
}

start_accounting() {
    if [ ! -d "$DIR/mysql/mysql" ]; then
        mariadb-install-db --user=root --datadir="$DIR/mysql" >"$DIR/log/mariadb-install.log" 2>&1 \
            || fail "mariadb-install-db failed (see $DIR/log/mariadb-install.log)"
    fi
    mariadbd --user=root --datadir="$DIR/mysql" --socket="$DIR/mysql.sock" --port=3307 --bind-address=127.0.0.1 \
        --pid-file="$DIR/mariadb.pid" --skip-grant-tables --log-error="$DIR/log/mariadb.log" &
    for _ in $(seq 1 30); do [ -S "$DIR/mysql.sock" ] && break; sleep 0.5; done
    [ -S "$DIR/mysql.sock" ] || fail "MariaDB did not start (see $DIR/log/mariadb.log)"
    cat >"$DIR/slurmdbd.conf" <<DBDEOF
AuthType=auth/munge
DbdHost=$(hostname -s)
DbdAddr=127.0.0.1
SlurmUser=root
LogFile=$DIR/log/slurmdbd.log
PidFile=$DIR/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=3307
StorageUser=root
StorageLoc=slurm_acct_db
DBDEOF
    chmod 600 "$DIR/slurmdbd.conf"
    # slurmdbd reads slurmdbd.conf beside $SLURM_CONF
    SLURM_CONF="$CONF" slurmdbd || fail "slurmdbd did not start (see $DIR/log/slurmdbd.log)"
    for _ in $(seq 1 30); do sacctmgr -n list cluster >/dev/null 2>&1 && break; sleep 0.5; done
    sacctmgr -i add cluster bench >/dev/null 2>&1 || true
}

start() {
    mkdir -p "$DIR"
    install
    write_conf
    start_munge
    export SLURM_CONF="$CONF"
    stop_daemons
    start_accounting
    slurmctld -f "$CONF" || fail "slurmctld did not start (see $DIR/log/slurmctld.log)"
    slurmd -f "$CONF" || fail "slurmd did not start (see $DIR/log/slurmd.log)"
    for _ in $(seq 1 60); do
        state=$(sinfo -h -o %t 2>/dev/null | head -1 || true)
        if [ "$state" = "idle" ]; then
            echo "slurm-local: up (SLURM_CONF=$CONF; $(sinfo -h -o '%P %D nodes, %c CPUs, %t'))"
            return 0
        fi
        if [ "$state" = "down" ] || [ "$state" = "drain" ] || [ "$state" = "down*" ]; then
            scontrol update nodename="$(hostname -s)" state=resume >/dev/null 2>&1 || true
        fi
        sleep 1
    done
    fail "the node did not become idle in 60 s (state: ${state:-none}; see $DIR/log/)"
}

stop_daemons() {
    for pid in "$DIR/slurmd.pid" "$DIR/slurmctld.pid" "$DIR/slurmdbd.pid" "$DIR/mariadb.pid"; do
        if [ -s "$pid" ]; then kill "$(cat "$pid")" 2>/dev/null || true; fi
    done
    for _ in $(seq 1 20); do
        pgrep -f "(slurmctld|slurmd|slurmdbd|mariadbd).*$DIR" >/dev/null || return 0
        sleep 0.5
    done
    pkill -9 -f "(slurmctld|slurmd|slurmdbd|mariadbd).*$DIR" || true
}

case "$cmd" in
    start) start ;;
    stop) export SLURM_CONF="$CONF"; stop_daemons; echo "slurm-local: stopped" ;;
    env) echo "export SLURM_CONF=$CONF" ;;
    *) fail "usage: $0 start|stop|env" ;;
esac
