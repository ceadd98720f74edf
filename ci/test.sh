#!/usr/bin/env bash
# Runs every test of the workspace against real backends: the one test command of the README
# and of .ci/run. Starts (and if needed installs) the backends first; a backend that cannot be
# started fails this script, it is never skipped.
#
# Every step runs even when an earlier one fails (and cargo runs every test binary), so one run
# shows everything that is wrong: the list of what failed comes at the end.
set -euo pipefail
cd "$(dirname "$0")/.."

ci/start-backends.sh
# The clustered deployments of the failover tests: 3 etcd members, 3 ZooKeeper servers, and a
# PostgreSQL primary streaming to a replica (Redis Cluster and Sentinel start above).
ci/start-clusters.sh >/dev/null
# A Docker engine (installed and started if none answers) and a local image of every server
# backend, for the testcontainers run of the kit at the end: NAME=image lines.
container_images=$(ci/build-images.sh)

# Each run gets new, empty databases on PostgreSQL and MariaDB, so the path a new deployment
# takes (no lock table yet, every node creating it at once, a first node ever) is tested on
# every run, and nothing a run leaves behind changes what the next one sees. They are dropped
# when the run ends; those of runs that ended without dropping theirs (killed), once they are
# older than any run lasts. (SQLite files, MongoDB collections, ZooKeeper roots and Redis and
# etcd envs are new per test already: each test names its own; the MongoDB kit runs each have
# a database of their own.)
RUN_DB="shedlock_run_$(date -u +%s)_$$"
drop_run_databases() { # drop_run_databases OLDER_THAN_EPOCH: the run databases made before it
  local cutoff=$1 database
  for database in $(psql -h 127.0.0.1 -U postgres -d postgres -tAc \
      "SELECT datname FROM pg_database WHERE datname LIKE 'shedlock\_run\_%'"); do
    [ "$(cut -d_ -f3 <<<"$database")" -lt "$cutoff" ] || continue
    psql -h 127.0.0.1 -U postgres -d postgres -qc "DROP DATABASE IF EXISTS $database WITH (FORCE)" || true
  done
  for database in $(mariadb -h 127.0.0.1 -u root -N -e "SHOW DATABASES LIKE 'shedlock\_run\_%'"); do
    [ "$(cut -d_ -f3 <<<"$database")" -lt "$cutoff" ] || continue
    mariadb -h 127.0.0.1 -u root -e "DROP DATABASE IF EXISTS $database" || true
  done
}
drop_run_databases $(( $(date -u +%s) - 6 * 3600 ))
made_databases=()
drop_own_databases() {
  local made
  for made in "${made_databases[@]}"; do
    case $made in
      postgres) psql -h 127.0.0.1 -U postgres -d postgres -qc "DROP DATABASE IF EXISTS $RUN_DB WITH (FORCE)" || true ;;
      mysql) mariadb -h 127.0.0.1 -u root -e "DROP DATABASE IF EXISTS $RUN_DB" || true ;;
    esac
  done
}
trap drop_own_databases EXIT
if [ -z "${SHEDLOCK_TEST_POSTGRES_URL:-}" ]; then
  psql -h 127.0.0.1 -U postgres -d postgres -qc "CREATE DATABASE $RUN_DB"
  made_databases+=(postgres)
  export SHEDLOCK_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/$RUN_DB
fi
if [ -z "${SHEDLOCK_TEST_MYSQL_URL:-}" ]; then
  mariadb -h 127.0.0.1 -u root -e "CREATE DATABASE $RUN_DB"
  made_databases+=(mysql)
  export SHEDLOCK_TEST_MYSQL_URL=mysql://root@127.0.0.1:3306/$RUN_DB
