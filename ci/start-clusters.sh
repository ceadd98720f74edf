#!/usr/bin/env bash
# Usage: ci/start-clusters.sh [etcd|zookeeper|postgres]...   (no argument: all three)
#
# Starts the clustered deployments the failover tests use, as local processes on loopback
# (Debian's packages, no Docker):
#   - etcd: 3 members (etcd-server's `etcd`), clients on 127.0.0.1:2479, 2579, 2679, peers on
#     2480, 2580, 2680; URL http://127.0.0.1:2479,http://127.0.0.1:2579,http://127.0.0.1:2679
#     (the etcd provider takes endpoints separated by commas);
#   - ZooKeeper: an ensemble of 3 servers (the zookeeper package's zkServer.sh), clients on
#     127.0.0.1:2191, 2192, 2193, quorum ports 2891-2893, election ports 3891-3893; connect
#     string 127.0.0.1:2191,127.0.0.1:2192,127.0.0.1:2193;
#   - PostgreSQL: a primary on 127.0.0.1:5440 streaming (asynchronously) to one hot-standby
#     replica on 127.0.0.1:5441, trust auth, database `test` with ShedLock's table `shedlock`;
#     postgres://postgres@127.0.0.1:5440/test and postgres://postgres@127.0.0.1:5441/test.
# None of them touches the single servers of ci/start-backends.sh (2379/2381, 2181/2282,
# 5432/5433). Data, configuration and logs live in ${SHEDLOCK_CI_STATE_DIR:-/var/tmp/shedlock-ci}/clusters.
# When all is up, the URLs are printed on stdout as NAME=value lines (the tests' variables).
#
# Idempotent: a cluster that is up and healthy is left alone. A member that is down (after a
# failover, say) is started again from its data; a cluster that does not become healthy then,
# or a PostgreSQL pair no longer in its original roles (after a promotion), is stopped, wiped and
# made anew. Fails loudly, naming the cluster and its log, when one cannot be started; it never
# skips one. ci/failover.sh uses the functions below (it sources this file) to cause failovers.
set -euo pipefail

STATE_DIR=${SHEDLOCK_CI_STATE_DIR:-/var/tmp/shedlock-ci}
CLUSTERS_DIR="$STATE_DIR/clusters"

ETCD_NAMES=(shedlock-ci-1 shedlock-ci-2 shedlock-ci-3)
ETCD_CLIENT_PORTS=(2479 2579 2679)
ETCD_PEER_PORTS=(2480 2580 2680)
ZK_CLIENT_PORTS=(2191 2192 2193)
ZK_QUORUM_PORTS=(2891 2892 2893)
ZK_ELECTION_PORTS=(3891 3892 3893)
PG_PRIMARY_PORT=5440
PG_REPLICA_PORT=5441
PG_REPLICA_NAME=shedlock-ci-replica

ETCD_URL=http://127.0.0.1:2479,http://127.0.0.1:2579,http://127.0.0.1:2679
ZOOKEEPER_URL=127.0.0.1:2191,127.0.0.1:2192,127.0.0.1:2193
POSTGRES_PRIMARY_URL=postgres://postgres@127.0.0.1:$PG_PRIMARY_PORT/test
POSTGRES_REPLICA_URL=postgres://postgres@127.0.0.1:$PG_REPLICA_PORT/test

# ci/failover.sh sources this file with its own LOG_TAG; BASH_SOURCE, unlike $0, is this file's
# path even then.
LOG_TAG=${LOG_TAG:-start-clusters}
# shellcheck source=ci/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# A command that fails outside die (set -e) still says so (die sets died=yes).
died=no
on_exit() {
  local rc=$?
  [ $rc -eq 0 ] || [ $died = yes ] \
    || log "ERROR: stopped by an unexpected failure (exit $rc); rerun with bash -x to see where"
}
trap on_exit EXIT

mkdir -p "$CLUSTERS_DIR"

APT_LOG="$CLUSTERS_DIR/apt.log"

# listener_pid PORT: the process listening on TCP PORT, or nothing.
listener_pid() { { ss -Hltnp "sport = :$1" 2>/dev/null || true; } | sed -n 's/.*pid=\([0-9]*\).*/\1/p' | head -n 1; }

