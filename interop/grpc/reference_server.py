#!/usr/bin/env python3
"""A reference gRPC server in a total UNAVAILABLE outage, to pin down what grpcio (the C
core) sends before the fault-server speaks gRPC: every call, any method, is answered
UNAVAILABLE, and every attempt is counted, grouped by its `x-request-id` metadata.

    reference_server.py                     # the A6 check: K = 1, 3, 10, each client in a process of its own
    reference_server.py --calls 1,2,5,20    # other Ks
    reference_server.py --pushback          # also: what grpcio does with grpc-retry-pushback-ms
    reference_server.py --serve             # just serve (prints `port N`), until Ctrl-C

Needs grpcio (interop/requirements.txt; PYTHONPATH=interop/.pylib after interop/run.sh or
interop/counts.sh installed it). Exit 0 when every count is the expected one, 1 if not.

## What A6 predicts (gRFC A6, "Throttling Retry Attempts and Hedged RPCs")

A channel to one server holds `token_count`, starting at `maxTokens`. Every failed
attempt whose status is retryable (here UNAVAILABLE; grpc-core counts it before it looks at
`maxAttempts` or a pushback) takes 1 token, down to 0; every success adds `tokenRatio`, up
to `maxTokens`. A retry may go only while `token_count > maxTokens / 2`, checked after the
failure has taken its token. With maxTokens 10, tokenRatio 0.1, maxAttempts 5, nothing
succeeding, K calls one after another:

    call 1: attempt 1 fails, 10 -> 9 > 5, retry; attempt 2, 9 -> 8, retry; attempt 3,
            8 -> 7, retry; attempt 4, 7 -> 6, retry; attempt 5, 6 -> 5: maxAttempts
            reached (and 5 > 5 is false anyway). 5 attempts, 4 of them retries.
    call 2: attempt 1 fails, 5 -> 4, not > 5: no retry. 1 attempt.
    call k > 2: tokens 3, 2, 1, 0, 0, ...: never above 5 again, 1 attempt each.

So K + 4 attempts in all, for every K >= 1: the bucket's upper half, maxTokens / 2 = 5
tokens, pays for 4 retries (the fifth failure brings it to the threshold, which does not
allow one), and the rest of the outage is one attempt per call. `a6_attempts` below is
that rule for any numbers; the check compares grpcio with it and, for the shipped config,
with K + 4.

The bucket is per process and server name in grpc-core (a `ServerRetryThrottleMap`), so a
second K in the same process would start from the tokens the first left: each K runs its
client in a process of its own.
"""

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from concurrent import futures
from pathlib import Path

import grpc

HERE = Path(__file__).resolve().parent
CLIENT = HERE.parent / "clients" / "grpcio_unary.py"
SERVICE_CONFIG = HERE / "service-config.json"


def a6_attempts(calls, max_attempts, max_tokens, token_ratio, pushback_calls=()):
    """The attempts A6 allows K calls, one after another, in a total outage of a retryable
    status. `pushback_calls`: the calls (1-based) whose every answer carries a negative
    `grpc-retry-pushback-ms` (no retry, but the failure still takes its token)."""
    max_attempts = min(max_attempts, 5)  # A6: the client caps maxAttempts at 5
    # grpc-core keeps milli-tokens, integers: the same arithmetic without float drift.
    milli, limit = int(max_tokens * 1000), int(max_tokens * 1000)
    del token_ratio  # nothing succeeds in an outage: no refill
    total = 0
    for n in range(1, calls + 1):
        attempt = 0
        while True:
            attempt += 1
            total += 1
            milli = max(0, milli - 1000)
            if milli <= limit // 2 or attempt >= max_attempts or n in pushback_calls:
                break
    return total


