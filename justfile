# Thin wrappers over cargo; `just --list` shows them all.

# Run every test (the same command CI runs).
test:
    cargo test --locked --workspace

# fmt, clippy and tests, as CI runs them.
ci:
    bash .ci/run

# Criterion benchmark of the policy core's decision path.
bench-policy:
    cargo bench -p chaos-policy --bench session