# wait_while SECONDS RUNNING COMMAND...: like wait_for, and gives up early when the command
# RUNNING (that the servers started still run) fails twice in a row.
wait_while() {
  local seconds=$1 running=$2 deadline gone=0
  shift 2
  deadline=$(awk -v a="$(now)" -v s="$seconds" 'BEGIN { printf "%.0f", a + s }')
  while :; do
    if "$@" >/dev/null 2>&1; then return 0; fi
    if "$running"; then gone=0; else gone=$((gone + 1)); fi
    [ $gone -lt 2 ] || { log "a server exited while starting"; return 1; }
    [ "$(date +%s)" -lt "$deadline" ] || return 1
    sleep 0.2
  done
}

# lock CLUSTER: one start or failover of CLUSTER at a time (fd 9; every server started below is
# started with 9>&-, so none keeps the lock).
lock() {
  exec 9>"$CLUSTERS_DIR/$1.lock"
  flock -w 300 9 || die "$1: another start or failover of it still runs after 300 s"
}
unlock() { exec 9>&-; }

# kill_server NAME PORT REGEX LOG: SIGKILLs the process listening on PORT, which must be ours
# (its command line matches REGEX), and waits until it has exited and PORT is closed.
kill_server() {
  local name=$1 port=$2 regex=$3 logfile=$4 pid
  pid=$(listener_pid "$port")
  [ -n "$pid" ] || return 0
  cmdline "$pid" | grep -Eq "$regex" \
    || die "$name: the process listening on 127.0.0.1:$port (pid $pid: $(cmdline "$pid")) is not ours"
  kill -KILL "$pid"
  for _ in $(seq 1 300); do
    if ! alive "$pid" && ! port_open "$port"; then return 0; fi
    sleep 0.1
  done
  die "$name (pid $pid) did not exit within 30 s of SIGKILL (log: $logfile)"
}

# ours_or_free NAME PORT REGEX: fails when PORT is taken by a process that is not ours.
ours_or_free() {
  local name=$1 port=$2 regex=$3 pid
  pid=$(listener_pid "$port")
  if [ -n "$pid" ]; then
    cmdline "$pid" | grep -Eq "$regex" && return 0
    die "$name: 127.0.0.1:$port is taken by something else (pid $pid: $(cmdline "$pid"))"
  fi
  port_open "$port" && die "$name: 127.0.0.1:$port is taken by something else"
  return 0
}

# ------------------------------------------------------------------------------------- etcd

ETCD_DIR="$CLUSTERS_DIR/etcd"
etcd_member_dir() { echo "$ETCD_DIR/${ETCD_NAMES[$1]}"; }
etcd_endpoint() { echo "http://127.0.0.1:${ETCD_CLIENT_PORTS[$1]}"; }
etcd_regex() { echo "(^|/)etcd .*--data-dir $(etcd_member_dir "$1")/data( |$)"; }
etcd_log() { echo "$(etcd_member_dir "$1")/etcd.log"; }
etcd_index_of_endpoint() {
  local i
  for i in 0 1 2; do [ "$(etcd_endpoint $i)" = "$1" ] && { echo $i; return 0; }; done
  return 1
}

etcdctl_() { ETCDCTL_API=3 etcdctl --dial-timeout=2s --command-timeout=3s "$@"; }

# etcd_status ENDPOINTS: one line per endpoint, "endpoint member-id leader-id".
etcd_status() {
  etcdctl_ --endpoints="$1" endpoint status -w json 2>/dev/null | python3 -c '
import json, sys
for e in json.load(sys.stdin):
    s = e["Status"]
    print(e["Endpoint"], s["header"]["member_id"], s["leader"])'
}

