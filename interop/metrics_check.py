"""A live fault-server's /metrics, parsed by the Prometheus project's own parsers
(prometheus_client): the classic text (format 0.0.4) and, asked for with `Accept`,
OpenMetrics 1.0, whose parser is strict (it refuses a counter family named `_total`, a
missing `# EOF`, a sample outside its family). Then what they read must be what the
server counted. Run by interop/metrics.sh with the server's URL."""

import sys
import urllib.request

from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families as text_families

url = sys.argv[1].rstrip("/") + "/metrics"


def scrape(accept):
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.headers.get("content-type", ""), response.read().decode()


def samples(families):
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in families
        for s in f.samples
    }


kind, text = scrape(None)
assert kind.startswith("text/plain; version=0.0.4"), kind
classic = list(text_families(text))
kind, om_text = scrape("application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5")
assert kind.startswith("application/openmetrics-text; version=1.0.0"), kind
strict = list(openmetrics_families(om_text))  # raises on anything invalid

# The strict parser is strict: the classic text (a counter family named `_total`, no
# `# EOF`) is not OpenMetrics, and it says so.
try:
    list(openmetrics_families(text))
    sys.exit("metrics: the OpenMetrics parser accepted the classic text: it is not strict")
except ValueError:
    pass

a, b = samples(classic), samples(strict)
types = {f.name: f.type for f in strict}
print(f"metrics: {len(classic)} families, {len(a)} samples in the text format; "
      f"{len(strict)} families, {len(b)} samples in OpenMetrics (strict parser)")
assert types.get("fault_server_requests") == "counter", types
assert types.get("fault_server_in_flight") == "gauge", types

# The traffic interop/metrics.sh sent: 20 requests, of which the script faulted 10 with 503.
requests = {k: v for k, v in b.items() if k[0] == "fault_server_requests_total"}
total = sum(requests.values())
faulted = requests.get(("fault_server_requests_total", (("code", "503"), ("outcome", "status"))), 0)
assert total == 20, requests
assert faulted == 10, requests
assert b[("fault_server_faults_total", (("kind", "status"),))] == 10, b
# Both formats carry the same samples (OpenMetrics adds none, drops none).
assert {k for k in a} == {k for k in b}, set(a) ^ set(b)
print("metrics: both parsers read 20 requests, 10 of them injected 503s, as sent")
