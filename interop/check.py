#!/usr/bin/env python3
"""Check one `harness client-test` report against what the program itself said.

    check.py REPORT_DIR --exit RC --expect-exit N [--passed GATE]... [--failed GATE]...

What it checks, each failure on its own line (exit 1 if any):
- the command's exit code is the expected one (0 pass, 1 a gate failed);
- report.json is a client-mode report;
- the logical requests the report counts are the calls the program made (its lines
  `call N: ...` in program.stdout);
- the attempts the report counts are the ledger's, and the attempts the program counted
  itself (`attempts=N` on each line; a library's own count: botocore's RetryAttempts, the
  JS SDK's $metadata.attempts, urllib3's retry history, curl's retry warnings) add up to
  them;
- each --passed gate passed and each --failed gate failed.
Python's standard library only.
"""

import argparse
import json
import re
import sys
from pathlib import Path

CALL = re.compile(r"^call (\d+): .*\battempts=(\d+|\?)\s*$")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("dir", type=Path)
    parser.add_argument("--exit", type=int, required=True, dest="rc")
    parser.add_argument("--expect-exit", type=int, required=True)
    parser.add_argument("--passed", action="append", default=[])
    parser.add_argument("--failed", action="append", default=[])
    args = parser.parse_args()

    problems = []
    if args.rc != args.expect_exit:
        problems.append(f"harness client-test exited {args.rc}, expected {args.expect_exit}")
    try:
        report = json.loads((args.dir / "report.json").read_text())
        stdout = (args.dir / "program.stdout").read_text()
    except (OSError, ValueError) as e:
        print(f"  FAIL {args.dir}: {e}")
        return 1

    if report.get("mode") != "client":
        problems.append(f"report.json mode is {report.get('mode')!r}, not 'client'")
    policies = report.get("policies") or [{}]
    policy = policies[0]

    calls = [CALL.match(line) for line in stdout.splitlines() if line.startswith("call ")]
    if not calls or not all(calls):
        problems.append("program.stdout has no `call N: ... attempts=N` lines, or a malformed one")
    calls = [c for c in calls if c]
    counted = [int(c.group(2)) for c in calls if c.group(2) != "?"]

    logical, attempts = policy.get("logical"), policy.get("attempts")
    ledger = policy.get("ledger") or {}
    if logical != len(calls):
        problems.append(f"the report counts {logical} logical requests, the program made {len(calls)} calls")
    if ledger.get("attempts") != attempts:
        problems.append(f"the report counts {attempts} attempts, the ledger {ledger.get('attempts')}")
    if ledger.get("logical") != logical:
        problems.append(f"the report counts {logical} logical requests, the ledger {ledger.get('logical')}")
    if len(counted) == len(calls) and sum(counted) != attempts:
        problems.append(f"the program counted {sum(counted)} attempts, the report {attempts}")

    gates = {g.get("name"): g for g in policy.get("gates", [])}
    for name, want in [(n, True) for n in args.passed] + [(n, False) for n in args.failed]:
        gate = gates.get(name)
        if gate is None:
            problems.append(f"no gate {name} in the report (it has {', '.join(gates) or 'none'})")
        elif gate.get("pass") is not want:
            state = "passed" if gate.get("pass") else "failed"
            problems.append(f"gate {name} {state}: {gate.get('detail')}")

    print(f"  {len(calls)} calls, {logical} logical requests, {attempts} attempts "
          f"(ledger {ledger.get('attempts')}, program {sum(counted)}), exit {args.rc}; gates: "
          + ", ".join(f"{n} {'pass' if g.get('pass') else 'FAIL'}" for n, g in gates.items()))
    for p in problems:
        print(f"  FAIL {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
