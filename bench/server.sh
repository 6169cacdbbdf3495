#!/usr/bin/env bash
# Throughput of the faultless fault-server against a bare axum hello world, measured by
# wrk on this machine in one run. The design's goal: fault-server >= 0.9 x hello world.
#
# The headline is the case the harness makes: every request with a unique x-request-id
# (the ledger tracks each), x-chaos-attempt and x-chaos-policy (bench/headers.lua), sent
# to both servers. The header-less case is measured too.
#
#   bench/server.sh                      # defaults below
#   DURATION=30s CONNECTIONS=128 bench/server.sh
#
# Then HTTP/2 (h2c, prior knowledge): the same two servers under h2load (Debian's
# nghttp2-client), H2_CLIENTS connections of H2_STREAMS concurrent streams each, with the
# harness's headers. h2load sends the same headers on every request: one x-request-id for
# all, so the ledger sees one logical request's attempts (each a known id, not a new one:
# a little cheaper than the unique ids of the wrk rows).
#
# Both servers run in release mode with the same runtime; each is measured ROUNDS times,
# alternating, after a warm-up; the medians of the rounds are compared, and every round is
# printed (the machines are shared: a round another process disturbed shows as an outlier).
set -euo pipefail

cd "$(dirname "$0")/.."

DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-2s}
THREADS=${THREADS:-1}
CONNECTIONS=${CONNECTIONS:-64}
ROUNDS=${ROUNDS:-5}
FAULT_PORT=${FAULT_PORT:-18080}
HELLO_PORT=${HELLO_PORT:-18081}
HELLO_H2_PORT=${HELLO_H2_PORT:-18082}
H2_CLIENTS=${H2_CLIENTS:-16}
H2_STREAMS=${H2_STREAMS:-32}
TARGET_DIR=${CARGO_TARGET_DIR:-target}

if ! command -v wrk >/dev/null 2>&1; then
    echo "wrk not found: installing the Debian package" >&2
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq wrk >/dev/null
fi
if ! command -v h2load >/dev/null 2>&1; then
    echo "h2load not found: installing the Debian package nghttp2-client" >&2
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq nghttp2-client >/dev/null
fi

echo "building (release)…" >&2
cargo build --release --quiet -p fault-server --bin fault-server --example hello

PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
trap cleanup EXIT

. bench/lib.sh

"$TARGET_DIR/release/fault-server" --listen "127.0.0.1:$FAULT_PORT" 2>/dev/null &
PIDS+=($!)
"$TARGET_DIR/release/examples/hello" "127.0.0.1:$HELLO_PORT" "127.0.0.1:$HELLO_H2_PORT" &
PIDS+=($!)
wait_for_port "$FAULT_PORT"
wait_for_port "$HELLO_PORT"
wait_for_port "$HELLO_H2_PORT"

# Requests/sec of one wrk run against a port, with the harness's headers or without.
measure() {
    local port=$1 duration=$2 headers=$3
    local script=()
    if [ "$headers" = yes ]; then script=(-s bench/headers.lua); fi
    wrk -t"$THREADS" -c"$CONNECTIONS" -d"$duration" "${script[@]}" "http://127.0.0.1:$port/" \
        | awk '/^Requests\/sec:/ { print $2 }'
}

measure "$FAULT_PORT" "$WARMUP" yes >/dev/null
measure "$HELLO_PORT" "$WARMUP" yes >/dev/null

median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }

for headers in yes no; do
    hellos=()
    faults=()
    for round in $(seq 1 "$ROUNDS"); do
        hello=$(measure "$HELLO_PORT" "$DURATION" "$headers")
        fault=$(measure "$FAULT_PORT" "$DURATION" "$headers")
        echo "headers $headers, round $round: hello world ${hello} req/s, fault-server ${fault} req/s" >&2
        hellos+=("$hello")
        faults+=("$fault")
    done
    med_hello=$(median "${hellos[@]}")
    med_fault=$(median "${faults[@]}")
    ratio=$(awk -v f="$med_fault" -v h="$med_hello" 'BEGIN { printf "%.3f", f / h }')
    if [ "$headers" = yes ]; then
        echo "with the harness's headers (a unique x-request-id per request): wrk -t$THREADS -c$CONNECTIONS -d$DURATION, median of $ROUNDS alternating rounds, $(nproc) cores"
    else
        echo "without headers:"
    fi
    echo "  hello world (axum):       ${med_hello} req/s"
    echo "  fault-server (faultless): ${med_fault} req/s"
    echo "  ratio: ${ratio} (goal >= 0.9)"
done

# Requests/sec of one h2load run against a port, with the harness's headers.
measure_h2() {
    local port=$1 duration=$2
    h2load -t"$THREADS" -c"$H2_CLIENTS" -m"$H2_STREAMS" -D "${duration%s}" \
        -H 'x-request-id: bench-h2' -H 'x-chaos-attempt: 1' -H 'x-chaos-policy: bench' \
        "http://127.0.0.1:$port/" \
        | awk '/^finished in/ { sub(",", "", $4); print $4 }'
}

measure_h2 "$FAULT_PORT" "$WARMUP" >/dev/null
measure_h2 "$HELLO_H2_PORT" "$WARMUP" >/dev/null
hellos=()
faults=()
for round in $(seq 1 "$ROUNDS"); do
    hello=$(measure_h2 "$HELLO_H2_PORT" "$DURATION")
    fault=$(measure_h2 "$FAULT_PORT" "$DURATION")
    echo "HTTP/2, round $round: hello world ${hello} req/s, fault-server ${fault} req/s" >&2
    hellos+=("$hello")
    faults+=("$fault")
done
med_hello=$(median "${hellos[@]}")
med_fault=$(median "${faults[@]}")
ratio=$(awk -v f="$med_fault" -v h="$med_hello" 'BEGIN { printf "%.3f", f / h }')
echo "HTTP/2 (h2c) with the harness's headers (one x-request-id for all): h2load -t$THREADS -c$H2_CLIENTS -m$H2_STREAMS -D ${DURATION%s}, median of $ROUNDS alternating rounds"
echo "  hello world (axum on hyper's http2): ${med_hello} req/s"
echo "  fault-server (faultless):            ${med_fault} req/s"
echo "  ratio: ${ratio} (goal >= 0.9)"
