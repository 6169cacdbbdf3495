#!/usr/bin/env bash
# The interop step: real retry libraries nobody here wrote, each run through
# `harness client-test` with its plan in plans/clients/, and each report checked
# (interop/check.py): the program's calls are the report's logical requests, the attempts
# the program counted are the report's and the ledger's, the gates decided as expected.
#
#   bash interop/run.sh            # everything (just interop)
#   bash interop/run.sh curl bad   # only the cases whose names contain these words
#
# Installs what it needs: botocore and urllib3 with pip into interop/.pylib (pinned in
# interop/requirements.txt; `pip install --target` needs no venv and is allowed on a
# Debian python3 that refuses system-wide installs); the AWS SDK for JavaScript v3 with
# `npm ci` into interop/node_modules when node and npm are there (skipped, saying so, when
# not); curl and pip with apt-get when missing and run as root. Reports go to
# reports/interop/<case>/ (or $INTEROP_OUT). Not here: grpcio, whose exact counts
# interop/grpc.sh checks (interop/counts.sh), and @grpc/grpc-js.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never

source interop/lib.sh

# --- tools and the Python libraries, pinned (interop/lib.sh) -------------------------
interop_python
command -v curl >/dev/null || apt_install curl
python3 -c 'import botocore, urllib3; print("interop: botocore", botocore.__version__, "urllib3", urllib3.__version__)'

# --- Node packages, pinned (optional) ------------------------------------------------
node_ok=false
if command -v node >/dev/null && command -v npm >/dev/null; then
  lockstamp=interop/node_modules/.interop-package-lock.json
  if cmp -s interop/package-lock.json "$lockstamp"; then
    node_ok=true
  elif (cd interop && npm ci --no-audit --no-fund --loglevel=error); then
    cp interop/package-lock.json "$lockstamp"
    node_ok=true
  else
    say "npm ci failed: the AWS SDK for JavaScript v3 case is skipped" >&2
  fi
  $node_ok && say "node $(node --version), @aws-sdk/client-s3 $(cd interop && node -p 'require("@aws-sdk/client-s3/package.json").version')"
else
  say "no node and npm here: the AWS SDK for JavaScript v3 case is skipped"
fi

# --- the harness ---------------------------------------------------------------------
cargo build --locked --release --quiet -p fault-server -p harness
harness="${CARGO_TARGET_DIR:-target}/release/harness"
"$harness" validate plans/clients/*.yaml

# --- the cases -----------------------------------------------------------------------
out=${INTEROP_OUT:-reports/interop}
mkdir -p "$out"
only=("$@")
failed=()
ran=0

# case NAME EXPECTED_EXIT CHECK_ARGS -- PLAN -- COMMAND...
case_() {
  local name=$1 expect=$2; shift 2
  local checks=()
  while [[ $1 != -- ]]; do checks+=("$1"); shift; done
  shift
  local plan=$1; shift 2
  if [[ ${#only[@]} -gt 0 ]]; then
    local hit=false w
    for w in "${only[@]}"; do [[ $name == *"$w"* ]] && hit=true; done
    $hit || return 0
  fi
  ran=$((ran + 1))
  local dir="$out/$name"
  rm -rf "$dir"
  say "== $name: harness client-test $plan -- $*"
  local rc=0
  "$harness" client-test "$plan" --out "$dir" --quiet -- "$@" || rc=$?
  if python3 interop/check.py "$dir" --exit "$rc" --expect-exit "$expect" "${checks[@]}"; then
    say "ok: $name"
  else
    failed+=("$name")
  fi
}

case_ botocore-standard 0 --passed backoff_within_preset \
  -- plans/clients/botocore-standard.yaml -- python3 interop/clients/botocore_standard.py --calls 6
AWS_NEW_RETRIES_2026=true case_ botocore-2026 0 --passed backoff_within_preset \
  -- plans/clients/botocore-2026.yaml -- python3 interop/clients/botocore_standard.py --calls 8
case_ urllib3 0 --passed retry_after_honoured \
  -- plans/clients/urllib3.yaml -- python3 interop/clients/urllib3_retry.py --calls 6
case_ curl 0 --passed retry_after_honoured \
  -- plans/clients/curl.yaml -- bash interop/clients/curl_retry.sh '{url}' 4
if $node_ok; then
  case_ aws-sdk-js-v3 0 --passed backoff_within_preset \
    -- plans/clients/aws-sdk-js-v3.yaml -- node interop/clients/aws_sdk_js_v3.mjs '{url}' 8
fi
case_ bad-client 1 --failed no_retry_of_permanent --failed no_retry_of_non_idempotent \
  --passed no_duplicate_side_effects \
  -- plans/clients/bad-client.yaml -- python3 interop/clients/bad_client.py --calls 8
case_ fresh-key-client 1 --failed no_retry_with_fresh_key --failed no_duplicate_side_effects \
  --passed no_retry_of_non_idempotent \
  -- plans/clients/fresh-keys.yaml -- python3 interop/clients/fresh_key_client.py --calls 20

if [[ $ran -eq 0 ]]; then
  say "no case matched: $*" >&2
  exit 2
fi
if [[ ${#failed[@]} -gt 0 ]]; then
  say "FAILED: ${failed[*]} (reports in $out/)" >&2
  exit 1
fi
say "reports in $out/"
echo "interop: $ran passed, 0 failed"
