#!/usr/bin/env bash
# The harness's load engine against oha and hey, at the same fixed rate, against the same
# faultless fault-server, in one run on this machine. For each tool: CPU seconds (user +
# system) per 100k requests, the rate it achieved, and (for the harness) how late arrivals
# were dispatched. The goals (issue 12): the harness costs no more CPU per request than
# oha, and sustains 40,000 req/s with arrival lag p99 <= 1 ms and nothing dropped.
#
#   bench/harness.sh                     # RATE=5000 DURATION=15, then the ceiling
#   RATE=2000 DURATION=30 CEILING="" bench/harness.sh
#   SOAK=1 bench/harness.sh              # memory: RSS after 1 and 10 minutes at 2,000 req/s
#
# Every tool gets CONNECTIONS connections (50): oha and hey with `-c`, the harness with
# `load.max_connections` (attempts beyond wait for one; the wait counts in latency).
# CONNECTIONS=default leaves the key out of the harness's plans (its default, 50);
# CONNECTIONS=per_attempt writes that (a connection for every attempt that finds none
# idle); oha and hey get 50 with either. CEILING_ONLY=1 runs the ceiling alone:
#
#   CONNECTIONS=default CEILING_ONLY=1 CEILING="20000 40000 50000" bench/harness.sh
#
# Rows besides the plain harness:
# - `all cores`: the same plan with `--threads $(nproc)` (the default gives this plan one
#   worker: docs/benchmarks.md);
# - `retrying`: a policy with three attempts and jittered backoff against a route that
#   answers 503 half of the time, so the policy core's retry path is in the loop; its
#   CPU is per 100k logical requests, and the attempts they took are printed beside it;
# - `traced`: the plain plan with full tracing into bench/otlp-sink.py (a stand-in
#   collector), so the cost of telemetry is measured too.
# Then the ceiling: the plain plan at each rate of CEILING for CEILING_DURATION seconds,
# up to the second miss in a row (lag p99 > 1 ms, or anything dropped), and the highest
# that met it.
#
# Installs what is missing: hey and GNU time from Debian, oha with `cargo install`.
set -euo pipefail
cd "$(dirname "$0")/.."

RATE=${RATE:-5000}
DURATION=${DURATION:-15}
CONNECTIONS=${CONNECTIONS:-50}
PORT=${PORT:-18090}
FLAKY_PORT=${FLAKY_PORT:-18092}
CEILING=${CEILING-5000 10000 15000 20000 25000 30000 35000 40000 45000 50000}
CEILING_DURATION=${CEILING_DURATION:-10}
SOAK=${SOAK:-}
CEILING_ONLY=${CEILING_ONLY:-}
case "$CONNECTIONS" in
    default) CONNECTIONS_KEY="" TOOL_CONNECTIONS=50 ;;
    per_attempt) CONNECTIONS_KEY="max_connections: per_attempt" TOOL_CONNECTIONS=50 ;;
    *) CONNECTIONS_KEY="max_connections: $CONNECTIONS" TOOL_CONNECTIONS=$CONNECTIONS ;;
