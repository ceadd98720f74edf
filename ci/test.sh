#!/usr/bin/env bash
# Runs every test of the workspace against real backends: the one test command of the README
# and of .ci/run. Starts (and if needed installs) the backends first; a backend that cannot be
# started fails this script, it is never skipped.
set -euo pipefail
cd "$(dirname "$0")/.."

ci/start-backends.sh

# Tests find their backends here only; each may be pointed elsewhere by setting it beforehand.
export SHEDLOCK_TEST_POSTGRES_URL=${SHEDLOCK_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}
export SHEDLOCK_TEST_MYSQL_URL=${SHEDLOCK_TEST_MYSQL_URL:-mysql://root@127.0.0.1:3306/test}
export SHEDLOCK_TEST_REDIS_URL=${SHEDLOCK_TEST_REDIS_URL:-redis://127.0.0.1:6379}
export SHEDLOCK_TEST_ETCD_URL=${SHEDLOCK_TEST_ETCD_URL:-http://127.0.0.1:2379}
export SHEDLOCK_TEST_ZOOKEEPER_URL=${SHEDLOCK_TEST_ZOOKEEPER_URL:-127.0.0.1:2181}
export SHEDLOCK_TEST_MONGO_URL=${SHEDLOCK_TEST_MONGO_URL:-mongodb://127.0.0.1:27017}

# Each provider's conformance run writes its report here; the summary is printed at the end.
export SHEDLOCK_CONFORMANCE_REPORT_DIR=${SHEDLOCK_CONFORMANCE_REPORT_DIR:-$PWD/target/conformance-report}
rm -rf "$SHEDLOCK_CONFORMANCE_REPORT_DIR"
mkdir -p "$SHEDLOCK_CONFORMANCE_REPORT_DIR"

cargo test --workspace --all-targets --locked
cargo test --workspace --doc --locked
# The workspace build gives the facade its default features only: once more with every provider
# (connect(url) against each backend) and with none (the errors naming the feature to enable).
cargo test -p shedlock --all-features --locked
cargo test -p shedlock --no-default-features --locked

if compgen -G "$SHEDLOCK_CONFORMANCE_REPORT_DIR/*.md" >/dev/null; then
  echo "== conformance reports =="
  cat "$SHEDLOCK_CONFORMANCE_REPORT_DIR"/*.md
fi
