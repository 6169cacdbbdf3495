"""Every shipped plan against docs/plan.schema.json, with python-jsonschema (a validator
nobody here wrote): the schema is valid draft-07, every plan validates, and plans with a
misspelt key, an unknown gate or a malformed duration do not. Run by interop/schema.sh."""

import glob
import json
import sys

import jsonschema
import yaml

schema = json.load(open("docs/plan.schema.json"))
jsonschema.Draft7Validator.check_schema(schema)
validator = jsonschema.Draft7Validator(schema)

plans = sorted(glob.glob("plans/*.yaml") + glob.glob("plans/science/*.yaml"))
plans += ["docs/plan-reference.yaml"]
failed = 0
for path in plans:
    with open(path) as f:
        plan = yaml.safe_load(f)
    errors = sorted(validator.iter_errors(plan), key=lambda e: list(e.absolute_path))
    for e in errors:
        where = "/".join(str(p) for p in e.absolute_path) or "(top)"
        print(f"schema: {path}: {where}: {e.message[:300]}", file=sys.stderr)
    failed += bool(errors)
print(f"schema: {len(plans) - failed} of {len(plans)} plans valid against docs/plan.schema.json")

# What the schema must refuse, as the harness does: each a valid plan with one mistake.
base = yaml.safe_load(open("plans/smoke.yaml"))
bad = {
    "a misspelt key (max_atempts)": lambda p: p["policies"][0].update(max_atempts=3),
    "a misspelt top-level key (fualts)": lambda p: p.update(fualts=[]),
    "an unknown gate": lambda p: p.update(gates=["no_retry_of_permanant"]),
    "a duration without a unit": lambda p: p.update(duration=10),
    "a probability above 1": lambda p: p.update(
        faults=[{"probability": 1.5, "respond": {"status": 503}}]
    ),
    "an unknown preset": lambda p: p["policies"][0].update(preset="grcp"),
    "max_connections: lots": lambda p: p["load"].update(max_connections="lots"),
}
for what, spoil in bad.items():
    plan = json.loads(json.dumps(base))
    spoil(plan)
    if validator.is_valid(plan):
        print(f"schema: a plan with {what} validates, and should not", file=sys.stderr)
        failed += 1
    else:
        print(f"schema: a plan with {what} is refused")
sys.exit(1 if failed else 0)
