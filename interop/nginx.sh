#!/usr/bin/env bash
# Interop: the fault proxy in front of a real server, nginx, checked against nginx's own
# access log.
#
#   interop/nginx.sh                 # from anywhere; as root on CI (apt-get, if nginx is missing)
#   PROXY_PORT=18480 UPSTREAM_PORT=18481 KEEP=1 interop/nginx.sh
#
# 1. nginx is the upstream: `return 200` on UPSTREAM_PORT, every request it receives a line
#    of its access log (method, path, status, x-request-id, x-chaos-attempt,
#    x-chaos-policy).
# 2. `fault-server --upstream http://127.0.0.1:UPSTREAM_PORT` listens on PROXY_PORT, with
#    no script of its own.
# 3. `harness chaos plans/proxy-nginx.yaml` (its target rewritten to PROXY_PORT) scripts
#    the proxy with faults for a quarter of the attempts (503s, resets), resets its ledger
#    before each policy and reads it after, into report.json.
# 4. The checks, each one a clear failure (exit 1) when it does not hold:
#    - for each policy, the proxy's ledger saw every attempt the harness sent
#      (report attempts == ledger attempts), and every one of them either was forwarded
#      (`upstream_<code>` outcomes) or got an injected fault (`status_<code>`, `reset`):
#      forwarded + injected == attempts;
#    - nginx's access log holds exactly the forwarded attempts of each policy (its lines
#      with that x-chaos-policy), and no attempt twice: so no attempt that got an
#      injected fault reached nginx;
#    - the proxy's live ledger (GET /__chaos/ledger after the run) is the last policy's
#      in the report: the report's server-side figures are the proxy's.
#
# Needs: cargo (or prebuilt binaries in $CARGO_TARGET_DIR/release), nginx (installed with
# apt-get when missing), python3 (to read JSON). Exit 0 when every check holds, 1 on a
# mismatch, 2 when something could not be set up.
set -euo pipefail

cd "$(dirname "$0")/.."

PROXY_PORT=${PROXY_PORT:-18480}
UPSTREAM_PORT=${UPSTREAM_PORT:-18481}
TARGET_DIR=${CARGO_TARGET_DIR:-target}
PLAN=plans/proxy-nginx.yaml

fail() { echo "interop/nginx.sh: FAIL: $*" >&2; exit 1; }
broken() { echo "interop/nginx.sh: cannot run: $*" >&2; exit 2; }

install() {
    echo "$1 not found: installing the Debian package $2" >&2
    local sudo=""
    if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$2" >/dev/null
}
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
if [ ! -x "$NGINX" ]; then
    install nginx nginx-light
    NGINX=$(command -v nginx || echo /usr/sbin/nginx)
fi
[ -x "$NGINX" ] || broken "no nginx after installing it"
command -v python3 >/dev/null 2>&1 || install python3 python3-minimal

if [ "${SKIP_BUILD:-0}" != 1 ]; then
    echo "building fault-server and harness (release)…" >&2
    cargo build --locked --release --quiet -p fault-server -p harness
fi
FAULT_SERVER="$TARGET_DIR/release/fault-server"
HARNESS="$TARGET_DIR/release/harness"
[ -x "$FAULT_SERVER" ] && [ -x "$HARNESS" ] || broken "no binaries in $TARGET_DIR/release"

WORK=$(mktemp -d)
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    if [ "${KEEP:-0}" = 1 ]; then echo "kept $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

wait_for_port() {
    for _ in $(seq 1 200); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
        sleep 0.05
    done
    broken "nothing listens on 127.0.0.1:$1"
}

# 1. nginx, the upstream, logging every request it receives.
mkdir -p "$WORK/nginx"
cat >"$WORK/nginx/nginx.conf" <<EOF
worker_processes 1;
daemon off;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/error.log warn;
events { worker_connections 1024; }
http {
    log_format interop '\$request_method \$uri \$status \$http_x_request_id \$http_x_chaos_attempt \$http_x_chaos_policy';
    access_log $WORK/nginx/access.log interop;
    keepalive_requests 1000000;
    client_body_temp_path $WORK/nginx/body;
    proxy_temp_path $WORK/nginx/proxy;
    fastcgi_temp_path $WORK/nginx/fastcgi;
    uwsgi_temp_path $WORK/nginx/uwsgi;
    scgi_temp_path $WORK/nginx/scgi;
    server {
        listen 127.0.0.1:$UPSTREAM_PORT;
        location / { return 200 "ok\n"; }
    }
}
EOF
"$NGINX" -c "$WORK/nginx/nginx.conf" -p "$WORK/nginx" &
PIDS+=($!)
wait_for_port "$UPSTREAM_PORT"

