#!/usr/bin/env bash
# Usage: ci/restart-backend.sh BACKEND   (postgres, mysql, redis, etcd, zookeeper or mongo)
#
# Restarts the one plain (non-TLS) server of BACKEND that ci/start-backends.sh runs on this
# machine, the way an operator's restart would: a graceful stop (PostgreSQL's own
# pg_ctlcluster stop, fast mode; SIGTERM to the process listening on the port for the others),
# a wait until that process has exited and its port is closed, then a start with the same data
# directory and settings as ci/start-backends.sh's, and a wait until the server answers again.
# For the fault-injection tests ("the backend restarts while a lock is held").
#
#   postgres   127.0.0.1:5432   the cluster pg_lsclusters lists on port 5432 (Debian's main)
#   mysql      127.0.0.1:3306   MariaDB, /usr/sbin/mariadbd with /etc/mysql's settings
#   redis      127.0.0.1:6379   no persistence: a restart loses every key (expected)
#   etcd       127.0.0.1:2379   data in $STATE_DIR/etcd
#   zookeeper  127.0.0.1:2181   data in $STATE_DIR/zookeeper/data
#   mongo      127.0.0.1:27017  SecantusDB, data in $STATE_DIR/mongo
#
# The TLS servers (5433, 3307, 6380, 2381, 2282, 27018) and the Redis Cluster and Sentinel
# processes are never touched: only the process listening on BACKEND's port is stopped. Every
# step is one line on stderr; the last one is the time the server was down (stop begun ->
# answering again). Fails loudly, naming the backend and its log, when the server does not stop
# or does not answer again within 60 s. Restarts of one backend are serialized (flock).
set -euo pipefail

STATE_DIR=${SHEDLOCK_CI_STATE_DIR:-/var/tmp/shedlock-ci}
TIMEOUT=60

# log, die, now, elapsed, port_open, alive, cmdline, and the ${backend}_ready probes, the same
# as ci/start-backends.sh's.
LOG_TAG=restart-backend
# shellcheck source=ci/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

BACKENDS="postgres, mysql, redis, etcd, zookeeper, mongo"
[ $# -eq 1 ] || die "usage: $0 BACKEND (one of: $BACKENDS)"
backend=$1

# listener_pid PORT: the one process listening on TCP PORT (any address); fails otherwise.
listener_pid() {
  local pids
  pids=$(ss -Hltnp "sport = :$1" | grep -o 'pid=[0-9]*' | cut -d= -f2 | sort -u)
  [ -n "$pids" ] || die "$backend: nothing listens on 127.0.0.1:$1 (run ci/start-backends.sh first)"
  [ "$(wc -l <<<"$pids")" -eq 1 ] || die "$backend: several processes listen on port $1: ${pids//$'\n'/ }"
  echo "$pids"
}
# expect_process PID REGEX: fails unless PID's command line matches REGEX (so nothing that is
# not the expected server is ever signalled).
expect_process() {
  cmdline "$1" | grep -Eq "$2" \
    || die "$backend: the process listening on 127.0.0.1:$port (pid $1: $(cmdline "$1")) is not the expected server"
}
# wait_gone PID: waits until PID has exited and the port is closed, then checks nothing else took it.
wait_gone() {
  local pid=$1 deadline=$((SECONDS + TIMEOUT))
  while alive "$pid" || port_open "$port"; do
    [ $SECONDS -lt $deadline ] || die "$backend (pid $pid) did not stop within $TIMEOUT s (log: $logfile)"
    sleep 0.1
  done
}
# sigterm_and_wait PID: SIGTERM, then wait_gone.
sigterm_and_wait() {
  log "sending SIGTERM to $backend (pid $1) and waiting until it has exited and port $port is closed"
  kill -TERM "$1"
  wait_gone "$1"
}

case "$backend" in
  postgres)
    port=5432
    # The cluster on 5432 (start-backends.sh starts the newest version's main cluster).
    read -r pg_version pg_cluster < <(pg_lsclusters -h 2>/dev/null | awk '$3 == 5432 { print $1, $2; exit }') || true
    [ -n "${pg_version:-}" ] || die "postgres: pg_lsclusters lists no cluster on port 5432"
    logfile="/var/log/postgresql/postgresql-$pg_version-$pg_cluster.log"
    name="PostgreSQL $pg_version/$pg_cluster" ;;
  mysql)
    port=3306
    logfile=/var/log/mysql/error.log
    # Where the plain server writes its pid (/etc/mysql's settings; the TLS one has its own).
    mysql_pid_file=$(my_print_defaults mysqld 2>/dev/null | sed -n 's/^--pid-file=//p' | tail -n 1)
    mysql_pid_file=${mysql_pid_file:-/run/mysqld/mysqld.pid}
    name=MariaDB ;;
  redis)
    port=6379
    logfile=/var/log/redis/ci.log
    name=Redis ;;
  etcd)
    port=2379
    logfile="$STATE_DIR/etcd.log"
    name=etcd ;;
  zookeeper)
    port=2181
    zk_dir="$STATE_DIR/zookeeper"
    # Debian's zkEnv.sh sets ZOO_LOG_DIR=/var/log/zookeeper whatever the caller's, and zkServer.sh
    # sends the server's output to zookeeper-$USER-server-$HOSTNAME.out there.
    logfile="/var/log/zookeeper/zookeeper-${USER:-}-server-$(hostname).out"
    [ -s "$zk_dir/conf/zoo.cfg" ] || die "zookeeper: $zk_dir/conf/zoo.cfg is missing (run ci/start-backends.sh first)"
    name=ZooKeeper ;;
  mongo)
    port=27017
    logfile="$STATE_DIR/mongo.log"
    PATH="$HOME/.cargo/bin:$PATH"
    command -v secantusd-rs >/dev/null || die "mongo: secantusd-rs is missing (ci/start-backends.sh builds it)"
    name="MongoDB (SecantusDB)" ;;
  *)
    die "unknown backend '$backend' (one of: $BACKENDS)" ;;
