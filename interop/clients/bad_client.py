#!/usr/bin/env python3
"""The counterexample: a client that retries what it must not. CALLS payments, one after
another, each a POST /payments without an Idempotency-Key, printed as one line.

Its retry loop (hand-written, Python's standard library only) makes the two mistakes the
harness's gates exist for:
- it retries a 400, a permanent answer that no retry can change (`no_retry_of_permanent`);
- it retries a POST without an Idempotency-Key after an answer that does not prove the
  server never ran it (`no_retry_of_non_idempotent`): a 503 may come after the charge.
At most 3 attempts, 100 ms apart. Each call's body is its own (`{"call": N, ...}`), so the
fault-server groups a call's attempts by their identical method, path and body (a guess)
and never takes the next payment for a retry. Its client-test exits 1 with those two gates
failed (interop/run.sh checks it).

Usage: bad_client.py [URL] [--calls N]
URL defaults to $CHAOS_TARGET_URL. Exits 0 whatever the calls' outcomes.
"""

import argparse
import json
import os
import time
import urllib.error
import urllib.request

RETRY_ON = {400, 503}  # the bug: 400 is permanent, and a POST without a key is not safe
MAX_ATTEMPTS = 3


def pay(url, n):
    body = json.dumps({"call": n, "amount": 5}).encode()
    for attempt in range(1, MAX_ATTEMPTS + 1):
        request = urllib.request.Request(
            f"{url.rstrip('/')}/payments", data=body, method="POST",
            headers={"content-type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return f"ok {response.status}", attempt
        except urllib.error.HTTPError as e:
            if e.code not in RETRY_ON or attempt == MAX_ATTEMPTS:
                return f"error {e.code}", attempt
        except OSError as e:
            return f"error {type(e).__name__}", attempt
        time.sleep(0.1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", nargs="?", default=os.environ.get("CHAOS_TARGET_URL"))
    parser.add_argument("--calls", type=int, default=8)
    args = parser.parse_args()
    if not args.url:
        parser.error("no URL: pass one or set CHAOS_TARGET_URL")
    for n in range(1, args.calls + 1):
        outcome, attempts = pay(args.url, n)
        print(f"call {n}: {outcome} attempts={attempts}", flush=True)


if __name__ == "__main__":
    main()
