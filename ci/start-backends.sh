#!/usr/bin/env bash
# Installs (from Debian's packages) and starts every backend the tests use, then waits until
# each one answers. Idempotent: a backend that already answers is left alone. Fails loudly,
# naming the backend and its log, when one cannot be started; it never skips one.
set -euo pipefail

STATE_DIR=${SHEDLOCK_CI_STATE_DIR:-/var/tmp/shedlock-ci}
mkdir -p "$STATE_DIR"

log() { printf '[start-backends] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

apt_updated=no
# apt_install PACKAGE...: installs what is missing; refreshes the package lists once if needed.
apt_install() {
  local missing=()
  for package in "$@"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y -q "${missing[@]}" >"$STATE_DIR/apt.log" 2>&1; then
    if [ "$apt_updated" = no ]; then
      apt_updated=yes
      apt-get update -q >>"$STATE_DIR/apt.log" 2>&1 || true
      apt-get install -y -q "${missing[@]}" >>"$STATE_DIR/apt.log" 2>&1 \
        || die "apt-get install ${missing[*]} failed; see $STATE_DIR/apt.log"
    else
      die "apt-get install ${missing[*]} failed; see $STATE_DIR/apt.log"
    fi
  fi
}

# port_open PORT: whether something accepts TCP connections on 127.0.0.1:PORT.
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# wait_until NAME LOG COMMAND...: retries COMMAND for up to 60 s, else fails naming NAME and LOG.
wait_until() {
  local name=$1 logfile=$2; shift 2
  for _ in $(seq 1 120); do
    if "$@" >/dev/null 2>&1; then log "$name is up"; return 0; fi
    sleep 0.5
  done
  [ -f "$logfile" ] && tail -n 30 "$logfile" >&2
  die "$name did not answer within 60 s (log: $logfile)"
}

# Build-time tool: etcd-client's build script needs protoc.
apt_install protobuf-compiler
command -v protoc >/dev/null || die "protoc is still missing after installing protobuf-compiler"

# --- PostgreSQL: 127.0.0.1:5432, user postgres, trust auth, database test.
postgres_ready() { psql -h 127.0.0.1 -U postgres -d test -tAc 'select 1' | grep -q 1; }
if ! postgres_ready 2>/dev/null; then
  apt_install postgresql postgresql-client
  if ! port_open 5432; then
    log "starting PostgreSQL"
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | sort -V | tail -n 1)" main start \
      || die "PostgreSQL failed to start (see /var/log/postgresql/)"
  fi
  wait_until "PostgreSQL port" /var/log/postgresql port_open 5432
  if ! postgres_ready 2>/dev/null; then
    # A fresh Debian cluster: allow local trust connections and create the test database.
    su postgres -c "psql -tAc \"select 1 from pg_database where datname='test'\"" | grep -q 1 \
      || su postgres -c "createdb test"
    hba=$(su postgres -c "psql -tAc 'show hba_file'")
    grep -q "shedlock-ci" "$hba" || {
      sed -i '1i host all all 127.0.0.1/32 trust # shedlock-ci\nhost all all ::1/128 trust # shedlock-ci' "$hba"
      su postgres -c "psql -tAc 'select pg_reload_conf()'" >/dev/null
    }
  fi
fi
wait_until PostgreSQL /var/log/postgresql postgres_ready

# --- MariaDB: 127.0.0.1:3306, root with an empty password, database test.
mariadb_ready() { mariadb -h 127.0.0.1 -P 3306 -u root -e 'select 1' test >/dev/null; }
if ! mariadb_ready 2>/dev/null; then
  apt_install mariadb-server mariadb-client
  if ! port_open 3306; then
    log "starting MariaDB"
    start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd
  fi
  wait_until "MariaDB port" /var/log/mysql/error.log port_open 3306
  if ! mariadb_ready 2>/dev/null; then
    mariadb -u root -e "CREATE DATABASE IF NOT EXISTS test;
      CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY '';
      GRANT ALL ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;" \
      || die "could not create database test in MariaDB"
  fi
fi
wait_until MariaDB /var/log/mysql/error.log mariadb_ready

# --- Redis: 127.0.0.1:6379, nothing kept on disk.
redis_ready() { redis-cli -h 127.0.0.1 -p 6379 ping | grep -q PONG; }
if ! redis_ready 2>/dev/null; then
  apt_install redis-server
  log "starting Redis"
  mkdir -p /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log || die "Redis failed to start"
fi
wait_until Redis /var/log/redis/ci.log redis_ready