# 2. The fault proxy in front of it.
"$FAULT_SERVER" --listen "127.0.0.1:$PROXY_PORT" --upstream "http://127.0.0.1:$UPSTREAM_PORT" \
    2>"$WORK/fault-server.log" &
PIDS+=($!)
wait_for_port "$PROXY_PORT"

# 3. The plan, aimed at the proxy's port.
sed "s|http://127.0.0.1:18480|http://127.0.0.1:$PROXY_PORT|" "$PLAN" >"$WORK/proxy-nginx.yaml"
grep -q "127.0.0.1:$PROXY_PORT" "$WORK/proxy-nginx.yaml" || broken "$PLAN has no target to rewrite"
set +e
"$HARNESS" chaos --quiet --out "$WORK/report" "$WORK/proxy-nginx.yaml" 2>"$WORK/harness.log"
status=$?
set -e
if [ "$status" -ne 0 ]; then
    cat "$WORK/harness.log" >&2
    fail "harness chaos exited $status (its gates, or the run itself, failed)"
fi
[ -f "$WORK/report/report.json" ] || broken "no report.json in $WORK/report"

exec 3<>"/dev/tcp/127.0.0.1/$PROXY_PORT"
printf 'GET /__chaos/ledger HTTP/1.1\r\nHost: proxy\r\nConnection: close\r\n\r\n' >&3
sed '1,/^\r$/d' <&3 >"$WORK/ledger.json"
exec 3<&-

# Let nginx finish writing its log (it writes a line when a request ends).
sleep 0.5

# 4. The checks.
python3 - "$WORK/report/report.json" "$WORK/ledger.json" "$WORK/nginx/access.log" <<'PY'
import collections, json, re, sys

report = json.load(open(sys.argv[1]))
live = json.load(open(sys.argv[2]))
lines = [l.split() for l in open(sys.argv[3]) if l.strip()]
problems = []

def forwarded(by_outcome):
    return sum(n for k, n in by_outcome.items() if re.fullmatch(r"upstream_\d+", k))

def injected(by_outcome):
    return sum(n for k, n in by_outcome.items()
               if re.fullmatch(r"status_\d+", k) or k in ("reset", "close", "truncate", "timeout"))

by_policy = collections.Counter(l[5] if len(l) > 5 else "-" for l in lines)
pairs = collections.Counter((l[3], l[4]) for l in lines if len(l) > 4)
twice = [p for p, n in pairs.items() if n > 1]
if twice:
    problems.append(f"nginx received {len(twice)} attempt(s) more than once, e.g. {twice[:3]}")

total_forwarded = 0
for p in report["policies"]:
    name, ledger = p["name"], p.get("ledger")
    if ledger is None:
        problems.append(f"{name}: the report has no ledger")
        continue
    outcomes = ledger["by_outcome"]
    fwd, inj = forwarded(outcomes), injected(outcomes)
    total_forwarded += fwd
    print(f"{name}: harness sent {p['attempts']} attempts; the proxy's ledger: {ledger['attempts']} "
          f"attempts, {fwd} forwarded, {inj} injected faults; nginx logged {by_policy[name]}; "
          f"outcomes {json.dumps(outcomes, sort_keys=True)}")
    if p["attempts"] != ledger["attempts"]:
        problems.append(f"{name}: the harness sent {p['attempts']} attempts, the proxy's ledger saw {ledger['attempts']}")
    if fwd + inj != ledger["attempts"]:
        problems.append(f"{name}: forwarded {fwd} + injected {inj} != the ledger's {ledger['attempts']} attempts")
    if inj == 0 or fwd == 0:
        problems.append(f"{name}: the plan should both fault and forward (injected {inj}, forwarded {fwd})")
    if by_policy[name] != fwd:
        problems.append(f"{name}: nginx logged {by_policy[name]} requests, the proxy forwarded {fwd}")

if len(lines) != total_forwarded:
    problems.append(f"nginx logged {len(lines)} requests in all, the proxy forwarded {total_forwarded}")
bad = [l for l in lines if len(l) < 6 or l[2] != "200"]
if bad:
    problems.append(f"{len(bad)} nginx log line(s) are not a 200 with a request id and policy, e.g. {bad[:2]}")

last = report["policies"][-1].get("ledger") or {}
if live.get("attempts") != last.get("attempts") or live.get("by_outcome") != last.get("by_outcome"):
    problems.append(f"the proxy's live ledger ({live.get('attempts')} attempts, {live.get('by_outcome')}) "
                    f"is not the report's last policy's ({last.get('attempts')}, {last.get('by_outcome')})")

if problems:
    for problem in problems:
        print("MISMATCH: " + problem, file=sys.stderr)
    sys.exit(1)
print(f"ok: nginx received exactly the {total_forwarded} forwarded attempts, none of the injected ones")
PY
