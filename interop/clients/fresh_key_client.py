#!/usr/bin/env python3
"""The counterexample payment APIs warn about: a client that mints a new Idempotency-Key
for every attempt. CALLS charges, one after another, each a POST /charges with the same
body (the same customer charged the same amount: a subscription's renewal), printed as
one line.

Its retry loop (Python's standard library only) retries a lost answer (the connection
closed with no response) and a 503, at most 3 attempts 100 ms apart, and sends a fresh
`Idempotency-Key` (a UUID) with each attempt. The key looks like protection and is none:
the server cannot tell the retry of a charge whose answer was lost from a new charge, and
runs it again. The fault-server groups an identical POST under a new key after a failed
answer into the call it repeats, so its client-test exits 1 with
`no_retry_with_fresh_key` and `no_duplicate_side_effects` failed (interop/run.sh checks
it); the calls are still told apart, because each call's answer was a success before the
next identical charge.

Usage: fresh_key_client.py [URL] [--calls N]
URL defaults to $CHAOS_TARGET_URL. Exits 0 whatever the calls' outcomes.
"""

import argparse
import http.client
import json
import os
import time
import urllib.error
import urllib.request
import uuid

RETRY_ON = {503}
MAX_ATTEMPTS = 3


def charge(url):
    body = json.dumps({"customer": "c-1", "amount": 5}).encode()
    for attempt in range(1, MAX_ATTEMPTS + 1):
        request = urllib.request.Request(
            f"{url.rstrip('/')}/charges", data=body, method="POST",
            # The bug: a key per attempt, where it should be one per charge.
            headers={"content-type": "application/json", "idempotency-key": str(uuid.uuid4())},
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return f"ok {response.status}", attempt
        except urllib.error.HTTPError as e:
            if e.code not in RETRY_ON or attempt == MAX_ATTEMPTS:
                return f"error {e.code}", attempt
        except (http.client.RemoteDisconnected, ConnectionError) as e:
            if attempt == MAX_ATTEMPTS:
                return f"error {type(e).__name__}", attempt
        time.sleep(0.1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", nargs="?", default=os.environ.get("CHAOS_TARGET_URL"))
    parser.add_argument("--calls", type=int, default=20)
    args = parser.parse_args()
    if not args.url:
        parser.error("no URL: pass one or set CHAOS_TARGET_URL")
    for n in range(1, args.calls + 1):
        outcome, attempts = charge(args.url)
        print(f"call {n}: {outcome} attempts={attempts}", flush=True)


if __name__ == "__main__":
    main()
