# Shared by the interop scripts (sourced, from the repository's root): the pinned Python
# libraries, and a fault-server of their own on a free port.
#
#   interop_python        python3 and pip (apt-get as root when missing), then
#                         interop/requirements.txt with pip into interop/.pylib (again only
#                         when the file or the Python changed), on PYTHONPATH
#   fs_start SCRIPT [FLAGS...]   a fault-server on 127.0.0.1:0 with that script; sets FS_URL
#   fs_reset / fs_ledger  POST /__chaos/reset, GET /__chaos/ledger (JSON on stdout)
#   json FILE EXPR        a Python expression over the JSON in FILE (bound to `j`)
# The caller sets FAULT_SERVER (a binary) and WORK (a scratch directory) before fs_start and
# stops what it started with fs_stop (or its own EXIT trap calling it).

say() { echo "${SAY_AS:-interop}: $*"; }
apt_install() {
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
    say "installing $* with apt-get"
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
  else
    say "$* missing, and no apt-get as root to install it" >&2
    exit 2
  fi
}

interop_python() {
  command -v python3 >/dev/null || apt_install python3
  python3 -m pip --version >/dev/null 2>&1 || apt_install python3-pip
  local pylib=interop/.pylib
  local stamp="$pylib/.requirements"
  local want
  want=$(python3 --version; cat interop/requirements.txt)   # a new Python reinstalls too
  if [[ $want != "$(cat "$stamp" 2>/dev/null)" ]]; then
    say "pip install -r interop/requirements.txt into $pylib"
    rm -rf "$pylib"
    PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check --no-warn-conflicts \
      --only-binary=grpcio --target "$pylib" -r interop/requirements.txt
    echo "$want" > "$stamp"
  fi
  export PYTHONPATH="$PWD/$pylib${PYTHONPATH:+:$PYTHONPATH}"
}

FS_PID=
fs_start() {
  local script=$1; shift
  : >"$WORK/fault-server.log"
  "$FAULT_SERVER" --listen 127.0.0.1:0 --script "$script" "$@" 2>"$WORK/fault-server.log" &
  FS_PID=$!
  FS_URL=
  local _
  for _ in $(seq 1 200); do
    FS_URL=$(sed -n 's/^fault-server listening on \(http:\/\/[0-9.:]*\).*/\1/p' "$WORK/fault-server.log")
    [[ -n $FS_URL ]] && return 0
    if ! kill -0 "$FS_PID" 2>/dev/null; then
      local rc=0
      wait "$FS_PID" || rc=$?
      FS_PID=
      say "fault-server --script $script exited $rc: $(cat "$WORK/fault-server.log")" >&2
      return 2
    fi
    sleep 0.05
  done
  say "fault-server did not say where it listens: $(cat "$WORK/fault-server.log")" >&2
  return 2
}
fs_stop() {
  if [[ -n ${FS_PID:-} ]]; then
    kill "$FS_PID" 2>/dev/null || true
    wait "$FS_PID" 2>/dev/null || true
    FS_PID=
  fi
}
fs_reset() {
  python3 -c 'import sys, urllib.request as u; u.urlopen(u.Request(sys.argv[1] + "/__chaos/reset", method="POST"), timeout=5).read()' "$FS_URL"
}
fs_ledger() {
  python3 -c 'import sys, urllib.request as u; sys.stdout.write(u.urlopen(sys.argv[1] + "/__chaos/ledger", timeout=5).read().decode())' "$FS_URL"
}
json() {
  python3 -c 'import json, sys; j = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"
}
