# shellcheck shell=bash
# The helpers the ci/ scripts share, one copy each so that they cannot drift apart: logging
# (log, die), time (now, elapsed, wait_for), processes and ports (port_open, alive, cmdline),
# Debian packages (apt_install), and the readiness probes of the plain servers that
# ci/start-backends.sh starts and ci/restart-backend.sh restarts (postgres_ready, mysql_ready,
# redis_ready, etcd_ready, zookeeper_ready, mongo_ready). Sourced, never run:
#
#   LOG_TAG=<the script's name>   # before sourcing: the [tag] of every line log and die write
#   # shellcheck source=ci/lib.sh
#   source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
#   APT_LOG=<a file>              # before calling apt_install: where apt-get's output goes
#
# ci/start-clusters.sh sets LOG_TAG=${LOG_TAG:-start-clusters} instead: ci/failover.sh sources
# it and has its own tag.
: "${LOG_TAG:?must name the calling script (set it before sourcing ci/lib.sh)}"

log() { printf '[%s] %s\n' "$LOG_TAG" "$*" >&2; }
# die MESSAGE: logs MESSAGE as an error and exits 1. died=yes tells ci/start-clusters.sh's EXIT
# trap that the failure was reported already (harmless in the scripts without that trap).
# shellcheck disable=SC2034 # died is read by ci/start-clusters.sh's on_exit
die() { died=yes; log "ERROR: $*"; exit 1; }

now() { date +%s.%N; }
# elapsed START: the seconds since START (a `now`), with one decimal.
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# wait_for SECONDS COMMAND...: whether COMMAND succeeds within SECONDS, tried every 0.2 s with its
# output discarded; returns 1 once SECONDS have passed. SECONDS may be fractional, but the
# deadline falls on a whole second (date +%s), so it holds to half a second.
wait_for() {
  local deadline
  deadline=$(awk -v a="$(now)" -v s="$1" 'BEGIN { printf "%.0f", a + s }'); shift
  while :; do
    if "$@" >/dev/null 2>&1; then return 0; fi
    [ "$(date +%s)" -lt "$deadline" ] || return 1
    sleep 0.2
  done
}

# port_open PORT: whether something accepts TCP connections on 127.0.0.1:PORT.
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
# alive PID: whether PID is a running process (a zombie counts as gone).
alive() { local s; s=$(ps -o stat= -p "$1" 2>/dev/null) && [ -n "$s" ] && [[ $s != Z* ]]; }
# cmdline PID: PID's command line, its arguments separated by spaces (empty once it is gone).
cmdline() { tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null || true; }

# apt_install PACKAGE...: installs the packages that are missing, apt-get's output going to
# $APT_LOG. A failure refreshes the package lists once and tries again; apt-get also fails at
# once while another apt-get holds its lock (a parallel script, the machine's own updates), and
# then it is tried again, for up to 5 minutes. Any other failure dies, naming the packages and
# the log.
apt_install() {
  local missing=() package updated=no
  for package in "$@"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  for _ in $(seq 1 60); do
    apt-get install -y -q "${missing[@]}" >"$APT_LOG.last" 2>&1 && { cat "$APT_LOG.last" >>"$APT_LOG"; return 0; }
    cat "$APT_LOG.last" >>"$APT_LOG"
    if grep -q 'Could not get lock\|Unable to acquire the dpkg frontend lock' "$APT_LOG.last"; then
      sleep 5
    elif [ "$updated" = no ]; then
      updated=yes
      apt-get update -q >>"$APT_LOG" 2>&1 || true
    else
      break
    fi
  done
  die "apt-get install ${missing[*]} failed; see $APT_LOG"
}

# --- Readiness of the plain servers of ci/start-backends.sh, each bounded (a server that
# accepts a connection and then hangs must not hang its caller). mysql_ready probes MariaDB:
# named after the backend, as ci/restart-backend.sh calls ${BACKEND}_ready.
postgres_ready() { timeout 5 psql -h 127.0.0.1 -U postgres -d test -tAc 'select 1' | grep -q 1; }
mysql_ready() { timeout 5 mariadb -h 127.0.0.1 -P 3306 -u root -e 'select 1' test >/dev/null; }
redis_ready() { timeout 5 redis-cli -h 127.0.0.1 -p 6379 ping | grep -q PONG; }
etcd_ready() { curl -fsS --max-time 5 http://127.0.0.1:2379/health | grep -q '"health":"true"'; }
# In a subshell: fd 3 (the connection) closes with it and never stays open in the caller.
zookeeper_ready() { (exec 3<>/dev/tcp/127.0.0.1/2181 && printf 'srvr' >&3 && timeout 2 cat <&3 | grep -q 'Mode: standalone'); }
mongo_ready() { mongo_answers_hello 127.0.0.1 27017; }

# mongo_answers_hello HOST PORT [CA_FILE]: the server answers a MongoDB hello with ok: 1; with
# CA_FILE, over TLS, the server's certificate verified against CA_FILE for the name HOST.
mongo_answers_hello() {
  timeout 5 python3 - "$@" <<'PY'
import socket, ssl, struct, sys
host, port = sys.argv[1], int(sys.argv[2])
# OP_MSG {hello: 1, $db: "admin"}; a server that answers it with ok: 1 is up.
doc = b"\x10hello\x00" + struct.pack("<i", 1) + b"\x02$db\x00" + struct.pack("<i", 6) + b"admin\x00"
doc = struct.pack("<i", len(doc) + 5) + doc + b"\x00"
body = struct.pack("<I", 0) + b"\x00" + doc
msg = struct.pack("<iiii", 16 + len(body), 1, 0, 2013) + body
s = socket.create_connection((host, port), timeout=2)
if len(sys.argv) > 3:
    s = ssl.create_default_context(cafile=sys.argv[3]).wrap_socket(s, server_hostname=host)
s.sendall(msg)
reply = b""
while len(reply) < 4 or len(reply) < struct.unpack("<i", reply[:4])[0]:
    chunk = s.recv(65536)
    if not chunk:
        raise SystemExit(1)
    reply += chunk
ok = (b"\x01ok\x00" + struct.pack("<d", 1.0), b"\x10ok\x00" + struct.pack("<i", 1))
raise SystemExit(0 if any(o in reply for o in ok) else 1)
PY
}

# free_port_of_earlier_run PORT PID_FILE PROCESS WHAT LOG: a TLS server of an earlier run still
# on PORT (its pid in PID_FILE, PROCESS in its command line), whose certificate has since been
# replaced, is stopped so that the caller starts it again; anything else on the port is not
# ours to stop, and fails the run naming WHAT and LOG.
free_port_of_earlier_run() {
  local port=$1 pid_file=$2 process=$3 what=$4 log_file=$5
  port_open "$port" || return 0
  if [ -s "$pid_file" ] && grep -q "$process" "/proc/$(cat "$pid_file")/cmdline" 2>/dev/null; then
    log "stopping the $what of an earlier run (it does not verify against the test CA)"
    kill "$(cat "$pid_file")"
    for _ in $(seq 1 60); do port_open "$port" || break; sleep 0.5; done
  fi
  if port_open "$port"; then
    die "port $port is taken by something that is not the $what (see $log_file)"
  fi
}
