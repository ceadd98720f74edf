#!/usr/bin/env bash
# Usage: ci/build-images.sh [postgres|mysql|redis|etcd|zookeeper|mongo]...   (none: all six)
#
# Makes sure a Docker engine answers, then builds, once per machine, one local image per server
# backend for the conformance kit's testcontainers launcher, with no registry: a Debian root
# filesystem made by debootstrap from the mirror apt already uses, with the backend's Debian
# package (MongoDB: the SecantusDB binary ci/start-backends.sh built), turned into an image by
# `docker import`. Each prints NAME=image lines on stdout, the variables the launcher reads:
#
#   SHEDLOCK_TEST_POSTGRES_IMAGE   shedlock-ci/postgres:bookworm   PostgreSQL 15, trust auth
#   SHEDLOCK_TEST_MYSQL_IMAGE      shedlock-ci/mariadb:bookworm    MariaDB 10.11, root without password, database test
#   SHEDLOCK_TEST_REDIS_IMAGE      shedlock-ci/redis:bookworm      Redis 7.0, nothing kept on disk
#   SHEDLOCK_TEST_ETCD_IMAGE       shedlock-ci/etcd:bookworm       etcd 3.4
#   SHEDLOCK_TEST_ZOOKEEPER_IMAGE  shedlock-ci/zookeeper:bookworm  ZooKeeper 3.8, standalone
#   SHEDLOCK_TEST_MONGO_IMAGE      shedlock-ci/mongo:bookworm      SecantusDB (MongoDB wire protocol)
#
# Each image runs its server in the foreground, listening on all of the container's interfaces,
# and its server logs, on the same stream, the line the launcher waits for with the official
# image (conformance/src/backends.rs): a container of either is ready at the same point.
#
# An image is rebuilt only when its recipe (this script) changed: the image carries the recipe's
# hash as a label. Fails loudly, naming the step and its log, when the engine cannot start or an
# image cannot be built; it never skips one. Logs: $STATE_DIR/images/.
set -euo pipefail

STATE_DIR=${SHEDLOCK_CI_STATE_DIR:-/var/tmp/shedlock-ci}
IMAGES_DIR="$STATE_DIR/images"
mkdir -p "$IMAGES_DIR"

LOG_TAG=build-images
# shellcheck source=ci/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ALL=(postgres mysql redis etcd zookeeper mongo)
[ $# -gt 0 ] || set -- "${ALL[@]}"
for backend in "$@"; do
  case " ${ALL[*]} " in *" $backend "*) ;; *) die "unknown backend '$backend' (one of: ${ALL[*]})" ;; esac
done

APT_LOG="$IMAGES_DIR/apt.log"

# --- The engine: Debian's docker.io, started here when nothing answers. Published ports bind to
# 127.0.0.1 unless a request names another address (--ip), so nothing is exposed beyond the host.
engine_answers() { docker info >/dev/null 2>&1; }
if ! engine_answers; then
  apt_install docker.io
  if [ -S /var/run/docker.sock ] && pgrep -x dockerd >/dev/null; then
    log "dockerd runs but does not answer yet"
  else
    log "starting dockerd"
    nohup dockerd --ip 127.0.0.1 >"$IMAGES_DIR/dockerd.log" 2>&1 &
  fi
  for _ in $(seq 1 60); do engine_answers && break; sleep 0.5; done
  engine_answers || { tail -n 30 "$IMAGES_DIR/dockerd.log" >&2 || true; die "the Docker engine did not answer within 30 s (log: $IMAGES_DIR/dockerd.log)"; }
  log "the Docker engine answers"
fi

# --- The recipes. packages_of BACKEND: the Debian packages in its image; serve_of BACKEND: its
# entry point, run as PID 1 (exec'ing the server where it can, so `docker stop` reaches it
# directly).
packages_of() {
  case $1 in
    postgres) echo postgresql-15 ;;
    mysql) echo mariadb-server ;;
    redis) echo redis-server ;;
    etcd) echo etcd-server ;;
    zookeeper) echo zookeeper ;;
    mongo) echo ca-certificates ;;
  esac
}
image_of() {
  case $1 in
    mysql) echo shedlock-ci/mariadb:bookworm ;;
    *) echo "shedlock-ci/$1:bookworm" ;;
  esac
}
port_of() {
  case $1 in
    postgres) echo 5432 ;; mysql) echo 3306 ;; redis) echo 6379 ;;
    etcd) echo 2379 ;; zookeeper) echo 2181 ;; mongo) echo 27017 ;;
  esac
}
serve_of() {
  echo '#!/bin/bash'
  echo 'set -euo pipefail'
  case $1 in
    postgres) cat <<'SH'