# --- etcd: 127.0.0.1:2379, a single member with its data under $STATE_DIR.
etcd_ready() { curl -fsS http://127.0.0.1:2379/health | grep -q '"health":"true"'; }
apt_install etcd-server curl
if ! etcd_ready 2>/dev/null; then
  port_open 2379 && die "port 2379 is taken by something that is not a healthy etcd"
  log "starting etcd"
  nohup etcd --name shedlock-ci --data-dir "$STATE_DIR/etcd" \
    --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
    --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster shedlock-ci=http://127.0.0.1:2380 >"$STATE_DIR/etcd.log" 2>&1 &
fi
wait_until etcd "$STATE_DIR/etcd.log" etcd_ready

# --- ZooKeeper: 127.0.0.1:2181, standalone, data under $STATE_DIR.
zookeeper_ready() { exec 3<>/dev/tcp/127.0.0.1/2181 && printf 'srvr' >&3 && timeout 2 cat <&3 | grep -q 'Mode: standalone'; }
apt_install zookeeper
if ! (zookeeper_ready) 2>/dev/null; then
  port_open 2181 && die "port 2181 is taken by something that is not a ZooKeeper answering 'srvr'"
  log "starting ZooKeeper"
  mkdir -p "$STATE_DIR/zookeeper/data" "$STATE_DIR/zookeeper/conf"
  cp /etc/zookeeper/conf/log4j.properties "$STATE_DIR/zookeeper/conf/" 2>/dev/null || true
  cat >"$STATE_DIR/zookeeper/conf/zoo.cfg" <<CFG
tickTime=2000
dataDir=$STATE_DIR/zookeeper/data
clientPort=2181
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=srvr,ruok
CFG
  ZOOCFGDIR="$STATE_DIR/zookeeper/conf" ZOO_LOG_DIR="$STATE_DIR/zookeeper" \
    /usr/share/zookeeper/bin/zkServer.sh start "$STATE_DIR/zookeeper/conf/zoo.cfg" \
    >"$STATE_DIR/zookeeper/start.log" 2>&1 || { cat "$STATE_DIR/zookeeper/start.log" >&2; die "ZooKeeper failed to start"; }
fi
wait_until ZooKeeper "$STATE_DIR/zookeeper/zookeeper.log" bash -c "$(declare -f zookeeper_ready); zookeeper_ready"

# --- MongoDB: 127.0.0.1:27017, SecantusDB's MongoDB-wire-compatible server (no real mongod can be
# installed here). It announces a one-node replica set, so majority concerns and transactions work.
# Building it takes about 17 minutes, so the binary in cargo's bin dir is reused when present.
SECANTUS_VERSION=0.5.3-beta.196
mongo_ready() {
  python3 - <<'PY'
import socket, struct
# OP_MSG {hello: 1, $db: "admin"}; a server that answers it with ok: 1 is up.
doc = b"\x10hello\x00" + struct.pack("<i", 1) + b"\x02$db\x00" + struct.pack("<i", 6) + b"admin\x00"
doc = struct.pack("<i", len(doc) + 5) + doc + b"\x00"
body = struct.pack("<I", 0) + b"\x00" + doc
msg = struct.pack("<iiii", 16 + len(body), 1, 0, 2013) + body
s = socket.create_connection(("127.0.0.1", 27017), timeout=2)
s.sendall(msg)
reply = b""
while len(reply) < 4 or len(reply) < struct.unpack("<i", reply[:4])[0]:
    chunk = s.recv(65536)
    if not chunk:
        raise SystemExit(1)
    reply += chunk
ok = (b"\x01ok\x00" + struct.pack("<d", 1.0), b"\x10ok\x00" + struct.pack("<i", 1))
raise SystemExit(0 if any(o in reply for o in ok) else 1)
PY
}
if ! mongo_ready 2>/dev/null; then
  port_open 27017 && die "port 27017 is taken by something that does not answer a MongoDB hello"
  PATH="$HOME/.cargo/bin:$PATH"
  if ! command -v secantusd-rs >/dev/null; then
    apt_install cmake
    log "building SecantusDB $SECANTUS_VERSION (about 17 minutes; reused afterwards)"
    cargo install secantus-mdb --version "$SECANTUS_VERSION" --ignore-rust-version \
      >"$STATE_DIR/secantus-install.log" 2>&1 \
      || { tail -n 30 "$STATE_DIR/secantus-install.log" >&2; die "cargo install secantus-mdb failed (log: $STATE_DIR/secantus-install.log)"; }
  fi
  log "starting MongoDB (SecantusDB)"
  mkdir -p "$STATE_DIR/mongo"
  nohup secantusd-rs --host 127.0.0.1 --port 27017 --storage-path "$STATE_DIR/mongo" \
    >"$STATE_DIR/mongo.log" 2>&1 &
fi
wait_until "MongoDB (SecantusDB)" "$STATE_DIR/mongo.log" mongo_ready

log "all backends are up"
