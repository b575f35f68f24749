#!/usr/bin/env bash
# How a build's throughput varies from one start of the server to the
# next: each binary is started N times, alternated with the others, and
# each start is measured once with `wrk -t1 -c32` on the Titanic POST for
# SECONDS. Prints every start's req/s and the median per binary. A build
# whose starts fall into two groups has something decided at start (which
# malloc arena a thread gets, which core) that a single run would hide.
#
#   benchmarks/scripts/starts.sh STARTS SECONDS BINARY [BINARY...]
set -euo pipefail
cd "$(dirname "$0")/../.."
starts=$1
seconds=$2
shift 2
command -v wrk >/dev/null || apt-get install -y -qq wrk >/dev/null
# Metrics on, as a default server has them, on a free port.
export WIRESPEED_METRICS=127.0.0.1:0
declare -A figures
for _ in $(seq "$starts"); do
    for bin in "$@"; do
        "$bin" serve --models models --http 127.0.0.1:18070 --grpc 127.0.0.1:18071 >/dev/null 2>&1 &
        pid=$!
        until curl -sf http://127.0.0.1:18070/v2/health/ready >/dev/null; do
            kill -0 "$pid" 2>/dev/null || { echo "$bin stopped before it was ready" >&2; exit 1; }
            sleep 0.05
        done
        rate=$(wrk -t1 -c32 -d"${seconds}s" -s benchmarks/wrk/titanic_infer.lua http://127.0.0.1:18070 |
            awk '/Requests\/sec/ {print int($2)}')
        figures[$bin]="${figures[$bin]:-} $rate"
        kill "$pid"
        wait "$pid" 2>/dev/null || true
    done
done
for bin in "$@"; do
    median=$(tr ' ' '\n' <<<"${figures[$bin]}" | grep . | sort -n |
        awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}')
    echo "$bin:${figures[$bin]} (median $median req/s)"
done
