#!/usr/bin/env python3
"""Interop: real nginx and HAProxy as tiers, against the harness's model of them.

For each case of the table below, writes a proxy config and a plan (client -> the proxy
-> the embedded fault-server, listening as the proxy's peers), then runs the plan live
(`harness chaos`: the real binary is the tier) and simulated (`harness simulate`: the
imported model is), and checks that the two agree attempt for attempt: the client's
attempts and outcomes, the proxy tier's received / sent / retries / violations, and the
attempts the fault-server saw per peer and per method, with its resends.

    python3 interop/stacks.py HARNESS [CASE...]   # CASE: a substring of a case's name,
                                                  # or stack.yaml for the shipped plan

Then (or alone, with `stack.yaml`) the shipped plans/stack.yaml, live with the real nginx
and HAProxy and simulated, each policy within the simulator's documented tolerance
(leaf amplification within 3%, success rate within 2 points).

Requests go one at a time (arrivals far enough apart that none overlap, and a live run
in which a stalled machine made two overlap is repeated), so a proxy's round robin sees
them in the same order live and simulated; faults are drawn per
request, peer and resend, so both runs draw the same ones. Exit 0 when every case agrees,
1 on a disagreement (each printed), 2 when something could not be set up.
"""

import json
import os
import subprocess
import sys
import tempfile

NGINX = """events {{}}
http {{
    upstream app {{
{servers}
    }}
    server {{
        listen 8080;
        location / {{
            proxy_pass http://app;
            proxy_read_timeout {read_timeout};
{extra}
        }}
    }}
}}
"""

HAPROXY = """defaults
    mode http
    timeout connect 200ms
    timeout client 10s
    timeout server {read_timeout}
frontend www
    bind 127.0.0.1:8080
    default_backend app
backend app
{extra}
{servers}
"""

GET_POST = """
    - { name: read, method: GET, path: "/items/{n}", weight: 2 }
    - { name: put, method: PUT, path: "/items/{n}", body: '{"v":1}', weight: 1 }
    - { name: order, method: POST, path: /orders, body: '{"sku":"x"}', weight: 1 }"""


def case(name, kind, peers, faults, extra="", server="", read_timeout="300ms",
         rate=40, duration="1s", requests=GET_POST, relay=False):
    """`relay`: a relay tier of the harness's own (`svc`, forwarding once) between the
    proxy and the fault-server, listening as the proxy's peers."""
    return dict(name=name, kind=kind, peers=peers, faults=faults, extra=extra,
                server=server, read_timeout=read_timeout, rate=rate,
                duration=duration, requests=requests, relay=relay)


LOST = "- { name: lost, probability: 0.3, respond: { fault: close } }"
RESET = "- { name: reset, probability: 0.3, respond: { fault: reset } }"
HOLD = "- { name: hold, probability: 0.5, respond: { fault: timeout } }"
STATUS = """- { name: statuses, probability: 0.5, respond: [ { status: 503 }, { status: 429 }, { status: 502 } ] }"""
BAD_PEER = "- { name: bad-instance, peer: 2, respond: { fault: reset } }"
NO_EJECT = " max_fails=0"

