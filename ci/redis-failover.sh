#!/usr/bin/env bash
# Usage: ci/redis-failover.sh COMMAND [ARGS]
#
# Fails over the Redis Cluster of ci/start-redis-topologies.sh (127.0.0.1:7000-7005, 3 masters
# + 3 replicas), for tests/cluster_failover.rs of shedlock-redis, and its Sentinel setup (data
# nodes 127.0.0.1:6390-6391, one master and one replica, watched by the sentinels 26390-26392
# under the master name `shedlock`), for tests/sentinel_failover.rs:
#
#   cluster-kill-master PORT [--on-stdin]
#       SIGKILLs the cluster master on 127.0.0.1:PORT (the process listening there, which must
#       be a redis-server on that port) and returns once it is gone; the cluster then promotes
#       its replica by itself (after cluster-node-timeout, 2 s, plus an election). Wants the
#       whole cluster healthy first, and PORT a master whose replica's link is up. With
#       --on-stdin it checks all that, prints pid=, replica= and then armed=yes, and kills only
#       when a line arrives on stdin (no kill if stdin closes first): a test arms it before it
#       takes a lock and kills within a pipe write after the acquire returned. Prints killed=,
#       replica=, pid= and sigkill_at= (when the signal went, in epoch seconds).
#   cluster-restore
#       starts every cluster node that is down again, from its configuration of
#       ci/start-redis-topologies.sh (a killed master rejoins as a replica of the node promoted
#       in its place), and waits until all six nodes say cluster_state:ok, know the five others
#       healthy, and every master has a replica whose link is up. Does nothing else when the
#       cluster is so already.
#   sentinel-kill-master
#       SIGKILLs the master the sentinels name (the redis-server listening on its port) and
#       returns once it is gone; the sentinels then promote the replica by themselves (after
#       down-after-milliseconds, 5 s, plus an election). Wants the setup healthy first (as
#       sentinel-restore waits for). Prints killed=, replica=, pid= and sigkill_at= (when the
#       signal went, in epoch seconds).
#   sentinel-restore
#       starts every node of the Sentinel setup that is down again (data nodes and sentinels),
#       from the configuration ci/start-redis-topologies.sh wrote and the sentinels rewrote
#       since, as that script starts them (a killed master comes back as a master with no data,
#       and the sentinels turn it into a replica of the node promoted in its place), and waits
#       until the setup is healthy: the three sentinels name the same master, not flagged down
#       or failing over, which has one replica whose link is up and synchronised, seen healthy
#       by every sentinel, each of which knows the two others and has its quorum. Does nothing
#       else when the setup is so already.
#
# All set repl-diskless-sync-delay to 0 at runtime on every data node: a rejoining node needs a
# full resynchronisation, which a master otherwise delays 5 s (Redis' default) in case more
# replicas ask. The sentinel commands also set the sentinels' INFO and hello periods short (1 s
# and 0.5 s, SENTINEL DEBUG, as ci/start-redis-topologies.sh does; a sentinel forgets them when
# it restarts). Every step is a line on stderr; stdout gets NAME=value lines for the caller
# (what was killed or restored, and the seconds taken). Commands are serialized with each other
# (flock). Fails loudly, naming the nodes and their logs, when the cluster or the Sentinel setup
# is not healthy within 60 s.
set -euo pipefail

STATE_DIR=${SHEDLOCK_CI_STATE_DIR:-/var/tmp/shedlock-ci}/redis-topologies
CLUSTER_PORTS=(7000 7001 7002 7003 7004 7005)
DATA_PORTS=(6390 6391)
SENTINEL_PORTS=(26390 26391 26392)
MASTER_NAME=shedlock
COMMANDS="cluster-kill-master PORT [--on-stdin], cluster-restore, sentinel-kill-master, sentinel-restore"

LOG_TAG=redis-failover
# shellcheck source=ci/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

report() { printf '%s\n' "$@"; }

cli() { local port=$1; shift; redis-cli -h 127.0.0.1 -p "$port" "$@" 2>/dev/null; }
answers() { cli "$1" ping | grep -q PONG; }
# field NAME: the value of NAME: in the `INFO`-style text on stdin (CRLF stripped).
field() { tr -d '\r' | sed -n "s/^$1://p"; }
listener_pid() { { ss -Hltnp "sport = :$1" 2>/dev/null || true; } | sed -n 's/.*pid=\([0-9]*\).*/\1/p' | head -n 1; }
cluster_dir() { echo "$STATE_DIR/cluster/$1"; }
data_dir() { echo "$STATE_DIR/sentinel-data/$1"; }
sentinel_dir() { echo "$STATE_DIR/sentinels/$1"; }

