#!/usr/bin/env bash
# Throughput of the fault proxy (`fault-server --upstream`, no fault firing) against
# nginx's own reverse proxy in front of the same upstream, measured by wrk in one run.
# The goal: fault-server >= 0.9 x nginx.
#
#   bench/proxy.sh                                  # defaults below
#   WORKERS=2 DURATION=20s bench/proxy.sh
#   PIN=1 bench/proxy.sh                            # each proxy alone on the last core
#
# Three processes: the upstream (nginx serving `return 200` on one port), the nginx
# proxy (`proxy_pass` to an `upstream {}` block with `keepalive 64`, HTTP/1.1 and
# `Connection ""`, so its connections to the upstream are pooled as the fault-server's
# are), and the fault-server (release build, `--upstream` to the same port, an empty
# script). Both proxies get WORKERS workers: nginx `worker_processes`, the fault-server
# `--threads` (with 1, one thread, as an nginx worker: tokio's current-thread runtime);
# the upstream gets WORKERS too. Each proxy is measured ROUNDS
# times, alternating, after a warm-up; the medians are compared, and every round is
# printed (a round another process disturbed shows as an outlier).
#
# PIN=1 puts both proxies on the last core and wrk and the upstream on the others
# (taskset): the proxy's own cost per request then sets the throughput, with less of the
# scheduler's noise (on 2 cores, three busy processes otherwise share two).
#
# nginx and wrk are installed with apt-get when missing (root, or sudo).
set -euo pipefail

cd "$(dirname "$0")/.."

DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-2s}
THREADS=${THREADS:-1}
CONNECTIONS=${CONNECTIONS:-64}
ROUNDS=${ROUNDS:-5}
WORKERS=${WORKERS:-1}
UPSTREAM_PORT=${UPSTREAM_PORT:-18090}
NGINX_PORT=${NGINX_PORT:-18091}
FAULT_PORT=${FAULT_PORT:-18092}
TARGET_DIR=${CARGO_TARGET_DIR:-target}
PIN=${PIN:-0}

# Where each process runs: with PIN=1, the proxies alone on the last core.
PROXY_CPUS=()
LOAD_CPUS=()
if [ "$PIN" = 1 ]; then
    last=$(($(nproc) - 1))
    if [ "$last" -lt 1 ]; then
        echo "PIN=1 needs two cores at least" >&2
        exit 2
    fi
    PROXY_CPUS=(taskset -c "$last")
    LOAD_CPUS=(taskset -c "0-$((last - 1))")
fi

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
command -v wrk >/dev/null 2>&1 || install wrk wrk

echo "building (release)…" >&2
cargo build --release --quiet -p fault-server --bin fault-server

WORK=$(mktemp -d)
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

# An nginx configuration: $1 its name, $2 the server block's body.
nginx_conf() {
    local name=$1 server=$2 upstream=${3:-}
    mkdir -p "$WORK/$name"
    cat >"$WORK/$name/nginx.conf" <<EOF
worker_processes $WORKERS;
daemon off;
pid $WORK/$name/nginx.pid;
error_log $WORK/$name/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    keepalive_requests 1000000;
    client_body_temp_path $WORK/$name/body;
    proxy_temp_path $WORK/$name/proxy;
    fastcgi_temp_path $WORK/$name/fastcgi;
    uwsgi_temp_path $WORK/$name/uwsgi;
    scgi_temp_path $WORK/$name/scgi;
    $upstream
    server {
        $server
    }
}
EOF
    echo "$WORK/$name/nginx.conf"
}

. bench/lib.sh