esac

# One restart of a backend at a time (parallel tests). The started servers must not inherit
# the lock's descriptor, hence the 9>&- on every start below.
mkdir -p "$STATE_DIR"
exec 9>"$STATE_DIR/restart-$backend.lock"
flock -w $((3 * TIMEOUT)) 9 || die "$backend: another restart of it still runs after $((3 * TIMEOUT)) s"

pid=$(listener_pid $port)
log "restarting $name on 127.0.0.1:$port (pid $pid)"

start=$(now)
case "$backend" in
  postgres)
    expect_process "$pid" '(^|/)postgres '
    log "stopping $name: pg_ctlcluster $pg_version $pg_cluster stop (fast mode)"
    pg_ctlcluster --skip-systemctl-redirect "$pg_version" "$pg_cluster" stop >&2 \
      || die "postgres: pg_ctlcluster stop failed (log: $logfile)"
    wait_gone "$pid"
    log "starting $name: pg_ctlcluster $pg_version $pg_cluster start"
    pg_ctlcluster --skip-systemctl-redirect "$pg_version" "$pg_cluster" start >&2 9>&- \
      || die "postgres: pg_ctlcluster start failed (log: $logfile)" ;;
  mysql)
    expect_process "$pid" '(^|/)mariadbd( |$)'
    sigterm_and_wait "$pid"
    log "starting $name: start-stop-daemon --exec /usr/sbin/mariadbd (pid file $mysql_pid_file)"
    # As ci/start-backends.sh, plus --pidfile: without it start-stop-daemon finds the TLS
    # MariaDB (the same executable, port 3307) and, with --oknodo, starts nothing.
    start-stop-daemon --start --oknodo --background --pidfile "$mysql_pid_file" \
      --exec /usr/sbin/mariadbd 9>&- || die "mysql: MariaDB failed to start (log: $logfile)" ;;
  redis)
    expect_process "$pid" '(^|/)redis-server [^ ]*:6379( |$)'
    sigterm_and_wait "$pid"
    log "starting $name as ci/start-backends.sh does (no persistence: every key is gone)"
    mkdir -p /var/lib/redis /var/log/redis
    redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
      --dir /var/lib/redis --logfile /var/log/redis/ci.log 9>&- || die "redis: Redis failed to start (log: $logfile)" ;;
  etcd)
    expect_process "$pid" "(^|/)etcd .*--data-dir $STATE_DIR/etcd( |$)"
    sigterm_and_wait "$pid"
    log "starting $name with its data in $STATE_DIR/etcd"
    # setsid: the server outlives the caller's process group (a test runner's Ctrl-C or timeout).
    setsid nohup etcd --name shedlock-ci --data-dir "$STATE_DIR/etcd" \
      --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
      --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
      --initial-cluster shedlock-ci=http://127.0.0.1:2380 >>"$STATE_DIR/etcd.log" 2>&1 </dev/null 9>&- & ;;
  zookeeper)
    expect_process "$pid" "QuorumPeerMain $zk_dir/conf/zoo.cfg"
    sigterm_and_wait "$pid"
    # zkServer.sh start refuses while its pid file names a process kill -0 reaches: a reused pid,
    # or the stopped server itself while it is a zombie (pid 1 here reaps late).
    [ "$(cat "$zk_dir/data/zookeeper_server.pid" 2>/dev/null)" = "$pid" ] && rm -f "$zk_dir/data/zookeeper_server.pid"
    log "starting $name with its data in $zk_dir/data"
    ZOOCFGDIR="$zk_dir/conf" ZOO_LOG_DIR="$zk_dir" \
      setsid -w /usr/share/zookeeper/bin/zkServer.sh start "$zk_dir/conf/zoo.cfg" \
      >>"$zk_dir/start.log" 2>&1 </dev/null 9>&- \
      || { tail -n 5 "$zk_dir/start.log" >&2; die "zookeeper: ZooKeeper failed to start (logs: $zk_dir/start.log, $logfile)"; } ;;
  mongo)
    expect_process "$pid" "(^|/)secantusd-rs .*--storage-path $STATE_DIR/mongo( |$)"
    sigterm_and_wait "$pid"
    log "starting $name with its data in $STATE_DIR/mongo"
    setsid nohup secantusd-rs --host 127.0.0.1 --port 27017 --storage-path "$STATE_DIR/mongo" \
      >>"$STATE_DIR/mongo.log" 2>&1 </dev/null 9>&- & ;;
esac

log "waiting until $name answers on 127.0.0.1:$port"
deadline=$((SECONDS + TIMEOUT))
until "${backend}_ready" >/dev/null 2>&1; do
  if [ $SECONDS -ge $deadline ]; then
    [ -f "$logfile" ] && tail -n 30 "$logfile" >&2
    die "$backend ($name) did not answer within $TIMEOUT s after its restart (log: $logfile)"
  fi
  sleep 0.1
done
log "$backend down for $(elapsed "$start") s"
