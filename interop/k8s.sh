#!/usr/bin/env bash
# The Kubernetes manifests of a sharded run, validated offline: `deploy/k8s/render.sh 8`
# against the API schemas kubernetes-validate ships (pinned in interop/requirements.txt),
# strictly (an unknown field fails). What a validator cannot see (the shard flags against
# `harness chaos --help`, images, ports, the Secret's key, the plan in the ConfigMap) is a
# cargo test, harness/tests/k8s.rs.
#
#   bash interop/k8s.sh        # or: just interop-k8s
set -euo pipefail
cd "$(dirname "$0")/.."
SAY_AS=k8s
source interop/lib.sh
interop_python
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
for n in 1 8; do
  bash deploy/k8s/render.sh "$n" 2026-12-07T08:00:00Z > "$WORK/shards-$n.yaml"
  python3 -m kubernetes_validate --strict "$WORK/shards-$n.yaml"
done
say "the manifests for 1 and 8 shards pass kubernetes-validate --strict"