# etcd_healthy ENDPOINTS: every endpoint (comma-separated) passes `endpoint health` (a
# linearizable read: there is a quorum and a leader) and all name the same leader, one of them.
etcd_healthy() {
  local endpoints=$1 status count endpoint
  # A closed port fails at once (etcdctl would wait out its dial timeout).
  for endpoint in ${endpoints//,/ }; do port_open "${endpoint##*:}" || return 1; done
  etcdctl_ --endpoints="$endpoints" endpoint health >/dev/null 2>&1 || return 1
  status=$(etcd_status "$endpoints") || return 1
  count=$(tr ',' '\n' <<<"$endpoints" | wc -l)
  [ "$(wc -l <<<"$status")" -eq "$count" ] || return 1
  [ "$(awk '{ print $3 }' <<<"$status" | sort -u | wc -l)" -eq 1 ] || return 1
  awk '$2 == $3 && $3 != 0 { found = 1 } END { exit !found }' <<<"$status"
}
etcd_leader_endpoint() { etcd_status "$1" | awk '$2 == $3 { print $1 }'; }

etcd_start_member() {
  local i=$1 dir name=${ETCD_NAMES[$1]} cluster="" j
  dir=$(etcd_member_dir "$i")
  ours_or_free "etcd member $name" "${ETCD_CLIENT_PORTS[$i]}" "$(etcd_regex "$i")"
  ours_or_free "etcd member $name (peer port)" "${ETCD_PEER_PORTS[$i]}" "$(etcd_regex "$i")"
  port_open "${ETCD_CLIENT_PORTS[$i]}" && return 0
  for j in 0 1 2; do cluster+="${cluster:+,}${ETCD_NAMES[$j]}=http://127.0.0.1:${ETCD_PEER_PORTS[$j]}"; done
  mkdir -p "$dir"
  log "starting etcd member $name on 127.0.0.1:${ETCD_CLIENT_PORTS[$i]} (log: $dir/etcd.log)"
  # The --initial-* flags count only when the data directory is new; a member restarted from
  # its data rejoins the cluster it was in. setsid: the member outlives the caller's process
  # group (a test runner's Ctrl-C or timeout).
  setsid nohup etcd --name "$name" --data-dir "$dir/data" \
    --listen-client-urls "$(etcd_endpoint "$i")" --advertise-client-urls "$(etcd_endpoint "$i")" \
    --listen-peer-urls "http://127.0.0.1:${ETCD_PEER_PORTS[$i]}" \
    --initial-advertise-peer-urls "http://127.0.0.1:${ETCD_PEER_PORTS[$i]}" \
    --initial-cluster "$cluster" --initial-cluster-token shedlock-ci-cluster \
    --initial-cluster-state new >>"$dir/etcd.log" 2>&1 </dev/null 9>&- &
  echo $! >"$dir/etcd.pid"
}

# Whether every member listens or its process (the last one started) still runs.
etcd_members_run() {
  local i pid_file
  for i in 0 1 2; do
    port_open "${ETCD_CLIENT_PORTS[$i]}" && continue
    pid_file="$(etcd_member_dir "$i")/etcd.pid"
    [ -s "$pid_file" ] && alive "$(cat "$pid_file")" || return 1
  done
}

etcd_kill_member() {
  kill_server "etcd member ${ETCD_NAMES[$1]}" "${ETCD_CLIENT_PORTS[$1]}" "$(etcd_regex "$1")" "$(etcd_log "$1")"
}

etcd_fail() { etcd_report; die "$1 (logs: $ETCD_DIR/<member>/etcd.log)"; }
etcd_report() {
  local i
  for i in 0 1 2; do
    log "etcd member ${ETCD_NAMES[$i]} ($(etcd_endpoint $i)): $(etcdctl_ --endpoints="$(etcd_endpoint $i)" endpoint health 2>&1 | tail -n 1)"
  done
  for i in 0 1 2; do
    if [ -f "$(etcd_log $i)" ]; then log "last lines of $(etcd_log $i):"; tail -n 10 "$(etcd_log $i)" >&2; fi
  done
}

ensure_etcd() {
  local i have_data=0
  apt_install etcd-server etcd-client python3
  if ! command -v etcd >/dev/null || ! command -v etcdctl >/dev/null; then
    die "etcd or etcdctl is missing after installing Debian's etcd-server and etcd-client"
  fi
  if etcd_healthy "$ETCD_URL"; then
    log "etcd cluster $ETCD_URL is up (left alone)"
    return 0
  fi
  for i in 0 1 2; do [ -d "$(etcd_member_dir $i)/data/member" ] && have_data=$((have_data + 1)); done
  if [ $have_data -eq 3 ]; then
    for i in 0 1 2; do etcd_start_member $i; done
    wait_while 30 etcd_members_run etcd_healthy "$ETCD_URL" && { log "etcd cluster $ETCD_URL is up"; return 0; }
    etcd_report
    log "the etcd cluster did not become healthy from its data (a member exited, or 30 s passed): stopping it and making it anew"
  elif [ $have_data -gt 0 ]; then
    log "only $have_data of 3 etcd members have data: stopping them and making the cluster anew"
  fi
  for i in 0 1 2; do etcd_kill_member $i; done
  for i in 0 1 2; do rm -rf "$(etcd_member_dir $i)/data"; done
  for i in 0 1 2; do etcd_start_member $i; done
  wait_while 60 etcd_members_run etcd_healthy "$ETCD_URL" \
    || etcd_fail "the etcd cluster $ETCD_URL did not become healthy with a leader (a member exited, or 60 s passed)"
  log "etcd cluster $ETCD_URL is up"
}

# -------------------------------------------------------------------------------- ZooKeeper

ZK_DIR="$CLUSTERS_DIR/zookeeper"
ZKSERVER=/usr/share/zookeeper/bin/zkServer.sh
zk_server_dir() { echo "$ZK_DIR/$(($1 + 1))"; }
zk_cfg() { echo "$(zk_server_dir "$1")/conf/zoo.cfg"; }
zk_regex() { echo "QuorumPeerMain $(zk_cfg "$1")( |$)"; }
zk_log() { echo "$(zk_server_dir "$1")/zookeeper.log"; }
zk_index_of_port() {
  local i
  for i in 0 1 2; do [ "${ZK_CLIENT_PORTS[$i]}" = "$1" ] && { echo $i; return 0; }; done
  return 1
}

# zk_cmd PORT WORD: a four-letter word's answer.
zk_cmd() {
  timeout 3 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1 && printf '%s' '$2' >&3 && cat <&3" 2>/dev/null || true
}
zk_mode() { zk_cmd "$1" srvr | sed -n 's/^Mode: //p'; }

# zk_healthy PORT...: exactly one of the servers on PORTs leads, the others follow, and the
# leader counts all of them as synced followers.
zk_healthy() {
  local port mode leader="" followers=0
  for port in "$@"; do
    mode=$(zk_mode "$port")
    case "$mode" in
      leader) [ -z "$leader" ] || return 1; leader=$port ;;
      follower) followers=$((followers + 1)) ;;
      *) return 1 ;;
    esac
  done
  [ -n "$leader" ] && [ $followers -eq $(($# - 1)) ] || return 1
  [ "$(zk_cmd "$leader" mntr | sed -n 's/^zk_synced_followers\t//p')" = "$followers" ]
}
zk_port_with_mode() {
  local port
  for port in "${ZK_CLIENT_PORTS[@]}"; do
    [ "$(zk_mode "$port")" = "$1" ] && { echo "$port"; return 0; }
  done
  return 1
}

zk_write_config() {
  local i=$1 dir j
  dir=$(zk_server_dir "$i")
  mkdir -p "$dir/conf" "$dir/data"
  echo $((i + 1)) >"$dir/data/myid"
  {
    echo "tickTime=2000"
    echo "initLimit=10"
    echo "syncLimit=5"
    echo "dataDir=$dir/data"
    echo "clientPort=${ZK_CLIENT_PORTS[$i]}"
    echo "clientPortAddress=127.0.0.1"
    echo "admin.enableServer=false"
    echo "4lw.commands.whitelist=srvr,ruok,mntr,stat"
    for j in 0 1 2; do
      echo "server.$((j + 1))=127.0.0.1:${ZK_QUORUM_PORTS[$j]}:${ZK_ELECTION_PORTS[$j]}"
    done
  } >"$dir/conf/zoo.cfg"
}

zk_start_server() {
  local i=$1 dir port=${ZK_CLIENT_PORTS[$1]} regex
  dir=$(zk_server_dir "$i")
  regex=$(zk_regex "$i")
  ours_or_free "ZooKeeper server $((i + 1))" "$port" "$regex"
  ours_or_free "ZooKeeper server $((i + 1)) (quorum port)" "${ZK_QUORUM_PORTS[$i]}" "$regex"
  ours_or_free "ZooKeeper server $((i + 1)) (election port)" "${ZK_ELECTION_PORTS[$i]}" "$regex"
  # A server still starting (its client port not yet open) is left to finish.
  if port_open "$port" || { [ -s "$dir/zookeeper.pid" ] && alive "$(cat "$dir/zookeeper.pid")" \
       && cmdline "$(cat "$dir/zookeeper.pid")" | grep -Eq "$regex"; }; then
    return 0
  fi
  zk_write_config "$i"
  log "starting ZooKeeper server $((i + 1)) on 127.0.0.1:$port (log: $dir/zookeeper.log)"
  # As ci/start-zookeeper-tls.sh: the config by its path, the server in the foreground with
  # its output in its log (exec makes the pid the JVM's). Debian's zookeeper.jar finds no SLF4J
  # binding and would log nothing: a second -cp (the JVM takes the last) adds slf4j-simple,
  # which logs to stderr. A small heap and the client compiler keep three JVMs light on a
  # 2-core machine.
  ZOOPIDFILE="$dir/zookeeper.pid" JMXDISABLE=true \
    SERVER_JVMFLAGS="-Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -cp /usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar -Dorg.slf4j.simpleLogger.showDateTime=true -Dorg.slf4j.simpleLogger.dateTimeFormat=yyyy-MM-dd_HH:mm:ss.SSS" \
    setsid nohup "$ZKSERVER" start-foreground "$dir/conf/zoo.cfg" >>"$dir/zookeeper.log" 2>&1 </dev/null 9>&- &
  echo $! >"$dir/zookeeper.pid"
}

# Whether every server listens or its JVM (the last one started) still runs.
zk_servers_run() {
  local i pid_file
  for i in 0 1 2; do
    port_open "${ZK_CLIENT_PORTS[$i]}" && continue
    pid_file="$(zk_server_dir "$i")/zookeeper.pid"
    [ -s "$pid_file" ] && alive "$(cat "$pid_file")" || return 1
  done
}

zk_kill_server() {
  local i=$1 pid_file
  pid_file="$(zk_server_dir "$i")/zookeeper.pid"
  kill_server "ZooKeeper server $((i + 1))" "${ZK_CLIENT_PORTS[$i]}" "$(zk_regex "$i")" "$(zk_log "$i")"
  # A server that never opened its client port.
  if [ -s "$pid_file" ] && alive "$(cat "$pid_file")" && cmdline "$(cat "$pid_file")" | grep -Eq "$(zk_regex "$i")"; then
    kill -KILL "$(cat "$pid_file")"
    for _ in $(seq 1 300); do alive "$(cat "$pid_file")" || break; sleep 0.1; done
  fi
  return 0
}

zk_fail() { zk_report; die "$1 (logs: $ZK_DIR/<1|2|3>/zookeeper.log)"; }
zk_report() {
  local i
  for i in 0 1 2; do
    log "ZooKeeper server $((i + 1)) (127.0.0.1:${ZK_CLIENT_PORTS[$i]}): $(zk_cmd "${ZK_CLIENT_PORTS[$i]}" srvr | grep -E '^Mode|not currently serving' | tr '\n' ' ')"
  done
  for i in 0 1 2; do
    if [ -f "$(zk_log $i)" ]; then log "last lines of $(zk_log $i):"; tail -n 10 "$(zk_log $i)" >&2; fi
  done
}

ensure_zookeeper() {
  local i
  [ -x "$ZKSERVER" ] || apt_install zookeeper
  [ -x "$ZKSERVER" ] || die "$ZKSERVER is missing after installing Debian's zookeeper"
  [ -e /usr/share/java/slf4j-simple.jar ] || apt_install libslf4j-java
  if zk_healthy "${ZK_CLIENT_PORTS[@]}"; then
    log "ZooKeeper ensemble $ZOOKEEPER_URL is up (left alone)"
    return 0
  fi
  for i in 0 1 2; do zk_start_server $i; done
  if wait_while 90 zk_servers_run zk_healthy "${ZK_CLIENT_PORTS[@]}"; then
    log "ZooKeeper ensemble $ZOOKEEPER_URL is up"
    return 0
  fi
  zk_report
  log "the ZooKeeper ensemble did not elect a leader with two synced followers (a server exited, or 90 s passed): stopping it and making it anew"
  for i in 0 1 2; do zk_kill_server $i; done
  for i in 0 1 2; do rm -rf "$(zk_server_dir $i)/data"; done
  for i in 0 1 2; do zk_start_server $i; done
  wait_while 90 zk_servers_run zk_healthy "${ZK_CLIENT_PORTS[@]}" \
    || zk_fail "the ZooKeeper ensemble $ZOOKEEPER_URL did not elect a leader with two synced followers (a server exited, or 90 s passed)"
  log "ZooKeeper ensemble $ZOOKEEPER_URL is up"
}

# ------------------------------------------------------------------------------- PostgreSQL

PG_DIR="$CLUSTERS_DIR/postgres"
PG_PRIMARY="$PG_DIR/primary"
PG_REPLICA="$PG_DIR/replica"
pg_bin() {
  local version
  version=$(find /usr/lib/postgresql -mindepth 1 -maxdepth 1 -printf '%f\n' 2>/dev/null | sort -V | tail -n 1)
  if [ -z "$version" ] || [ ! -x "/usr/lib/postgresql/$version/bin/pg_ctl" ]; then
    die "no PostgreSQL server binaries in /usr/lib/postgresql/<version>/bin (Debian package postgresql)"
  fi
  echo "/usr/lib/postgresql/$version/bin"
}
# pg_as COMMAND...: runs COMMAND as user postgres (from /, which it can read).
pg_as() { (cd / && runuser -u postgres -- "$@"); }
# pg_sql PORT SQL: one query's unaligned answer, as postgres on database test.
pg_sql() {
  PGCONNECT_TIMEOUT=3 timeout 10 psql -X -q -h 127.0.0.1 -p "$1" -U postgres -d test -tAc "$2" 2>/dev/null
}
pg_regex() { echo "(^|/)postgres -D $1( |$)"; }

pg_pair_healthy() {
  [ "$(pg_sql $PG_PRIMARY_PORT 'select pg_is_in_recovery()')" = f ] || return 1
  [ "$(pg_sql $PG_REPLICA_PORT 'select pg_is_in_recovery()')" = t ] || return 1
  [ "$(pg_sql $PG_PRIMARY_PORT "select state from pg_stat_replication where application_name = '$PG_REPLICA_NAME'")" = streaming ]
}
# Accepts writes: out of recovery, and it hands out a transaction id (a standby cannot).
pg_writable() { [ "$(pg_sql "$1" 'select pg_is_in_recovery(), txid_current() > 0')" = "f|t" ]; }

# pg_start DATADIR PORT NAME: starts the server of DATADIR unless it runs.
pg_start() {
  local dir=$1 port=$2 name=$3
  ours_or_free "$name" "$port" "$(pg_regex "$dir")"
  port_open "$port" && return 0
  log "starting $name on 127.0.0.1:$port (log: $dir.log)"
  pg_as setsid -w "$PG_BIN/pg_ctl" -D "$dir" -l "$dir.log" -w -t 60 start >>"$PG_DIR/pg_ctl.log" 2>&1 9>&- \
    || { tail -n 30 "$dir.log" >&2; die "$name failed to start (log: $dir.log)"; }
}

# pg_stop DATADIR PORT NAME: stops the server of DATADIR at once (immediate mode: no
# checkpoint, like a crash), and fails if the port then stays open.
pg_stop() {
  local dir=$1 port=$2 name=$3
  ours_or_free "$name" "$port" "$(pg_regex "$dir")"
  if [ -f "$dir/postmaster.pid" ] && pg_as "$PG_BIN/pg_ctl" -D "$dir" status >/dev/null 2>&1; then
    pg_as "$PG_BIN/pg_ctl" -D "$dir" -m immediate -w -t 60 stop >>"$PG_DIR/pg_ctl.log" 2>&1 \
      || die "$name did not stop (log: $dir.log)"
  fi
  wait_for 30 bash -c "! (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null" \
    || die "$name: 127.0.0.1:$port is still open after pg_ctl stop (log: $dir.log)"
}

# Makes the pair anew: initdb, the primary with database test and ShedLock's table, then a
# base backup of it (-R: a standby that streams from it) as the replica.
pg_create_pair() {
  pg_stop "$PG_REPLICA" $PG_REPLICA_PORT "PostgreSQL replica"
  pg_stop "$PG_PRIMARY" $PG_PRIMARY_PORT "PostgreSQL primary"
  rm -rf "$PG_PRIMARY" "$PG_REPLICA"
  mkdir -p "$PG_DIR"
  chown postgres:postgres "$PG_DIR"
  log "creating the PostgreSQL primary in $PG_PRIMARY"
  pg_as "$PG_BIN/initdb" -D "$PG_PRIMARY" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 -N \
    >"$PG_DIR/initdb.log" 2>&1 || { tail -n 30 "$PG_DIR/initdb.log" >&2; die "initdb failed (log: $PG_DIR/initdb.log)"; }
  # fsync off: a CI database, and a killed server loses nothing by it (only an OS crash would).
  # initdb's pg_hba.conf with --auth=trust trusts local and loopback connections, replication too.
  cat >>"$PG_PRIMARY/postgresql.conf" <<CONF

# shedlock-ci (ci/start-clusters.sh)
listen_addresses = '127.0.0.1'
port = $PG_PRIMARY_PORT
unix_socket_directories = ''
cluster_name = 'shedlock-ci-primary'
shared_buffers = 32MB
fsync = off
wal_keep_size = 256MB
CONF
  pg_start "$PG_PRIMARY" $PG_PRIMARY_PORT "PostgreSQL primary"
  PGCONNECT_TIMEOUT=3 psql -X -q -h 127.0.0.1 -p $PG_PRIMARY_PORT -U postgres -d postgres -c 'CREATE DATABASE test' \
    >>"$PG_DIR/pg_ctl.log" 2>&1 || die "could not create database test on the PostgreSQL primary (log: $PG_PRIMARY.log)"
  # ShedLock's table, for tests that connect with defaults (as ci/start-backends.sh does for 5433).
  pg_sql $PG_PRIMARY_PORT 'CREATE TABLE IF NOT EXISTS shedlock (name VARCHAR(64) NOT NULL,
     lock_until TIMESTAMP NOT NULL, locked_at TIMESTAMP NOT NULL, locked_by VARCHAR(255) NOT NULL,
     PRIMARY KEY (name))' >/dev/null || die "could not create the shedlock table on the PostgreSQL primary"
  log "making the PostgreSQL replica in $PG_REPLICA (pg_basebackup -R)"
  pg_as "$PG_BIN/pg_basebackup" -h 127.0.0.1 -p $PG_PRIMARY_PORT -U postgres -D "$PG_REPLICA" \
    -R -X stream -c fast -N >"$PG_DIR/basebackup.log" 2>&1 \
    || { tail -n 30 "$PG_DIR/basebackup.log" >&2; die "pg_basebackup failed (log: $PG_DIR/basebackup.log)"; }
  # The later setting wins; the walreceiver names itself after cluster_name in pg_stat_replication.
  cat >>"$PG_REPLICA/postgresql.conf" <<CONF
port = $PG_REPLICA_PORT
cluster_name = '$PG_REPLICA_NAME'
CONF
  pg_start "$PG_REPLICA" $PG_REPLICA_PORT "PostgreSQL replica"
}

pg_fail() { pg_report; die "$1 (logs: $PG_PRIMARY.log, $PG_REPLICA.log)"; }
pg_report() {
  local f
  log "PostgreSQL primary 127.0.0.1:$PG_PRIMARY_PORT: in recovery '$(pg_sql $PG_PRIMARY_PORT 'select pg_is_in_recovery()')', replication '$(pg_sql $PG_PRIMARY_PORT 'select application_name, state from pg_stat_replication')'"
  log "PostgreSQL replica 127.0.0.1:$PG_REPLICA_PORT: in recovery '$(pg_sql $PG_REPLICA_PORT 'select pg_is_in_recovery()')'"
  for f in "$PG_PRIMARY.log" "$PG_REPLICA.log"; do
    if [ -f "$f" ]; then log "last lines of $f:"; tail -n 10 "$f" >&2; fi
  done
}

ensure_postgres() {
  apt_install postgresql postgresql-client
  PG_BIN=$(pg_bin)
  if pg_pair_healthy; then
    log "PostgreSQL primary 127.0.0.1:$PG_PRIMARY_PORT streaming to replica 127.0.0.1:$PG_REPLICA_PORT is up (left alone)"
    return 0
  fi
  # Still in the original roles (the replica has its standby.signal, the primary none): start
  # what is down. After a promotion the replica has none, and the pair is made anew.
  if [ -s "$PG_PRIMARY/PG_VERSION" ] && [ ! -e "$PG_PRIMARY/standby.signal" ] \
     && [ -s "$PG_REPLICA/PG_VERSION" ] && [ -e "$PG_REPLICA/standby.signal" ]; then
    pg_start "$PG_PRIMARY" $PG_PRIMARY_PORT "PostgreSQL primary"
    pg_start "$PG_REPLICA" $PG_REPLICA_PORT "PostgreSQL replica"
    if wait_for 30 pg_pair_healthy; then
      log "PostgreSQL primary 127.0.0.1:$PG_PRIMARY_PORT streaming to replica 127.0.0.1:$PG_REPLICA_PORT is up"
      return 0
    fi
    pg_report
    log "the PostgreSQL pair did not resume streaming within 30 s: making it anew"
  elif [ -e "$PG_PRIMARY" ] || [ -e "$PG_REPLICA" ]; then
    log "the PostgreSQL pair is not in its original roles (or incomplete): making it anew"
  fi
  pg_create_pair
  wait_for 60 pg_pair_healthy \
    || pg_fail "the PostgreSQL replica 127.0.0.1:$PG_REPLICA_PORT did not stream from the primary 127.0.0.1:$PG_PRIMARY_PORT within 60 s"
  log "PostgreSQL primary 127.0.0.1:$PG_PRIMARY_PORT streaming to replica 127.0.0.1:$PG_REPLICA_PORT is up"
}

# ------------------------------------------------------------------------------------- main

ensure_cluster() {
  local started
  started=$(now)
  lock "$1"
  case "$1" in
    etcd) ensure_etcd ;;
    zookeeper) ensure_zookeeper ;;
    postgres) ensure_postgres ;;
    *) die "unknown cluster '$1' (etcd, zookeeper or postgres)" ;;
  esac
  unlock
  log "$1: ready after $(elapsed "$started") s"
}