esac
SOAK_RATE=${SOAK_RATE:-2000}
SOAK_MINUTES=${SOAK_MINUTES:-10}
TARGET_DIR=${CARGO_TARGET_DIR:-target}
OUT=${OUT:-$TARGET_DIR/bench-harness}
mkdir -p "$OUT"

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
need_apt=()
[ -n "$CEILING_ONLY" ] || command -v hey >/dev/null 2>&1 || need_apt+=(hey)
[ -x /usr/bin/time ] || need_apt+=(time)
if [ ${#need_apt[@]} -gt 0 ]; then
    echo "installing ${need_apt[*]} (Debian)" >&2
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
if [ -z "$CEILING_ONLY" ] && ! command -v oha >/dev/null 2>&1; then
    echo "installing oha (cargo install oha: a few minutes)" >&2
    cargo install --locked --quiet oha
fi

echo "building (release)…" >&2
cargo build --release --quiet -p fault-server -p harness

PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
trap cleanup EXIT
. bench/lib.sh
"$TARGET_DIR/release/fault-server" --listen "127.0.0.1:$PORT" 2>/dev/null &
SERVER_PID=$!
PIDS+=("$SERVER_PID")
wait_for_port "$PORT"

URL="http://127.0.0.1:$PORT/items/1"

# Runs a command under GNU time; prints "user+sys seconds".
cpu_of() {
    local log=$1; shift
    /usr/bin/time -f "%U %S" -o "$log.time" "$@" >"$log.out" 2>"$log.err"
    awk '{ printf "%.3f", $1 + $2 }' "$log.time"
}

# The figures of a report's first policy: logical requests, arrival lag p50 and p99,
# latency p50 and p99, then each extra key named (a policy's, or `telemetry.KEY`).
figures() {
    python3 - "$@" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
p = r["policies"][0]
t = r.get("telemetry", {})
extra = [t.get(k[len("telemetry."):], 0) if k.startswith("telemetry.") else p[k] for k in sys.argv[2:]]
print(p["logical"], p["arrival_lag_ms"]["p50"], p["arrival_lag_ms"]["p99"], p["latency_ms"]["p50"], p["latency_ms"]["p99"], *extra)
PY
}

# The plain plan: no retries, one route, uniform arrivals at $1 req/s for $2 seconds.
plan() {
    cat <<PLAN
name: bench
duration: ${2}s
drain: 2s
target: { url: "http://127.0.0.1:$PORT" }
load:
  rate: $1
  arrivals: uniform
  max_in_flight: 100000
  $CONNECTIONS_KEY
  requests: [ { name: read, path: /items/1 } ]
policies: [ { name: no-retry, max_attempts: 1 } ]
PLAN
}
plan "$RATE" "$DURATION" >"$OUT/plan.yaml"

rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }

if [ -n "$SOAK" ]; then
    # Half a minute longer than sampled, so the last sample finds the run still going.
    plan "$SOAK_RATE" $((SOAK_MINUTES * 60 + 30)) >"$OUT/soak.yaml"
    echo "soak: $SOAK_RATE req/s for $SOAK_MINUTES minutes; RSS sampled every minute" >&2
    "$TARGET_DIR/release/harness" chaos --quiet --out "$OUT/report-soak" "$OUT/soak.yaml" >/dev/null 2>"$OUT/soak.err" &
    HARNESS_PID=$!
    PIDS+=("$HARNESS_PID")
    printf "%-8s %14s %14s\n" minute "harness RSS" "server RSS"
    first_h=0 first_s=0 last_h=0 last_s=0
    for minute in $(seq 1 "$SOAK_MINUTES"); do
        sleep 60
        last_h=$(rss_kb "$HARNESS_PID")
        last_s=$(rss_kb "$SERVER_PID")
        if [ "$minute" -eq 1 ]; then first_h=$last_h first_s=$last_s; fi
        printf "%-8s %11s kB %11s kB\n" "$minute" "$last_h" "$last_s"
    done
    wait "$HARNESS_PID" || true
    python3 - "$OUT/report-soak/report.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))["policies"][0]
print(f"logical {p['logical']}, dropped {p['dropped']}, lag p99 {p['arrival_lag_ms']['p99']} ms")
PY
    awk -v h1="$first_h" -v s1="$first_s" -v h="$last_h" -v s="$last_s" -v m="$SOAK_MINUTES" 'BEGIN {
        printf "RSS after %d minutes over RSS after 1: harness %.3f, fault-server %.3f (goal <= 1.1)\n", m, h / h1, s / s1 }'
    exit 0
fi

if [ -z "$CEILING_ONLY" ]; then
# A warm-up, discarded: the first seconds of load on a fresh server and a cold machine
# (page cache, allocator arenas, the server's tables growing) would land on the first
# row alone; oha and hey run later against a server that is warm by then.
plan "$RATE" 3 >"$OUT/warmup.yaml"
"$TARGET_DIR/release/harness" chaos --quiet --out "$OUT/report-warmup" "$OUT/warmup.yaml" >/dev/null 2>&1 || true

echo "harness: $RATE req/s for ${DURATION}s" >&2
h_cpu=$(cpu_of "$OUT/harness" "$TARGET_DIR/release/harness" chaos --quiet --out "$OUT/report" "$OUT/plan.yaml")
read -r h_logical h_lag_p50 h_lag_p99 h_p50 h_p99 < <(figures "$OUT/report/report.json")

