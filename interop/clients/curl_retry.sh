#!/usr/bin/env bash
# curl's own retries, against the fault-server: CALLS GETs of /items/N, one after another,
# each printed as one line.
#
# `curl --retry 3` and nothing else about retries, so every other value is curl's default
# (curl(1), --retry):
# - it retries a timeout and HTTP 408, 429, 500, 502, 503 and 504 ("transient errors");
#   never another 4xx, never a refused connection (that takes --retry-connrefused);
# - it waits 1 s before the first retry and doubles the wait for each one after, up to
#   10 minutes (no jitter); --retry-delay would replace this with a fixed wait;
# - since 7.66.0 a Retry-After on the answer sets the wait instead;
# - --retry-max-time is unset: no limit on the time spent retrying.
# --max-time 10 bounds each attempt so a hung server cannot hold a call forever.
#
# curl sends nothing that names the logical request, and each call reads a path of its
# own, so the fault-server groups a call's attempts by their identical method, path and
# body (a guess, which the report counts as such).
#
# Usage: curl_retry.sh [URL] [CALLS]   (URL defaults to $CHAOS_TARGET_URL, CALLS to 5)
# Exits 0 whatever the calls' outcomes.
set -u
url=${1:-${CHAOS_TARGET_URL:?pass a URL or set CHAOS_TARGET_URL}}
calls=${2:-5}
echo "# $(curl --version | head -n 1)" >&2

for n in $(seq 1 "$calls"); do
  # The status of the last attempt from -w; the retries from curl's own warnings
  # ("Will retry in 1 seconds. 3 retries left."), which --no-progress-meter keeps and
  # --silent would hide.
  # The body goes to a file: curl 7.x cannot retry into /dev/null ("Failed to truncate").
  warnings=$(mktemp) body=$(mktemp)
  status=$(curl --no-progress-meter --output "$body" --retry 3 --max-time 10 \
    --write-out '%{http_code}' "${url%/}/items/$n" 2>"$warnings")
  retries=$(grep -c 'Will retry' "$warnings")
  rm -f "$warnings" "$body"
  case $status in
    2??) outcome="ok $status" ;;
    *) outcome="error $status" ;;
  esac
  attempts=$((retries + 1))
  echo "call $n: $outcome attempts=$attempts"
done
