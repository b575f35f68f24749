#!/usr/bin/env bash
# Two wirespeed binaries side by side, alternated round by round in one
# run: Titanic REST single-client latency (examples/rest_latency, p50),
# `wrk -t1 -c32` Titanic POST throughput, `wrk -t1 -c64` on `GET /v2`, and
# the p50 of a 42.5 MB request (262144x8 FP32 V2 JSON in json.dumps' form,
# to identity_fp32, answered as binary so that decoding the JSON is what
# is measured), `wrk -t1 -c16` on a Titanic row through an ensemble of two
# steps (identity, then the trees), and, when a Python with numpy is at
# hand (WIRESPEED_PYTHON, else .venv's), `wrk -t1 -c16` on one 8-float row
# to a Python model (benchmarks/python_models/sum, 2 workers). For a
# change to the request path: build the old binary from the old commit (a
# git worktree) and compare.
#
# The binary started first, on the first port, does better by a few
# percent on a busy machine: the servers are started again halfway, the
# other way round, so that each binary has each place for half the
# rounds.
#
#   benchmarks/scripts/no_regression.sh OLD_BINARY NEW_BINARY [ROUNDS] [SECONDS]
set -euo pipefail
# Each wirespeed started here serves its metrics listener on a free port.
export WIRESPEED_METRICS=${WIRESPEED_METRICS:-127.0.0.1:0}
cd "$(dirname "$0")/../.."
old=$1
new=$2
rounds=${3:-5}
seconds=${4:-10}
command -v wrk >/dev/null || apt-get install -y -qq wrk >/dev/null
probe=target/release/examples/rest_latency
[ -x "$probe" ] || cargo build --release -p wirespeed-server --example rest_latency --locked

work=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; rm -rf "$work"' EXIT
# The bundled models, an ensemble ahead of the Titanic trees, and the
# Python model when its Python is at hand.
repo="$work/models"; mkdir -p "$repo"; cp -r models/. "$repo/"
mkdir -p "$repo/ens"
cat >"$repo/ens/config.toml" <<'TOML'
backend = "ensemble"
[[inputs]]
name = "features"
datatype = "FP32"
shape = [-1, 12]
[[outputs]]
name = "probability"
datatype = "FP32"
shape = [-1]
[[steps]]
model = "identity_fp32"
inputs = { INPUT0 = "features" }
outputs = { OUTPUT0 = "passed" }
[[steps]]
model = "titanic"
inputs = { features = "passed" }
outputs = { probability = "probability" }
TOML
python=${WIRESPEED_PYTHON:-$PWD/.venv/bin/python}
if [ -x "$python" ] && "$python" -c 'import numpy' 2>/dev/null; then
    cp -r benchmarks/python_models/sum "$repo/"
    export WIRESPEED_PYTHON="$python"
else
    echo "no Python with numpy (WIRESPEED_PYTHON or .venv): the Python model is left out" >&2
