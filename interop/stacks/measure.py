#!/usr/bin/env python3
"""Measure nginx / HAProxy upstream retry behaviour against a scripted upstream.

Usage: python3 measure.py [--only SUBSTR ...] [--out results.md]
Needs: nginx (Debian nginx-light 1.22), haproxy (2.6) on PATH; Python 3.11 stdlib.
Each experiment starts a fresh proxy (so passive-ejection / RR state is reset),
scripts the peers, sends requests one at a time with a unique x-request-id and
records: final status, elapsed, every arrival per peer (order + gaps) and the
proxy's own log line for that request.
"""
import argparse
import http.client
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from upstream import Upstream  # noqa: E402

BASE = os.environ.get("STACKS_MEASURE_DIR", "/tmp/stacks-measure/run")
PEERS = {"A": 18001, "B": 18002, "C": 18003}
PORT_OF = {v: k for k, v in PEERS.items()}
NGX_PORT = 18080
HAP_PORT = 18090
RID = itertools.count(1)
UP = None


# ------------------------------------------------------------------ proxies
class Nginx:
    def __init__(self, servers=("A", "B", "C"), server_params="", upstream_extra="",
                 location_extra="", read_timeout="1s", connect_timeout="1s"):
        self.dir = os.path.join(BASE, "nginx")
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(self.dir + "/logs")
        if isinstance(server_params, str):
            server_params = {s: server_params for s in servers}
        srv = "\n".join(f"    server 127.0.0.1:{PEERS[s]} {server_params.get(s, '')};" for s in servers)
        self.conf = f"""worker_processes 1;
error_log {self.dir}/logs/error.log info;
pid {self.dir}/nginx.pid;
events {{ worker_connections 256; }}
http {{
  client_body_temp_path {self.dir}/cbt; proxy_temp_path {self.dir}/pt;
  fastcgi_temp_path {self.dir}/ft; uwsgi_temp_path {self.dir}/ut; scgi_temp_path {self.dir}/st;
  log_format m '$http_x_request_id|$status|$upstream_addr|$upstream_status|$upstream_response_time|$request_time';
  access_log {self.dir}/logs/access.log m;
  upstream up {{
{srv}
    {upstream_extra}
  }}
  server {{
    listen 127.0.0.1:{NGX_PORT};
    location / {{
      proxy_pass http://up;
      proxy_read_timeout {read_timeout};
      proxy_connect_timeout {connect_timeout};
      {location_extra}
    }}
  }}
}}
"""
        with open(self.dir + "/nginx.conf", "w") as f:
            f.write(self.conf)
        self.proc = subprocess.Popen(["nginx", "-p", self.dir, "-c", self.dir + "/nginx.conf",
                                      "-g", "daemon off;"], stdout=subprocess.DEVNULL,
                                     stderr=open(self.dir + "/logs/stderr", "w"))
        wait_port(NGX_PORT, self.proc)
        self.port = NGX_PORT

    def log_for(self, rid):
        time.sleep(0.02)
        try:
            for ln in open(self.dir + "/logs/access.log"):
                if ln.startswith(rid + "|"):
                    p = ln.strip().split("|")
                    return f"addr={p[2]} ust={p[3]}"
        except OSError:
            pass
        return ""

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(5)
        wait_port_free(NGX_PORT)

    def error_log(self):
        return open(self.dir + "/logs/error.log").read()


class HAProxy:
    def __init__(self, defaults_extra="", backend_extra="", server_params="",
                 timeout_server="1s", timeout_connect="500ms", servers=("A", "B", "C")):
        self.dir = os.path.join(BASE, "haproxy")
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(self.dir)
        srv = "\n".join(f"  server {s} 127.0.0.1:{PEERS[s]} {server_params}" for s in servers)
        self.conf = f"""global
  log stdout format raw local0
defaults
  mode http
  log global
  timeout client 10s
  {"timeout server " + timeout_server if timeout_server else ""}
  {"timeout connect " + timeout_connect if timeout_connect else ""}
  log-format "rid=%[capture.req.hdr(0)] srv=%s rc=%rc Tc=%Tc Tr=%Tr Ta=%Ta st=%ST ts=%tsc"
{defaults_extra}
frontend fe
  bind 127.0.0.1:{HAP_PORT}
  http-request capture req.hdr(x-request-id) len 64
  default_backend be
backend be
  balance roundrobin
{backend_extra}
{srv}
"""
        with open(self.dir + "/haproxy.cfg", "w") as f:
            f.write(self.conf)
        self.out = open(self.dir + "/out.log", "w")
        self.proc = subprocess.Popen(["haproxy", "-f", self.dir + "/haproxy.cfg", "-db"],
                                     stdout=self.out, stderr=subprocess.STDOUT)
        wait_port(HAP_PORT, self.proc, self.dir + "/out.log")
        self.port = HAP_PORT

    def log_for(self, rid):
        for _ in range(20):
            for ln in open(self.dir + "/out.log"):
                if ln.startswith(f"rid={rid} "):
                    return ln.strip()[len(f"rid={rid} "):]
            time.sleep(0.01)
        return ""

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        wait_port_free(HAP_PORT)

    def startup_output(self):
        return open(self.dir + "/out.log").read()


