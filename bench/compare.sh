#!/usr/bin/env bash
# Two builds of this project against each other, in one run, rounds alternating so that
# a busy machine slows both alike: the ratio new / old of
# - the simulator's wall time for bench/sim-outage.yaml (6.1 million logical requests);
# - the live engine's CPU (user + system) driving RATE req/s for DURATION s through a
#   policy without retries at a faultless fault-server of the same build;
# - that fault-server's CPU for the same load.
# Medians of ROUNDS rounds. Ratios above 1 are slower.
#
#   OLD=/path/to/old/target/release NEW=target/release bench/compare.sh
#   ROUNDS=5 RATE=5000 DURATION=10 OLD=... bench/compare.sh
#
# Build the old one in a worktree: `git worktree add --detach ../old REV && (cd ../old &&
# cargo build --release -p harness -p fault-server)`, then OLD=../old/target/release.
set -euo pipefail
cd "$(dirname "$0")/.."

OLD=${OLD:?OLD=the target/release directory of the build to compare against}
NEW=${NEW:-target/release}
ROUNDS=${ROUNDS:-3}
RATE=${RATE:-5000}
DURATION=${DURATION:-10}
PORT=${PORT:-18190}
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"

if [ ! -x /usr/bin/time ]; then
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get install -y -qq time >/dev/null
fi
for build in "$OLD" "$NEW"; do
    for bin in harness fault-server; do
        [ -x "$build/$bin" ] || { echo "no $build/$bin: build it with --release" >&2; exit 2; }
    done
done

cat >"$OUT/plan.yaml" <<PLAN
name: compare
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

. bench/lib.sh
# CPU seconds (user + system) a process has used so far.
cpu_of_pid() {
    awk -v hz="$(getconf CLK_TCK)" '{ printf "%.3f", ($14 + $15) / hz }' "/proc/$1/stat"
}

sim_s() {
    /usr/bin/time -f "%e" -o "$OUT/time" "$1/harness" simulate bench/sim-outage.yaml \
        --quiet --out "$OUT/sim" >/dev/null 2>&1 || true
    cat "$OUT/time"
}

# Prints "harness-cpu server-cpu" for one live run of build $1.
live_cpu() {
    "$1/fault-server" --listen "127.0.0.1:$PORT" 2>/dev/null &
    local server=$!
    wait_for_port "$PORT"
    local before
    before=$(cpu_of_pid "$server")
    /usr/bin/time -f "%U %S" -o "$OUT/time" "$1/harness" chaos --quiet --out "$OUT/live" \
        "$OUT/plan.yaml" >/dev/null 2>&1 || true
    local after
    after=$(cpu_of_pid "$server")
    kill "$server"
    wait "$server" 2>/dev/null || true
    awk -v b="$before" -v a="$after" '{ printf "%.3f %.3f\n", $1 + $2, a - b }' "$OUT/time"
}

median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

: >"$OUT/rows"
for round in $(seq 1 "$ROUNDS"); do
    for side in old new; do
        build=$OLD
        [ "$side" = new ] && build=$NEW
        sim=$(sim_s "$build")
        read -r harness server < <(live_cpu "$build")
        echo "$side $sim $harness $server" | tee -a "$OUT/rows" >&2
    done
done

echo "medians of $ROUNDS rounds (old, new, new/old):"
for col in 2 3 4; do
    name=$(case $col in 2) echo "simulate bench/sim-outage.yaml, wall s" ;; 3) echo "harness CPU s at $RATE req/s x ${DURATION}s" ;; 4) echo "fault-server CPU s, same load" ;; esac)
    old=$(awk -v c="$col" '$1 == "old" { print $c }' "$OUT/rows" | median)
    new=$(awk -v c="$col" '$1 == "new" { print $c }' "$OUT/rows" | median)
    awk -v n="$name" -v o="$old" -v w="$new" 'BEGIN { printf "  %-45s %8.3f %8.3f %6.3f\n", n, o, w, (o > 0 ? w / o : 0) }'
done