lock() {
  mkdir -p "$STATE_DIR"
  exec 9>"$STATE_DIR/redis-failover.lock"
  flock -w 60 9 || die "another ci/redis-failover.sh command still runs after 60 s (or holds $STATE_DIR/redis-failover.lock)"
}

# sigkill PORT PID: SIGKILLs the redis-server PID listening on 127.0.0.1:PORT and waits (3 s at
# most) until it is gone; sets `started` and `sigkill_at` (the moment of the signal, without a
# fork in between: bash 5's clock, in epoch seconds).
sigkill() {
  local port=$1 pid=$2
  started=$(now)
  sigkill_at=$EPOCHREALTIME
  kill -KILL "$pid"
  for _ in $(seq 1 300); do
    if ! alive "$pid" && ! port_open "$port"; then break; fi
    sleep 0.01
  done
  alive "$pid" && die "the master 127.0.0.1:$port (pid $pid) still runs 3 s after SIGKILL"
  return 0
}

is_cluster_port() {
  local port
  for port in "${CLUSTER_PORTS[@]}"; do [ "$port" = "$1" ] && return 0; done
  return 1
}

# Healthy: every node says cluster_state:ok over all 16384 slots of 3 masters, knows six nodes
# with none flagged failing and every link connected, and sees three masters serving slots and
# three replicas; each master has a replica online, and each replica's link to its master is up
# with no sync in progress.
cluster_fully_healthy() {
  local port info nodes masters=0 replicas=0
  for port in "${CLUSTER_PORTS[@]}"; do
    info=$(cli "$port" cluster info) || return 1
    [ "$(field cluster_state <<<"$info")" = ok ] || return 1
    [ "$(field cluster_known_nodes <<<"$info")" = 6 ] || return 1
    [ "$(field cluster_size <<<"$info")" = 3 ] || return 1
    [ "$(field cluster_slots_ok <<<"$info")" = 16384 ] || return 1
    nodes=$(cli "$port" cluster nodes | tr -d '\r') || return 1
    [ "$(grep -c . <<<"$nodes")" = 6 ] || return 1
    awk '$3 ~ /fail|handshake|noaddr/ || $8 != "connected" { bad = 1 } END { exit bad }' \
      <<<"$nodes" || return 1
    # Its view of the others agrees with theirs: three masters, each serving slots, and three
    # replicas. A node that rejoined is demoted at once in its own eyes but in the others' only
    # once gossip reaches them, and meanwhile they list it as a master serving nothing.
    awk '$3 ~ /master/ { masters++; if (NF < 9) bad = 1 } $3 ~ /slave/ { replicas++ }
         END { exit bad || masters != 3 || replicas != 3 }' <<<"$nodes" || return 1
    info=$(cli "$port" info replication) || return 1
    case "$(field role <<<"$info")" in
      master)
        masters=$((masters + 1))
        grep -q '^slave0:.*state=online' <<<"$(tr -d '\r' <<<"$info")" || return 1 ;;
      slave)
        replicas=$((replicas + 1))
        [ "$(field master_link_status <<<"$info")" = up ] || return 1
        [ "$(field master_sync_in_progress <<<"$info")" = 0 ] || return 1 ;;
      *) return 1 ;;
    esac
  done
  [ "$masters" = 3 ] && [ "$replicas" = 3 ]
}

describe_cluster() {
  local port
  for port in "${CLUSTER_PORTS[@]}"; do
    log "node $port: $(cli "$port" cluster info | tr -d '\r' | grep -E 'cluster_state|known_nodes|slots_ok' | tr '\n' ' ')$(cli "$port" info replication | tr -d '\r' | grep -E '^(role|master_link_status|connected_slaves):' | tr '\n' ' ')"
  done
}

# No full resynchronisation waits for more replicas (runtime only; ports given or all live).
tune() {
  local port
  for port in "$@"; do
    answers "$port" || continue
    cli "$port" config set repl-diskless-sync-delay 0 | grep -q OK \
      || die "cluster node $port refused CONFIG SET repl-diskless-sync-delay (log: $(cluster_dir "$port")/redis.log)"
  done
}

