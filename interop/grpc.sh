#!/usr/bin/env bash
# gRPC retry counts, real client against the harness (issue 29): grpcio (the C core) with
# the service config interop/grpc/service-config.json (retryPolicy maxAttempts 5 on
# UNAVAILABLE, retryThrottling maxTokens 10 tokenRatio 0.1) in a total UNAVAILABLE outage,
# K calls one after another on one channel, must make exactly the attempts gRFC A6 allows,
# K + 4 (the derivation: interop/grpc/reference_server.py); the harness, the same config
# imported and `protocol: grpc`, must send exactly as many against the same outage.
#
#   bash interop/grpc.sh          # about 20 s once built; KS="1 3 10" by default
#   SKIP_BUILD=1 KEEP=1 bash interop/grpc.sh
#
# 1. grpcio against grpcio's own server (interop/grpc/reference_server.py, every call
#    aborted UNAVAILABLE, every attempt counted): the count of each K, each client in a
#    process of its own (grpc-core shares the throttle per process and server name), must
#    be A6's; and `grpc-retry-pushback-ms` (negative or malformed: no retry, the token
#    still taken; 300: the wait) as A6 says. Needs no fault-server.
# 2. `fault-server --script interop/grpc/outage.yaml` (every request `{ grpc: unavailable }`)
#    on a free port; for each K, the ledger reset, grpcio run in a process of its own, the
#    ledger read: attempts == the reference count == K + 4, logical requests == K (grpcio
#    sends `x-request-id` per call, the same on each attempt).
# 3. `harness chaos interop/grpc/plan-grpc.yaml` against the same server (script: keep):
#    10 calls in a row; the report's attempts, and its ledger's, == grpcio's count for
#    K = 10 == 14.
# Exit 0 when every count holds, 1 on a mismatch, 2 when something could not be set up.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never
SAY_AS="interop/grpc.sh"
source interop/lib.sh

KS=${KS:-"1 3 10"}
HARNESS_K=10   # the plan's arrivals: interop/grpc/plan-grpc.yaml
[[ " $KS " == *" $HARNESS_K "* ]] || KS="$KS $HARNESS_K"
TARGET_DIR=${CARGO_TARGET_DIR:-target}
FAULT_SERVER="$TARGET_DIR/release/fault-server"
HARNESS="$TARGET_DIR/release/harness"
failed=0
fail() { say "FAIL: $*" >&2; failed=1; }

interop_python
python3 -c 'import grpc; print("interop/grpc.sh: grpcio", grpc.__version__)'
if [[ ${SKIP_BUILD:-0} != 1 ]]; then
  cargo build --locked --release --quiet -p fault-server -p harness
fi
[[ -x $FAULT_SERVER && -x $HARNESS ]] || { say "no binaries in $TARGET_DIR/release" >&2; exit 2; }