def wait_port(port, proc, logf=None):
    import socket
    for _ in range(300):
        if proc.poll() is not None:
            raise RuntimeError(f"proxy exited rc={proc.returncode}: "
                               + (open(logf).read() if logf else ""))
        try:
            socket.create_connection(("127.0.0.1", port), 0.1).close()
            return
        except OSError:
            time.sleep(0.02)
    raise RuntimeError("proxy did not listen")


def wait_port_free(port):
    import socket
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), 0.1).close()
            time.sleep(0.02)
        except OSError:
            return


# ------------------------------------------------------------------ client
def send(proxy, method="GET", body_len=None, timeout=30):
    rid = f"r{next(RID):05d}"
    body = None
    if method in ("POST", "PUT", "PATCH") and body_len is None:
        body_len = 11
    if body_len:
        body = b"x" * body_len
    c = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=timeout)
    t0 = time.monotonic()
    try:
        c.request(method, f"/p/{rid}", body=body, headers={"x-request-id": rid})
        r = c.getresponse()
        r.read()
        status = r.status
    except Exception as e:  # noqa
        status = type(e).__name__
    t1 = time.monotonic()
    c.close()
    time.sleep(0.05)
    arr = sorted(UP.arrivals(rid), key=lambda a: a["t"])
    tries = []
    prev = t0
    for a in arr:
        tries.append(f"{a['peer']}:{a['action']}@+{(a['t'] - prev) * 1000:.0f}")
        prev = a["t"]
    return {"rid": rid, "method": method, "status": status, "ms": round((t1 - t0) * 1000),
            "n": len(arr), "tries": " ".join(tries) or "-", "plog": proxy.log_for(rid),
            "arrivals": arr, "t0": t0}


# ------------------------------------------------------------------ experiments
RESULTS = []   # (section, experiment, rows)
METHODS = ["GET", "PUT", "DELETE", "POST", "PATCH"]


def record(section, name, rows, note=""):
    RESULTS.append({"section": section, "name": name, "rows": rows, "note": note})
    print(f"\n### [{section}] {name} {note}")
    for r in rows:
        print(f"  {r.get('label', '')} {r['method']:6} -> {r['status']} {r['ms']}ms "
              f"n={r['n']} {r['tries']} | {r['plog']}")
    sys.stdout.flush()


def one_shot(mk, rules, methods, label=""):
    """Fresh proxy per request, so state does not leak between requests."""
    rows = []
    for m in methods:
        UP.set_rules(rules)
        p = mk()
        try:
            r = send(p, m)
        finally:
            p.stop()
        r["label"] = label
        rows.append(r)
    return rows


def seq(p, rules, methods, label=""):
    UP.set_rules(rules)
    rows = []
    for m in methods:
        r = send(p, m)
        r["label"] = label
        rows.append(r)
    return rows


FAILS = ["close", "rst", "hold", "down", 502, 503, 504, 429, 500, 404]


def all_(a):
    return {p: a for p in PEERS}


# ---------------- nginx
def ngx_defaults():
    for f in FAILS:
        record("nginx-1", f"defaults, 3 servers, all peers={f}",
               one_shot(lambda: Nginx(), all_(f), METHODS))
    for f in ["close", "rst", "hold", "down", 503]:
        record("nginx-1", f"defaults, A={f}, B,C=200",
               one_shot(lambda: Nginx(), {"A": f, "B": 200, "C": 200}, ["GET", "POST"]))
    for f in ["close", "rst", "hold", "down", 502, 503]:
        record("nginx-1", f"defaults, 1 server (A), A={f}",
               one_shot(lambda: Nginx(servers=("A",)), {"A": f}, ["GET", "POST"]))