fi
# start FIRST SECOND: FIRST on 18090, started first, and SECOND on 18091.
start() {
    if [ ${#pids[@]} -gt 0 ]; then
        kill "${pids[@]}" 2>/dev/null || true
        wait "${pids[@]}" 2>/dev/null || true
        pids=()
    fi
    "$1" serve --models "$repo" --http 127.0.0.1:18090 --grpc off --log-level warn & pids+=($!)
    "$2" serve --models "$repo" --http 127.0.0.1:18091 --grpc off --log-level warn & pids+=($!)
    for port in 18090 18091; do
        for _ in $(seq 300); do curl -sf "http://127.0.0.1:$port/v2/health/ready" >/dev/null && break; sleep 0.1; done
    done
}
printf '{"inputs": [{"name": "features", "shape": [1, 12], "datatype": "FP32", "data": [3, 1, 0, 0.275, 0.25, 0, -0.4275, 0, 1, 0, 0, 0]}]}' >"$work/row.json"
printf '{"inputs": [{"name": "x", "shape": [1, 8], "datatype": "FP32", "data": [0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5]}]}' >"$work/sum.json"

# The large body, once: the same floats json.dumps writes.
python3 - "$work/large.json" <<'PY'
import json, random, sys
random.seed(7)
rows = [[random.random() for _ in range(8)] for _ in range(262144)]
body = {"inputs": [{"name": "INPUT0", "shape": [262144, 8], "datatype": "FP32", "data": rows}],
        "parameters": {"binary_data_output": True}}
open(sys.argv[1], "w").write(json.dumps(body))
PY

median() { sort -g | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }
p50() { "$probe" "127.0.0.1:$1" 20000 1 | awk '/p50/ {for (i=1;i<=NF;i++) if ($i=="p50") print $(i+1)}'; }
rps() { wrk -t1 -c32 -d"${seconds}s" -s benchmarks/wrk/titanic_infer.lua "http://127.0.0.1:$1" | awk '/Requests\/sec/ {print $2}'; }
meta() { WRK_METHOD=GET WRK_PATH=/v2 wrk -t1 -c64 -d"${seconds}s" -s benchmarks/wrk/post.lua "http://127.0.0.1:$1" | awk '/Requests\/sec/ {print $2}'; }
post16() {  # PORT MODEL BODY
    WRK_PATH="/v2/models/$2/infer" WRK_BODY="$3" wrk -t1 -c16 -d"${seconds}s" -s benchmarks/wrk/post.lua \
        "http://127.0.0.1:$1" | awk '/Requests\/sec/ {print $2}'
}
large() {
    for _ in 1 2 3 4 5 6 7; do
        curl -s -o /dev/null -w '%{time_total}\n' -H 'Content-Type: application/json' \
            --data-binary @"$work/large.json" "http://127.0.0.1:$1/v2/models/identity_fp32/infer"
    done | median | awk '{printf "%.1f", $1 * 1000}'
}
half=$(( (rounds + 1) / 2 ))
start "$old" "$new"
for round in $(seq "$rounds"); do
    # Halfway, the places swap: new first, on 18090.
    if [ "$round" -eq $((half + 1)) ]; then start "$new" "$old"; fi
    if [ "$round" -le "$half" ]; then at_old=18090; at_new=18091; else at_old=18091; at_new=18090; fi
    # ABBA within a round, so neither always goes first.
    if [ $((round % 2)) -eq 1 ]; then order="old new"; else order="new old"; fi
    for which in $order; do
        if [ "$which" = old ]; then port=$at_old; else port=$at_new; fi
        l=$(p50 "$port"); r=$(rps "$port"); m=$(meta "$port"); g=$(large "$port")
        e=$(post16 "$port" ens "$work/row.json")
        p=-; [ -d "$repo/sum" ] && p=$(post16 "$port" sum "$work/sum.json")
        echo "round $round $which (port $port): p50 ${l} us, ${r} req/s, GET /v2 ${m} req/s, 42.5 MB p50 ${g} ms, ensemble ${e} req/s, Python ${p} req/s"
        echo "$l" >> "$work/lat_$which"; echo "$r" >> "$work/rps_$which"
        echo "$m" >> "$work/meta_$which"; echo "$g" >> "$work/large_$which"
        echo "$e" >> "$work/ens_$which"; echo "$p" >> "$work/py_$which"
    done
done
lo=$(median < "$work/lat_old"); ln=$(median < "$work/lat_new")
ro=$(median < "$work/rps_old"); rn=$(median < "$work/rps_new")
echo "median single-client p50: old $lo us, new $ln us (new/old $(awk -v a="$ln" -v b="$lo" 'BEGIN {printf "%.3f", a/b}'))"
echo "median wrk -t1 -c32: old $ro req/s, new $rn req/s (new/old $(awk -v a="$rn" -v b="$ro" 'BEGIN {printf "%.3f", a/b}'))"
mo=$(median < "$work/meta_old"); mn=$(median < "$work/meta_new")
go=$(median < "$work/large_old"); gn=$(median < "$work/large_new")
echo "median GET /v2 wrk -t1 -c64: old $mo req/s, new $mn req/s (new/old $(awk -v a="$mn" -v b="$mo" 'BEGIN {printf "%.3f", a/b}'))"
echo "median 42.5 MB JSON p50: old $go ms, new $gn ms (old/new $(awk -v a="$go" -v b="$gn" 'BEGIN {printf "%.3f", a/b}'))"
eo=$(median < "$work/ens_old"); en=$(median < "$work/ens_new")
echo "median ensemble wrk -t1 -c16: old $eo req/s, new $en req/s (new/old $(awk -v a="$en" -v b="$eo" 'BEGIN {printf "%.3f", a/b}'))"
if [ -d "$repo/sum" ]; then
    po=$(median < "$work/py_old"); pn=$(median < "$work/py_new")
    echo "median Python model wrk -t1 -c16: old $po req/s, new $pn req/s (new/old $(awk -v a="$pn" -v b="$po" 'BEGIN {printf "%.3f", a/b}'))"
fi