class Outage(grpc.GenericRpcHandler):
    """Every call UNAVAILABLE; each attempt recorded (its x-request-id, its
    grpc-previous-rpc-attempts, when it arrived)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.attempts = []
        self.pushback = None        # a grpc-retry-pushback-ms value to send, or None
        self.pushback_calls = None  # only on calls whose id ends in -N for N in this set

    def reset(self, pushback=None, pushback_calls=None):
        with self.lock:
            self.attempts = []
            self.pushback, self.pushback_calls = pushback, pushback_calls

    def service(self, handler_call_details):
        return grpc.unary_unary_rpc_method_handler(self.handle)  # raw bytes in and out

    def handle(self, request, context):
        md = dict(context.invocation_metadata())
        rid = md.get("x-request-id", "")
        with self.lock:
            self.attempts.append({
                "id": rid,
                "previous": md.get("grpc-previous-rpc-attempts"),
                "at": time.monotonic(),
            })
            pushback, only = self.pushback, self.pushback_calls
        if pushback is not None and (only is None or int(rid.rsplit("-", 1)[-1]) in only):
            context.set_trailing_metadata((("grpc-retry-pushback-ms", pushback),))
        context.abort(grpc.StatusCode.UNAVAILABLE, "reference server: total outage")

    def tally(self):
        with self.lock:
            attempts = list(self.attempts)
        per_call = {}
        for a in attempts:
            per_call.setdefault(a["id"], []).append(a)
        return attempts, per_call


def start():
    handler = Outage()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), handlers=(handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, handler, port


def run_client(port, calls, timeout=5.0):
    out = subprocess.run(
        [sys.executable, str(CLIENT), "--target", f"127.0.0.1:{port}", "--calls", str(calls),
         "--service-config", str(SERVICE_CONFIG), "--timeout", str(timeout)],
        capture_output=True, text=True, timeout=120, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def case(handler, port, calls, expected, label, **reset):
    handler.reset(**reset)
    summary = run_client(port, calls)
    time.sleep(0.1)  # the last attempt's handler has returned before the client printed
    attempts, per_call = handler.tally()
    counts = [len(tries) for tries in per_call.values()]  # in the order the calls came
    previous = sorted({a["previous"] for a in attempts if a["previous"] is not None})
    gaps = []
    for tries in per_call.values():
        gaps += [round((b["at"] - a["at"]) * 1000) for a, b in zip(tries, tries[1:])]
    ok = (len(attempts) == expected and len(per_call) == calls
          and all(c == "UNAVAILABLE" for c in summary["codes"]))
    print(json.dumps({"case": label, "calls": calls, "attempts": len(attempts),
                      "expected": expected, "logical": len(per_call), "per_call": counts,
                      "gaps_ms": gaps, "previous_rpc_attempts": previous, "codes": sorted(set(summary["codes"])),
                      "grpcio": summary["version"], "ok": ok}), flush=True)
    return ok


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", default="1,3,10", help="the Ks, comma-separated")
    parser.add_argument("--pushback", action="store_true",
                        help="also run the grpc-retry-pushback-ms cases")
    parser.add_argument("--serve", action="store_true", help="only serve, until Ctrl-C")
    args = parser.parse_args()

    server, handler, port = start()
    if args.serve:
        print(f"port {port}", flush=True)
        try:
            server.wait_for_termination()
        except KeyboardInterrupt:
            pass
        return 0

    config = json.loads(SERVICE_CONFIG.read_text())
    policy = config["methodConfig"][0]["retryPolicy"]
    throttling = config["retryThrottling"]
    numbers = (policy["maxAttempts"], throttling["maxTokens"], throttling["tokenRatio"])
    shipped = numbers == (5, 10, 0.1)
    ok = True
    for k in (int(k) for k in args.calls.split(",")):
        expected = a6_attempts(k, *numbers)
        if shipped and expected != k + 4:
            print(f"the A6 model says {expected} for K={k}, not K + 4", file=sys.stderr)
            ok = False
        ok &= case(handler, port, k, expected, "outage")
    if args.pushback:
        # A negative pushback on every answer: no call retries, each failure still takes a
        # token.
        ok &= case(handler, port, 3, a6_attempts(3, *numbers, pushback_calls={1, 2, 3}),
                   "pushback -1 on every call", pushback="-1")
        # On calls 1-3 only: they take 3 tokens without a retry, so call 4 finds 7 and
        # retries once (7 -> 6 > 5, then 6 -> 5): 3 + 2 + 1 attempts for 5 calls.
        ok &= case(handler, port, 5, a6_attempts(5, *numbers, pushback_calls={1, 2, 3}),
                   "pushback -1 on calls 1-3", pushback="-1", pushback_calls={1, 2, 3})
        # Malformed: A6 says a pushback that does not parse as a non-negative integer means
        # no retry, the same as a negative one.
        ok &= case(handler, port, 3, a6_attempts(3, *numbers, pushback_calls={1, 2, 3}),
                   "pushback 'soon' on every call", pushback="soon")
        # 300 ms: the wait before each retry is the pushback, not the backoff; the count is
        # the outage's (K + 4).
        ok &= case(handler, port, 2, a6_attempts(2, *numbers), "pushback 300 on every call",
                   pushback="300")
    server.stop(grace=None)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