UPSTREAM_CONF=$(nginx_conf upstream "listen 127.0.0.1:$UPSTREAM_PORT; location / { return 200 \"ok\\n\"; }")
PROXY_CONF=$(nginx_conf proxy "listen 127.0.0.1:$NGINX_PORT;
        location / {
            proxy_pass http://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection \"\";
        }" "upstream backend { server 127.0.0.1:$UPSTREAM_PORT; keepalive 64; keepalive_requests 1000000; }")

"${LOAD_CPUS[@]}" "$NGINX" -c "$UPSTREAM_CONF" -p "$WORK/upstream" &
PIDS+=($!)
"${PROXY_CPUS[@]}" "$NGINX" -c "$PROXY_CONF" -p "$WORK/proxy" &
PIDS+=($!)
"${PROXY_CPUS[@]}" "$TARGET_DIR/release/fault-server" --threads "$WORKERS" \
    --listen "127.0.0.1:$FAULT_PORT" --upstream "http://127.0.0.1:$UPSTREAM_PORT" \
    2>"$WORK/fault-server.log" &
PIDS+=($!)
wait_for_port "$UPSTREAM_PORT"
wait_for_port "$NGINX_PORT"
wait_for_port "$FAULT_PORT"

# Every proxy answers what the upstream says, or the figures mean nothing.
for port in "$NGINX_PORT" "$FAULT_PORT"; do
    answer=$(exec 3<>"/dev/tcp/127.0.0.1/$port"; printf 'GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n' >&3; cat <&3)
    case "$answer" in
    *"200 OK"*ok*) ;;
    *) echo "the proxy on port $port did not answer the upstream's 200: $answer" >&2; exit 1 ;;
    esac
done

# Requests/sec of one wrk run against a port; a run with socket errors or non-2xx
# answers is refused (a proxy answering 502s fast is no result).
measure() {
    local port=$1 duration=$2 out
    out=$("${LOAD_CPUS[@]}" wrk -t"$THREADS" -c"$CONNECTIONS" -d"$duration" "http://127.0.0.1:$port/")
    if grep -q -e "Non-2xx" -e "Socket errors" <<<"$out"; then
        echo "wrk against port $port saw errors:" >&2
        echo "$out" >&2
        exit 1
    fi
    awk '/^Requests\/sec:/ { print $2 }' <<<"$out"
}

measure "$NGINX_PORT" "$WARMUP" >/dev/null
measure "$FAULT_PORT" "$WARMUP" >/dev/null

median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }

nginxes=()
faults=()
for round in $(seq 1 "$ROUNDS"); do
    nginx=$(measure "$NGINX_PORT" "$DURATION")
    fault=$(measure "$FAULT_PORT" "$DURATION")
    echo "round $round: nginx proxy_pass ${nginx} req/s, fault-server --upstream ${fault} req/s" >&2
    nginxes+=("$nginx")
    faults+=("$fault")
done
med_nginx=$(median "${nginxes[@]}")
med_fault=$(median "${faults[@]}")
ratio=$(awk -v f="$med_fault" -v n="$med_nginx" 'BEGIN { printf "%.3f", f / n }')
ledger=$(exec 3<>"/dev/tcp/127.0.0.1/$FAULT_PORT"; printf 'GET /__chaos/ledger HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n' >&3; cat <&3)
echo "wrk -t$THREADS -c$CONNECTIONS -d$DURATION, median of $ROUNDS alternating rounds, $(nproc) cores;"
echo "nginx $("$NGINX" -v 2>&1 | sed 's/.*version: //'), $WORKERS worker process(es) for each nginx, --threads $WORKERS for the fault-server"
if [ "$PIN" = 1 ]; then
    echo "pinned: the proxies on core $last, wrk and the upstream on cores 0-$((last - 1))"
else
    echo "not pinned: the scheduler places wrk, the upstream and the proxy"
fi
echo "  nginx proxy_pass (keepalive 64):  ${med_nginx} req/s"
echo "  fault-server --upstream:          ${med_fault} req/s"
echo "  ratio: ${ratio} (goal >= 0.9)"
grep -o '"by_outcome":{[^}]*}' <<<"$ledger" | sed 's/^/  fault-server ledger: /'
