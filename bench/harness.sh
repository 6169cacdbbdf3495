#!/usr/bin/env bash
# The harness's load engine against oha and hey, at the same fixed rate, against the same
# faultless fault-server, in one run on this machine. For each tool: CPU seconds (user +
# system) per 100k requests, the rate it achieved, and (for the harness) how late arrivals
# were dispatched. The design's goal: the harness holds its rate within 1%, schedules each
# arrival within 1 ms (p99), and costs no more CPU per request than oha or hey.
#
#   bench/harness.sh                     # RATE=2000 DURATION=20
#   RATE=5000 DURATION=30 bench/harness.sh
#
# A second harness row, `traced`, runs the same plan with full tracing into
# bench/otlp-sink.py (a stand-in collector), so the cost of telemetry is measured too.
#
# Installs what is missing: hey and GNU time from Debian, oha with `cargo install`.
set -euo pipefail
cd "$(dirname "$0")/.."

RATE=${RATE:-2000}
DURATION=${DURATION:-20}
CONNECTIONS=${CONNECTIONS:-50}
PORT=${PORT:-18090}
TARGET_DIR=${CARGO_TARGET_DIR:-target}
OUT=${OUT:-$TARGET_DIR/bench-harness}
mkdir -p "$OUT"

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
need_apt=()
command -v hey >/dev/null 2>&1 || need_apt+=(hey)
[ -x /usr/bin/time ] || need_apt+=(time)
if [ ${#need_apt[@]} -gt 0 ]; then
    echo "installing ${need_apt[*]} (Debian)" >&2
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
if ! command -v oha >/dev/null 2>&1; then
    echo "installing oha (cargo install oha: a few minutes)" >&2
    cargo install --locked --quiet oha
fi

echo "building (release)…" >&2
cargo build --release --quiet -p fault-server -p harness

SERVER_PID=""
cleanup() { [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null; wait 2>/dev/null || true; }
trap cleanup EXIT
"$TARGET_DIR/release/fault-server" --listen "127.0.0.1:$PORT" 2>/dev/null &
SERVER_PID=$!
for _ in $(seq 1 200); do
    (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break
    sleep 0.05
done

URL="http://127.0.0.1:$PORT/items/1"

# Runs a command under GNU time; prints "user+sys seconds".
cpu_of() {
    local log=$1; shift
    /usr/bin/time -f "%U %S" -o "$log.time" "$@" >"$log.out" 2>"$log.err"
    awk '{ printf "%.3f", $1 + $2 }' "$log.time"
}

cat >"$OUT/plan.yaml" <<PLAN
name: bench
duration: ${DURATION}s
drain: 2s
target: { url: "http://127.0.0.1:$PORT" }
load:
  rate: $RATE
  arrivals: uniform
  max_in_flight: 100000
  requests: [ { name: read, path: /items/1 } ]
policies: [ { name: no-retry, max_attempts: 1 } ]
PLAN

echo "harness: $RATE req/s for ${DURATION}s" >&2
h_cpu=$(cpu_of "$OUT/harness" "$TARGET_DIR/release/harness" chaos --quiet --out "$OUT/report" "$OUT/plan.yaml")
read -r h_logical h_lag_p50 h_lag_p99 h_p50 h_p99 < <(python3 - "$OUT/report/report.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))["policies"][0]
print(p["logical"], p["arrival_lag_ms"]["p50"], p["arrival_lag_ms"]["p99"], p["latency_ms"]["p50"], p["latency_ms"]["p99"])
PY
)

# The same run with full tracing (every logical request a trace, metrics every 5 s) into
# bench/otlp-sink.py, a stand-in collector: what telemetry costs the harness's CPU.
SINK_PORT=${SINK_PORT:-18091}
python3 bench/otlp-sink.py "$SINK_PORT" >"$OUT/sink.json" 2>/dev/null &
SINK_PID=$!
for _ in $(seq 1 200); do
    (exec 3<>"/dev/tcp/127.0.0.1/$SINK_PORT") 2>/dev/null && break
    sleep 0.05
done
echo "harness with tracing: $RATE req/s for ${DURATION}s" >&2
t_cpu=$(OTEL_TRACES_SAMPLER_ARG=1 cpu_of "$OUT/harness-traced" "$TARGET_DIR/release/harness" chaos --quiet --out "$OUT/report-traced" --otlp "http://127.0.0.1:$SINK_PORT" "$OUT/plan.yaml")
kill -INT "$SINK_PID" 2>/dev/null; wait "$SINK_PID" 2>/dev/null || true
read -r t_logical t_lag_p50 t_lag_p99 t_p50 t_p99 t_spans t_dropped < <(python3 - "$OUT/report-traced/report.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
p = r["policies"][0]
t = r.get("telemetry", {})
print(p["logical"], p["arrival_lag_ms"]["p50"], p["arrival_lag_ms"]["p99"], p["latency_ms"]["p50"], p["latency_ms"]["p99"], t.get("spans_exported", 0), t.get("spans_dropped", 0))
PY
)

echo "oha: $RATE req/s for ${DURATION}s" >&2
o_cpu=$(cpu_of "$OUT/oha" oha --no-tui --output-format json -q "$RATE" -z "${DURATION}s" -c "$CONNECTIONS" --latency-correction "$URL")
read -r o_count o_p50 o_p99 < <(python3 - "$OUT/oha.out" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
s = d["summary"]
total = sum(d.get("statusCodeDistribution", {}).values())
lp = d.get("latencyPercentiles", {})
print(total, lp.get("p50", 0) * 1000, lp.get("p99", 0) * 1000)
PY
)

echo "hey: $RATE req/s for ${DURATION}s" >&2
per_worker=$(awk -v r="$RATE" -v c="$CONNECTIONS" 'BEGIN { printf "%.0f", r / c }')
y_cpu=$(cpu_of "$OUT/hey" hey -z "${DURATION}s" -c "$CONNECTIONS" -q "$per_worker" "$URL")
y_count=$(awk '/\[200\]/ { print $2 }' "$OUT/hey.out")
y_p50=$(awk '/ 50% in / { print $3 * 1000 }' "$OUT/hey.out")
y_p99=$(awk '/ 99% in / { print $3 * 1000 }' "$OUT/hey.out")

row() { # name cpu count p50 p99 lag50 lag99
    awk -v n="$1" -v cpu="$2" -v c="$3" -v d="$DURATION" -v r="$RATE" -v p50="$4" -v p99="$5" -v l50="$6" -v l99="$7" 'BEGIN {
        printf "%-8s %10.2f %12.1f %9.2f%% %9.2f %9.2f %9s %9s\n", n, cpu / c * 100000, c / d, (c / d - r) / r * 100, p50, p99, l50, l99 }'
}
echo
echo "target $RATE req/s for ${DURATION}s, $CONNECTIONS connections for oha/hey, $(nproc) cores, faultless fault-server"
printf "%-8s %10s %12s %10s %9s %9s %9s %9s\n" tool "cpu-s/100k" "achieved/s" "rate err" "p50 ms" "p99 ms" "lag p50" "lag p99"
row harness "$h_cpu" "$h_logical" "$h_p50" "$h_p99" "$h_lag_p50" "$h_lag_p99"
row traced "$t_cpu" "$t_logical" "$t_p50" "$t_p99" "$t_lag_p50" "$t_lag_p99"
row oha "$o_cpu" "$o_count" "$o_p50" "$o_p99" "–" "–"
row hey "$y_cpu" "$y_count" "$y_p50" "$y_p99" "–" "–"
echo
echo "traced: the harness exporting every logical request as a trace ($t_spans spans exported, $t_dropped dropped) to bench/otlp-sink.py"
awk -v a="$h_cpu" -v b="$t_cpu" 'BEGIN { printf "tracing costs %.2fx the CPU of the untraced run\n", b / a }'
