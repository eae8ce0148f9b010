#!/usr/bin/env bash
# A real one-node Slurm cluster on this machine, for grading shards under a scheduler as HPC sites do.
#
#   bash scripts/slurm_local.sh start     install slurm-wlm and munge if missing (root, apt), start them
#   bash scripts/slurm_local.sh env       print the line that points sbatch/squeue/sinfo at this cluster
#   bash scripts/slurm_local.sh status    the node and the queue
#   bash scripts/slurm_local.sh stop      stop the daemons (queued jobs are cancelled)
#
# Everything lives in one state folder, .slurm/ in the checkout (ZEROLAB_SLURM_DIR to move it): its own munge key and
# socket, slurm.conf with ports picked free at start, spool, logs and pids. Two checkouts on one machine each run
# their own cluster and never touch the machine's /etc/slurm or /run/munge.
# Then, from the repository root:
#   eval "$(bash scripts/slurm_local.sh env)"
#   sbatch --export=ALL,LESSON=03_overlap_comm --array=1-3 deploy/slurm/grade.sbatch
# The daemons run as root, so jobs run as the user who submits them (root here): see docs/instructor.md for what
# the grading sandbox can do then.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
STATE="${ZEROLAB_SLURM_DIR:-$ROOT/.slurm}"
CONF="$STATE/slurm.conf"
NODE="$(hostname -s)"
CPUS="${ZEROLAB_SLURM_CPUS:-$(nproc)}"  # slots; more than the cores is allowed (config_overrides below)

say() { echo "slurm_local: $*" >&2; }

install_if_missing() {
    command -v slurmctld >/dev/null && command -v munged >/dev/null && return 0
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
        say "slurm-wlm and munge are not installed, and this is not root with apt-get: install them, then run again"
        exit 2
    fi
    say "installing slurm-wlm and munge (Debian packages, about a minute)"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

alive() {  # pid file -> 0 when its process runs
    [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null
}

write_conf() {
    local memory_mb ctld_port slurmd_port
    memory_mb=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 * 9 / 10 ))
    ctld_port=$(free_port)
    slurmd_port=$(free_port)
    cat >"$CONF" <<EOF
# Written by scripts/slurm_local.sh start; rewritten at each start.
ClusterName=zerolab
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$STATE/munge.socket
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
MailProg=/bin/true
SlurmdTimeout=60
InactiveLimit=0
KillWait=5
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$memory_mb State=UNKNOWN
PartitionName=grading Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
}

start() {
    if [ "$(id -u)" != 0 ]; then
        say "the daemons need root (slurmd starts jobs as the submitting user); run it as root"
        exit 2
    fi
    install_if_missing
    if alive "$STATE/slurmctld.pid" && alive "$STATE/slurmd.pid"; then
        say "already running ($CONF)"
        return 0
    fi
    stop quiet
    mkdir -p "$STATE/ctld" "$STATE/spool" "$STATE/log"
    if [ ! -f "$STATE/munge.key" ]; then
        mungekey --create --keyfile="$STATE/munge.key" 2>/dev/null || dd if=/dev/urandom bs=1 count=1024 of="$STATE/munge.key" 2>/dev/null
        chmod 400 "$STATE/munge.key"
    fi
    munged --force --key-file="$STATE/munge.key" --socket="$STATE/munge.socket" --pid-file="$STATE/munged.pid" \
        --log-file="$STATE/log/munged.log" --seed-file="$STATE/munged.seed"
    write_conf
    slurmctld -f "$CONF"
    slurmd -f "$CONF" -N "$NODE"
    for _ in $(seq 60); do
        if SLURM_CONF="$CONF" sinfo -h -N -o '%t' 2>/dev/null | grep -qx 'idle'; then
            say "a one-node cluster ($CPUS CPUs) is up: eval \"\$(bash scripts/slurm_local.sh env)\" to use it"
            return 0
        fi
        sleep 1
    done
    say "the node did not come up in 60 s; logs in $STATE/log/"
    tail -n 5 "$STATE/log/slurmctld.log" "$STATE/log/slurmd.log" >&2 || true
    exit 1
}

stop() {
    if [ -f "$CONF" ] && alive "$STATE/slurmctld.pid"; then
        SLURM_CONF="$CONF" scancel --full --quiet --user="$(id -un)" 2>/dev/null || true
    fi
    for daemon in slurmd slurmctld munged; do
        if alive "$STATE/$daemon.pid"; then
            kill "$(cat "$STATE/$daemon.pid")" 2>/dev/null || true
            for _ in $(seq 50); do alive "$STATE/$daemon.pid" || break; sleep 0.1; done
            alive "$STATE/$daemon.pid" && kill -9 "$(cat "$STATE/$daemon.pid")" 2>/dev/null || true
        fi
        rm -f "$STATE/$daemon.pid"
    done
    [ "${1:-}" = quiet ] || say "stopped"
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    env) echo "export SLURM_CONF=$CONF" ;;
    status) SLURM_CONF="$CONF" sinfo -N && SLURM_CONF="$CONF" squeue ;;
    *) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
