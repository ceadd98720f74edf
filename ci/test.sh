#!/usr/bin/env bash
# Runs every test of the workspace against real backends: the one test command of the README
# and of .ci/run. Starts (and if needed installs) the backends first; a backend that cannot be
# started fails this script, it is never skipped.
set -euo pipefail
cd "$(dirname "$0")/.."

ci/start-backends.sh
# The clustered deployments of the failover tests: 3 etcd members, 3 ZooKeeper servers, and a
# PostgreSQL primary streaming to a replica (Redis Cluster and Sentinel start above).
ci/start-clusters.sh >/dev/null

# Tests find their backends here only; each may be pointed elsewhere by setting it beforehand.
export SHEDLOCK_TEST_POSTGRES_URL=${SHEDLOCK_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}
export SHEDLOCK_TEST_MYSQL_URL=${SHEDLOCK_TEST_MYSQL_URL:-mysql://root@127.0.0.1:3306/test}
export SHEDLOCK_TEST_REDIS_URL=${SHEDLOCK_TEST_REDIS_URL:-redis://127.0.0.1:6379}
export SHEDLOCK_TEST_ETCD_URL=${SHEDLOCK_TEST_ETCD_URL:-http://127.0.0.1:2379}
export SHEDLOCK_TEST_ZOOKEEPER_URL=${SHEDLOCK_TEST_ZOOKEEPER_URL:-127.0.0.1:2181}
export SHEDLOCK_TEST_MONGO_URL=${SHEDLOCK_TEST_MONGO_URL:-mongodb://127.0.0.1:27017}
# TLS-only servers (ci/start-backends.sh) and the CA that signed their certificates.
export SHEDLOCK_TEST_TLS_CA_FILE=${SHEDLOCK_TEST_TLS_CA_FILE:-${SHEDLOCK_CI_STATE_DIR:-/var/tmp/shedlock-ci}/tls/ca.pem}
export SHEDLOCK_TEST_POSTGRES_TLS_URL=${SHEDLOCK_TEST_POSTGRES_TLS_URL:-postgres://postgres@localhost:5433/test}
export SHEDLOCK_TEST_REDIS_TLS_URL=${SHEDLOCK_TEST_REDIS_TLS_URL:-rediss://localhost:6380}
export SHEDLOCK_TEST_ETCD_TLS_URL=${SHEDLOCK_TEST_ETCD_TLS_URL:-https://localhost:2381}
export SHEDLOCK_TEST_MYSQL_TLS_URL=${SHEDLOCK_TEST_MYSQL_TLS_URL:-mysql://root@localhost:3307/test}
export SHEDLOCK_TEST_MONGO_TLS_URL=${SHEDLOCK_TEST_MONGO_TLS_URL:-mongodb://localhost:27018}
export SHEDLOCK_TEST_ZOOKEEPER_TLS_URL=${SHEDLOCK_TEST_ZOOKEEPER_TLS_URL:-zk+tls://localhost:2282}
# The TLS ZooKeeper requires a client certificate (ZooKeeper's default), signed by the same CA.
export SHEDLOCK_TEST_ZOOKEEPER_TLS_CLIENT_CERT=${SHEDLOCK_TEST_ZOOKEEPER_TLS_CLIENT_CERT:-${SHEDLOCK_CI_STATE_DIR:-/var/tmp/shedlock-ci}/zookeeper-tls/client.pem}
export SHEDLOCK_TEST_ZOOKEEPER_TLS_CLIENT_KEY=${SHEDLOCK_TEST_ZOOKEEPER_TLS_CLIENT_KEY:-${SHEDLOCK_CI_STATE_DIR:-/var/tmp/shedlock-ci}/zookeeper-tls/client.key}
# Redis Cluster (3 masters, 3 replicas) and Redis Sentinel (ci/start-redis-topologies.sh).
export SHEDLOCK_TEST_REDIS_CLUSTER_URL=${SHEDLOCK_TEST_REDIS_CLUSTER_URL:-redis+cluster://127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002}
export SHEDLOCK_TEST_REDIS_SENTINEL_URL=${SHEDLOCK_TEST_REDIS_SENTINEL_URL:-redis+sentinel://127.0.0.1:26390,127.0.0.1:26391,127.0.0.1:26392/shedlock}

# The clusters of ci/start-clusters.sh, and the command that fails them over.
export SHEDLOCK_TEST_ETCD_CLUSTER_URL=${SHEDLOCK_TEST_ETCD_CLUSTER_URL:-http://127.0.0.1:2479,http://127.0.0.1:2579,http://127.0.0.1:2679}
export SHEDLOCK_TEST_ZOOKEEPER_ENSEMBLE_URL=${SHEDLOCK_TEST_ZOOKEEPER_ENSEMBLE_URL:-127.0.0.1:2191,127.0.0.1:2192,127.0.0.1:2193}
export SHEDLOCK_TEST_POSTGRES_PRIMARY_URL=${SHEDLOCK_TEST_POSTGRES_PRIMARY_URL:-postgres://postgres@127.0.0.1:5440/test}
export SHEDLOCK_TEST_POSTGRES_REPLICA_URL=${SHEDLOCK_TEST_POSTGRES_REPLICA_URL:-postgres://postgres@127.0.0.1:5441/test}
export SHEDLOCK_TEST_POSTGRES_FAILOVER=${SHEDLOCK_TEST_POSTGRES_FAILOVER:-$PWD/ci/failover.sh}
export SHEDLOCK_TEST_ETCD_FAILOVER=${SHEDLOCK_TEST_ETCD_FAILOVER:-$PWD/ci/failover.sh}
export SHEDLOCK_TEST_ZOOKEEPER_FAILOVER=${SHEDLOCK_TEST_ZOOKEEPER_FAILOVER:-$PWD/ci/failover.sh}
export SHEDLOCK_TEST_REDIS_FAILOVER=${SHEDLOCK_TEST_REDIS_FAILOVER:-$PWD/ci/redis-failover.sh}
# The fault suite (tests/faults.rs of each provider) restarts each server with these commands.
for backend in POSTGRES MYSQL REDIS ETCD ZOOKEEPER MONGO; do
  variable="SHEDLOCK_TEST_${backend}_RESTART"
  export "$variable=${!variable:-$PWD/ci/restart-backend.sh ${backend,,}}"
done
# Its soak runs this long per backend (seconds); see RELIABILITY.md for the long-soak command.
export SHEDLOCK_SOAK_SECONDS=${SHEDLOCK_SOAK_SECONDS:-30}

# Each provider's conformance run writes its report here; the summary is printed at the end.
export SHEDLOCK_CONFORMANCE_REPORT_DIR=${SHEDLOCK_CONFORMANCE_REPORT_DIR:-$PWD/target/conformance-report}
rm -rf "$SHEDLOCK_CONFORMANCE_REPORT_DIR"
mkdir -p "$SHEDLOCK_CONFORMANCE_REPORT_DIR"

cargo test --workspace --all-targets --locked
cargo test --workspace --doc --locked
# The workspace build gives the facade the features its members ask for (the examples turn on
# most backends): once more with every feature (connect(url) against each backend, the macro)
# and with none (the errors naming the feature to enable).
cargo test -p shedlock --all-features --locked
cargo test -p shedlock --no-default-features --locked
# Without TLS (the providers' TLS features off): a URL that asks for TLS names the feature.
cargo test -p shedlock-postgres --no-default-features --test tls_disabled --locked
cargo test -p shedlock-redis --no-default-features --test tls --locked
cargo test -p shedlock-mysql --no-default-features --test tls_disabled --locked
cargo test -p shedlock-zookeeper --no-default-features --test tls --locked
# The CLI with every backend: list and unlock against each server started above.
cargo test -p shedlock-cli --all-features --locked

if compgen -G "$SHEDLOCK_CONFORMANCE_REPORT_DIR/*.md" >/dev/null; then
  echo "== conformance reports =="
  cat "$SHEDLOCK_CONFORMANCE_REPORT_DIR"/*.md
fi
