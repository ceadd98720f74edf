#!/usr/bin/env bash
# Starts a second MongoDB-compatible server (SecantusDB, as for the plain one on 27017) that
# serves TLS only: localhost:27018 (127.0.0.1), with the server certificate that
# ci/start-backends.sh makes (signed by its test CA for the name localhost alone), its data
# under the state directory. The tests of providers/mongo/tests/tls.rs use it. Idempotent: a
# server that already answers over TLS with that certificate is left alone. Fails loudly,
# naming the log, when the server cannot be started; it never skips. Needs secantusd-rs, which
# ci/start-backends.sh builds.
set -euo pipefail

STATE_DIR=${SHEDLOCK_CI_STATE_DIR:-/var/tmp/shedlock-ci}
TLS_DIR="$STATE_DIR/tls"
DIR="$STATE_DIR/mongo-tls"
PORT=27018
LOG="$DIR/secantusd.log"

LOG_TAG=start-mongo-tls
# shellcheck source=ci/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

for file in ca.pem server.pem server.key; do
  [ -s "$TLS_DIR/$file" ] || die "$TLS_DIR/$file is missing: run ci/start-backends.sh first (it makes the test CA)"
done
PATH="$HOME/.cargo/bin:$PATH"
command -v secantusd-rs >/dev/null \
  || die "secantusd-rs is missing: ci/start-backends.sh builds it (cargo install secantus-mdb)"

# Ready means: a TLS handshake with the name localhost verifies the server against the test
# CA, and the server answers a MongoDB hello with ok: 1 over it.
tls_ready() { mongo_answers_hello localhost "$PORT" "$TLS_DIR/ca.pem"; }

if tls_ready 2>/dev/null; then
  log "the TLS MongoDB (SecantusDB) on localhost:$PORT is up"
  exit 0
fi

pid_file="$DIR/secantusd.pid"
free_port_of_earlier_run "$PORT" "$pid_file" secantusd "TLS MongoDB" "$LOG"

mkdir -p "$DIR/data"
log "starting the TLS MongoDB (SecantusDB) on localhost:$PORT"
nohup secantusd-rs --host 127.0.0.1 --port $PORT --storage-path "$DIR/data" \
  --tls-cert-file "$TLS_DIR/server.pem" --tls-key-file "$TLS_DIR/server.key" \
  >"$LOG" 2>&1 </dev/null &
echo $! >"$pid_file"

for _ in $(seq 1 120); do
  tls_ready 2>/dev/null && break
  kill -0 "$(cat "$pid_file")" 2>/dev/null || break
  sleep 0.5
done
if ! tls_ready 2>/dev/null; then
  tail -n 30 "$LOG" >&2
  die "the TLS MongoDB (SecantusDB) did not answer a hello over verified TLS on localhost:$PORT within 60 s (log: $LOG)"
fi
log "the TLS MongoDB (SecantusDB) on localhost:$PORT is up"
