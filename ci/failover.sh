#!/usr/bin/env bash
# Usage: ci/failover.sh COMMAND
#
# Causes a failover in one of the clusters of ci/start-clusters.sh, for the failover tests, and
# returns once the new topology answers:
#
#   etcd-kill-leader         SIGKILLs the etcd leader (found with etcdctl endpoint status) and
#                            waits until the two other members agree on a new leader and pass
#                            `etcdctl endpoint health` (a quorum read).
#   etcd-restore             starts every member that is down again and waits until all three
#                            are healthy and agree on a leader.
#   zookeeper-kill-follower  SIGKILLs one follower; waits until the leader and the other
#                            follower serve (srvr) and the leader counts one synced follower.
#   zookeeper-kill-leader    SIGKILLs the leader; waits until the two others have elected a
#                            leader with one synced follower.
#   zookeeper-restore        starts every server that is down again and waits until one leads
#                            and two follow.
#   postgres-promote         stops the primary (127.0.0.1:5440) at once (pg_ctl stop -m
#                            immediate: no checkpoint, as a crash) and promotes the replica
#                            (127.0.0.1:5441, pg_ctl promote); waits until it accepts writes.
#                            5440 stays down (no split brain): the primary is now on 5441.
#   postgres-restore         makes the pair anew in its original roles (wiped, initdb, base
#                            backup: every row written before is gone), or leaves it alone if
#                            it is already streaming in those roles.
#
# The kill commands want the whole cluster healthy first (three members); after one of them,
# the matching restore (or ci/start-clusters.sh) brings the cluster back. Every step is a line
# on stderr; the last one says what was done and how long it took (kill -> the new topology
# answers). stdout gets NAME=value lines for the caller: what was killed, the leader (or
# primary) now, and the seconds taken. Failovers of one cluster are serialized with each other
# and with ci/start-clusters.sh (flock). Fails loudly, naming the cluster and its logs, when the
# new topology does not answer within 60 s (90 s for ZooKeeper).
set -euo pipefail

LOG_TAG=failover
# shellcheck source=ci/start-clusters.sh
. "$(dirname "$0")/start-clusters.sh"

