#!/usr/bin/env python3
"""urllib3's `Retry`, unchanged, against the fault-server: CALLS GETs of /items/N, one
after another, each printed as one line.

The policy under test, a common one:

    Retry(total=3, backoff_factor=0.1, status_forcelist=[503],
          respect_retry_after_header=True)

- `total=3`: at most 3 retries, 4 attempts (the default is 10).
- `backoff_factor=0.1`: sleeps `0.1 * 2 ** (n - 1)` s before retry n, except that the
  first retry goes at once (`get_backoff_time` returns 0 after a single error): 0, 0.2,
  0.4 s (the default factor is 0: no backoff at all). No jitter (`backoff_jitter`
  defaults to 0), capped at 120 s (`DEFAULT_BACKOFF_MAX`).
- `status_forcelist=[503]`: retry a 503 (the default is none, but a 413, 429 or 503 that
  carries `Retry-After` is retried anyway: `RETRY_AFTER_STATUS_CODES`).
- `respect_retry_after_header=True` is the default: a `Retry-After` replaces the backoff
  (`Retry.sleep`: it sleeps what the server asked, not the larger of the two).
- `allowed_methods` keeps its default, the idempotent methods (GET, HEAD, PUT, DELETE,
  OPTIONS, TRACE): a POST is never retried on a status.

urllib3 sends nothing that names the logical request, and each call reads a path of its
own, so the fault-server groups a call's attempts by their identical method, path and body
(a guess, which the report counts as such) and never mistakes the next call for a retry.

Usage: urllib3_retry.py [URL] [--calls N]
URL defaults to $CHAOS_TARGET_URL. Exits 0 whatever the calls' outcomes.
"""

import argparse
import os
import sys

import urllib3
from urllib3.util.retry import Retry


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", nargs="?", default=os.environ.get("CHAOS_TARGET_URL"))
    parser.add_argument("--calls", type=int, default=8)
    args = parser.parse_args()
    if not args.url:
        parser.error("no URL: pass one or set CHAOS_TARGET_URL")

    retry = Retry(total=3, backoff_factor=0.1, status_forcelist=[503],
                  respect_retry_after_header=True)
    http = urllib3.PoolManager(retries=retry, timeout=urllib3.Timeout(connect=2, read=10))
    print(f"# urllib3 {urllib3.__version__}, {retry!r}", file=sys.stderr)

    for n in range(1, args.calls + 1):
        try:
            response = http.request("GET", f"{args.url.rstrip('/')}/items/{n}")
            # The retries it made are in the history of the Retry object it ended with.
            attempts = len(response.retries.history) + 1 if response.retries else 1
            outcome = f"ok {response.status}" if response.status < 400 else f"error {response.status}"
        except urllib3.exceptions.MaxRetryError as e:
            attempts, outcome = retry.total + 1, f"error {type(e.reason).__name__}"
        except urllib3.exceptions.HTTPError as e:
            attempts, outcome = "?", f"error {type(e).__name__}"
        print(f"call {n}: {outcome} attempts={attempts}", flush=True)


if __name__ == "__main__":
    main()