kill_master() {
  local port=$1 on_stdin=$2 info replica pid pidfile started sigkill_at
  is_cluster_port "$port" || die "$port is not a port of the cluster (${CLUSTER_PORTS[*]})"
  [ -s "$(cluster_dir "$port")/redis.conf" ] \
    || die "no configuration $(cluster_dir "$port")/redis.conf: run ci/start-redis-topologies.sh first"
  cluster_fully_healthy \
    || { describe_cluster; die "the cluster on 127.0.0.1:7000-7005 is not fully healthy (run ci/redis-failover.sh cluster-restore first)"; }
  info=$(cli "$port" info replication | tr -d '\r')
  [ "$(field role <<<"$info")" = master ] || die "127.0.0.1:$port is not a master"
  replica=$(sed -n 's/^slave0:.*port=\([0-9]*\),state=online.*/\1/p' <<<"$info")
  [ -n "$replica" ] || die "127.0.0.1:$port has no replica online"
  pid=$(listener_pid "$port")
  [ -n "$pid" ] || die "no process listens on 127.0.0.1:$port (is ss from iproute2 installed?)"
  cmdline "$pid" | grep -Eq "^redis-server [^ ]*:$port( |$)" \
    || die "the process listening on 127.0.0.1:$port (pid $pid: $(cmdline "$pid")) is not its redis-server"
  pidfile=$(cluster_dir "$port")/redis.pid
  if [ -s "$pidfile" ] && [ "$(cat "$pidfile")" != "$pid" ]; then
    die "127.0.0.1:$port is served by pid $pid, but $pidfile says $(cat "$pidfile")"
  fi
  tune "${CLUSTER_PORTS[@]}"
  if [ "$on_stdin" = yes ]; then
    report "pid=$pid" "replica=127.0.0.1:$replica" "armed=yes"
    log "armed: SIGKILL to the master 127.0.0.1:$port (pid $pid) when a line arrives on stdin"
    if ! IFS= read -r _; then
      log "stdin closed before the word to kill: 127.0.0.1:$port left running"
      exit 3
    fi
  fi
  sigkill "$port" "$pid"
  log "killed the master 127.0.0.1:$port (pid $pid, replica 127.0.0.1:$replica) after $(elapsed "$started") s"
  report "killed=127.0.0.1:$port" "replica=127.0.0.1:$replica" "pid=$pid" "sigkill_at=$sigkill_at"
}

restore() {
  local started port conf down=()
  started=$(now)
  tune "${CLUSTER_PORTS[@]}"
  for port in "${CLUSTER_PORTS[@]}"; do
    answers "$port" && continue
    port_open "$port" && die "127.0.0.1:$port is taken by something that is not Redis"
    conf=$(cluster_dir "$port")/redis.conf
    [ -s "$conf" ] || die "no configuration $conf: run ci/start-redis-topologies.sh first"
    log "starting cluster node $port again (redis-server $conf)"
    # As ci/start-redis-topologies.sh starts it: the same configuration, daemonized.
    # fd 9 (the flock) closed: the daemon must not hold the lock after this script ends.
    redis-server "$conf" 9>&- || die "cluster node $port failed to start (log: $(cluster_dir "$port")/redis.log)"
    wait_for 20 answers "$port" \
      || { tail -n 30 "$(cluster_dir "$port")/redis.log" >&2
           die "cluster node $port did not answer within 20 s (log: $(cluster_dir "$port")/redis.log)"; }
    tune "$port"
    down+=("127.0.0.1:$port")
  done
  if ! wait_for 60 cluster_fully_healthy; then
    describe_cluster
    die "the Redis Cluster on 127.0.0.1:7000-7005 was not fully healthy within 60 s (logs: $STATE_DIR/cluster/<port>/redis.log)"
  fi
  log "restored ${down[*]:-nothing (all nodes ran)}; all six nodes ok, each master with a replica, after $(elapsed "$started") s"
  report "restored=$(IFS=,; echo "${down[*]:-}")" "seconds=$(elapsed "$started")"
}

# --- Redis Sentinel -------------------------------------------------------------------------

# pairs: `SENTINEL MASTER`-style name/value lines on stdin as NAME:value lines, one per field
# (`SENTINEL REPLICAS` gives one block per replica, each starting with name:).
pairs() { tr -d '\r' | paste -d: - -; }

# The port of the master all three sentinels name (fails if one does not answer, names another
# or another host).
sentinel_master_port() {
  local port addr master=""
  for port in "${SENTINEL_PORTS[@]}"; do
    addr=$(cli "$port" sentinel get-master-addr-by-name "$MASTER_NAME" | tr -d '\r' | paste -sd:) \
      || return 1
    [[ $addr =~ ^127\.0\.0\.1:[0-9]+$ ]] || return 1
    if [ -z "$master" ]; then master=$addr; elif [ "$master" != "$addr" ]; then return 1; fi
  done
  echo "${master#*:}"
}