# The same with a worker thread per core (`--threads $(nproc)`), the default of a plan
# whose peak attempt rate is beyond one worker's (cli/runtime.rs), to show what the
# default's one worker spares.
echo "harness --threads $(nproc): $RATE req/s for ${DURATION}s" >&2
one_cpu=$(cpu_of "$OUT/harness-one" "$TARGET_DIR/release/harness" chaos --quiet --threads "$(nproc)" --out "$OUT/report-one" "$OUT/plan.yaml")
read -r one_logical one_lag_p50 one_lag_p99 one_p50 one_p99 < <(figures "$OUT/report-one/report.json")

# A retrying policy against a route that fails half of the time (on a second
# fault-server, which the harness scripts with the plan's faults): first attempts, backoff
# draws, retries and give-ups all go through the policy core.
"$TARGET_DIR/release/fault-server" --listen "127.0.0.1:$FLAKY_PORT" 2>/dev/null &
PIDS+=($!)
wait_for_port "$FLAKY_PORT"
cat >"$OUT/retrying.yaml" <<PLAN
name: bench-retrying
duration: ${DURATION}s
drain: 2s
target: { url: "http://127.0.0.1:$FLAKY_PORT" }
load:
  rate: $RATE
  arrivals: uniform
  max_in_flight: 100000
  $CONNECTIONS_KEY
  requests: [ { name: read, path: /flaky/1 } ]
faults:
  - name: flaky
    match: { path: /flaky }
    probability: 0.5
    respond: [ { status: 503 } ]
policies:
  - name: retrying
    max_attempts: 3
    attempt_timeout: 1s
    backoff: { exponential: { base: 5ms, multiplier: 2, cap: 50ms }, jitter: full }
PLAN
echo "harness, retrying policy against a flaky route: $RATE req/s for ${DURATION}s" >&2
r_cpu=$(cpu_of "$OUT/retrying" "$TARGET_DIR/release/harness" chaos --quiet --out "$OUT/report-retrying" "$OUT/retrying.yaml")
read -r r_logical r_lag_p50 r_lag_p99 r_p50 r_p99 r_attempts r_success < <(figures "$OUT/report-retrying/report.json" attempts success_rate)

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
read -r t_logical t_lag_p50 t_lag_p99 t_p50 t_p99 t_spans t_dropped < <(figures "$OUT/report-traced/report.json" telemetry.spans_exported telemetry.spans_dropped)

echo "oha: $RATE req/s for ${DURATION}s" >&2
o_cpu=$(cpu_of "$OUT/oha" oha --no-tui --output-format json -q "$RATE" -z "${DURATION}s" -c "$TOOL_CONNECTIONS" --latency-correction "$URL")
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
per_worker=$(awk -v r="$RATE" -v c="$TOOL_CONNECTIONS" 'BEGIN { printf "%.0f", r / c }')
y_cpu=$(cpu_of "$OUT/hey" hey -z "${DURATION}s" -c "$TOOL_CONNECTIONS" -q "$per_worker" "$URL")
y_count=$(awk '/\[200\]/ { print $2 }' "$OUT/hey.out")
y_p50=$(awk '/ 50% in / { print $3 * 1000 }' "$OUT/hey.out")
y_p99=$(awk '/ 99% in / { print $3 * 1000 }' "$OUT/hey.out")

