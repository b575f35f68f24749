#!/usr/bin/env bash
# The server's CPU per request: two wirespeed binaries side by side on the
# bundled models, `wrk -t1` rounds alternated between them, each round's
# CPU time of the whole server process (user + system, from
# /proc/PID/stat) divided by the requests wrk counted. Steadier than the
# rate on a small machine, where wrk and the loopback share the cores.
#
#   benchmarks/scripts/cpu_per_request.sh OLD_BINARY NEW_BINARY [get|post] [ROUNDS] [SECONDS]
#
# get: `GET /v2` at 64 connections; post: the Titanic V2 JSON `POST` at 32.
# Prints each round and the medians.
set -euo pipefail
export WIRESPEED_METRICS=${WIRESPEED_METRICS:-127.0.0.1:0}
cd "$(dirname "$0")/../.."
old=$1 new=$2 kind=${3:-get} rounds=${4:-5} seconds=${5:-4}

"$old" serve --models models --http 127.0.0.1:18090 --grpc off --log-level warn & a=$!
"$new" serve --models models --http 127.0.0.1:18091 --grpc off --log-level warn & b=$!
trap 'kill $a $b 2>/dev/null || true' EXIT
for port in 18090 18091; do
    for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/v2/health/ready" >/dev/null && break; sleep 0.1; done
done

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)
work=$(mktemp -d)
for round in $(seq "$rounds"); do
    for side in "old 18090 $a" "new 18091 $b"; do
        read -r name port pid <<< "$side"
        before=$(ticks "$pid")
        if [ "$kind" = get ]; then
            out=$(wrk -t1 -c64 -d"${seconds}s" "http://127.0.0.1:$port/v2")
        else
            out=$(wrk -t1 -c32 -d"${seconds}s" -s benchmarks/wrk/titanic_infer.lua "http://127.0.0.1:$port")
        fi
        after=$(ticks "$pid")
        n=$(awk '/requests in/ {print $1}' <<< "$out")
        rate=$(awk '/Requests\/sec/ {print $2}' <<< "$out")
        us=$(awk -v t=$((after - before)) -v n="$n" -v hz="$hz" 'BEGIN {printf "%.2f", t * 1e6 / hz / n}')
        echo "round $round $name: $rate req/s, $us us of server CPU a request"
        echo "$us" >> "$work/$name"
    done
done
median() { sort -g "$1" | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }
o=$(median "$work/old"); n=$(median "$work/new")
echo "median CPU a request: old $o us, new $n us (new/old $(awk -v a="$n" -v b="$o" 'BEGIN {printf "%.3f", a/b}'))"
rm -rf "$work"
