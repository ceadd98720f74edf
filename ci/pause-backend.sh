#!/usr/bin/env bash
# Usage: ci/pause-backend.sh BACKEND stop SECONDS   pauses BACKEND's server (SIGSTOP); it is
#                                                  resumed by itself after SECONDS at the latest
#        ci/pause-backend.sh BACKEND cont          resumes it (SIGCONT) now
#
# BACKEND is postgres, mysql, redis, etcd, zookeeper or mongo: the one plain (non-TLS) server
# ci/start-backends.sh runs on its port (see ci/restart-backend.sh). A paused server neither
# answers nor closes anything: its connections stay open, requests sit in its socket buffers,
# new connections wait in its listen queue, and its clock-driven work (TTLs, leases, session
# expiry) waits too. That is what a stop-the-world pause, a frozen VM or a container paused by
# `docker pause` does, for the fault suite's backend_paused check.
#
# PostgreSQL runs a process per connection: the postmaster and every child are paused. A
# watchdog, started with the pause and detached from the caller, resumes the server after
# SECONDS whatever happens to the caller, so a test that dies mid-pause cannot leave a server
# stopped for the tests after it.
set -euo pipefail

LOG_TAG=pause-backend
# shellcheck source=ci/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

BACKENDS="postgres, mysql, redis, etcd, zookeeper, mongo"
[ $# -ge 2 ] || die "usage: $0 BACKEND stop SECONDS | $0 BACKEND cont (BACKEND: one of $BACKENDS)"
backend=$1 action=$2
case "$backend" in
  postgres) port=5432 pattern='(^|/)postgres ' ;;
  mysql) port=3306 pattern='(^|/)mariadbd( |$)' ;;
  redis) port=6379 pattern='(^|/)redis-server [^ ]*:6379( |$)' ;;
  etcd) port=2379 pattern='(^|/)etcd ' ;;
  zookeeper) port=2181 pattern='QuorumPeerMain ' ;;
  mongo) port=27017 pattern='(^|/)secantusd-rs ' ;;
  *) die "unknown backend '$backend' (one of: $BACKENDS)" ;;
esac

# The one process listening on the port (ss shows a stopped process's sockets too).
pids=$(ss -Hltnp "sport = :$port" | grep -o 'pid=[0-9]*' | cut -d= -f2 | sort -u)
[ -n "$pids" ] || die "$backend: nothing listens on 127.0.0.1:$port (run ci/start-backends.sh first)"
[ "$(wc -l <<<"$pids")" -eq 1 ] || die "$backend: several processes listen on port $port: ${pids//$'\n'/ }"
pid=$pids
cmdline "$pid" | grep -Eq "$pattern" \
  || die "$backend: the process on 127.0.0.1:$port (pid $pid: $(cmdline "$pid")) is not the expected server"
# Every process of the server: PostgreSQL's postmaster and its children, the one process otherwise.
children=$(pgrep -P "$pid" | tr '\n' ' ' || true)
processes="$pid $children"

case "$action" in
  stop)
    seconds=${3:-}
    [[ $seconds =~ ^[0-9]+$ ]] && [ "$seconds" -gt 0 ] \
      || die "stop needs the longest pause in whole seconds (the watchdog resumes the server then)"
    # The watchdog first: if anything below fails, the server is resumed all the same.
    setsid nohup bash -c "sleep $seconds; kill -CONT $processes" >/dev/null 2>&1 </dev/null &
    # Children first, so no child runs on while its postmaster is already stopped.
    # shellcheck disable=SC2086 # a list of pids
    kill -STOP $children "$pid"
    log "paused $backend (pids $processes) for at most $seconds s" ;;
  cont)
    # shellcheck disable=SC2086 # a list of pids
    kill -CONT $processes
    log "resumed $backend (pids $processes)" ;;
  *) die "unknown action '$action' (stop SECONDS or cont)" ;;
esac
