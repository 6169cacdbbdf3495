#!/usr/bin/env bash
# The plan's JSON Schema against a validator nobody here wrote (python-jsonschema, pinned
# in interop/requirements.txt): docs/plan.schema.json is valid draft-07, every shipped plan
# validates against it, and plans with a misspelt key, an unknown gate, a duration without
# a unit (and more: interop/schema_check.py) do not. That the file is what
# `harness plan-schema --json` prints is a cargo test (harness/tests/schema.rs).
#
#   bash interop/schema.sh        # or: just interop-schema
set -euo pipefail
cd "$(dirname "$0")/.."
SAY_AS=schema
source interop/lib.sh
interop_python
python3 -c 'import jsonschema, importlib.metadata as m; print("schema: python-jsonschema", m.version("jsonschema"))'
python3 interop/schema_check.py