def ngx_next_upstream():
    nu = "proxy_next_upstream error timeout http_503 http_429;"
    for f in [503, 429, 500, 502, "close"]:
        record("nginx-2", f"`{nu}` all={f}",
               one_shot(lambda: Nginx(location_extra=nu), all_(f), ["GET", "PUT", "POST", "PATCH"]))
    nu2 = "proxy_next_upstream error timeout http_500 http_502 http_503 http_504 http_429 non_idempotent;"
    for f in [503, "close", "rst"]:
        record("nginx-2", f"`{nu2}` all={f}",
               one_shot(lambda: Nginx(location_extra=nu2), all_(f), ["POST", "PATCH"]))
    for f in ["close", 503, "down", "hold"]:
        record("nginx-2", f"`proxy_next_upstream off;` all={f}",
               one_shot(lambda: Nginx(location_extra="proxy_next_upstream off;"), all_(f), ["GET"]))
    t2 = "proxy_next_upstream error timeout http_503; proxy_next_upstream_tries 2;"
    for f in ["close", 503, "hold"]:
        record("nginx-2", f"`{t2}` all={f}",
               one_shot(lambda: Nginx(location_extra=t2), all_(f), ["GET"]))
    nt = "proxy_next_upstream_timeout 1500ms;"
    record("nginx-2", f"`{nt}` read_timeout 1s, all=hold",
           one_shot(lambda: Nginx(location_extra=nt), all_("hold"), ["GET"]))
    nu5 = "proxy_next_upstream error timeout http_503;"
    for rules in [{"A": 503, "B": "close", "C": 200}, {"A": "close", "B": 503, "C": 503},
                  {"A": 503, "B": 503, "C": "close"}, {"A": 503, "B": 503, "C": "hold"},
                  {"A": "hold", "B": "rst", "C": "down"}, {"A": 503, "B": 503, "C": 500}]:
        record("nginx-2", f"`{nu5}` mixed {rules}",
               one_shot(lambda: Nginx(location_extra=nu5), rules, ["GET"]))
    nu6 = "proxy_next_upstream error timeout http_404;"
    record("nginx-2", f"`{nu6}` all=404 (403/404 retried but not counted as fail)",
           one_shot(lambda: Nginx(location_extra=nu6), all_(404), ["GET"]))


def timed_probe(p, until_s, step=0.5, method="GET"):
    """Send a request every `step` s for `until_s` seconds; rows carry +t offsets."""
    rows = []
    start = time.monotonic()
    while time.monotonic() - start < until_s:
        r = send(p, method)
        r["label"] = f"t+{r['t0'] - start:5.2f}s"
        rows.append(r)
        nxt = start + step * len(rows)
        time.sleep(max(0, nxt - time.monotonic()))
    return rows


def ngx_ejection():
    # burst of failures on all peers, then all healthy; how long does nginx answer 502 w/o trying?
    for ft in ["3s", "10s"]:
        params = "" if ft == "10s" else f"fail_timeout={ft}"
        UP.set_rules(all_("rst"))
        p = Nginx(server_params=params)
        rows = seq(p, all_("rst"), ["GET"], label="burst")
        UP.set_rules(all_(200))
        rows += timed_probe(p, 13 if ft == "10s" else 5, 0.5)
        p.stop()
        record("nginx-3", f"all peers rst once then all 200; {params or 'default max_fails=1 fail_timeout=10s'}", rows)
    # which failures count as fails? A=F, B,C=200; 7 GETs within a few seconds.
    cases = [("503, no http_503 in next_upstream", 503, ""),
             ("503, with http_503", 503, "proxy_next_upstream error timeout http_503;"),
             ("500, no http_500", 500, ""),
             ("404, with http_404", 404, "proxy_next_upstream error timeout http_404;"),
             ("404, no http_404", 404, ""),
             ("close", "close", ""), ("hold (timeout)", "hold", ""), ("down (refused)", "down", ""),
             ("rst, max_fails=0", "rst", "max_fails=0"),
             ("rst, max_fails=2", "rst", "max_fails=2")]
    for name, f, extra in cases:
        if extra.startswith("max_fails"):
            p = Nginx(server_params=extra)
        else:
            p = Nginx(location_extra=extra)
        rows = seq(p, {"A": f, "B": 200, "C": 200}, ["GET"] * 7)
        p.stop()
        record("nginx-3", f"A={name}; B,C=200; 7 consecutive GETs", rows)
    # one-server upstream never ejected
    p = Nginx(servers=("A",))
    rows = seq(p, {"A": "rst"}, ["GET"] * 3)
    rows += seq(p, {"A": 200}, ["GET"] * 2)
    p.stop()
    record("nginx-3", "1 server, rst x3 then 200 x2 (never ejected?)", rows)
    # max_fails=0, all peers fail: every request tries all
    p = Nginx(server_params="max_fails=0")
    rows = seq(p, all_("rst"), ["GET"] * 3)
    p.stop()
    record("nginx-3", "max_fails=0, all=rst, 3 GETs", rows)
    # mid-request 'no live upstreams': B,C ejected first, then A fails
    p = Nginx(location_extra="proxy_next_upstream error timeout http_503;")
    rows = seq(p, {"A": 200, "B": "rst", "C": "rst"}, ["GET"] * 3)
    rows += seq(p, {"A": "hold", "B": 200, "C": 200}, ["GET"])
    rows += seq(p, {"A": 503}, ["GET"])
    p.stop()
    record("nginx-3", "eject B,C via rst, then A=hold/503 (remaining peers ejected mid-request)", rows)