row() { # name cpu count p50 p99 lag50 lag99
    awk -v n="$1" -v cpu="$2" -v c="$3" -v d="$DURATION" -v r="$RATE" -v p50="$4" -v p99="$5" -v l50="$6" -v l99="$7" 'BEGIN {
        printf "%-9s %10.2f %12.1f %9.2f%% %9.2f %9.2f %9s %9s\n", n, cpu / c * 100000, c / d, (c / d - r) / r * 100, p50, p99, l50, l99 }'
}
echo
echo "target $RATE req/s for ${DURATION}s, $TOOL_CONNECTIONS connections for oha/hey, $(nproc) cores, faultless fault-server"
printf "%-9s %10s %12s %10s %9s %9s %9s %9s\n" tool "cpu-s/100k" "achieved/s" "rate err" "p50 ms" "p99 ms" "lag p50" "lag p99"
row harness "$h_cpu" "$h_logical" "$h_p50" "$h_p99" "$h_lag_p50" "$h_lag_p99"
row "all cores" "$one_cpu" "$one_logical" "$one_p50" "$one_p99" "$one_lag_p50" "$one_lag_p99"
row retrying "$r_cpu" "$r_logical" "$r_p50" "$r_p99" "$r_lag_p50" "$r_lag_p99"
row traced "$t_cpu" "$t_logical" "$t_p50" "$t_p99" "$t_lag_p50" "$t_lag_p99"
row oha "$o_cpu" "$o_count" "$o_p50" "$o_p99" "–" "–"
row hey "$y_cpu" "$y_count" "$y_p50" "$y_p99" "–" "–"
echo
awk -v a="$r_attempts" -v l="$r_logical" -v s="$r_success" -v cpu="$r_cpu" 'BEGIN {
    printf "retrying: %d attempts for %d logical requests (%.2f each), success rate %.3f; %.2f cpu-s per 100k attempts\n", a, l, a / l, s, cpu / a * 100000 }'
echo "traced: the harness exporting every logical request as a trace ($t_spans spans exported, $t_dropped dropped) to bench/otlp-sink.py"
awk -v a="$h_cpu" -v b="$t_cpu" 'BEGIN { printf "tracing costs %.2fx the CPU of the untraced run\n", b / a }'
awk -v h="$h_cpu" -v hc="$h_logical" -v t="$one_cpu" -v tc="$one_logical" -v o="$o_cpu" -v oc="$o_count" 'BEGIN {
    printf "harness over oha, cpu per request: %.2fx (goal <= 1); with a worker per core: %.2fx\n", (h / hc) / (o / oc), (t / tc) / (o / oc) }'

fi

# The ceiling: the highest rate the harness holds with arrival lag p99 <= 1 ms and
# nothing dropped, the fault-server sharing the machine.
if [ -n "$CEILING" ]; then
    echo
    echo "ceiling: the plain plan for ${CEILING_DURATION}s at each rate, until two in a row miss (lag p99 > 1 ms or drops)"
    printf "%-8s %12s %9s %9s %9s %10s %10s %10s %9s\n" rate "achieved/s" dropped "lag p50" "lag p99" "cpu-s/100k" "p99 ms" "wait p99" connects
    best=none
    misses=0
    for rate in $CEILING; do
        plan "$rate" "$CEILING_DURATION" >"$OUT/ceiling-$rate.yaml"
        c_cpu=$(cpu_of "$OUT/ceiling-$rate" "$TARGET_DIR/release/harness" chaos --quiet --out "$OUT/report-ceiling-$rate" "$OUT/ceiling-$rate.yaml")
        read -r c_logical c_dropped c_lag_p50 c_lag_p99 c_p99 c_wait99 c_connects < <(python3 - "$OUT/report-ceiling-$rate/report.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))["policies"][0]
w = (p.get("connection_wait") or {}).get("wait_ms", {}).get("p99", 0)
o = (p.get("connections_opened") or {}).get("total", 0)
print(p["logical"], p["dropped"], p["arrival_lag_ms"]["p50"], p["arrival_lag_ms"]["p99"], p["latency_ms"]["p99"], w, o)
PY
)
        awk -v r="$rate" -v l="$c_logical" -v d="$c_dropped" -v l50="$c_lag_p50" -v l99="$c_lag_p99" -v cpu="$c_cpu" -v s="$CEILING_DURATION" -v p99="$c_p99" -v w99="$c_wait99" -v o="$c_connects" 'BEGIN {
            printf "%-8d %12.1f %9d %9.3f %9.3f %10.2f %10.2f %10.2f %9d\n", r, l / s, d, l50, l99, cpu / l * 100000, p99, w99, o }'
        if awk -v d="$c_dropped" -v l99="$c_lag_p99" 'BEGIN { exit !(d == 0 && l99 <= 1.0) }'; then
            best=$rate
            misses=0
        else
            # One stall of this shared VM can fail a rate the engine holds; two misses in
            # a row end the search.
            misses=$((misses + 1))
            [ "$misses" -ge 2 ] && break
        fi
    done
    echo "highest rate with arrival lag p99 <= 1 ms and nothing dropped: $best req/s (goal: 40000)"
fi