# Healthy: all three sentinels name the same master, flagged nothing but master (not down, not
# failing over), know the two other sentinels and have their quorum, and know exactly one
# replica, the other data node, flagged nothing but slave, its link ok. The master says so too
# (one replica online), and the replica says its master is that one, its link up and no sync in
# progress.
sentinel_fully_healthy() {
  local master port info replica
  master=$(sentinel_master_port) || return 1
  replica=""
  for port in "${DATA_PORTS[@]}"; do [ "$port" = "$master" ] || replica=$port; done
  [ -n "$replica" ] || return 1
  for port in "${SENTINEL_PORTS[@]}"; do
    info=$(cli "$port" sentinel master "$MASTER_NAME" | pairs) || return 1
    [ "$(field flags <<<"$info")" = master ] || return 1
    [ "$(field num-other-sentinels <<<"$info")" = 2 ] || return 1
    [ "$(field num-slaves <<<"$info")" = 1 ] || return 1
    info=$(cli "$port" sentinel replicas "$MASTER_NAME" | pairs) || return 1
    [ "$(field name <<<"$info")" = "127.0.0.1:$replica" ] || return 1
    [ "$(field flags <<<"$info")" = slave ] || return 1
    [ "$(field master-link-status <<<"$info")" = ok ] || return 1
    [ "$(field master-port <<<"$info")" = "$master" ] || return 1
    cli "$port" sentinel ckquorum "$MASTER_NAME" | grep -q '^OK' || return 1
  done
  info=$(cli "$master" info replication | tr -d '\r') || return 1
  [ "$(field role <<<"$info")" = master ] || return 1
  [ "$(field connected_slaves <<<"$info")" = 1 ] || return 1
  grep -q "^slave0:.*port=$replica,state=online" <<<"$info" || return 1
  info=$(cli "$replica" info replication) || return 1
  [ "$(field role <<<"$info")" = slave ] || return 1
  [ "$(field master_port <<<"$info")" = "$master" ] || return 1
  [ "$(field master_link_status <<<"$info")" = up ] || return 1
  [ "$(field master_sync_in_progress <<<"$info")" = 0 ]
}

describe_sentinel() {
  local port
  for port in "${SENTINEL_PORTS[@]}"; do
    log "sentinel $port: names $(cli "$port" sentinel get-master-addr-by-name "$MASTER_NAME" | tr -d '\r' | paste -sd:); master $(cli "$port" sentinel master "$MASTER_NAME" | pairs | grep -E '^(flags|num-slaves|num-other-sentinels):' | tr '\n' ' ')replicas $(cli "$port" sentinel replicas "$MASTER_NAME" | pairs | grep -E '^(name|flags|master-link-status):' | tr '\n' ' ')$(cli "$port" sentinel ckquorum "$MASTER_NAME" | tr -d '\r' | cut -c1-40)"
  done
  for port in "${DATA_PORTS[@]}"; do
    log "data node $port: $(cli "$port" info replication | tr -d '\r' | grep -E '^(role|master_port|master_link_status|master_sync_in_progress|connected_slaves):' | tr '\n' ' ')"
  done
}

# Short INFO and hello periods on every sentinel that runs, and no delay before a full
# resynchronisation on every data node that runs (runtime settings).
tune_sentinel_setup() {
  local port
  for port in "${SENTINEL_PORTS[@]}"; do
    answers "$port" || continue
    cli "$port" sentinel debug info-period 1000 publish-period 500 | grep -q OK \
      || die "sentinel $port refused SENTINEL DEBUG info-period/publish-period (needs Redis 7; log: $(sentinel_dir "$port")/sentinel.log)"
  done
  for port in "${DATA_PORTS[@]}"; do
    answers "$port" || continue
    cli "$port" config set repl-diskless-sync-delay 0 | grep -q OK \
      || die "Redis $port refused CONFIG SET repl-diskless-sync-delay (log: $(data_dir "$port")/redis.log)"
  done
}

sentinel_setup_configured() {
  local port
  for port in "${DATA_PORTS[@]}"; do
    [ -s "$(data_dir "$port")/redis.conf" ] \
      || die "no configuration $(data_dir "$port")/redis.conf: run ci/start-redis-topologies.sh first"
  done
  for port in "${SENTINEL_PORTS[@]}"; do
    [ -s "$(sentinel_dir "$port")/sentinel.conf" ] \
      || die "no configuration $(sentinel_dir "$port")/sentinel.conf: run ci/start-redis-topologies.sh first"
  done
}