WORK=$(mktemp -d)
cleanup() {
  fs_stop
  if [[ ${KEEP:-0} == 1 ]]; then say "kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

# --- 1. the reference: grpcio against grpcio's own server ---------------------------
declare -A reference
python3 interop/grpc/reference_server.py --calls "${KS// /,}" --pushback >"$WORK/reference.jsonl" \
  || fail "grpcio against the reference server is not what A6 predicts: $(grep '"ok": false' "$WORK/reference.jsonl")"
while read -r k n; do reference[$k]=$n; done < <(python3 -c '
import json, sys
for line in open(sys.argv[1]):
    case = json.loads(line)
    if case["case"] == "outage":
        print(case["calls"], case["attempts"])
    else:  # the grpc-retry-pushback-ms cases: A6 model and grpcio agree, or the run failed
        print("interop/grpc.sh: reference server, %(case)s: %(per_call)s attempts per call "
              "(A6: %(expected)s in all)" % case, file=sys.stderr)' "$WORK/reference.jsonl")
for k in $KS; do
  say "reference server, K=$k: ${reference[$k]:-?} attempts (A6: $((k + 4)))"
  [[ ${reference[$k]:-} == $((k + 4)) ]] || fail "reference server, K=$k: ${reference[$k]:-no count}, A6 says $((k + 4))"
done

# --- 2. grpcio against the fault-server ----------------------------------------------
if ! fs_start interop/grpc/outage.yaml; then
  say "the fault-server did not start with interop/grpc/outage.yaml (its log above says why)" >&2
  exit 2
fi
say "fault-server at $FS_URL (interop/grpc/outage.yaml)"
target=${FS_URL#http://}
for k in $KS; do
  fs_reset
  python3 interop/clients/grpcio_unary.py --target "$target" --calls "$k" \
    --service-config interop/grpc/service-config.json >"$WORK/grpcio-$k.out" 2>"$WORK/grpcio-$k.err" \
    || { fail "grpcio_unary.py --calls $k exited $?: $(cat "$WORK/grpcio-$k.err")"; continue; }
  sleep 0.2   # the last attempt's answer is written before the ledger counts its outcome
  fs_ledger >"$WORK/ledger-$k.json"
  attempts=$(json "$WORK/ledger-$k.json" 'j["attempts"]')
  logical=$(json "$WORK/ledger-$k.json" 'j["logical"]')
  tail -n 1 "$WORK/grpcio-$k.out" >"$WORK/grpcio-$k.json"   # its last line: the run as JSON
  codes=$(json "$WORK/grpcio-$k.json" 'sorted(set(j["codes"]))')
  say "grpcio, K=$k: ledger $attempts attempts, $logical logical requests; codes $codes"
  [[ $attempts == "${reference[$k]:-}" ]] || fail "grpcio, K=$k: the ledger counts $attempts attempts, grpcio made ${reference[$k]:-?} against the reference server"
  [[ $attempts == $((k + 4)) ]] || fail "grpcio, K=$k: the ledger counts $attempts attempts, A6 says $((k + 4))"
  [[ $logical == "$k" ]] || fail "grpcio, K=$k: the ledger counts $logical logical requests, grpcio made $k calls"
  [[ $codes == "['UNAVAILABLE']" ]] || fail "grpcio, K=$k: the calls ended $codes, not all UNAVAILABLE"
done

# --- 3. the harness against the same outage ------------------------------------------
sed -e "s|http://127.0.0.1:18490|$FS_URL|" \
    -e "s|grpc_service_config: service-config.json|grpc_service_config: $PWD/interop/grpc/service-config.json|" \
    interop/grpc/plan-grpc.yaml >"$WORK/plan-grpc.yaml"
grep -q "$FS_URL" "$WORK/plan-grpc.yaml" || { say "interop/grpc/plan-grpc.yaml has no target to rewrite" >&2; exit 2; }
fs_reset
rc=0
"$HARNESS" chaos --quiet --out "$WORK/report" "$WORK/plan-grpc.yaml" 2>"$WORK/harness.log" || rc=$?
if [[ ! -s $WORK/report/report.json ]]; then
  fail "harness chaos exited $rc without a report: $(tail -n 20 "$WORK/harness.log")"
else
  r="$WORK/report/report.json"
  h_logical=$(json "$r" 'j["policies"][0]["logical"]')
  h_attempts=$(json "$r" 'j["policies"][0]["attempts"]')
  h_ledger=$(json "$r" '(j["policies"][0].get("ledger") or {}).get("attempts")')
  say "harness, K=$h_logical: $h_attempts attempts (ledger $h_ledger), exit $rc"
  [[ $h_logical == "$HARNESS_K" ]] || fail "harness: $h_logical logical requests, the plan has $HARNESS_K"
  [[ $h_attempts == "${reference[$HARNESS_K]:-}" ]] || fail "harness: $h_attempts attempts, grpcio made ${reference[$HARNESS_K]:-?} for K=$HARNESS_K"
  [[ $h_ledger == "$h_attempts" ]] || fail "harness: the ledger counts $h_ledger attempts, the report $h_attempts"
  [[ $rc == 0 ]] || fail "harness chaos exited $rc (a gate failed: $(json "$r" '[g["name"] for g in j["policies"][0]["gates"] if not g["pass"]]'))"
fi

if [[ $failed != 0 ]]; then
  say "FAILED (KEEP=1 keeps $WORK)" >&2
  exit 1
fi
say "ok: grpcio and the harness made K + 4 attempts for K in $KS"
