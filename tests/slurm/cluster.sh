#!/usr/bin/env bash
# A real two-node Slurm cluster on this one machine, for rootcause's Slurm tests.
#
#   tests/slurm/cluster.sh install   apt-get install slurm-wlm and munge (root; about a minute)
#   tests/slurm/cluster.sh start     munged, slurmctld and two slurmd (n1, n2); prints SLURM_CONF=...
#   tests/slurm/cluster.sh status    exit 0 when both nodes answer, 1 otherwise
#   tests/slurm/cluster.sh stop      stops what start started, removes the /etc/hosts line and the state
#
# One slurmctld and two slurmd processes (-N n1, -N n2) on distinct ports, all on 127.0.0.1; the
# node names resolve through a line in /etc/hosts (MASTER_ADDR is a node name). ProctrackType
# linuxproc and TaskPlugin none: no cgroups needed. State, spool, logs and slurm.conf live under
# $RC_SLURM_DIR (default /tmp/rootcause-slurm); clients find the cluster with SLURM_CONF.
# The daemons get /dev/null as stdio (their logs are files): a caller reading this script's output
# through a pipe must see it end. Every failure prints one line "cannot start the Slurm test cluster: <why>" on stderr and exits 1.
set -uo pipefail

DIR="${RC_SLURM_DIR:-/tmp/rootcause-slurm}"
CONF="$DIR/slurm.conf"
HOSTS_TAG="# rootcause-slurm-test"
NODES=(n1 n2)
CPUS_PER_NODE=4

die() { echo "cannot start the Slurm test cluster: $*" >&2; exit 1; }

need_root() { [ "$(id -u)" = 0 ] || die "$1 needs root (it writes /etc/hosts and runs munged and slurmd)"; }

free_port() {
  python3 - <<'EOF'
import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
EOF
}

install() {
  need_root install
  command -v apt-get >/dev/null || die "no apt-get: install slurm-wlm and munge with this system's package manager"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null || die "apt-get update failed"
  apt-get install -y -q slurm-wlm munge >/dev/null || die "apt-get install slurm-wlm munge failed"
}

status() {
  [ -f "$CONF" ] || return 1
  local states
  states=$(SLURM_CONF="$CONF" timeout 10 sinfo -h -N -o '%N %T' 2>/dev/null) || return 1
  for node in "${NODES[@]}"; do
    grep -Eq "^$node (idle|mixed|allocated|completing)" <<<"$states" || return 1
  done
}

munge_answers() { munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; }

start_munge() {
  if munge_answers; then
    return 0
  fi
  if [ ! -s /etc/munge/munge.key ]; then
    mkdir -p /etc/munge
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none || die "cannot write /etc/munge/munge.key"
  fi
  mkdir -p /run/munge /var/lib/munge /var/log/munge
  chown munge:munge /etc/munge /etc/munge/munge.key /run/munge /var/lib/munge /var/log/munge
  chmod 0700 /etc/munge /var/lib/munge /var/log/munge
  chmod 0400 /etc/munge/munge.key
  chmod 0755 /run/munge
  runuser -u munge -- /usr/sbin/munged --force </dev/null >/dev/null 2>&1 || die "munged did not start (see /var/log/munge/munged.log)"
  touch "$DIR/started-munged"
  for _ in $(seq 50); do
    munge_answers && return 0
    sleep 0.1
  done
  die "munged does not answer (munge -n | unmunge fails)"
}

write_conf() {
  local host ctl_port
  host=$(hostname -s)
  ctl_port=$(free_port)
  mkdir -p "$DIR/state" "$DIR/log"
  for node in "${NODES[@]}"; do mkdir -p "$DIR/spool/$node"; done
  cat >"$CONF" <<EOF
ClusterName=rootcause
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctl_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
KillWait=5
MinJobAge=300
InactiveLimit=0
SlurmctldTimeout=30
SlurmdTimeout=60
EOF
  for node in "${NODES[@]}"; do
    echo "NodeName=$node NodeHostname=$host NodeAddr=127.0.0.1 Port=$(free_port) CPUs=$CPUS_PER_NODE State=UNKNOWN" >>"$CONF"
  done
  echo "PartitionName=debug Nodes=$(IFS=,; echo "${NODES[*]}") Default=YES MaxTime=INFINITE State=UP" >>"$CONF"
}

add_hosts() {
  grep -q "$HOSTS_TAG" /etc/hosts && return 0
  # /etc/hosts may be a bind mount (containers): rewrite it in place, never replace the file.
  echo "127.0.0.1 ${NODES[*]} $HOSTS_TAG" >>/etc/hosts || die "cannot write /etc/hosts"
}

remove_hosts() {
  grep -q "$HOSTS_TAG" /etc/hosts 2>/dev/null || return 0
  local kept
  kept=$(grep -v "$HOSTS_TAG" /etc/hosts)
  printf '%s\n' "$kept" >/etc/hosts
}

start() {
  if status; then
    echo "SLURM_CONF=$CONF"
    return 0
  fi
  need_root start
  for tool in slurmctld slurmd munged srun sbatch squeue scancel scontrol sinfo; do
    command -v "$tool" >/dev/null || die "$tool is not installed (run: $0 install)"
  done
  stop_daemons
  mkdir -p "$DIR"
  start_munge
  add_hosts
  write_conf
  slurmctld -f "$CONF" </dev/null >/dev/null 2>&1 || die "slurmctld did not start (see $DIR/log/slurmctld.log)"
  for node in "${NODES[@]}"; do
    slurmd -f "$CONF" -N "$node" </dev/null >/dev/null 2>&1 || die "slurmd -N $node did not start (see $DIR/log/slurmd-$node.log)"
  done
  for _ in $(seq 150); do
    if status; then
      echo "SLURM_CONF=$CONF"
      return 0
    fi
    sleep 0.2
  done
  die "the nodes did not come up within 30 s: $(SLURM_CONF="$CONF" sinfo -N 2>&1 | tr '\n' ' ') (see $DIR/log/)"
}

stop_pidfile() {
  local file=$1 pid
  [ -f "$file" ] || return 0
  pid=$(cat "$file" 2>/dev/null)
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null
  fi
  rm -f "$file"
}

stop_daemons() {
  [ -d "$DIR" ] || return 0
  if [ -f "$CONF" ]; then
    SLURM_CONF="$CONF" timeout 10 scancel --full --quiet --user=root 2>/dev/null
  fi
  for node in "${NODES[@]}"; do stop_pidfile "$DIR/slurmd-$node.pid"; done
  stop_pidfile "$DIR/slurmctld.pid"
}

stop() {
  stop_daemons
  if [ -f "$DIR/started-munged" ] && [ -f /run/munge/munged.pid ]; then
    kill "$(cat /run/munge/munged.pid)" 2>/dev/null
  fi
  remove_hosts
  rm -rf "$DIR"
}

case "${1:-}" in
  install) install ;;
  start) start ;;
  status) status ;;
  stop) stop ;;
  *) echo "usage: $0 install|start|status|stop" >&2; exit 2 ;;
esac