# The data directory survives `docker restart` (the container's own layer): made once.
DATA=/var/lib/postgresql/data
if [ ! -s "$DATA/PG_VERSION" ]; then
  install -d -o postgres -g postgres -m 0700 "$DATA"
  # UTF-8, as the official image: under the C locale initdb picks SQL_ASCII, where VARCHAR(64)
  # counts bytes and a 64-character name with accents does not fit.
  su postgres -c "/usr/lib/postgresql/15/bin/initdb -D $DATA -U postgres --auth=trust --encoding=UTF8 --locale=C.UTF-8" >/dev/null
  echo "host all all 0.0.0.0/0 trust" >>"$DATA/pg_hba.conf"
fi
install -d -o postgres -g postgres /var/run/postgresql
# Logs go to stderr: "database system is ready to accept connections" once it listens.
setpriv --reuid=postgres --regid=postgres --init-groups \
  /usr/lib/postgresql/15/bin/postgres -D "$DATA" -c listen_addresses=* -c max_connections=300 &
server=$!
# `docker stop` sends SIGTERM, which PostgreSQL takes as a smart shutdown, waiting for every
# client to leave: it gets SIGINT, a fast shutdown, as the official image's stop signal.
trap 'kill -INT "$server"' TERM INT
# wait returns early when a signal arrives: wait again until the server has stopped.
while kill -0 "$server" 2>/dev/null; do wait "$server" || true; done
SH
    ;;
    mysql) cat <<'SH'
if [ ! -d /var/lib/mysql/mysql ]; then
  mariadb-install-db --user=mysql --datadir=/var/lib/mysql --auth-root-authentication-method=normal >/dev/null
fi
install -d -o mysql -g mysql /run/mysqld
# Root may connect from anywhere without a password, as the tests' URLs do; database test. The
# init file runs before the server accepts connections, so the ready line comes after it.
cat >/run/mysqld/init.sql <<'SQL'
CREATE DATABASE IF NOT EXISTS test;
CREATE USER IF NOT EXISTS 'root'@'%' IDENTIFIED BY '';
GRANT ALL ON *.* TO 'root'@'%' WITH GRANT OPTION;
SQL
chown mysql /run/mysqld/init.sql
# Logs go to stderr: "mariadbd: ready for connections." and "port: 3306" once it listens.
exec mariadbd --user=mysql --bind-address=0.0.0.0 --port=3306 --skip-name-resolve \
  --max-connections=500 --init-file=/run/mysqld/init.sql
SH
    ;;
    redis) cat <<'SH'
# Logs go to stdout: "Ready to accept connections".
exec redis-server --bind 0.0.0.0 --protected-mode no --port 6379 --save "" --appendonly no
SH
    ;;
    etcd) cat <<'SH'
# Logs go to stderr: "ready to serve client requests".
exec etcd --name shedlock-ci --data-dir /var/lib/etcd/data \
  --listen-client-urls http://0.0.0.0:2379 --advertise-client-urls http://127.0.0.1:2379 \
  --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
  --initial-cluster shedlock-ci=http://127.0.0.1:2380
SH
    ;;
    zookeeper) cat <<'SH'
mkdir -p /var/lib/zookeeper/data /etc/shedlock-zookeeper
cat >/etc/shedlock-zookeeper/zoo.cfg <<'CFG'
tickTime=2000
dataDir=/var/lib/zookeeper/data
clientPort=2181
admin.enableServer=false
4lw.commands.whitelist=srvr,ruok
CFG
# Debian's zkServer.sh gives SLF4J no binding, so ZooKeeper would log nothing: slf4j-simple
# logs to stdout, "PrepRequestProcessor (sid:0) started" once it serves.
exec java -cp /usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar \
  -Dorg.slf4j.simpleLogger.logFile=System.out \
  org.apache.zookeeper.server.quorum.QuorumPeerMain /etc/shedlock-zookeeper/zoo.cfg
SH
    ;;
    mongo) cat <<'SH'
mkdir -p /var/lib/mongo
# SecantusDB logs "secantusd-rs listening on ..." on stdout; the official image's mongod logs
# "Waiting for connections" there, the line the launcher waits for: it follows the first.
/usr/local/bin/secantusd-rs --host 0.0.0.0 --port 27017 --storage-path /var/lib/mongo \
  > >(while IFS= read -r line; do
        printf '%s\n' "$line"
        [[ $line == *"listening on"* ]] && echo "Waiting for connections"
      done) 2>&1 &
server=$!
trap 'kill -TERM "$server"' TERM INT
# wait returns early when a signal arrives: wait again until the server has stopped.
while kill -0 "$server" 2>/dev/null; do wait "$server" || true; done
SH
    ;;
  esac
}

