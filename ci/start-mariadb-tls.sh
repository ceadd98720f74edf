#!/usr/bin/env bash
# Starts a second MariaDB that accepts TLS connections only: localhost:3307 (127.0.0.1 and ::1),
# database test, user root from 127.0.0.1 and ::1 with an empty password, with the server
# certificate that ci/start-backends.sh makes (signed by its test CA for the name localhost
# alone). The tests of providers/mysql/tests/tls.rs use it; the plain MariaDB on 3306 stays as
# it is. Idempotent: a server that already answers over TLS with that certificate is left alone.
# Fails loudly, naming the log, when the server cannot be started; it never skips.
set -euo pipefail

STATE_DIR=${SHEDLOCK_CI_STATE_DIR:-/var/tmp/shedlock-ci}
TLS_DIR="$STATE_DIR/tls"
DIR="$STATE_DIR/mariadb-tls"
PORT=3307
LOG="$DIR/error.log"

LOG_TAG=start-mariadb-tls
# shellcheck source=ci/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

for file in ca.pem server.pem server.key; do
  [ -s "$TLS_DIR/$file" ] || die "$TLS_DIR/$file is missing: run ci/start-backends.sh first (it makes the test CA)"
done
command -v mariadbd >/dev/null || [ -x /usr/sbin/mariadbd ] \
  || die "mariadbd is missing: ci/start-backends.sh installs mariadb-server"
MARIADBD=$(command -v mariadbd || echo /usr/sbin/mariadbd)

# Ready means: the server answers root over TCP with TLS, its certificate verifies against the
# current test CA for the name localhost, and the session really is encrypted.
tls_ready() {
  mariadb --no-defaults --protocol=TCP -h localhost -P $PORT -u root \
    --ssl --ssl-ca="$TLS_DIR/ca.pem" --ssl-verify-server-cert -N -B \
    -e "SHOW SESSION STATUS LIKE 'Ssl_version'" test 2>/dev/null | grep -q 'TLSv1\.[23]'
}

if tls_ready; then
  log "the TLS MariaDB on localhost:$PORT is up"
  exit 0
fi

free_port_of_earlier_run "$PORT" "$DIR/mariadbd.pid" mariadbd "TLS MariaDB" "$LOG"

mkdir -p "$DIR"
# The server runs as mysql and must read its key; the shared copy stays root's alone.
install -o mysql -g mysql -m 0600 "$TLS_DIR/server.key" "$DIR/server.key"
install -o mysql -g mysql -m 0644 "$TLS_DIR/server.pem" "$DIR/server.pem"
install -o mysql -g mysql -m 0644 "$TLS_DIR/ca.pem" "$DIR/ca.pem"

if [ ! -d "$DIR/data/mysql" ]; then
  log "creating the TLS MariaDB's data directory $DIR/data"
  rm -rf "$DIR/data"
  mariadb-install-db --no-defaults --user=mysql --datadir="$DIR/data" \
    --auth-root-authentication-method=socket >"$DIR/install.log" 2>&1 \
    || { tail -n 30 "$DIR/install.log" >&2; die "mariadb-install-db failed (log: $DIR/install.log)"; }
fi
chown -R mysql:mysql "$DIR"

log "starting the TLS MariaDB on localhost:$PORT"
# --no-defaults: nothing of /etc/mysql (the plain server's datadir, socket and port) applies.
nohup "$MARIADBD" --no-defaults --user=mysql --datadir="$DIR/data" \
  --port=$PORT --bind-address=127.0.0.1,::1 --skip-name-resolve \
  --socket="$DIR/mariadbd.sock" --pid-file="$DIR/mariadbd.pid" --log-error="$LOG" \
  --ssl-cert="$DIR/server.pem" --ssl-key="$DIR/server.key" --ssl-ca="$DIR/ca.pem" \
  --require-secure-transport=ON \
  --character-set-server=utf8mb4 --collation-server=utf8mb4_general_ci \
  >"$DIR/mariadbd.out" 2>&1 &

socket_ready() { mariadb --no-defaults --socket="$DIR/mariadbd.sock" -u root -e 'select 1' >/dev/null 2>&1; }
for _ in $(seq 1 120); do
  socket_ready && break
  sleep 0.5
done
if ! socket_ready; then
  tail -n 30 "$LOG" >&2 2>/dev/null || cat "$DIR/mariadbd.out" >&2
  die "the TLS MariaDB did not answer on its socket within 60 s (log: $LOG)"
fi

# root over TCP from the loopback addresses (skip-name-resolve: they are matched as written),
# without a password, as on the plain server; the socket keeps unix_socket authentication.
mariadb --no-defaults --socket="$DIR/mariadbd.sock" -u root -e "
  CREATE DATABASE IF NOT EXISTS test;
  CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY '';
  CREATE USER IF NOT EXISTS 'root'@'::1' IDENTIFIED BY '';
  GRANT ALL ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;
  GRANT ALL ON *.* TO 'root'@'::1' WITH GRANT OPTION;" \
  || die "could not create database test and the TCP root user in the TLS MariaDB (log: $LOG)"

tls_ready || { tail -n 30 "$LOG" >&2; die "the TLS MariaDB does not answer over verified TLS on localhost:$PORT (log: $LOG)"; }
log "the TLS MariaDB on localhost:$PORT is up"
