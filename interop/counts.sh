#!/usr/bin/env bash
# Exact retry counts, a real client against the harness's model of it (issue 29): each
# client goes through a total outage on a fault-server of its own here, its attempts
# counted by the server's ledger, and the harness goes through the same outage on the same
# server; the two counts must be equal. The expected number is the real client's, measured
# in the run, not written down.
#
#   bash interop/counts.sh              # every case, about a minute once built (just interop-counts)
#   bash interop/counts.sh aws          # only the cases whose names contain these words
#   SKIP_BUILD=1 KEEP=1 bash interop/counts.sh
#
# aws-standard       botocore 1.43, retry_mode standard, 5 S3 GetObject calls in a row,
#                    every attempt a 503 (plans/clients/outage.yaml as the server's script);
#                    then `harness chaos interop/aws/plan-aws-standard.yaml` (the shipped
#                    aws-standard preset, 5 calls in a row) against the same server.
#                    3 attempts a call: 15.
# aws-standard-2026  the same with AWS_NEW_RETRIES_2026=true and 40 calls, against the
#                    aws-standard-2026 preset (interop/aws/plan-aws-standard-2026.yaml):
#                    the retry quota (500, 14 a retry) pays 35 retries, so 75.
# grpc               interop/grpc.sh: grpcio with a service config (A6 throttling) against
#                    `{ grpc: unavailable }`, K + 4, and the harness with it imported.
#
# Each check, for each case: the ledger's logical requests are the client's calls; the
# attempts the client counted itself (botocore's RetryAttempts + 1 per call) are the
# ledger's; the harness's report has the same logical requests, and its attempts and its
# ledger's are the client's. Installs what interop/run.sh installs (interop/lib.sh).
# Exit 0 when every count holds, 1 on a mismatch, 2 when something could not be set up.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never
SAY_AS="interop/counts.sh"
source interop/lib.sh

TARGET_DIR=${CARGO_TARGET_DIR:-target}
FAULT_SERVER="$TARGET_DIR/release/fault-server"
HARNESS="$TARGET_DIR/release/harness"
only=("$@")
failed=()
ran=0
wanted() {
  [[ ${#only[@]} -eq 0 ]] && return 0
  local w
  for w in "${only[@]}"; do [[ $1 == *"$w"* ]] && return 0; done
  return 1
}

interop_python
python3 -c 'import botocore, grpc; print("interop/counts.sh: botocore", botocore.__version__, "grpcio", grpc.__version__)'
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

# aws_case NAME CALLS PLAN [env's arguments: -u NAME, NAME=VALUE]: botocore, then the harness, same server.
aws_case() {
  local name=$1 calls=$2 plan=$3; shift 3
  wanted "$name" || return 0
  ran=$((ran + 1))
  local dir="$WORK/$name" problems=()
  mkdir -p "$dir"
  # botocore: its own count (RetryAttempts + 1 per call) and the ledger's.
  fs_reset
  env "$@" python3 interop/clients/botocore_standard.py "$FS_URL" --calls "$calls" \
    >"$dir/botocore.out" 2>"$dir/botocore.err" || problems+=("botocore_standard.py exited $?: $(tail -n 5 "$dir/botocore.err")")
  sleep 0.2   # the last answer is written before the ledger counts its outcome
  fs_ledger >"$dir/ledger.json"
  local n logical counted lines
  n=$(json "$dir/ledger.json" 'j["attempts"]')
  logical=$(json "$dir/ledger.json" 'j["logical"]')
  read -r lines counted < <(python3 -c '
import re, sys
counts = [m.group(1) for m in (re.match(r"^call \d+: .*\battempts=(\d+|\?)\s*$", l)
          for l in open(sys.argv[1])) if m]
print(len(counts), sum(int(c) for c in counts) if all(c.isdigit() for c in counts) else "?")' "$dir/botocore.out")
  say "$name: botocore, $calls calls: ledger $n attempts, $logical logical requests; botocore counted $counted"
  [[ $lines == "$calls" ]] || problems+=("botocore printed $lines calls, not $calls")
  [[ $logical == "$calls" ]] || problems+=("the ledger counts $logical logical requests, botocore made $calls calls")
  [[ $counted == "$n" ]] || problems+=("botocore counted $counted attempts, the ledger $n")
  [[ $n -gt $calls ]] || problems+=("botocore made $n attempts for $calls calls: no retry in an outage")

  # The harness, the plan aimed at this server.
  sed "s|http://127.0.0.1:18491|$FS_URL|" "$plan" >"$dir/plan.yaml"
  grep -q "$FS_URL" "$dir/plan.yaml" || { say "$plan has no target to rewrite" >&2; exit 2; }
  fs_reset
  local rc=0
  "$HARNESS" chaos --quiet --out "$dir/report" "$dir/plan.yaml" 2>"$dir/harness.log" || rc=$?
  local r="$dir/report/report.json"
  if [[ ! -s $r ]]; then
    problems+=("harness chaos exited $rc without a report: $(tail -n 20 "$dir/harness.log")")
  else
    local h_logical h_attempts h_ledger h_preset
    h_logical=$(json "$r" 'j["policies"][0]["logical"]')
    h_attempts=$(json "$r" 'j["policies"][0]["attempts"]')
    h_ledger=$(json "$r" '(j["policies"][0].get("ledger") or {}).get("attempts")')
    h_preset=$(json "$r" 'j["policies"][0].get("preset")')
    say "$name: harness ($h_preset), $h_logical calls: $h_attempts attempts (ledger $h_ledger), exit $rc"
    [[ $h_logical == "$calls" ]] || problems+=("the harness sent $h_logical logical requests, botocore $calls")
    [[ $h_attempts == "$n" ]] || problems+=("the harness ($h_preset) sent $h_attempts attempts, botocore $n")
    [[ $h_ledger == "$h_attempts" ]] || problems+=("the ledger counts $h_ledger of the harness's attempts, the report $h_attempts")
    [[ $rc == 0 ]] || problems+=("harness chaos exited $rc")
  fi
  if [[ ${#problems[@]} -eq 0 ]]; then
    say "ok: $name: botocore $n attempts = harness $h_attempts"
  else
    local p
    for p in "${problems[@]}"; do say "FAIL $name: $p" >&2; done
    failed+=("$name")
  fi
}

if wanted aws-standard || wanted aws-standard-2026; then
  fs_start plans/clients/outage.yaml --judge || exit 2
  say "fault-server at $FS_URL (plans/clients/outage.yaml, --judge: botocore's attempts grouped by amz-sdk-invocation-id)"
  aws_case aws-standard 5 interop/aws/plan-aws-standard.yaml -u AWS_NEW_RETRIES_2026
  aws_case aws-standard-2026 40 interop/aws/plan-aws-standard-2026.yaml AWS_NEW_RETRIES_2026=true
  fs_stop
fi

if wanted grpc; then
  ran=$((ran + 1))
  SKIP_BUILD=1 bash interop/grpc.sh || failed+=(grpc)
fi

if [[ $ran -eq 0 ]]; then
  say "no case matched: $*" >&2
  exit 2
fi
if [[ ${#failed[@]} -gt 0 ]]; then
  say "FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "interop counts: $ran passed, 0 failed"
