# Thin wrappers over cargo; `just --list` shows them all.

# Run a chaos plan: `just chaos plans/outage.yaml` (extra flags pass through).
chaos plan *flags:
    cargo run --release -p harness -- chaos {{plan}} {{flags}}

# The nightly regression gate: every plan with a baseline in reports/baselines/ against it.
gate:
    cargo build --locked --release -p harness
    bash .ci/nightly

# Save a plan's run as its baseline (look at the report first, then commit the file).
save-baseline name:
    cargo run --release -p harness -- chaos plans/{{name}}.yaml --save-baseline reports/baselines/{{name}}.json

# Check plans without running them.
validate +plans="plans/*.yaml":
    cargo run --release -p harness -- validate {{plans}}

# The policy presets, with their sources and caveats.
presets:
    cargo run --release -p harness -- presets

# Start the fault-server alone, scripted by a plan or script file.
serve script="plans/outage.yaml" listen="127.0.0.1:8080":
    cargo run --release -p fault-server -- --listen {{listen}} --script {{script}}

# Run every test (the same command CI runs).
test:
    cargo test --locked --workspace

# The simulator links no HTTP stack: harness and fault-server build without their default
# features, and their trees hold no hyper, axum, reqwest, exporter or tokio runtime
# (.ci/no-http, as CI runs it).
no-http:
    bash .ci/no-http

# Real clients (botocore, urllib3, curl, the AWS JS SDK, a bad client) through
# `harness client-test`, each report checked (interop/run.sh; installs the pinned libraries).
# Without cases, then the exact retry counts of interop/counts.sh (botocore, grpcio) too.
# `just interop curl bad` runs only the client-test cases whose names contain those words.
interop *cases:
    bash interop/run.sh {{cases}}
    if [ -z "{{cases}}" ]; then bash interop/counts.sh; fi

# Exact retry counts: a real client and the harness's model of it through one total outage
# on one fault-server must make as many attempts (botocore standard vs aws-standard and
# aws-standard-2026; grpcio with a service config vs the config imported, K + 4 by gRFC A6).
# interop/counts.sh; installs the pinned libraries. `just interop-counts grpc` runs one case.
interop-counts *cases:
    bash interop/counts.sh {{cases}}

# The fault proxy in front of nginx: nginx's access log holds exactly the forwarded attempts
# (interop/nginx.sh; installs nginx with apt-get if missing).
interop-proxy:
    bash interop/nginx.sh

# Real nginx and HAProxy as tiers against the harness's model of each, attempt for attempt,
# per peer and per method, then plans/stack.yaml live and simulated (interop/stacks.sh;
# installs nginx-light and haproxy with apt-get if missing). `just interop-stacks haproxy`
# runs only the cases whose names contain that word.
interop-stacks *cases:
    bash interop/stacks.sh {{cases}}

# The plan's JSON Schema against python-jsonschema: docs/plan.schema.json is valid draft-07,
# every shipped plan validates, misspelt keys do not (interop/schema.sh; installs the pins).
interop-schema:
    bash interop/schema.sh

# The fault-server's /metrics parsed by the Prometheus project's parsers: the text format
# and OpenMetrics, strictly (interop/metrics.sh; installs the pins).
interop-metrics:
    bash interop/metrics.sh

# The Kubernetes manifests of a sharded run for N shards (deploy/k8s/, docs/kubernetes.md),
# written to target/k8s/shards-N.yaml; START is the shards' common start (default: in 2 min).
k8s-render n start="":
    mkdir -p target/k8s
    bash deploy/k8s/render.sh {{n}} {{start}} > target/k8s/shards-{{n}}.yaml
    @echo "target/k8s/shards-{{n}}.yaml: kubectl -n chaos apply -f target/k8s/shards-{{n}}.yaml"

# The rendered manifests against kubernetes-validate --strict, as CI runs it.
interop-k8s:
    bash interop/k8s.sh

# report.html and sweep.html in headless chromium: no console message, every chart of
# non-zero size, a screenshot beside each (interop/browser.sh; installs chromium).
browser out="reports/browser":
    bash interop/browser.sh {{out}}

# docs/ci.md's workflow as documented, its install step (`cargo install --path`) included,
# in a temporary repository holding a plan and its baseline (harness/tests/ci_docs.rs);
# the install reuses the release build of the first line, so it only copies the binary.
ci-docs:
    cargo build --locked --release -p fault-server -p harness
    cargo test --locked --workspace --test ci_docs -- --include-ignored --nocapture

# README's example output against a live run of plans/outage.yaml: the same verdicts
# (about a minute; harness/tests/readme.rs, whose default test checks the simulation).
readme-live:
    cargo test --locked --workspace --test readme -- --include-ignored --nocapture

# fmt, clippy, tests and the smoke plan, as CI runs them.
ci:
    bash .ci/run

# The harness against oha and hey at a fixed rate (installs them if missing).
bench:
    bash bench/harness.sh

# The faultless fault-server against a bare axum hello world: HTTP/1.1 with wrk, HTTP/2
# (h2c) with h2load (installs wrk and nghttp2-client if missing).
bench-server:
    bash bench/server.sh

# The fault proxy (fault-server --upstream) against nginx's proxy_pass to the same upstream,
# with wrk (installs nginx and wrk if missing; PIN=1 WORKERS=2 ROUNDS=... pass through).
bench-proxy:
    bash bench/proxy.sh

# Criterion benchmark of the policy core's decision path.
bench-policy:
    cargo bench -p chaos-policy --bench session

# Criterion benchmark of the ledger's hot path: a new request id on a full ledger.
bench-ledger:
    cargo bench -p fault-server --bench ledger

# Criterion benchmark of `harness validate`: the 100,000-level nesting bomb, a plan with six
# mistakes, a valid plan.
bench-validate:
    cargo bench -p harness --bench validate

# Reports land in reports/compose/, written as you (your uid and gid are passed in).
# Start the compose stack (fault-server, harness, collector, Jaeger UI on :16686; docs/docker.md).
up:
    CHAOS_UID="$(id -u)" CHAOS_GID="$(id -g)" docker compose up --build

# Stop the compose stack and remove its containers and network.
down:
    docker compose down

# Every shipped plan live and simulated, side by side (minutes: the live runs take real time).
# PLANS=outage,overload narrows it.
sim-vs-live:
    cargo test --release -p harness --test faithful -- --include-ignored --nocapture

# A plan in virtual time: the same report, in well under a second (`--sweep KEY=V1,V2` too).
simulate plan *flags:
    cargo run --release -p harness -- simulate {{plan}} {{flags}}

# Tune a policy in the simulator, confirm the best live (docs/tune.md):
# `just tune plans/outage.yaml --policy jittered-budget --vary budget.ratio=0.05..0.5`
tune plan *flags:
    cargo run --release -p harness -- tune {{plan}} {{flags}}

# A plan's policy as a production config: `just export plans/outage.yaml --policy grpc --format envoy-route`
export plan *flags:
    cargo run --release -p harness -- export {{plan}} {{flags}}

# The simulator's speed (logical requests per second of wall time) and memory.
bench-sim:
    bash bench/sim.sh

# This build against another one (OLD=its target/release), rounds alternating: the
# simulator's wall time, the harness's and the fault-server's CPU at a fixed rate;
# medians and new/old ratios (bench/compare.sh).
bench-compare:
    cargo build --release --locked -p harness -p fault-server
    bash bench/compare.sh
