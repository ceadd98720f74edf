#!/usr/bin/env bash
# Starts a second ZooKeeper (Debian's package, standalone) that serves clients over TLS only:
# localhost:2282 (127.0.0.1), no plain client port, with the server certificate that
# ci/start-backends.sh makes (signed by its test CA for the name localhost alone). Like
# ZooKeeper's own default (ssl.clientAuth=need), it asks every client for a certificate signed
# by that CA: this script makes one, client.pem and client.key in the state directory below.
# The tests of providers/zookeeper/tests/tls.rs use it; the plain ZooKeeper on 2181 stays as it
# is. Idempotent: a server that already answers over TLS with these certificates is left alone.
# Fails loudly, naming the log, when the server cannot be started; it never skips.
set -euo pipefail

STATE_DIR=${SHEDLOCK_CI_STATE_DIR:-/var/tmp/shedlock-ci}
TLS_DIR="$STATE_DIR/tls"
DIR="$STATE_DIR/zookeeper-tls"
PORT=2282
LOG="$DIR/zookeeper.log"

LOG_TAG=start-zookeeper-tls
# shellcheck source=ci/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

for file in ca.pem ca.key server.pem server.key; do
  [ -s "$TLS_DIR/$file" ] || die "$TLS_DIR/$file is missing: run ci/start-backends.sh first (it makes the test CA)"
done
ZKSERVER=/usr/share/zookeeper/bin/zkServer.sh
[ -x "$ZKSERVER" ] || die "$ZKSERVER is missing: ci/start-backends.sh installs Debian's zookeeper"
# The secure port needs Netty, which Debian's zookeeper.jar names in its manifest's Class-Path.
for jar in netty-handler netty-transport netty-buffer netty-common netty-codec; do
  [ -e "/usr/share/java/$jar.jar" ] || die "/usr/share/java/$jar.jar is missing: ZooKeeper's TLS port needs Netty (Debian package libnetty-java)"
done

mkdir -p "$DIR/conf" "$DIR/data"

# The client certificate, made again whenever it does not verify against the current CA.
if ! openssl verify -CAfile "$TLS_DIR/ca.pem" "$DIR/client.pem" >/dev/null 2>&1 || [ ! -s "$DIR/client.key" ]; then
  log "making a client certificate signed by the test CA in $DIR"
  (
    cd "$DIR"
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
      -subj "/CN=shedlock-rs CI ZooKeeper client" -keyout client.key -out client.csr
    printf '%s\n' "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature" \
      "extendedKeyUsage=clientAuth" >client.ext
    openssl x509 -req -in client.csr -CA "$TLS_DIR/ca.pem" -CAkey "$TLS_DIR/ca.key" \
      -CAcreateserial -CAserial "$DIR/ca.srl" -days 3650 -extfile client.ext -out client.pem
    chmod 0600 client.key
  ) >"$DIR/certificates.log" 2>&1 || { cat "$DIR/certificates.log" >&2; die "openssl could not make the client certificate (log: $DIR/certificates.log)"; }
fi

# Ready means: a TLS handshake with the name localhost verifies the server against the test
# CA, the server accepts the client certificate, and ZooKeeper answers 'srvr' as standalone.
tls_ready() {
  printf 'srvr' | timeout 5 openssl s_client -quiet -connect "localhost:$PORT" \
    -servername localhost -verify_hostname localhost -verify_return_error \
    -CAfile "$TLS_DIR/ca.pem" -cert "$DIR/client.pem" -key "$DIR/client.key" 2>/dev/null \
    | grep -q 'Mode: standalone'
}

if tls_ready; then
  log "the TLS ZooKeeper on localhost:$PORT is up"
  exit 0
fi

pid_file="$DIR/zookeeper_server.pid"
free_port_of_earlier_run "$PORT" "$pid_file" QuorumPeerMain "TLS ZooKeeper" "$LOG"

# ZooKeeper's PEM key store is one file holding the key and the certificate.
cat "$TLS_DIR/server.key" "$TLS_DIR/server.pem" >"$DIR/server-keystore.pem"
chmod 0600 "$DIR/server-keystore.pem"
# Keys that zoo.cfg does not know become system properties (zookeeper.<key>), which is how
# serverCnxnFactory and the ssl.* settings reach the server.
cat >"$DIR/conf/zoo.cfg" <<CFG
tickTime=2000
dataDir=$DIR/data
secureClientPort=$PORT
secureClientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=srvr,ruok
serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory
ssl.keyStore.location=$DIR/server-keystore.pem
ssl.keyStore.type=PEM
ssl.trustStore.location=$TLS_DIR/ca.pem
ssl.trustStore.type=PEM
ssl.clientAuth=need
CFG

log "starting the TLS ZooKeeper on localhost:$PORT"
# Debian's zkEnv.sh sets the config and log directories and the class path itself, so the
# config is given by its path and the server runs in the foreground with its output in $LOG
# (exec makes its pid the JVM's). Debian's zookeeper.jar leaves netty-codec out of its
# manifest's Class-Path although Netty's TLS handler needs it (NoClassDefFoundError:
# io/netty/handler/codec/ByteToMessageDecoder on the first TLS connection): a second -cp,
# which the JVM takes over the first, adds it.
CLASS_PATH="/etc/zookeeper/conf:/usr/share/java/zookeeper.jar:/usr/share/java/netty-codec.jar"
ZOOPIDFILE="$pid_file" JMXDISABLE=true \
  SERVER_JVMFLAGS="-cp $CLASS_PATH -Dzookeeper.root.logger=INFO,CONSOLE" \
  nohup "$ZKSERVER" start-foreground "$DIR/conf/zoo.cfg" >"$LOG" 2>&1 </dev/null &
echo $! >"$pid_file"

for _ in $(seq 1 120); do
  tls_ready && break
  kill -0 "$(cat "$pid_file")" 2>/dev/null || break
  sleep 0.5
done
if ! tls_ready; then
  tail -n 30 "$LOG" >&2
  die "the TLS ZooKeeper did not answer over verified TLS on localhost:$PORT within 60 s (log: $LOG)"
fi
log "the TLS ZooKeeper on localhost:$PORT is up"
