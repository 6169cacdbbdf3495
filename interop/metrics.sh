#!/usr/bin/env bash
# The fault-server's hand-written /metrics against the Prometheus project's parsers
# (prometheus_client, pinned in interop/requirements.txt): a fault-server with a script
# that answers every request under /flaky 503, 20 requests with curl, then the text format and
# OpenMetrics (asked for with Accept) parsed, the strict OpenMetrics parser included, and
# the counts read back checked against what was sent (interop/metrics_check.py).
#
#   bash interop/metrics.sh        # or: just interop-metrics
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never
SAY_AS=metrics
source interop/lib.sh
interop_python
command -v curl >/dev/null || apt_install curl
python3 -c 'import importlib.metadata as m; print("metrics: prometheus_client", m.version("prometheus-client"))'

cargo build --locked --release --quiet -p fault-server -p harness
FAULT_SERVER="${CARGO_TARGET_DIR:-target}/release/fault-server"
WORK=$(mktemp -d)
trap 'fs_stop; rm -rf "$WORK"' EXIT
cat >"$WORK/script.yaml" <<'YAML'
faults:
  - { name: flaky, match: { path: /flaky }, respond: { status: 503 } }
YAML
fs_start "$WORK/script.yaml"
for i in $(seq 1 10); do
  curl -s -o /dev/null "$FS_URL/items/$i"
  curl -s -o /dev/null "$FS_URL/flaky/$i"
done
python3 interop/metrics_check.py "$FS_URL"