def ngx_rr():
    p = Nginx()
    rows = seq(p, all_(200), ["GET"] * 7)
    p.stop()
    record("nginx-4", "3 equal servers, all 200, 7 GETs", rows)
    p = Nginx(server_params={"A": "weight=3", "B": "weight=1", "C": "weight=1"})
    rows = seq(p, all_(200), ["GET"] * 10)
    p.stop()
    record("nginx-4", "weights A=3,B=1,C=1, 10 GETs", rows)
    p = Nginx(server_params="max_fails=0", location_extra="proxy_next_upstream error timeout http_503;")
    rows = seq(p, {"A": 503, "B": 200, "C": 200}, ["GET"] * 7)
    p.stop()
    record("nginx-4", "max_fails=0, A=503 (retried), B,C=200, 7 GETs: start peer per request", rows)
    p = Nginx(server_params="max_fails=0")
    rows = seq(p, {"A": "rst", "B": "rst", "C": 200}, ["GET"] * 6)
    p.stop()
    record("nginx-4", "max_fails=0, A,B=rst, C=200, 6 GETs", rows)
    p = Nginx(server_params={"A": "weight=3 max_fails=3", "B": "max_fails=3", "C": "max_fails=3"})
    rows = seq(p, {"A": ["rst", 200], "B": 200, "C": 200}, ["GET"] * 10)
    p.stop()
    record("nginx-4", "A weight=3 max_fails=3: one rst on A then 200; effective_weight recovery", rows)


def ngx_headers():
    UP.set_rules(all_(200))
    p = Nginx()
    rows = []
    for m in ["GET", "POST"]:
        r = send(p, m)
        rows.append(r)
    p.stop()
    for r in rows:
        a = r["arrivals"][0]
        r["tries"] = f"{a['method']} {a['path']} {a['ver']} headers={a['headers']} body={a['body_len']}"
    record("nginx-5", "request as seen by upstream", rows)
    UP.set_rules(all_(200))
    p = HAProxy()
    rows = [send(p, m) for m in ["GET", "POST"]]
    p.stop()
    for r in rows:
        a = r["arrivals"][0]
        r["tries"] = f"{a['method']} {a['path']} {a['ver']} headers={a['headers']} body={a['body_len']} conn={a['conn']}"
    record("haproxy-0", "request as seen by upstream", rows)


# ---------------- haproxy
def hap_defaults():
    for f in ["down", "close", "rst", "hold", 503]:
        record("haproxy-1", f"defaults (retries 3, retry-on conn-failure), A={f}, B,C=200",
               one_shot(lambda: HAProxy(), {"A": f, "B": 200, "C": 200}, ["GET", "POST"]))
    record("haproxy-1", "defaults, all=down",
           one_shot(lambda: HAProxy(), all_("down"), ["GET"]))
    record("haproxy-1", "defaults, no timeouts at all, A=down",
           one_shot(lambda: HAProxy(timeout_connect=None, timeout_server=None),
                    {"A": "down", "B": 200, "C": 200}, ["GET"]))
    record("haproxy-1", "defaults, timeout connect 3s, A=down (turn-around capped at 1s?)",
           one_shot(lambda: HAProxy(timeout_connect="3s"), {"A": "down", "B": 200, "C": 200}, ["GET"]))


