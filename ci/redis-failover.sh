#!/usr/bin/env bash
# Usage: ci/redis-failover.sh COMMAND [ARGS]
#
# Fails over the Redis Cluster of ci/start-redis-topologies.sh (127.0.0.1:7000-7005, 3 masters
# + 3 replicas), for tests/cluster_failover.rs of shedlock-redis:
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
#
# Both set repl-diskless-sync-delay to 0 at runtime on every node: a rejoining node needs a
# full resynchronisation, which a master otherwise delays 5 s (Redis' default) in case more
# replicas ask. Every step is a line on stderr; stdout gets NAME=value lines for the caller
# (what was killed or restored, and the seconds taken). Commands are serialized with each other
# (flock). Fails loudly, naming the nodes and their logs, when the cluster is not healthy
# within 60 s.
set -euo pipefail

STATE_DIR=${SHEDLOCK_CI_STATE_DIR:-/var/tmp/shedlock-ci}/redis-topologies
CLUSTER_PORTS=(7000 7001 7002 7003 7004 7005)
COMMANDS="cluster-kill-master PORT [--on-stdin], cluster-restore"

log() { printf '[redis-failover] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
report() { printf '%s\n' "$@"; }

cli() { local port=$1; shift; redis-cli -h 127.0.0.1 -p "$port" "$@" 2>/dev/null; }
answers() { cli "$1" ping | grep -q PONG; }
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
# field NAME: the value of NAME: in the `INFO`-style text on stdin (CRLF stripped).
field() { tr -d '\r' | sed -n "s/^$1://p"; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
alive() { local s; s=$(ps -o stat= -p "$1" 2>/dev/null) && [ -n "$s" ] && [[ $s != Z* ]]; }
listener_pid() { { ss -Hltnp "sport = :$1" 2>/dev/null || true; } | sed -n 's/.*pid=\([0-9]*\).*/\1/p' | head -n 1; }
cmdline() { tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null || true; }
cluster_dir() { echo "$STATE_DIR/cluster/$1"; }

# wait_for SECONDS COMMAND...: whether COMMAND succeeds within SECONDS (polled every 0.2 s).
wait_for() {
  local deadline
  deadline=$(awk -v a="$(now)" -v s="$1" 'BEGIN { printf "%.0f", a + s }'); shift
  while :; do
    if "$@" >/dev/null 2>&1; then return 0; fi
    [ "$(date +%s)" -lt "$deadline" ] || return 1
    sleep 0.2
  done
}

lock() {
  mkdir -p "$STATE_DIR"
  exec 9>"$STATE_DIR/redis-failover.lock"
  flock -w 60 9 || die "another ci/redis-failover.sh command still runs after 60 s (or holds $STATE_DIR/redis-failover.lock)"
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
  started=$(now)
  # The moment of the signal, without a fork in between (bash 5's clock, in epoch seconds).
  sigkill_at=$EPOCHREALTIME
  kill -KILL "$pid"
  for _ in $(seq 1 300); do
    if ! alive "$pid" && ! port_open "$port"; then break; fi
    sleep 0.01
  done
  alive "$pid" && die "the master 127.0.0.1:$port (pid $pid) still runs 3 s after SIGKILL"
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
  -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2 ;;
  *) die "unknown command '${1:-}' (one of: $COMMANDS)" ;;
esac