CASES = [
    # nginx: `proxy_next_upstream error timeout` by default; each peer at most once.
    case("nginx defaults, lost responses, 3 peers", "nginx", 3, LOST, server=NO_EJECT),
    case("nginx defaults, resets, 1 peer (never retried)", "nginx", 1, RESET),
    case("nginx defaults, read timeouts, 3 peers", "nginx", 3, HOLD, server=NO_EJECT,
         read_timeout="100ms", rate=3, duration="3s"),
    case("nginx defaults, statuses passed on", "nginx", 3, STATUS, server=NO_EJECT),
    case("nginx http_503 http_429 retried", "nginx", 3, STATUS, server=NO_EJECT,
         extra="proxy_next_upstream error timeout http_503 http_429;"),
    case("nginx proxy_next_upstream_tries 2", "nginx", 3, LOST, server=NO_EJECT,
         extra="proxy_next_upstream_tries 2;"),
    case("nginx non_idempotent resends a POST", "nginx", 3, RESET, server=NO_EJECT,
         extra="proxy_next_upstream error timeout non_idempotent;"),
    case("nginx off", "nginx", 3, LOST, extra="proxy_next_upstream off;"),
    case("nginx resends a POST to a relay tier's peers (http_503 non_idempotent)", "nginx", 3,
         "- { name: sheds, tier: svc, probability: 0.4, respond: { status: 503 } }",
         server=NO_EJECT, relay=True,
         extra="proxy_next_upstream error timeout http_503 non_idempotent;"),
    case("nginx passive ejection of one bad instance (max_fails=1)", "nginx", 3, BAD_PEER),
    case("nginx ejects every peer after a burst, then answers 502 unsent", "nginx", 3,
         "- { name: burst, until: 150ms, respond: { fault: close } }", rate=10, duration="2s"),
    # HAProxy: `retries 3`, `retry-on conn-failure` by default; the same server unless
    # `option redispatch`.
    case("haproxy defaults, lost responses not retried", "haproxy", 3, LOST),
    case("haproxy all-retryable-errors resends a POST on its server", "haproxy", 3,
         LOST + "\n  " + STATUS.replace("0.5", "0.3"),
         extra="    retry-on all-retryable-errors\n    option http-buffer-request"),
    case("haproxy redispatch moves every retry", "haproxy", 3, BAD_PEER,
         extra="    retry-on all-retryable-errors\n    option http-buffer-request\n    option redispatch"),
    case("haproxy retries 1", "haproxy", 3, LOST,
         extra="    retries 1\n    retry-on empty-response\n    option http-buffer-request"),
    case("haproxy response-timeout", "haproxy", 3, HOLD, read_timeout="100ms", rate=2,
         duration="3s",
         extra="    retry-on response-timeout\n    option http-buffer-request\n    option redispatch"),
    case("haproxy 503 retried, 429 passed on", "haproxy", 3, STATUS,
         extra="    retry-on 503\n    option http-buffer-request"),
    case("haproxy one peer", "haproxy", 1, LOST,
         extra="    retry-on empty-response\n    option http-buffer-request"),
]


def config(c):
    if c["kind"] == "nginx":
        servers = "\n".join(f"        server 127.0.0.1:{18100 + i}{c['server']};"
                            for i in range(c["peers"]))
        extra = "\n".join("            " + line for line in c["extra"].splitlines())
        return NGINX.format(servers=servers, extra=extra, read_timeout=c["read_timeout"])
    servers = "\n".join(f"    server s{i + 1} 127.0.0.1:{18100 + i}" for i in range(c["peers"]))
    return HAPROXY.format(servers=servers, extra=c["extra"], read_timeout=c["read_timeout"])


def plan(c, config_file):
    block = "location: /" if c["kind"] == "nginx" else "backend: app"
    relay_tier = "\n  - svc" if c["relay"] else ""
    relay_policy = ", tiers: { svc: none }" if c["relay"] else ""
    return f"""name: stack-case
seed: 5
duration: {c['duration']}
drain: 2s
tiers:
  - {{ name: proxy, {c['kind']}: {{ config: {config_file}, {block} }} }}{relay_tier}
load:
  rate: {c['rate']}
  arrivals: uniform
  requests:{c['requests']}
faults:
  {c['faults']}
policies:
  - {{ name: once, max_attempts: 1, attempt_timeout: 5s{relay_policy} }}
"""


def figures(report):
    """What must agree: the client's, the proxy tier's and the server's counts."""
    p = report["policies"][0]
    t = p["tiers"][0]
    ledger = p.get("ledger") or {}
    return {
        "client attempts": p["attempts"],
        "client succeeded": p["succeeded"],
        "client failed": p["failed"],
        "client outcomes": p["outcomes"],
        "proxy received": t["received"],
        "proxy sent": t["sent"],
        "proxy retries": t["retries"],
        "proxy violations": t["violations"],
        "server attempts": ledger.get("attempts"),
        "server by peer and method": ledger.get("by_peer", {}),
        "server resends by method": ledger.get("repeats_by_method", {}),
        "every tier": [(t["name"], t["received"], t["sent"], t["retries"], t["violations"])
                       for t in p["tiers"]],
    }


def run(harness, args, out):
    done = subprocess.run([harness, *args, "--out", out, "--quiet"], capture_output=True,
                          text=True, timeout=300)
    report = os.path.join(out, "report.json")
    if not os.path.exists(report):
        print(done.stdout, done.stderr, file=sys.stderr)
        sys.exit(f"interop/stacks.py: `harness {args[0]}` wrote no report ({done.returncode})")
    with open(report) as f:
        return json.load(f)


