#!/usr/bin/env bash
# Idle clients against the fault-server: opens N keep-alive connections that each sent one
# request and then sit idle, then times one /healthz on a fresh connection. The server runs
# under a hard descriptor limit of LIMIT, so N far above it shows the connection budget at
# work (the idlest connections are closed to make room).
#   N=5000 LIMIT=1024 bash bench/idle-connections.sh
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-5000}
LIMIT=${LIMIT:-1024}
PORT=${PORT:-18555}
cargo build --release -p fault-server >/dev/null
bin=${CARGO_TARGET_DIR:-target}/release/fault-server
bash -c "ulimit -n $LIMIT; ulimit -Hn $LIMIT; exec $bin --listen 127.0.0.1:$PORT" &
server=$!
trap 'kill $server 2>/dev/null' EXIT
sleep 0.5
ulimit -n $((N + 1024))
python3 - "$PORT" "$N" <<'PY'
import socket, subprocess, sys
port, n = int(sys.argv[1]), int(sys.argv[2])
idle = []
for _ in range(n):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"GET /healthz HTTP/1.1\r\nhost: bench\r\n\r\n")
    idle.append(s)
out = subprocess.run(
    ["curl", "-s", "-m", "10", "-o", "/dev/null", "-w", "%{http_code} in %{time_total} s",
     f"http://127.0.0.1:{port}/healthz"],
    capture_output=True, text=True).stdout
print(f"{n} idle connections: /healthz answered {out}")
PY
