#!/usr/bin/env python3
"""A stand-in OTLP/HTTP collector for benchmarks and a look at what the harness exports.

Accepts POST /v1/traces and /v1/metrics (http/protobuf) and answers 200 with an empty
export response, as a collector does. On exit (SIGINT or SIGTERM) it prints what it
received: requests and bytes per signal and, with `--decode` (needs the
`opentelemetry-proto` package: `pip install opentelemetry-proto`), spans by service and
kind, traces, and the metric names. Benchmarks run it without `--decode`, so the sink's
own CPU stays small on a shared machine.

    python3 bench/otlp-sink.py [--decode] [PORT]          # default 4318
"""
import json
import signal
import sys
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DECODE = "--decode" in sys.argv[1:]
try:
    if not DECODE:
        raise ImportError("not asked to decode")
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
    DECODE = True
except ImportError:
    DECODE = False

LOCK = threading.Lock()
STATS = {"requests": Counter(), "bytes": Counter(), "spans": Counter(), "metrics": set(), "traces": set()}
KINDS = {1: "INTERNAL", 2: "SERVER", 3: "CLIENT"}


def service_of(resource):
    for kv in resource.attributes:
        if kv.key == "service.name":
            return kv.value.string_value
    return "?"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        length = int(self.headers.get("content-length", 0))
        body = self.rfile.read(length)
        signal_name = self.path.rsplit("/", 1)[-1]
        with LOCK:
            STATS["requests"][signal_name] += 1
            STATS["bytes"][signal_name] += len(body)
        if DECODE and signal_name == "traces":
            request = ExportTraceServiceRequest.FromString(body)
            with LOCK:
                for rs in request.resource_spans:
                    service = service_of(rs.resource)
                    for ss in rs.scope_spans:
                        for span in ss.spans:
                            STATS["spans"][(service, KINDS.get(span.kind, str(span.kind)))] += 1
                            STATS["traces"].add(span.trace_id)
        elif DECODE and signal_name == "metrics":
            request = ExportMetricsServiceRequest.FromString(body)
            with LOCK:
                for rm in request.resource_metrics:
                    for sm in rm.scope_metrics:
                        for m in sm.metrics:
                            STATS["metrics"].add(m.name)
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def report(*_):
    with LOCK:
        out = {
            "requests": dict(STATS["requests"]),
            "bytes": dict(STATS["bytes"]),
        }
        if DECODE:
            out["spans"] = {f"{s} {k}": n for (s, k), n in sorted(STATS["spans"].items())}
            out["traces"] = len(STATS["traces"])
            out["metrics"] = sorted(STATS["metrics"])
    print(json.dumps(out, indent=1), flush=True)
    sys.exit(0)


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--decode"]
    port = int(args[0]) if args else 4318
    signal.signal(signal.SIGTERM, report)
    signal.signal(signal.SIGINT, report)
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    print(f"otlp-sink on http://127.0.0.1:{port} (decoding: {DECODE})", file=sys.stderr, flush=True)
    server.serve_forever()