# print_urls CLUSTER: what the tests connect to, as NAME=value lines on stdout.
print_urls() {
  case "$1" in
    etcd) echo "SHEDLOCK_TEST_ETCD_CLUSTER_URL=$ETCD_URL" ;;
    zookeeper) echo "SHEDLOCK_TEST_ZOOKEEPER_ENSEMBLE_URL=$ZOOKEEPER_URL" ;;
    postgres)
      echo "SHEDLOCK_TEST_POSTGRES_PRIMARY_URL=$POSTGRES_PRIMARY_URL"
      echo "SHEDLOCK_TEST_POSTGRES_REPLICA_URL=$POSTGRES_REPLICA_URL" ;;
  esac
}

start_clusters_main() {
  local clusters=("$@") cluster started
  [ ${#clusters[@]} -gt 0 ] || clusters=(etcd zookeeper postgres)
  for cluster in "${clusters[@]}"; do
    case "$cluster" in
      etcd|zookeeper|postgres) ;;
      -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 0 ;;
      *) die "unknown cluster '$cluster' (usage: $0 [etcd|zookeeper|postgres]...)" ;;
    esac
  done
  started=$(now)
  for cluster in "${clusters[@]}"; do ensure_cluster "$cluster"; done
  log "up: ${clusters[*]} ($(elapsed "$started") s)"
  for cluster in "${clusters[@]}"; do print_urls "$cluster"; done
}

# Sourced by ci/failover.sh for its functions; run, it starts the clusters.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  start_clusters_main "$@"
fi
