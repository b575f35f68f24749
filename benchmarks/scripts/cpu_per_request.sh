#!/usr/bin/env bash
# Server CPU time per request: a steadier measure than requests/s when the
# load generator shares the machine's cores with the server.
#   benchmarks/scripts/cpu_per_request.sh [PORT] [SECONDS]
# Needs wrk, and a server already listening on 127.0.0.1:PORT.
set -euo pipefail
port=${1:-8000}
seconds=${2:-10}
here=$(cd "$(dirname "$0")/.." && pwd)
pid=$(ss -ltnp "sport = :$port" | grep -o 'pid=[0-9]*' | head -1 | cut -d= -f2)
[ -n "$pid" ] || { echo "nothing listens on 127.0.0.1:$port" >&2; exit 1; }
tick=$(getconf CLK_TCK)
read -r u0 s0 < <(awk '{print $14, $15}' "/proc/$pid/stat")
n=$(wrk -t1 -c32 -d"${seconds}s" -s "$here/wrk/titanic_infer.lua" "http://127.0.0.1:$port" | awk '/requests in/ {print $1}')
read -r u1 s1 < <(awk '{print $14, $15}' "/proc/$pid/stat")
awk -v n="$n" -v u=$((u1 - u0)) -v s=$((s1 - s0)) -v t="$tick" 'BEGIN {
    printf "%d requests: %.1f us server CPU per request (user %.1f, system %.1f)\n", n, (u + s) * 1e6 / t / n, u * 1e6 / t / n, s * 1e6 / t / n
}'
