#!/usr/bin/env bash
# Starts the Redis topologies the shedlock-redis tests reach by URL, as local processes on
# loopback (Debian's redis-server, in cluster and in sentinel mode):
#   - a Redis Cluster of 3 masters + 3 replicas on 127.0.0.1:7000-7005
#     (SHEDLOCK_TEST_REDIS_CLUSTER_URL=redis+cluster://127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002);
#   - a master 127.0.0.1:6390 with one replica 6391, watched by three sentinels 26390-26392 under
#     the master name `shedlock`, quorum 2, with short timeouts so a test can fail over quickly
#     (SHEDLOCK_TEST_REDIS_SENTINEL_URL=redis+sentinel://127.0.0.1:26390,127.0.0.1:26391,127.0.0.1:26392/shedlock).
# Data, configuration and logs live in ${SHEDLOCK_CI_STATE_DIR:-/var/tmp/shedlock-ci}/redis-topologies.
#
# Idempotent: a topology that is up and healthy is left alone (after a failover test the master
# may be 6391: that is healthy too). A process that is down is started again from its kept
# configuration; a topology that does not become healthy is shut down, wiped and made anew.
# Fails loudly, naming the server and its log, when one cannot be started; it never skips one.
set -euo pipefail

STATE_DIR=${SHEDLOCK_CI_STATE_DIR:-/var/tmp/shedlock-ci}/redis-topologies
CLUSTER_PORTS=(7000 7001 7002 7003 7004 7005)
DATA_PORTS=(6390 6391)
SENTINEL_PORTS=(26390 26391 26392)
MASTER_NAME=shedlock
# How long the master may not answer before the sentinels fail over: short, for fault tests, but
# not 1 s, which a loaded 2-core machine (a build beside the tests) misses now and then, failing
# over under tests that did not ask for it.
DOWN_AFTER_MS=5000

LOG_TAG=start-redis-topologies
# shellcheck source=ci/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

mkdir -p "$STATE_DIR"
APT_LOG="$STATE_DIR/apt.log"

# Both tools come with Debian's redis-server package (ci/start-backends.sh installs it too).
if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
  apt_install redis-server
fi

cli() { local port=$1; shift; redis-cli -h 127.0.0.1 -p "$port" "$@" 2>/dev/null; }
answers() { cli "$1" ping | grep -q PONG; }
# field NAME: the value of NAME: in the `INFO`-style text on stdin (CRLF stripped).
field() { tr -d '\r' | sed -n "s/^$1://p"; }

# start_server NAME PORT CONF LOGFILE [--sentinel]: starts redis-server on CONF (daemonized) and
# waits until it answers; fails naming the server and its log otherwise.
start_server() {
  local name=$1 port=$2 conf=$3 logfile=$4; shift 4
  if answers "$port"; then return 0; fi
  port_open "$port" && die "$name: 127.0.0.1:$port is taken by something that is not Redis"
  log "starting $name on 127.0.0.1:$port"
  redis-server "$conf" "$@" || die "$name failed to start (log: $logfile)"
  if ! wait_for 20 answers "$port"; then
    [ -f "$logfile" ] && tail -n 30 "$logfile" >&2
    die "$name did not answer on 127.0.0.1:$port within 20 s (log: $logfile)"
  fi
}

# stop_server PORT: shuts down the Redis this script started on PORT, without saving.
stop_server() {
  local port=$1
  answers "$port" || return 0
  cli "$port" shutdown nosave >/dev/null || true
  wait_for 10 bash -c "! (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null" \
    || die "the Redis on 127.0.0.1:$port did not shut down within 10 s"
}

# --- Redis Cluster --------------------------------------------------------------------------

cluster_dir() { echo "$STATE_DIR/cluster/$1"; }

write_cluster_conf() {
  local port=$1 dir
  dir=$(cluster_dir "$port")
  mkdir -p "$dir"
  [ -s "$dir/redis.conf" ] && return 0
  # A short node timeout so a later fault test sees a replica promoted within seconds.
  cat >"$dir/redis.conf" <<EOF
port $port
bind 127.0.0.1
daemonize yes
pidfile $dir/redis.pid
logfile $dir/redis.log
dir $dir
save ""
appendonly no
cluster-enabled yes
cluster-config-file nodes.conf
cluster-node-timeout 2000
EOF
}

start_cluster_nodes() {
  for port in "${CLUSTER_PORTS[@]}"; do
    write_cluster_conf "$port"
    start_server "cluster node $port" "$port" "$(cluster_dir "$port")/redis.conf" \
      "$(cluster_dir "$port")/redis.log"
  done
}

