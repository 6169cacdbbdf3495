#!/usr/bin/env python3
"""Scriptable multi-peer HTTP/1.x upstream for measuring proxy retry behaviour.

Python 3.11, stdlib only.  N listeners on 127.0.0.1, each answering every
request according to a per-peer rule:

  200/429/500/502/503/504/404/403/400  answer that status (Content-Length body)
  "close"   read the request, then close the connection without any response (FIN)
  "rst"     read the request, then reset the connection (SO_LINGER 0 -> RST)
  "hold"    read the request, never answer; wait until the proxy gives up (EOF)
  "down"    the listener is not running (connection refused)

A rule is either one action (applies to every request) or a list of actions
consumed one per request (the last one repeats).  Every arrival is logged:
peer, connection id, n-th request on the connection, monotonic time, method,
path, http version, x-request-id, all headers, body length; plus connection
accepts and the time the proxy closed a held connection.

Use in-process (Upstream class; measure.py does this) or standalone:
  python3 upstream.py --peers A=18001,B=18002,C=18003 --rules rules.json --log arrivals.jsonl
where rules.json is {"A": 503, "B": ["rst", 200], "C": "down"} and is re-read
on every request (a change to "down"/back is applied within 0.2 s).
"""
import asyncio
import json
import socket
import struct
import sys
import threading
import time

STATUS_TEXT = {200: "OK", 400: "Bad Request", 403: "Forbidden", 404: "Not Found",
               429: "Too Many Requests", 500: "Internal Server Error",
               502: "Bad Gateway", 503: "Service Unavailable", 504: "Gateway Timeout"}


class Upstream:
    def __init__(self, peers):
        self.peers = dict(peers)          # name -> port
        self.rules = {p: 200 for p in self.peers}
        self.log = []                     # arrivals
        self.events = []                  # accepts / proxy-closed
        self.lock = threading.Lock()
        self.loop = None
        self.servers = {}
        self.conn_seq = 0
        self._ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    # ---------------------------------------------------------- control API
    def start(self):
        self.thread.start()
        self._ready.wait()
        return self

    def _call(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def set_rules(self, rules):
        """rules: name -> action | [actions]; peers not named keep their rule."""
        with self.lock:
            for p, r in rules.items():
                self.rules[p] = list(r) if isinstance(r, list) else r
        for p in self.peers:
            want_down = self.rules[p] == "down"
            self._call(self._ensure(p, not want_down))

    def clear(self):
        with self.lock:
            self.log.clear()
            self.events.clear()

    def arrivals(self, rid=None):
        with self.lock:
            return [a for a in self.log if rid is None or a["rid"] == rid]

    # ---------------------------------------------------------- internals
    def _run(self):
        self.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self.loop)
        for p in self.peers:
            self.loop.run_until_complete(self._ensure(p, True))
        self._ready.set()
        self.loop.run_forever()

    async def _ensure(self, peer, up):
        srv = self.servers.get(peer)
        if up and srv is None:
            port = self.peers[peer]
            self.servers[peer] = await asyncio.start_server(
                lambda r, w, p=peer: self._handle(p, r, w), "127.0.0.1", port,
                reuse_address=True, backlog=128)
        elif not up and srv is not None:
            srv.close()
            await srv.wait_closed()
            del self.servers[peer]

    def _next_action(self, peer):
        with self.lock:
            r = self.rules[peer]
            if isinstance(r, list):
                a = r[0] if r else 200
                if len(r) > 1:
                    r.pop(0)
                return a
            return r

    async def _handle(self, peer, reader, writer):
        with self.lock:
            self.conn_seq += 1
            cid = self.conn_seq
            self.events.append({"ev": "accept", "peer": peer, "conn": cid, "t": time.monotonic()})
        nreq = 0
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                t = time.monotonic()
                lines = head.decode("latin-1").split("\r\n")
                method, path, ver = (lines[0].split(" ") + ["", "", ""])[:3]
                headers = []
                for ln in lines[1:]:
                    if ln and ":" in ln:
                        k, v = ln.split(":", 1)
                        headers.append((k.strip(), v.strip()))
                hd = {k.lower(): v for k, v in headers}
                body = b""
                if "content-length" in hd:
                    body = await reader.readexactly(int(hd["content-length"]))
                elif "chunked" in hd.get("transfer-encoding", "").lower():
                    while True:
                        sz = int((await reader.readline()).split(b";")[0].strip(), 16)
                        if sz == 0:
                            await reader.readuntil(b"\r\n")
                            break
                        body += await reader.readexactly(sz)
                        await reader.readexactly(2)
                nreq += 1
                action = self._next_action(peer)
                with self.lock:
                    self.log.append({"peer": peer, "conn": cid, "nreq": nreq, "t": t,
                                     "method": method, "path": path, "ver": ver,
                                     "rid": hd.get("x-request-id"), "headers": headers,
                                     "body_len": len(body), "action": action})
                if isinstance(action, int):
                    keep = ver == "HTTP/1.1" and hd.get("connection", "").lower() != "close"
                    b = f"{peer} {action}\n".encode()
                    resp = (f"HTTP/1.1 {action} {STATUS_TEXT.get(action, 'X')}\r\n"
                            f"Content-Type: text/plain\r\nContent-Length: {len(b)}\r\n"
                            f"X-Peer: {peer}\r\n"
                            + ("" if keep else "Connection: close\r\n") + "\r\n").encode() + b
                    writer.write(resp)
                    await writer.drain()
                    if not keep:
                        break
                elif action == "close":
                    break
                elif action == "rst":
                    sock = writer.get_extra_info("socket")
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    writer.transport.abort()
                    return
                elif action == "hold":
                    try:
                        await asyncio.wait_for(reader.read(), 60)
                    except Exception:
                        pass
                    with self.lock:
                        self.events.append({"ev": "proxy_closed", "peer": peer, "conn": cid,
                                            "t": time.monotonic()})
                    break
                else:
                    break
        finally:
            try:
                writer.close()
            except Exception:
                pass


def main():
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--peers", default="A=18001,B=18002,C=18003")
    ap.add_argument("--rules")
    ap.add_argument("--log", default="-")
    a = ap.parse_args()
    peers = dict((kv.split("=")[0], int(kv.split("=")[1])) for kv in a.peers.split(","))
    up = Upstream(peers).start()
    out = sys.stdout if a.log == "-" else open(a.log, "a")
    seen = 0
    last = None
    while True:
        if a.rules:
            try:
                txt = open(a.rules).read()
                if txt != last:
                    up.set_rules(json.loads(txt))
                    last = txt
            except (OSError, ValueError):
                pass
        arr = up.arrivals()
        for x in arr[seen:]:
            out.write(json.dumps(x) + "\n")
        out.flush()
        seen = len(arr)
        time.sleep(0.2)


if __name__ == "__main__":
    main()
