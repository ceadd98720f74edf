# Sourced by the ci/ scripts that install Debian packages. The caller defines `log` and `die`
# and sets APT_LOG, the file apt-get's output goes to.
#
# apt_install PACKAGE...: installs the packages that are missing. A failure refreshes the
# package lists once and tries again; apt-get also fails at once while another apt-get holds
# its lock (a parallel script, the machine's own updates), and then it is tried again, for up
# to 5 minutes. Any other failure dies, naming the packages and the log.
apt_install() {
  local missing=() package attempt updated=no
  for package in "$@"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  for attempt in $(seq 1 60); do
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