# Healthy: every node says the cluster is ok, knows all six nodes, and sees 3 masters serving
# all 16384 slots.
cluster_healthy() {
  local info
  for port in "${CLUSTER_PORTS[@]}"; do
    info=$(cli "$port" cluster info) || return 1
    [ "$(field cluster_state <<<"$info")" = ok ] || return 1
    [ "$(field cluster_known_nodes <<<"$info")" = 6 ] || return 1
    [ "$(field cluster_size <<<"$info")" = 3 ] || return 1
    [ "$(field cluster_slots_ok <<<"$info")" = 16384 ] || return 1
  done
}

# Whether no node has been joined to a cluster yet (each knows only itself, no slots).
cluster_never_created() {
  for port in "${CLUSTER_PORTS[@]}"; do
    [ "$(cli "$port" cluster info | field cluster_known_nodes)" = 1 ] || return 1
    [ "$(cli "$port" cluster info | field cluster_slots_assigned)" = 0 ] || return 1
  done
}

create_cluster() {
  local nodes=()
  for port in "${CLUSTER_PORTS[@]}"; do nodes+=("127.0.0.1:$port"); done
  log "creating the cluster (3 masters, 3 replicas) on ${nodes[*]}"
  redis-cli --cluster create "${nodes[@]}" --cluster-replicas 1 --cluster-yes \
    >"$STATE_DIR/cluster-create.log" 2>&1 \
    || { tail -n 30 "$STATE_DIR/cluster-create.log" >&2
         die "redis-cli --cluster create failed (log: $STATE_DIR/cluster-create.log)"; }
}

wipe_cluster() {
  log "the cluster is not healthy: shutting its nodes down and making it anew"
  for port in "${CLUSTER_PORTS[@]}"; do stop_server "$port"; done
  rm -rf "$STATE_DIR/cluster"
}

ensure_cluster() {
  if cluster_healthy; then
    log "Redis Cluster 127.0.0.1:7000-7005 is up (left alone)"
    return 0
  fi
  start_cluster_nodes
  # Nodes restarted from their nodes.conf find each other again within seconds.
  if ! cluster_never_created && ! wait_for 20 cluster_healthy; then
    wipe_cluster
    start_cluster_nodes
  fi
  if cluster_never_created; then
    create_cluster
  fi
  if ! wait_for 60 cluster_healthy; then
    for port in "${CLUSTER_PORTS[@]}"; do
      log "cluster node $port: $(cli "$port" cluster info | tr -d '\r' | grep -E 'cluster_state|known_nodes|slots_ok' | tr '\n' ' ')"
    done
    die "the Redis Cluster on 127.0.0.1:7000-7005 did not reach cluster_state:ok on every node within 60 s (logs: $STATE_DIR/cluster/<port>/redis.log, $STATE_DIR/cluster-create.log)"
  fi
  log "Redis Cluster 127.0.0.1:7000-7005 is up"
}

# --- Redis Sentinel -------------------------------------------------------------------------

data_dir() { echo "$STATE_DIR/sentinel-data/$1"; }
sentinel_dir() { echo "$STATE_DIR/sentinels/$1"; }

# The configurations are written once: sentinels rewrite theirs (and the data nodes' through
# CONFIG REWRITE) when the master changes, and a restart must keep what they learned.
write_data_conf() {
  local port=$1 dir
  dir=$(data_dir "$port")
  mkdir -p "$dir"
  [ -s "$dir/redis.conf" ] && return 0
  cat >"$dir/redis.conf" <<EOF
port $port
bind 127.0.0.1
daemonize yes
pidfile $dir/redis.pid
logfile $dir/redis.log
dir $dir
save ""
appendonly no
repl-diskless-sync-delay 0
EOF
  if [ "$port" != "${DATA_PORTS[0]}" ]; then
    echo "replicaof 127.0.0.1 ${DATA_PORTS[0]}" >>"$dir/redis.conf"
  fi
}

write_sentinel_conf() {
  local port=$1 dir
  dir=$(sentinel_dir "$port")
  mkdir -p "$dir"
  [ -s "$dir/sentinel.conf" ] && return 0
  # A failover that stalls is abandoned after 5 s.
  cat >"$dir/sentinel.conf" <<EOF
port $port
bind 127.0.0.1
daemonize yes
pidfile $dir/sentinel.pid
logfile $dir/sentinel.log
dir $dir
sentinel monitor $MASTER_NAME 127.0.0.1 ${DATA_PORTS[0]} 2
sentinel down-after-milliseconds $MASTER_NAME $DOWN_AFTER_MS
sentinel failover-timeout $MASTER_NAME 5000
sentinel parallel-syncs $MASTER_NAME 1
EOF
}

start_sentinel_setup() {
  for port in "${DATA_PORTS[@]}"; do
    write_data_conf "$port"
    start_server "sentinel-monitored Redis $port" "$port" "$(data_dir "$port")/redis.conf" \
      "$(data_dir "$port")/redis.log"
  done
  for port in "${SENTINEL_PORTS[@]}"; do
    write_sentinel_conf "$port"
    start_server "sentinel $port" "$port" "$(sentinel_dir "$port")/sentinel.conf" \
      "$(sentinel_dir "$port")/sentinel.log" --sentinel
  done
}