# The recipe's hash: the packages and the entry point, and a number to raise when the way an
# image is built changes.
RECIPE_VERSION=1
recipe_of() { { echo "$RECIPE_VERSION"; packages_of "$1"; serve_of "$1"; } | sha256sum | cut -c1-16; }

mirror() {
  local uri
  uri=$(grep -hoE '^URIs: *http[^ ]+' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n 1 | awk '{print $2}')
  [ -n "$uri" ] || uri=$(grep -hoE '^deb +http[^ ]+' /etc/apt/sources.list 2>/dev/null | head -n 1 | awk '{print $2}')
  echo "${uri:-http://deb.debian.org/debian}"
}

build() {
  local backend=$1 image recipe current root started
  image=$(image_of "$backend")
  recipe=$(recipe_of "$backend")
  current=$(docker image inspect -f '{{ index .Config.Labels "shedlock.recipe" }}' "$image" 2>/dev/null || true)
  if [ "$current" = "$recipe" ]; then
    log "$image is up to date"
    return 0
  fi
  started=$SECONDS
  root="$IMAGES_DIR/rootfs-$backend"
  log "building $image (debootstrap of bookworm with $(packages_of "$backend"))"
  # A download cache per image: the builds run at once, and debootstrap does not share one.
  mkdir -p "$IMAGES_DIR/debs-$backend"
  # With six builds fetching at once, the mirror now and then fails one package's download
  # ("E: Couldn't download packages: findutils", seen on a fresh machine). The cache keeps what
  # arrived, so another attempt fetches only what failed; the third failure is the build's.
  local attempt
  for attempt in 1 2 3; do
    rm -rf "$root"
    if debootstrap --variant=minbase --include="$(packages_of "$backend")" --cache-dir="$IMAGES_DIR/debs-$backend" \
      bookworm "$root" "$(mirror)" >"$IMAGES_DIR/$backend.log" 2>&1; then
      break
    fi
    if [ "$attempt" -eq 3 ]; then
      tail -n 30 "$IMAGES_DIR/$backend.log" >&2
      die "debootstrap for $image failed 3 times (log of the last: $IMAGES_DIR/$backend.log)"
    fi
    log "debootstrap for $image failed (attempt $attempt of 3: $(grep -m 1 '^E:' "$IMAGES_DIR/$backend.log" || tail -n 1 "$IMAGES_DIR/$backend.log")); trying again"
    sleep 5
  done
  if [ "$backend" = mongo ]; then
    local secantus
    secantus=$(PATH="$HOME/.cargo/bin:$PATH" command -v secantusd-rs) \
      || die "$image needs SecantusDB's secantusd-rs: run ci/start-backends.sh first, it builds it"
    install -m 0755 "$secantus" "$root/usr/local/bin/secantusd-rs"
  fi
  serve_of "$backend" >"$root/usr/local/bin/shedlock-serve"
  chmod 0755 "$root/usr/local/bin/shedlock-serve"
  rm -rf "$root/var/cache/apt/archives/"*.deb "$root/var/lib/apt/lists/"*
  local replaced
  replaced=$(docker image inspect -f '{{ .Id }}' "$image" 2>/dev/null || true)
  tar -C "$root" -c . | docker import \
    -c 'CMD ["/usr/local/bin/shedlock-serve"]' \
    -c "EXPOSE $(port_of "$backend")" \
    -c "LABEL shedlock.recipe=$recipe" \
    - "$image" >>"$IMAGES_DIR/$backend.log" 2>&1 \
    || { tail -n 30 "$IMAGES_DIR/$backend.log" >&2; die "docker import of $image failed (log: $IMAGES_DIR/$backend.log)"; }
  rm -rf "$root"
  # The image this one replaces, unless a container still uses it.
  [ -z "$replaced" ] || docker rmi "$replaced" >/dev/null 2>&1 || true
  log "built $image in $((SECONDS - started)) s"
}

apt_install debootstrap
# The images build at once (each is mostly waiting on downloads and dpkg); each fails on its own.
started=$SECONDS
builds=()
for backend in "$@"; do
  build "$backend" &
  builds+=("$!:$backend")
done
failed=()
for entry in "${builds[@]}"; do
  wait "${entry%%:*}" || failed+=("${entry#*:}")
done
[ ${#failed[@]} -eq 0 ] || die "could not build the image of: ${failed[*]} (logs: $IMAGES_DIR/<backend>.log)"
log "images ready in $((SECONDS - started)) s"
for backend in "$@"; do
  echo "SHEDLOCK_TEST_${backend^^}_IMAGE=$(image_of "$backend")"
done
