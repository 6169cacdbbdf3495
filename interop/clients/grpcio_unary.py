#!/usr/bin/env python3
"""grpcio's own retries (the C core, grpc-core), unchanged: CALLS unary calls of
/chaos.Demo/Get, one after another on one insecure channel, each printed as one line, then
the whole run as one JSON line.

What it exercises: the retry policy and retry throttling of a service config (gRFC A6),
given as the channel's default service config (`grpc.service_config`, with
`grpc.enable_retries` 1), and nothing else of the client's own:

- the method's `retryPolicy`: `maxAttempts` (capped at 5 by the client), the backoff
  `random(0, min(initialBackoff * backoffMultiplier ** (n - 1), maxBackoff))`, the
  `retryableStatusCodes`; a server's `grpc-retry-pushback-ms` replaces the backoff (a
  negative or malformed one ends the call's retries);
- the top-level `retryThrottling`: one token bucket per process and server name
  (grpc-core's `ServerRetryThrottleMap`), shared by every channel to that server. So a
  run's count depends on everything the process sent before: one case, one process.

The request is raw bytes (no generated stubs, no protobuf: `request_serializer=None`), the
answer is not parsed. Every call carries the metadata `x-request-id: grpcio-<pid>-<n>`;
metadata belongs to the call, so grpc-core sends the same value on every attempt, and the
fault-server's ledger groups the attempts of one call by it (retries carry
`grpc-previous-rpc-attempts` too). grpcio does not say how many attempts a call made, so
each line says `attempts=?` and the server's ledger counts them.

Output (stdout): `call N: ok|error CODE attempts=?` per call, then one line of JSON,
`{"client": "grpcio", "version": ..., "calls": K, "codes": ["UNAVAILABLE", ...],
"attempts": null, "service_config": {...}}`.

Usage: grpcio_unary.py --target HOST:PORT [--calls K] [--service-config FILE]
                       [--method /chaos.Demo/Get] [--timeout SECONDS]
--target defaults to $CHAOS_TARGET_URL without its http://. Exits 0 whatever the calls'
outcomes, 2 on a bad command line.
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default=os.environ.get("CHAOS_TARGET_URL", ""),
                        help="host:port (an http:// URL's scheme and path are dropped)")
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--service-config", type=Path,
                        default=Path(__file__).resolve().parent.parent / "grpc" / "service-config.json")
    parser.add_argument("--method", default="/chaos.Demo/Get")
    parser.add_argument("--timeout", type=float, default=5.0,
                        help="each call's deadline in seconds, all its attempts included")
    parser.add_argument("--pause", type=float, default=0.0,
                        help="seconds between the end of a call and the next")
    args = parser.parse_args()
    target = args.target.removeprefix("http://").split("/", 1)[0]
    if not target:
        parser.error("no target: pass --target HOST:PORT or set CHAOS_TARGET_URL")
    config = json.loads(args.service_config.read_text())

    import grpc

    print(f"# grpcio {grpc.__version__}, {target}, {args.method}, service config "
          f"{args.service_config}", file=sys.stderr)
    options = [
        ("grpc.enable_retries", 1),
        ("grpc.service_config", json.dumps(config)),
    ]
    codes = []
    with grpc.insecure_channel(target, options=options) as channel:
        call = channel.unary_unary(args.method, request_serializer=None,
                                   response_deserializer=None)
        for n in range(1, args.calls + 1):
            metadata = (("x-request-id", f"grpcio-{os.getpid()}-{n}"),)
            try:
                call(b"chaos", timeout=args.timeout, metadata=metadata)
                code, outcome = "OK", "ok OK"
            except grpc.RpcError as e:
                code = e.code().name
                outcome = f"error {code}"
            codes.append(code)
            print(f"call {n}: {outcome} attempts=?", flush=True)
            if args.pause:
                time.sleep(args.pause)
    print(json.dumps({
        "client": "grpcio",
        "version": grpc.__version__,
        "target": target,
        "method": args.method,
        "calls": args.calls,
        "codes": codes,
        "attempts": None,  # not exposed by grpcio: the server counts them
        "service_config": config,
    }), flush=True)


if __name__ == "__main__":
    main()