# Healthy: all three sentinels name the same master, which says it is the master of one
# replica whose link is up; each sentinel knows the two others and the replica, and has a
# quorum to fail over.
sentinel_healthy() {
  local master="" addr host port info replica
  for port in "${SENTINEL_PORTS[@]}"; do
    addr=$(cli "$port" sentinel get-master-addr-by-name "$MASTER_NAME" | tr '\n' ':') || return 1
    [ -n "$addr" ] || return 1
    if [ -z "$master" ]; then master=$addr; elif [ "$master" != "$addr" ]; then return 1; fi
    info=$(cli "$port" sentinel master "$MASTER_NAME" | paste - - | tr '\t' ':') || return 1
    [ "$(field num-other-sentinels <<<"$info")" = 2 ] || return 1
    [ "$(field num-slaves <<<"$info")" = 1 ] || return 1
    cli "$port" sentinel ckquorum "$MASTER_NAME" | grep -q '^OK' || return 1
  done
  host=${master%%:*}; port=${master#*:}; port=${port%:}
  [ "$host" = 127.0.0.1 ] || return 1
  info=$(cli "$port" info replication) || return 1
  [ "$(field role <<<"$info")" = master ] || return 1
  [ "$(field connected_slaves <<<"$info")" = 1 ] || return 1
  for replica in "${DATA_PORTS[@]}"; do
    [ "$replica" = "$port" ] && continue
    info=$(cli "$replica" info replication) || return 1
    [ "$(field role <<<"$info")" = slave ] || return 1
    [ "$(field master_port <<<"$info")" = "$port" ] || return 1
    [ "$(field master_link_status <<<"$info")" = up ] || return 1
  done
}

wipe_sentinel_setup() {
  log "the sentinel setup is not healthy: shutting it down and making it anew"
  for port in "${SENTINEL_PORTS[@]}" "${DATA_PORTS[@]}"; do stop_server "$port"; done
  rm -rf "$STATE_DIR/sentinels" "$STATE_DIR/sentinel-data"
}

# A failover test should take seconds, not the defaults' half minute (runtime settings, set on
# every run: a sentinel forgets its SENTINEL DEBUG values when it restarts):
# - sentinels read each server's INFO every 10 s and demote an old master that still runs only
#   4 hello periods (4 x 2 s) after it last said it is a master: every 1 s and 4 x 0.5 s instead;
# - a master waits 5 s before it streams a full resynchronisation to a replica (as the demoted
#   old master needs): at once instead.
tune_sentinels() {
  for port in "${SENTINEL_PORTS[@]}"; do
    cli "$port" sentinel set "$MASTER_NAME" down-after-milliseconds "$DOWN_AFTER_MS" | grep -q OK \
      || die "sentinel $port refused SENTINEL SET down-after-milliseconds (log: $(sentinel_dir "$port")/sentinel.log)"
    cli "$port" sentinel debug info-period 1000 publish-period 500 | grep -q OK \
      || die "sentinel $port refused SENTINEL DEBUG info-period/publish-period (needs Redis 7; log: $(sentinel_dir "$port")/sentinel.log)"
  done
  for port in "${DATA_PORTS[@]}"; do
    cli "$port" config set repl-diskless-sync-delay 0 | grep -q OK \
      || die "Redis $port refused CONFIG SET repl-diskless-sync-delay (log: $(data_dir "$port")/redis.log)"
  done
}

ensure_sentinel_setup() {
  if sentinel_healthy; then
    tune_sentinels
    log "Redis Sentinel (master name $MASTER_NAME, sentinels 26390-26392) is up (left alone)"
    return 0
  fi
  start_sentinel_setup
  # Sentinels find each other through the master's hello channel every 2 s.
  if ! wait_for 30 sentinel_healthy; then
    wipe_sentinel_setup
    start_sentinel_setup
    if ! wait_for 60 sentinel_healthy; then
      for port in "${SENTINEL_PORTS[@]}"; do
        log "sentinel $port: master $(cli "$port" sentinel get-master-addr-by-name "$MASTER_NAME" | tr '\n' ' ')$(cli "$port" sentinel ckquorum "$MASTER_NAME")"
      done
      die "the sentinels 26390-26392 did not agree on a healthy master $MASTER_NAME within 60 s (logs: $STATE_DIR/sentinels/<port>/sentinel.log, $STATE_DIR/sentinel-data/<port>/redis.log)"
    fi
  fi
  tune_sentinels
  log "Redis Sentinel (master name $MASTER_NAME, sentinels 26390-26392) is up"
}

ensure_cluster
ensure_sentinel_setup