sentinel_kill_master() {
  local port replica pid pidfile started sigkill_at
  sentinel_setup_configured
  tune_sentinel_setup
  sentinel_fully_healthy \
    || { describe_sentinel; die "the Sentinel setup (master name $MASTER_NAME, 127.0.0.1:6390-6391, sentinels 26390-26392) is not fully healthy (run ci/redis-failover.sh sentinel-restore first)"; }
  port=$(sentinel_master_port) || die "the sentinels stopped agreeing on a master"
  for replica in "${DATA_PORTS[@]}"; do [ "$replica" = "$port" ] || break; done
  pid=$(listener_pid "$port")
  [ -n "$pid" ] || die "no process listens on 127.0.0.1:$port (is ss from iproute2 installed?)"
  cmdline "$pid" | grep -Eq "^redis-server [^ ]*:$port( |$)" \
    || die "the process listening on 127.0.0.1:$port (pid $pid: $(cmdline "$pid")) is not its redis-server"
  pidfile=$(data_dir "$port")/redis.pid
  if [ -s "$pidfile" ] && [ "$(cat "$pidfile")" != "$pid" ]; then
    die "127.0.0.1:$port is served by pid $pid, but $pidfile says $(cat "$pidfile")"
  fi
  sigkill "$port" "$pid"
  port_open "$port" && die "127.0.0.1:$port still accepts connections 3 s after its master (pid $pid) was killed"
  log "killed the sentinels' master 127.0.0.1:$port (pid $pid, replica 127.0.0.1:$replica) after $(elapsed "$started") s"
  report "killed=127.0.0.1:$port" "replica=127.0.0.1:$replica" "pid=$pid" "sigkill_at=$sigkill_at"
}

# start_node NAME PORT CONF LOGFILE [--sentinel]: as ci/start-redis-topologies.sh starts it
# (the same configuration, daemonized); returns once it answers.
start_node() {
  local name=$1 port=$2 conf=$3 logfile=$4; shift 4
  port_open "$port" && die "$name: 127.0.0.1:$port is taken by something that is not Redis"
  log "starting $name again (redis-server $conf${*:+ $*})"
  # fd 9 (the flock) closed: the daemon must not hold the lock after this script ends.
  redis-server "$conf" "$@" 9>&- || die "$name failed to start (log: $logfile)"
  wait_for 20 answers "$port" \
    || { [ -f "$logfile" ] && tail -n 30 "$logfile" >&2
         die "$name did not answer on 127.0.0.1:$port within 20 s (log: $logfile)"; }
}

sentinel_restore() {
  local started port down=()
  started=$(now)
  sentinel_setup_configured
  for port in "${DATA_PORTS[@]}"; do
    answers "$port" && continue
    start_node "data node $port" "$port" "$(data_dir "$port")/redis.conf" "$(data_dir "$port")/redis.log"
    down+=("127.0.0.1:$port")
  done
  for port in "${SENTINEL_PORTS[@]}"; do
    answers "$port" && continue
    start_node "sentinel $port" "$port" "$(sentinel_dir "$port")/sentinel.conf" \
      "$(sentinel_dir "$port")/sentinel.log" --sentinel
    down+=("127.0.0.1:$port")
  done
  tune_sentinel_setup
  if ! wait_for 60 sentinel_fully_healthy; then
    describe_sentinel
    die "the Sentinel setup (master name $MASTER_NAME) was not fully healthy within 60 s (logs: $STATE_DIR/sentinel-data/<port>/redis.log, $STATE_DIR/sentinels/<port>/sentinel.log)"
  fi
  port=$(sentinel_master_port)
  log "restored ${down[*]:-nothing (all nodes ran)}; master 127.0.0.1:$port with its replica, all sentinels agreeing, after $(elapsed "$started") s"
  report "restored=$(IFS=,; echo "${down[*]:-}")" "master=127.0.0.1:$port" "seconds=$(elapsed "$started")"
}

case "${1:-}" in
  cluster-kill-master)
    if [ $# -lt 2 ] || [ $# -gt 3 ]; then die "usage: $0 cluster-kill-master PORT [--on-stdin]"; fi
    on_stdin=no
    if [ $# -eq 3 ]; then
      [ "$3" = --on-stdin ] || die "unknown option '$3' (only --on-stdin)"
      on_stdin=yes
    fi
    lock; kill_master "$2" "$on_stdin" ;;
  cluster-restore)
    [ $# -eq 1 ] || die "usage: $0 cluster-restore"
    lock; restore ;;
  sentinel-kill-master)
    [ $# -eq 1 ] || die "usage: $0 sentinel-kill-master"
    lock; sentinel_kill_master ;;
  sentinel-restore)
    [ $# -eq 1 ] || die "usage: $0 sentinel-restore"
    lock; sentinel_restore ;;
  -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2 ;;
  *) die "unknown command '${1:-}' (one of: $COMMANDS)" ;;
esac
