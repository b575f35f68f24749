#!/usr/bin/env bash
# The small-JSON ceiling: `GET /v2` (server metadata, ~100 bytes of JSON)
# from wirespeed against nginx answering the same bytes from a
# `return 200` location, rounds interleaved so a slow moment of the
# machine hits both, then the Titanic `POST` (one passenger, V2 JSON) with
# `wrk -t1 -c32`. Installs nginx and wrk from Debian's packages if they
# are missing.
#
#   benchmarks/scripts/small_json.sh [ROUNDS] [SECONDS] [WIRESPEED_BINARY]
#
# `GET /v2` is measured three ways, because on a machine whose cores the
# client shares the servers' thread layouts decide the rate:
#
# - as both servers start: wirespeed's I/O thread per core spreads wrk's
#   64 connections evenly, nginx's `worker_processes auto` leaves them on
#   whichever worker was awake (on two cores, one worker serves them all
#   and wrk has the other core to itself), `wrk -t1`;
# - one thread each (`--io-threads 1`, `worker_processes 1`), `wrk -t1`:
#   the same layout for both;
# - as both start, `wrk -t2`: a client with a thread per core, which
#   makes nginx spread too.
#
# Prints each round, the medians, the ratios to nginx, and how each
# server's requests fell over its threads (the share of the busiest
# thread's CPU, from /proc).
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
    [ -n "${ws1_pid:-}" ] && kill "$ws1_pid" 2>/dev/null || true
    for pid in "$work"/nginx*.pid; do [ -f "$pid" ] && kill "$(cat "$pid")" 2>/dev/null; done
    sleep 0.5
    rm -rf "$work"
}
trap cleanup EXIT

"$bin" serve --models models --http 127.0.0.1:18080 --grpc off --log-level warn &
ws_pid=$!
"$bin" serve --models models --http 127.0.0.1:18082 --grpc off --log-level warn --io-threads 1 &
ws1_pid=$!
for port in 18080 18082; do
    for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/v2/health/ready" >/dev/null && break; sleep 0.1; done
done
body=$(curl -sf http://127.0.0.1:18080/v2)

# The same bytes, escaped for an nginx string.
escaped=$(printf '%s' "$body" | sed 's/\\/\\\\/g; s/"/\\"/g')
mkdir -p "$work/logs"
# nginx_conf WORKERS PORT: the same answer from a `return 200`.
nginx_conf() {
    cat > "$work/nginx$2.conf" <<CONF
worker_processes $1;
pid $work/nginx$2.pid;
error_log $work/logs/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    keepalive_requests 100000000;
    keepalive_timeout 60s;
    server {
        listen 127.0.0.1:$2;
        location = /v2 {
            default_type application/json;
            return 200 "$escaped";
        }
    }
}
CONF
    "$nginx_bin" -p "$work" -c "$work/nginx$2.conf"
    for _ in $(seq 100); do curl -sf "http://127.0.0.1:$2/v2" >/dev/null && break; sleep 0.1; done
    [ "$(curl -sf "http://127.0.0.1:$2/v2")" = "$body" ] || { echo "nginx answers other bytes" >&2; exit 1; }
}
nginx_conf auto 18081
nginx_conf 1 18083

rate() { awk '/Requests\/sec/ {print $2}'; }
median() { sort -g | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }
# threads PID...: each serving thread's CPU ticks so far (wirespeed's I/O
# threads, nginx's workers), one line.
threads() {
    for pid in "$@"; do
        for stat in /proc/"$pid"/task/*/stat; do
            comm=$(sed 's/^[0-9]* (\(.*\)).*/\1/' "$stat")
            case $comm in wirespeed-io-*|nginx) awk '{sub(/^.*\) /, ""); print $12 + $13}' "$stat" ;; esac
        done
    done | paste -sd' '
}
# busiest BEFORE AFTER: the busiest thread's share of the threads' CPU.
busiest() {
    awk -v a="$1" -v b="$2" 'BEGIN {
        n = split(a, x, " "); split(b, y, " "); t = 0; m = 0
        for (i = 1; i <= n; i++) { d = y[i] - x[i]; t += d; if (d > m) m = d }
        printf "%.0f%%", (t > 0 ? 100 * m / t : 0)
    }'
}
get() { wrk -t"$1" -c64 -d"${seconds}s" "http://127.0.0.1:$2/v2" | rate; }
nginx_workers() { pgrep -P "$(cat "$work/nginx$1.pid")" | paste -sd' '; }
for f in ws nginx ws1 nginx1 ws_t2 nginx_t2 ws_post; do : > "$work/$f"; done
for round in $(seq "$rounds"); do
    t0=$(threads "$ws_pid"); w=$(get 1 18080); t1=$(threads "$ws_pid")
    ws_share=$(busiest "$t0" "$t1")
    # shellcheck disable=SC2046
    t0=$(threads $(nginx_workers 18081)); n=$(get 1 18081); t1=$(threads $(nginx_workers 18081))
    nginx_share=$(busiest "$t0" "$t1")
    w1=$(get 1 18082); n1=$(get 1 18083)
    w2=$(get 2 18080); n2=$(get 2 18081)
    p=$(wrk -t1 -c32 -d"${seconds}s" -s benchmarks/wrk/titanic_infer.lua http://127.0.0.1:18080 | rate)
    echo "round $round: GET /v2 wirespeed $w req/s (busiest I/O thread $ws_share of their CPU), nginx $n ($nginx_share);" \
        "one thread each: $w1, $n1; wrk -t2: $w2, $n2; Titanic POST wirespeed $p req/s"
    echo "$w" >> "$work/ws"; echo "$n" >> "$work/nginx"; echo "$w1" >> "$work/ws1"; echo "$n1" >> "$work/nginx1"
    echo "$w2" >> "$work/ws_t2"; echo "$n2" >> "$work/nginx_t2"; echo "$p" >> "$work/ws_post"
done
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a/b}'; }
for f in ws nginx ws1 nginx1 ws_t2 nginx_t2 ws_post; do eval "m_$f=\$(median < \"\$work/\$f\")"; done
echo "median: GET /v2 wirespeed $m_ws req/s, nginx $m_nginx req/s, ratio $(ratio "$m_ws" "$m_nginx"); Titanic POST wirespeed $m_ws_post req/s, $(ratio "$m_ws_post" "$m_nginx") of nginx's GET"
echo "median, one thread each: wirespeed $m_ws1 req/s, nginx $m_nginx1 req/s, ratio $(ratio "$m_ws1" "$m_nginx1")"
echo "median, wrk -t2: wirespeed $m_ws_t2 req/s, nginx $m_nginx_t2 req/s, ratio $(ratio "$m_ws_t2" "$m_nginx_t2")"
