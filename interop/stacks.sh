#!/usr/bin/env bash
# Interop: real nginx and HAProxy as tiers of a chain, checked against the harness's model
# of each (interop/stacks.py): a table of configurations (defaults, explicit retry
# conditions, tries limits, one and three peers, redispatch, method rules, lost responses,
# read timeouts, statuses, passive ejection), each run live with the real binary as the
# tier and simulated with its imported model, agreeing attempt for attempt, per peer and
# per method; then the shipped plans/stack.yaml, live and simulated, within the
# simulator's tolerance.
#
#   interop/stacks.sh                 # installs nginx-light and haproxy with apt-get if missing
#   interop/stacks.sh haproxy         # only the cases whose names contain `haproxy`
#
# Exit 0 when every case agrees, 1 on a disagreement, 2 when something could not be set up.
set -euo pipefail
cd "$(dirname "$0")/.."
SAY_AS=interop/stacks.sh
source interop/lib.sh

missing=()
command -v nginx >/dev/null || [[ -x /usr/sbin/nginx ]] || missing+=(nginx-light)
command -v haproxy >/dev/null || [[ -x /usr/sbin/haproxy ]] || missing+=(haproxy)
if ((${#missing[@]})); then apt_install "${missing[@]}"; fi
command -v python3 >/dev/null || apt_install python3
# Debian starts both services on install; their ports are not the run's, but nothing
# here needs them running.
systemctl stop nginx haproxy >/dev/null 2>&1 || true

TARGET_DIR=${CARGO_TARGET_DIR:-target}
if [[ ${SKIP_BUILD:-0} != 1 ]]; then
  say "building harness (release)"
  cargo build --locked --release --quiet -p fault-server -p harness
fi
say "$(/usr/sbin/nginx -v 2>&1), $(/usr/sbin/haproxy -v | head -1)"
python3 interop/stacks.py "$TARGET_DIR/release/harness" "$@"