# The simulator's documented tolerance (harness/src/simulate/mod.rs: FAITHFUL_*).
FAITHFUL_AMPLIFICATION = 0.03
FAITHFUL_SUCCESS_POINTS = 2.0


def shipped_plan(harness, work):
    """plans/stack.yaml live and simulated, each policy within the simulator's tolerance."""
    live = run(harness, ["chaos", "plans/stack.yaml"], os.path.join(work, "stack-live"))
    sim = run(harness, ["simulate", "plans/stack.yaml"], os.path.join(work, "stack-sim"))
    wrong = 0
    for lp, sp in zip(live["policies"], sim["policies"]):
        la, sa = lp["leaf_amplification"], sp["leaf_amplification"]
        ls, ss = 100 * lp["success_rate"], 100 * sp["success_rate"]
        ok = abs(la - sa) <= FAITHFUL_AMPLIFICATION * sa and abs(ls - ss) <= FAITHFUL_SUCCESS_POINTS
        hops = " / ".join(f"{t['name']} {t['sent']}" for t in lp["tiers"])
        print(f"{'agree' if ok else 'DISAGREE':8} plans/stack.yaml `{lp['name']}`: leaf amplification "
              f"live {la:.2f} / simulated {sa:.2f}, success {ls:.1f}% / {ss:.1f}% (sent: {hops})")
        wrong += not ok
    return wrong


LIVE_TRIES = 3


def run_apart(harness, c, plan_file, d):
    """The live run's figures, from a run whose requests went one at a time.

    The cases hold the proxy's round robin to the simulator's only when no request is
    still in flight when the next one is due. A stalled machine can send two at once
    (the engine is open loop: a late arrival goes late, it is not skipped), so the run
    checks it: every request finished before the next was due (latency counts from the
    scheduled time) or the run is repeated, up to LIVE_TRIES times."""
    gap_ms = 1000 / c["rate"]
    for attempt in range(1, LIVE_TRIES + 1):
        out = os.path.join(d, "live" if attempt == 1 else f"live-{attempt}")
        report = run(harness, ["chaos", plan_file], out)
        slowest = report["policies"][0]["latency_ms"]["max"]
        if slowest < gap_ms:
            return figures(report)
        print(f"rerun    {c['name']}: a request finished {slowest:.1f} ms after it was due, "
              f"the next was due {gap_ms:.1f} ms after it (try {attempt} of {LIVE_TRIES})")
    return None


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    harness, wanted = sys.argv[1], sys.argv[2:]
    cases = [c for c in CASES if not wanted or any(w in c["name"] for w in wanted)]
    disagreements = 0
    work = tempfile.mkdtemp(prefix="chaos-stacks-")
    if not wanted or "stack.yaml" in wanted:
        disagreements += shipped_plan(harness, work)
    for i, c in enumerate(cases):
        d = os.path.join(work, str(i))
        os.makedirs(d)
        name = "proxy.conf" if c["kind"] == "nginx" else "proxy.cfg"
        with open(os.path.join(d, name), "w") as f:
            f.write(config(c))
        plan_file = os.path.join(d, "plan.yaml")
        with open(plan_file, "w") as f:
            f.write(plan(c, name))
        live = run_apart(harness, c, plan_file, d)
        sim = figures(run(harness, ["simulate", plan_file], os.path.join(d, "sim")))
        wrong = {k: (live[k], sim[k]) for k in live if live[k] != sim[k]} if live else {
            "live run": ("requests overlapped on every try", "one at a time")}
        live = live or sim
        verdict = "agree" if not wrong else "DISAGREE"
        print(f"{verdict:8} {c['name']}: {live['client attempts']} client attempts, "
              f"proxy sent {live['proxy sent']} ({live['proxy retries']} retries), "
              f"violations {live['proxy violations']}, per peer {live['server by peer and method']}")
        for k, (l, s) in wrong.items():
            print(f"         {k}: live {l} / simulated {s}")
        disagreements += bool(wrong)
    print(f"{disagreements} disagreement(s) in {len(cases)} cases and the shipped plan (work in {work})")
    sys.exit(1 if disagreements else 0)


if __name__ == "__main__":
    main()
