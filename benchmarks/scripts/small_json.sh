#!/usr/bin/env bash
# The small-JSON ceiling: `GET /v2` (server metadata, ~100 bytes of JSON)
# from wirespeed against nginx answering the same bytes from a
# `return 200` location, with `wrk -t1 -c64`, rounds interleaved so a slow
# moment of the machine hits both. Then the Titanic `POST` (one passenger,
# V2 JSON) with `wrk -t1 -c32`, for the same rounds. Installs nginx and wrk
# from Debian's packages if they are missing.
#
#   benchmarks/scripts/small_json.sh [ROUNDS] [SECONDS] [WIRESPEED_BINARY]
#
# Prints each round and the medians, and the ratio to nginx.
set -euo pipefail
# Each wirespeed started here serves its metrics listener on a free port.
export WIRESPEED_METRICS=${WIRESPEED_METRICS:-127.0.0.1:0}
cd "$(dirname "$0")/../.."
rounds=${1:-5}
seconds=${2:-10}
bin=${3:-target/release/wirespeed}

need=()
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || need+=(nginx)
command -v wrk >/dev/null || need+=(wrk)
if [ ${#need[@]} -gt 0 ]; then
    apt-get install -y -qq "${need[@]}" >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq "${need[@]}"; }
fi
nginx_bin=$(command -v nginx || echo /usr/sbin/nginx)
[ -x "$bin" ] || cargo build --release -p wirespeed --locked

work=$(mktemp -d)
cleanup() {
    [ -n "${ws_pid:-}" ] && kill "$ws_pid" 2>/dev/null || true
    [ -f "$work/nginx.pid" ] && kill "$(cat "$work/nginx.pid")" 2>/dev/null || true
    sleep 0.5
    rm -rf "$work"
}
trap cleanup EXIT

"$bin" serve --models models --http 127.0.0.1:18080 --grpc off --log-level warn &
ws_pid=$!
for _ in $(seq 100); do curl -sf http://127.0.0.1:18080/v2/health/ready >/dev/null && break; sleep 0.1; done
body=$(curl -sf http://127.0.0.1:18080/v2)

# The same bytes, escaped for an nginx string.
escaped=$(printf '%s' "$body" | sed 's/\\/\\\\/g; s/"/\\"/g')
mkdir -p "$work/logs"
cat > "$work/nginx.conf" <<CONF
worker_processes auto;
pid $work/nginx.pid;
error_log $work/logs/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    keepalive_requests 100000000;
    keepalive_timeout 60s;
    server {
        listen 127.0.0.1:18081;
        location = /v2 {
            default_type application/json;
            return 200 "$escaped";
        }
    }
}
CONF
"$nginx_bin" -p "$work" -c "$work/nginx.conf"
for _ in $(seq 100); do curl -sf http://127.0.0.1:18081/v2 >/dev/null && break; sleep 0.1; done
[ "$(curl -sf http://127.0.0.1:18081/v2)" = "$body" ] || { echo "nginx answers other bytes" >&2; exit 1; }

rate() { awk '/Requests\/sec/ {print $2}'; }
median() { sort -g | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }
: > "$work/ws_get"; : > "$work/nginx_get"; : > "$work/ws_post"
for round in $(seq "$rounds"); do
    w=$(wrk -t1 -c64 -d"${seconds}s" http://127.0.0.1:18080/v2 | rate)
    n=$(wrk -t1 -c64 -d"${seconds}s" http://127.0.0.1:18081/v2 | rate)
    p=$(wrk -t1 -c32 -d"${seconds}s" -s benchmarks/wrk/titanic_infer.lua http://127.0.0.1:18080 | rate)
    echo "round $round: GET /v2 wirespeed $w req/s, nginx $n req/s; Titanic POST wirespeed $p req/s"
    echo "$w" >> "$work/ws_get"; echo "$n" >> "$work/nginx_get"; echo "$p" >> "$work/ws_post"
done
w=$(median < "$work/ws_get"); n=$(median < "$work/nginx_get"); p=$(median < "$work/ws_post")
echo "median: GET /v2 wirespeed $w req/s, nginx $n req/s, ratio $(awk -v a="$w" -v b="$n" 'BEGIN {printf "%.2f", a/b}'); Titanic POST wirespeed $p req/s"