def hap_retry_on():
    for ro in ["all-retryable-errors", "503", "empty-response response-timeout", "conn-failure 503 504"]:
        for f in ["close", "rst", "hold", 503, 500, 504]:
            for redisp in ["", "  option redispatch"]:
                record("haproxy-2", f"retry-on {ro}{'; option redispatch' if redisp else ''}; all={f}",
                       one_shot(lambda: HAProxy(defaults_extra=f"  retry-on {ro}\n{redisp}"),
                                all_(f), ["GET", "POST"]))
    # 429 accepted?
    try:
        p = HAProxy(defaults_extra="  retry-on 429")
        out = p.startup_output()
        p.stop()
        record("haproxy-2", "retry-on 429 -> accepted", [], note=out[:300])
    except RuntimeError as e:
        RESULTS.append({"section": "haproxy-2", "name": "retry-on 429 rejected", "rows": [],
                        "note": str(e).strip()[:600]})
        print("retry-on 429:", e)
    # POST body + http-buffer-request
    for hb in ["", "  option http-buffer-request"]:
        for bl in [11, 20000]:
            UP.set_rules(all_(503))
            p = HAProxy(defaults_extra=f"  retry-on 503\n  option redispatch\n{hb}")
            r = send(p, "POST", body_len=bl)
            p.stop()
            r["label"] = f"body={bl}"
            record("haproxy-2", f"retry-on 503 + redispatch{'; http-buffer-request' if hb else ''}; POST body {bl}B; all=503", [r])
    # mixed: last status answered
    for rules in [{"A": 503, "B": 503, "C": 200}, {"A": 503, "B": "close", "C": 504},
                  {"A": "rst", "B": 503, "C": 503}]:
        record("haproxy-2", f"retry-on all-retryable-errors + redispatch; mixed {rules}",
               one_shot(lambda: HAProxy(defaults_extra="  retry-on all-retryable-errors\n  option redispatch"),
                        rules, ["GET"]))


def hap_redispatch():
    for extra in ["  option redispatch", "  retries 2", "  retries 2\n  option redispatch",
                  "  retries 0", "  option redispatch 1", "  retries 5\n  option redispatch 2"]:
        for rules in [{"A": "down", "B": 200, "C": 200}, all_("down")]:
            record("haproxy-3", f"{extra.strip().replace(chr(10), '; ')}; {rules}",
                   one_shot(lambda: HAProxy(defaults_extra=extra), rules, ["GET"]))
    for extra in ["  retry-on 503", "  retry-on 503\n  option redispatch",
                  "  retry-on 503\n  retries 1\n  option redispatch"]:
        record("haproxy-3", f"{extra.strip().replace(chr(10), '; ')}; all=503",
               one_shot(lambda: HAProxy(defaults_extra=extra), all_(503), ["GET"]))
    # two backends: turn-around only on same-server retries?
    record("haproxy-3", "1 server only, A=down, defaults",
           one_shot(lambda: HAProxy(servers=("A",)), {"A": "down"}, ["GET"]))
    record("haproxy-3", "1 server only, A=down, option redispatch",
           one_shot(lambda: HAProxy(servers=("A",), defaults_extra="  option redispatch"), {"A": "down"}, ["GET"]))


def hap_timeouts_rr():
    record("haproxy-4", "timeout server 1s, all=hold, defaults",
           one_shot(lambda: HAProxy(), all_("hold"), ["GET"]))
    record("haproxy-4", "timeout connect to unroutable (10.255.255.1) -> see plog",
           [], note="skipped (no blackhole address on loopback)")
    p = HAProxy()
    rows = seq(p, all_(200), ["GET"] * 6)
    p.stop()
    record("haproxy-4", "roundrobin, all 200, 6 GETs", rows)
    p = HAProxy(defaults_extra="  retry-on 503\n  option redispatch")
    rows = seq(p, {"A": 503, "B": 200, "C": 200}, ["GET"] * 6)
    p.stop()
    record("haproxy-4", "retry-on 503 + redispatch, A=503, 6 GETs (RR start points)", rows)
    p = HAProxy(defaults_extra="  option redispatch")
    rows = seq(p, {"A": "down", "B": 200, "C": 200}, ["GET"] * 6)
    p.stop()
    record("haproxy-4", "redispatch, A=down, 6 GETs (RR start points)", rows)


