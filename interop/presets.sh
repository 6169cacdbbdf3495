#!/usr/bin/env bash
# The figures of docs/research/presets.md, "Presets against their real libraries": every
# real library through the same two plans with `harness client-test`, then one table.
#   plans/clients/outage.yaml       every attempt a 503: attempts per call, backoff per attempt
#   plans/clients/retry-after.yaml  a 503 asking Retry-After 2 s, then success: the wait
#
#   bash interop/presets.sh        # about 4 minutes; reports in reports/presets/<case>/<plan>/
#
# Needs what interop/run.sh installs (run it first), and installs botocore 1.44.8 beside it
# (interop/.pylib-botocore-1.44) to show that 1.44 has only the 2026 behaviour.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ -d interop/.pylib ]] || { echo "run interop/run.sh first (it installs the libraries)" >&2; exit 2; }
pylib=$PWD/interop/.pylib
new=$PWD/interop/.pylib-botocore-1.44
if [[ ! -d $new/botocore ]]; then
  PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check \
    --no-deps --target "$new" botocore==1.44.8
fi
cargo build --locked --release --quiet -p fault-server -p harness
harness="${CARGO_TARGET_DIR:-target}/release/harness"
out=${PRESETS_OUT:-reports/presets}
rm -rf "$out"
mkdir -p "$out"

# measure NAME OUTAGE_CALLS RA_CALLS ENV... -- COMMAND... ('{calls}' is replaced)
measure() {
  local name=$1 n_outage=$2 n_ra=$3; shift 3
  local env=()
  while [[ $1 != -- ]]; do env+=("$1"); shift; done
  shift
  local plan n
  for plan in outage retry-after; do
    [[ $plan == outage ]] && n=$n_outage || n=$n_ra
    local cmd=()
    local a
    for a in "$@"; do cmd+=("${a//\{calls\}/$n}"); done
    echo "== $name, $plan: harness client-test plans/clients/$plan.yaml -- ${cmd[*]}" >&2
    env PYTHONPATH="$pylib" "${env[@]}" "$harness" client-test "plans/clients/$plan.yaml" \
      --out "$out/$name/$plan" --quiet -- "${cmd[@]}" || true
  done
}

measure botocore-1.43-standard 20 5 -- python3 interop/clients/botocore_standard.py --calls '{calls}'
measure botocore-1.43-legacy 5 5 -- python3 interop/clients/botocore_standard.py --calls '{calls}' --retry-mode legacy
measure botocore-1.43-2026 40 5 AWS_NEW_RETRIES_2026=true -- python3 interop/clients/botocore_standard.py --calls '{calls}'
measure botocore-1.43-2026-dynamodb 40 5 AWS_NEW_RETRIES_2026=true -- python3 interop/clients/botocore_standard.py --calls '{calls}' --service dynamodb
measure botocore-1.44.8 40 5 PYTHONPATH="$new:$pylib" -- python3 interop/clients/botocore_standard.py --calls '{calls}'
measure urllib3 20 5 -- python3 interop/clients/urllib3_retry.py --calls '{calls}'
measure curl 5 5 -- bash interop/clients/curl_retry.sh '{url}' '{calls}'
if [[ -d interop/node_modules ]]; then
  measure aws-sdk-js-v3-s3 40 5 -- node interop/clients/aws_sdk_js_v3.mjs '{url}' '{calls}'
  measure aws-sdk-js-v3-dynamodb 40 5 SERVICE=dynamodb -- node interop/clients/aws_sdk_js_v3.mjs '{url}' '{calls}'
fi

python3 - "$out" <<'EOF'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
print("| library | calls | attempts | most per call | retries | wait before attempt 2, 3, 4, 5 (p50 / max ms) | after Retry-After: 2 s | gates failed |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
for case in sorted(p for p in out.iterdir() if p.is_dir()):
    def load(plan):
        return json.loads((case / plan / "report.json").read_text())["policies"][0]
    o, ra = load("outage"), load("retry-after")
    lines = (case / "outage" / "program.stdout").read_text().splitlines()
    counts = [l.rsplit("attempts=", 1)[1] for l in lines if l.startswith("call ")]
    most = max((int(c) for c in counts if c.isdigit()), default=0)
    waits = ", ".join(f"{b['p50_ms']:.0f} / {b['max_ms']:.0f}" for b in o["client"]["backoff"])
    h = ra["client"]["retry_after"]
    if h["early"] == 0:
        asked = f"waited, {h['honoured']} of {h['asked']}"
    else:
        shortest = 2000 - h["worst_early_us"] / 1000
        asked = f"ignored, {h['early']} of {h['asked']} early (shortest wait {shortest:.0f} ms)"
    failed = [f"{g['name']} ({plan})" for plan, r in (("outage", o), ("retry-after", ra))
              for g in r["gates"] if not g["pass"]]
    print(f"| {case.name} | {o['logical']} | {o['attempts']} | {most} | {o['attempts'] - o['logical']} "
          f"| {waits} | {asked} | {', '.join(failed) or 'none'} |")
EOF