COMMANDS="etcd-kill-leader, etcd-restore, zookeeper-kill-follower, zookeeper-kill-leader, zookeeper-restore, postgres-promote, postgres-restore"
[ $# -eq 1 ] || die "usage: $0 COMMAND (one of: $COMMANDS)"

# report KEY=VALUE...: the caller's lines on stdout.
report() { printf '%s\n' "$@"; }

etcd_kill_leader() {
  local leader index pid others=() remaining i started new_leader
  etcd_healthy "$ETCD_URL" \
    || die "etcd: the cluster $ETCD_URL is not healthy with all three members (run ci/failover.sh etcd-restore or ci/start-clusters.sh etcd first)"
  leader=$(etcd_leader_endpoint "$ETCD_URL")
  index=$(etcd_index_of_endpoint "$leader") || die "etcd: the leader's endpoint '$leader' is not one of $ETCD_URL"
  pid=$(listener_pid "${ETCD_CLIENT_PORTS[$index]}")
  for i in 0 1 2; do [ "$i" = "$index" ] || others+=("$(etcd_endpoint $i)"); done
  remaining=$(IFS=,; echo "${others[*]}")
  log "etcd: killing the leader ${ETCD_NAMES[$index]} ($leader, pid $pid) with SIGKILL"
  started=$(now)
  etcd_kill_member "$index"
  log "etcd: waiting until $remaining elect a leader"
  wait_for 60 etcd_healthy "$remaining" \
    || etcd_fail "etcd: $remaining did not elect a new leader within 60 s of the leader's SIGKILL"
  new_leader=$(etcd_leader_endpoint "$remaining")
  local took; took=$(elapsed "$started")
  log "etcd: killed leader $leader; $new_leader leads after $took s"
  report "killed=$leader" "leader=$new_leader" "seconds=$took"
}

etcd_restore() {
  local started down=() i leader
  started=$(now)
  for i in 0 1 2; do port_open "${ETCD_CLIENT_PORTS[$i]}" || down+=("$(etcd_endpoint $i)"); done
  log "etcd: restoring ${down[*]:-nothing (all members run)}"
  ensure_etcd
  leader=$(etcd_leader_endpoint "$ETCD_URL")
  local took; took=$(elapsed "$started")
  log "etcd: restored ${down[*]:-nothing}; all three healthy, $leader leads, after $took s"
  report "restored=$(IFS=,; echo "${down[*]:-}")" "leader=$leader" "seconds=$took"
}

# zookeeper_kill MODE: SIGKILLs the server in MODE (leader or follower).
zookeeper_kill() {
  local mode=$1 port index remaining=() p started new_leader
  zk_healthy "${ZK_CLIENT_PORTS[@]}" \
    || die "zookeeper: the ensemble $ZOOKEEPER_URL does not have one leader and two synced followers (run ci/failover.sh zookeeper-restore or ci/start-clusters.sh zookeeper first)"
  port=$(zk_port_with_mode "$mode") || die "zookeeper: no server says it is the $mode"
  index=$(zk_index_of_port "$port")
  for p in "${ZK_CLIENT_PORTS[@]}"; do [ "$p" = "$port" ] || remaining+=("$p"); done
  log "zookeeper: killing the $mode, server $((index + 1)) (127.0.0.1:$port, pid $(listener_pid "$port")) with SIGKILL"
  started=$(now)
  zk_kill_server "$index"
  log "zookeeper: waiting until 127.0.0.1:${remaining[0]} and 127.0.0.1:${remaining[1]} serve as leader and follower"
  wait_for 90 zk_healthy "${remaining[@]}" \
    || zk_fail "zookeeper: ${remaining[*]} did not serve as leader and synced follower within 90 s of the $mode's SIGKILL"
  for p in "${remaining[@]}"; do [ "$(zk_mode "$p")" = leader ] && new_leader=127.0.0.1:$p; done
  local took; took=$(elapsed "$started")
  log "zookeeper: killed the $mode 127.0.0.1:$port; $new_leader leads with one follower after $took s"
  report "killed=127.0.0.1:$port" "leader=$new_leader" "seconds=$took"
}

zookeeper_restore() {
  local started down=() port leader
  started=$(now)
  for port in "${ZK_CLIENT_PORTS[@]}"; do port_open "$port" || down+=("127.0.0.1:$port"); done
  log "zookeeper: restoring ${down[*]:-nothing (all servers run)}"
  ensure_zookeeper
  leader=127.0.0.1:$(zk_port_with_mode leader)
  local took; took=$(elapsed "$started")
  log "zookeeper: restored ${down[*]:-nothing}; $leader leads two followers after $took s"
  report "restored=$(IFS=,; echo "${down[*]:-}")" "leader=$leader" "seconds=$took"
}

postgres_promote() {
  local started
  PG_BIN=$(pg_bin)
  pg_pair_healthy \
    || die "postgres: the primary 127.0.0.1:$PG_PRIMARY_PORT is not streaming to the replica 127.0.0.1:$PG_REPLICA_PORT (run ci/failover.sh postgres-restore or ci/start-clusters.sh postgres first)"
  log "postgres: stopping the primary 127.0.0.1:$PG_PRIMARY_PORT (pg_ctl stop -m immediate)"
  started=$(now)
  pg_stop "$PG_PRIMARY" $PG_PRIMARY_PORT "PostgreSQL primary"
  log "postgres: promoting the replica 127.0.0.1:$PG_REPLICA_PORT (pg_ctl promote)"
  pg_as "$PG_BIN/pg_ctl" -D "$PG_REPLICA" -w -t 60 promote >>"$PG_DIR/pg_ctl.log" 2>&1 \
    || pg_fail "postgres: pg_ctl promote of the replica failed (log: $PG_DIR/pg_ctl.log)"
  wait_for 60 pg_writable $PG_REPLICA_PORT \
    || pg_fail "postgres: the promoted replica 127.0.0.1:$PG_REPLICA_PORT did not accept writes within 60 s"
  local took; took=$(elapsed "$started")
  log "postgres: stopped the primary 127.0.0.1:$PG_PRIMARY_PORT and promoted 127.0.0.1:$PG_REPLICA_PORT, which accepts writes after $took s"
  report "killed=$POSTGRES_PRIMARY_URL" "primary=$POSTGRES_REPLICA_URL" "seconds=$took"
}

postgres_restore() {
  local started
  started=$(now)
  log "postgres: restoring the primary 127.0.0.1:$PG_PRIMARY_PORT and the replica 127.0.0.1:$PG_REPLICA_PORT"
  ensure_postgres
  local took; took=$(elapsed "$started")
  log "postgres: primary 127.0.0.1:$PG_PRIMARY_PORT streams to replica 127.0.0.1:$PG_REPLICA_PORT after $took s"
  report "primary=$POSTGRES_PRIMARY_URL" "replica=$POSTGRES_REPLICA_URL" "seconds=$took"
}

case "$1" in
  etcd-kill-leader) lock etcd; etcd_kill_leader ;;
  etcd-restore) lock etcd; etcd_restore ;;
  zookeeper-kill-follower) lock zookeeper; zookeeper_kill follower ;;
  zookeeper-kill-leader) lock zookeeper; zookeeper_kill leader ;;
  zookeeper-restore) lock zookeeper; zookeeper_restore ;;
  postgres-promote) lock postgres; postgres_promote ;;
  postgres-restore) lock postgres; postgres_restore ;;
  -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2 ;;
  *) die "unknown command '$1' (one of: $COMMANDS)" ;;
esac