def hap_ejection():
    p = HAProxy()
    rows = seq(p, {"A": "rst", "B": 200, "C": 200}, ["GET"] * 9)
    p.stop()
    record("haproxy-5", "no check: A=rst, B,C=200, 9 GETs (A never ejected?)", rows)
    p = HAProxy()
    rows = seq(p, {"A": "down", "B": 200, "C": 200}, ["GET"] * 6)
    p.stop()
    record("haproxy-5", "no check: A=down, B,C=200, 6 GETs", rows)
    p = HAProxy(server_params="observe layer4 error-limit 1 on-error mark-down")
    rows = seq(p, {"A": "down", "B": 200, "C": 200}, ["GET"] * 6)
    p.stop()
    record("haproxy-5", "observe layer4 w/o check (config accepted?)", rows)


def hap_post_race():
    record("haproxy-6", "retry-on 503 (no conn-failure!), A=down, B,C=200",
           one_shot(lambda: HAProxy(defaults_extra="  retry-on 503"), {"A": "down", "B": 200, "C": 200}, ["GET"]))
    record("haproxy-6", "retry-on 503 + redispatch (no conn-failure!), A=down, B,C=200",
           one_shot(lambda: HAProxy(defaults_extra="  retry-on 503\n  option redispatch"),
                    {"A": "down", "B": 200, "C": 200}, ["GET"]))
    for f, ro in [(503, "503"), ("close", "empty-response")]:
        for extra in ["", "  option http-buffer-request"]:
            for m in ["POST", "PUT", "GET"]:
                p = HAProxy(defaults_extra=f"  retry-on {ro}\n  option redispatch\n{extra}")
                rows = seq(p, all_(f), [m] * 20)
                p.stop()
                dist = {}
                for r in rows:
                    dist[r["n"]] = dist.get(r["n"], 0) + 1
                rows = [{**rows[0], "label": "first of 20"}]
                record("haproxy-6", f"retry-on {ro} + redispatch{'; http-buffer-request' if extra else ''}; all={f}; "
                       f"20x {m} (11-byte body for POST/PUT)", rows,
                       note=f"attempts-per-request distribution {{attempts: count}} = {dict(sorted(dist.items()))}")


EXPERIMENTS = [("nginx-1", ngx_defaults), ("nginx-2", ngx_next_upstream), ("nginx-3", ngx_ejection),
               ("nginx-4", ngx_rr), ("nginx-5", ngx_headers), ("haproxy-1", hap_defaults),
               ("haproxy-2", hap_retry_on), ("haproxy-3", hap_redispatch),
               ("haproxy-4", hap_timeouts_rr), ("haproxy-5", hap_ejection),
               ("haproxy-6", hap_post_race)]


def write_md(path):
    out = ["# Measured proxy retry behaviour (raw)", "",
           f"nginx: `{subprocess.run(['nginx', '-v'], capture_output=True, text=True).stderr.strip()}`; "
           f"haproxy: `{subprocess.run(['haproxy', '-v'], capture_output=True, text=True).stdout.splitlines()[0]}`", "",
           "Peers A=18001 B=18002 C=18003. `tries`: peer:action@+ms since previous arrival "
           "(first: since client send). nginx: read/connect timeout 1s; HAProxy: timeout connect 500ms, "
           "server 1s. plog = proxy's own log (nginx $upstream_addr/$upstream_status; "
           "HAProxy %s %rc(retries) %Tc %Tr %Ta %ST %tsc).", ""]
    for e in RESULTS:
        out.append(f"## [{e['section']}] {e['name']}")
        if e["note"]:
            out.append("")
            out.append("```\n" + e["note"] + "\n```")
        if e["rows"]:
            out.append("")
            out.append("| # | label | method | status | ms | n | tries | proxy log |")
            out.append("|---|---|---|---|---|---|---|---|")
            for i, r in enumerate(e["rows"], 1):
                out.append(f"| {i} | {r.get('label', '')} | {r['method']} | {r['status']} | {r['ms']} | "
                           f"{r['n']} | {r['tries'].replace('|', '/')} | {r['plog'].replace('|', '/')} |")
        out.append("")
    with open(path, "w") as f:
        f.write("\n".join(out))


def main():
    global UP
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--out", default="results.md")
    a = ap.parse_args()
    UP = Upstream(PEERS).start()
    for name, fn in EXPERIMENTS:
        if a.only and not any(o in name for o in a.only):
            continue
        fn()
    write_md(a.out)
    with open(a.out.replace(".md", ".json"), "w") as f:
        json.dump([{**e, "rows": [{k: v for k, v in r.items() if k != "arrivals"} for r in e["rows"]]}
                   for e in RESULTS], f, indent=1)
    print("wrote", a.out)


if __name__ == "__main__":
    main()