fi
echo "[test] this run's databases: $SHEDLOCK_TEST_POSTGRES_URL $SHEDLOCK_TEST_MYSQL_URL"
# Tests find their backends here only; each may be pointed elsewhere by setting it beforehand.
export SHEDLOCK_TEST_REDIS_URL=${SHEDLOCK_TEST_REDIS_URL:-redis://127.0.0.1:6379}
export SHEDLOCK_TEST_ETCD_URL=${SHEDLOCK_TEST_ETCD_URL:-http://127.0.0.1:2379}
export SHEDLOCK_TEST_ZOOKEEPER_URL=${SHEDLOCK_TEST_ZOOKEEPER_URL:-127.0.0.1:2181}
export SHEDLOCK_TEST_MONGO_URL=${SHEDLOCK_TEST_MONGO_URL:-mongodb://127.0.0.1:27017}
# TLS-only servers (ci/start-backends.sh) and the CA that signed their certificates.
export SHEDLOCK_TEST_TLS_CA_FILE=${SHEDLOCK_TEST_TLS_CA_FILE:-${SHEDLOCK_CI_STATE_DIR:-/var/tmp/shedlock-ci}/tls/ca.pem}
export SHEDLOCK_TEST_POSTGRES_TLS_URL=${SHEDLOCK_TEST_POSTGRES_TLS_URL:-postgres://postgres@localhost:5433/test}
# Redis 6.2, which predates `SET ... NX ... GET` (ci/start-backends.sh).
export SHEDLOCK_TEST_REDIS_6_URL=${SHEDLOCK_TEST_REDIS_6_URL:-redis://127.0.0.1:6399}
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

# The browser the HTTP view's page is tested in (ci/start-backends.sh installs both).
export SHEDLOCK_TEST_CHROMEDRIVER=${SHEDLOCK_TEST_CHROMEDRIVER:-$(command -v chromedriver)}
export SHEDLOCK_TEST_CHROMIUM=${SHEDLOCK_TEST_CHROMIUM:-$(command -v chromium)}

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
  # ... and pauses it (SIGSTOP) with these, for backend_paused.
  variable="SHEDLOCK_TEST_${backend}_PAUSE"
  export "$variable=${!variable:-$PWD/ci/pause-backend.sh ${backend,,}}"
done
# Its soak runs this long per backend (seconds); see RELIABILITY.md for the long-soak command.
export SHEDLOCK_SOAK_SECONDS=${SHEDLOCK_SOAK_SECONDS:-30}

# Every provider's conformance run goes deep: 10,000 names held at once and fencing tokens past
# 65,535 (the harnesses move a name's tokens there, so a hundred acquisitions cross it).
export SHEDLOCK_CONFORMANCE_DEEP=${SHEDLOCK_CONFORMANCE_DEEP:-1}

# Each provider's conformance run writes its report here; the summary is printed at the end.
export SHEDLOCK_CONFORMANCE_REPORT_DIR=${SHEDLOCK_CONFORMANCE_REPORT_DIR:-$PWD/target/conformance-report}
rm -rf "$SHEDLOCK_CONFORMANCE_REPORT_DIR"
mkdir -p "$SHEDLOCK_CONFORMANCE_REPORT_DIR"

# step COMMAND...: runs one step with its output kept; a failure is listed at the end, and the
# steps after it still run.
STEP_LOG_DIR=$PWD/target/test-steps
rm -rf "$STEP_LOG_DIR" && mkdir -p "$STEP_LOG_DIR"
failed_steps=()
step_times=()
step_number=0
step() {
  step_number=$((step_number + 1))
  local log="$STEP_LOG_DIR/$step_number.log" started=$SECONDS
  echo "== $*"
  if ! "$@" 2>&1 | tee "$log"; then
    failed_steps+=("$*|$log")
  fi
  step_times+=("$((SECONDS - started)) s  $*")
}

# The workspace's test binaries run three at a time (ci/test-binaries.py): most of their time is
# spent waiting for locks to expire. The kit's defect suite, six kits at once, runs first by
# itself; those that restart, pause or fail over a shared server run after the rest,
# one at a time.
step ci/test-binaries.py --workspace --all-targets --locked
step cargo test --workspace --doc --locked --no-fail-fast
# The workspace build gives the facade the features its members ask for (the examples turn on
# most backends): once more with every feature (connect(url) against each backend, the macro)
# and with none (the errors naming the feature to enable).
step cargo test -p shedlock --all-features --locked --no-fail-fast
step cargo test -p shedlock --no-default-features --locked --no-fail-fast
# Without TLS (the providers' TLS features off): a URL that asks for TLS names the feature.
step cargo test -p shedlock-postgres --no-default-features --test tls --locked
step cargo test -p shedlock-redis --no-default-features --test tls --locked
step cargo test -p shedlock-mysql --no-default-features --test tls --locked
step cargo test -p shedlock-zookeeper --no-default-features --test tls --locked
# The kit's launcher without the `testcontainers` feature (the workspace build turns it on):
# the error that names the variable and the feature.
step cargo test -p shedlock-conformance --lib --locked
# The CLI with every backend: list and unlock against each server started above.
step cargo test -p shedlock-cli --all-features --locked --no-fail-fast

# The conformance kit and the fault suite once more for every server backend, through the
# kit's own launcher: with no URL set, it starts each backend in a container (the local images
# above, through testcontainers, published on 127.0.0.1 only), restarts and pauses that
# container itself for the fault suite, and removes it when the run ends. Normal mode and a
# 15 s soak (the URL-based run above goes deep and soaks 30 s): what is new here is the launcher.
# Each backend's default configuration only: the SQL providers' client-time runs and Redis's
# fencing, Cluster and Sentinel runs (named <configuration>::<check>) add nothing the launcher
# decides, and the Cluster and Sentinel runs would reach the topologies above, not a container.
containers() {
  local backend unset=()
  for backend in POSTGRES MYSQL REDIS ETCD ZOOKEEPER MONGO; do
    unset+=(-u "SHEDLOCK_TEST_${backend}_URL" -u "SHEDLOCK_TEST_${backend}_RESTART" -u "SHEDLOCK_TEST_${backend}_PAUSE")
  done
  # Each binary starts containers of its own, so even the fault suites run side by side.
  # shellcheck disable=SC2086 # one NAME=image word per backend
  env "${unset[@]}" $container_images \
    SHEDLOCK_CONFORMANCE_REPORT_DIR="$SHEDLOCK_CONFORMANCE_REPORT_DIR/containers" \
    SHEDLOCK_CONFORMANCE_DEEP=0 SHEDLOCK_SOAK_SECONDS=15 \
    ci/test-binaries.py --servers-of-their-own --locked --test conformance --test faults \
      -p shedlock-postgres -p shedlock-mysql -p shedlock-redis -p shedlock-etcd \
      -p shedlock-zookeeper -p shedlock-mongo \
      -- --skip client-time:: --skip fencing:: --skip cluster:: --skip sentinel::
}
# Containers the kit started and did not remove: a run that was killed, or a launcher that
# leaks. Before the run they are removed; after it, any is a failure.
leftover_containers() { docker ps -aq --filter label=shedlock.conformance; }
no_leftover_containers() {
  local left
  left=$(leftover_containers)
  [ -z "$left" ] || { echo "containers the kit left behind: $left"; docker rm -f $left >/dev/null; return 1; }
}
stale=$(leftover_containers)
[ -z "$stale" ] || docker rm -f $stale >/dev/null
mkdir -p "$SHEDLOCK_CONFORMANCE_REPORT_DIR/containers"
step containers
step no_leftover_containers

for reports in "$SHEDLOCK_CONFORMANCE_REPORT_DIR" "$SHEDLOCK_CONFORMANCE_REPORT_DIR/containers"; do
  if compgen -G "$reports/*.md" >/dev/null; then
    echo "== conformance reports ($reports) =="
    cat "$reports"/*.md
  fi
done

echo "== time per step (this script: $SECONDS s in all) =="
printf '%s\n' "${step_times[@]}"

if [ ${#failed_steps[@]} -gt 0 ]; then
  echo "== FAILED: ${#failed_steps[@]} step(s) =="
  for failure in "${failed_steps[@]}"; do
    log=${failure##*|}
    echo "- ${failure%|*}  (output: $log)"
    # cargo's list of failed targets, and each failed test (libtest and the kit's runners).
    grep -E '^    `-p |^test .* FAILED$|^error: (test failed|[0-9]+ targets? failed)' "$log" \
      | sed 's/^/    /' || true
  done
  # What each failed test said (the first lines after libtest's `---- <test> ... ----` header):
  # the end of this output is what a reader of the CI run sees first.
  echo "== what the failed tests said =="
  for failure in "${failed_steps[@]}"; do
    awk '/^---- .* ----$/ { left = 12 } left > 0 { print "    " substr($0, 1, 600); left-- }' \
      "${failure##*|}" | head -n 120 || true
  done
  exit 1
fi
echo "== every step passed =="
