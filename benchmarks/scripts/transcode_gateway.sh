#!/usr/bin/env bash
# End to end: `wirespeed proxy` against grpc-gateway, in one run, in front
# of the same gRPC service: bench.proto (in
# crates/wirespeed-transcode/tests/protos, which the tests serve too),
# served by a Go server (benchmarks/transcode/gateway) whose methods echo
# their request, so both directions are transcoded.
#
# grpc-gateway v2.33.0 and its protoc plugins come from the Go module
# proxy; protoc is grpcio-tools' (the tests' venv, or `pip install
# grpcio-tools`). Each call is first made through both proxies and their
# answers compared; then `wrk -t1 -c32` per call, the two proxies
# alternated within each round. Besides throughput, the CPU time each
# proxy process spends per request (utime + stime from /proc) is taken
# over the same runs: on one machine the upstream and wrk share the cores
# with the proxy, so end-to-end throughput also carries their costs,
# while CPU per request is the proxy's own.
#
#   benchmarks/scripts/transcode_gateway.sh [ROUNDS] [SECONDS] [WIRESPEED_BINARY]
#
# Prints each round's requests per second and p50, then the medians and
# wirespeed's throughput over grpc-gateway's.
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-3}
seconds=${2:-3}
bin=${3:-target/release/wirespeed}
python=${PYTHON:-.venv/bin/python}
command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk; }
[ -x "$bin" ] || cargo build --release -p wirespeed --locked
"$python" -c "import grpc_tools" 2>/dev/null || { echo "needs grpcio-tools in $python (set PYTHON)" >&2; exit 1; }

work=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

# The plugins and the gateway, built from the module proxy.
export GOBIN=$work/bin GOFLAGS=-mod=mod
go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
go install github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-grpc-gateway@v2.33.0
src=$work/gateway
cp -r benchmarks/transcode/gateway "$src"
mkdir -p "$src/gen"
protos=crates/wirespeed-transcode/tests/protos
well_known=$("$python" -c "import grpc_tools, os; print(os.path.join(os.path.dirname(grpc_tools.__file__), '_proto'))")
# The test protos' copies of google/api/*.proto name no Go package.
go_api=google.golang.org/genproto/googleapis/api/annotations
opt=paths=source_relative,Mgoogle/api/annotations.proto=$go_api,Mgoogle/api/http.proto=$go_api
"$python" -m grpc_tools.protoc -I"$protos" -I"$well_known" \
    --plugin=protoc-gen-go="$GOBIN/protoc-gen-go" --plugin=protoc-gen-go-grpc="$GOBIN/protoc-gen-go-grpc" \
    --plugin=protoc-gen-grpc-gateway="$GOBIN/protoc-gen-grpc-gateway" \
    --go_out="$src/gen" --go_opt="$opt" \
    --go-grpc_out="$src/gen" --go-grpc_opt="$opt" \
    --grpc-gateway_out="$src/gen" --grpc-gateway_opt="$opt" \
    --include_imports --descriptor_set_out="$work/bench.pb" bench.proto
(cd "$src" && go build -o "$work/bench" .)

for port in 18150 18151 18152; do
    ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || { echo "port $port is in use" >&2; exit 1; }
done
wait_for() { for _ in $(seq 300); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done; cat "$1" >&2; exit 1; }
"$work/bench" upstream 127.0.0.1:18150 2> "$work/upstream.log" & pids+=($!)
wait_for "$work/upstream.log" "upstream listening"
"$work/bench" gateway 127.0.0.1:18151 127.0.0.1:18150 2> "$work/gateway.log" & pids+=($!)
wait_for "$work/gateway.log" "gateway listening"
# grpc-gateway prints fields that hold their defaults; so does the proxy here.
"$bin" proxy --descriptor-set "$work/bench.pb" --upstream grpc://127.0.0.1:18150 \
    --http 127.0.0.1:18152 --emit-defaults --log-level warn 2> "$work/proxy.log" & pids+=($!)
declare -A proxy_pid=([18151]=${pids[1]} [18152]=${pids[2]})
# A process's CPU time so far, in clock ticks.
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)
for _ in $(seq 300); do curl -s -o /dev/null http://127.0.0.1:18152/ && break; sleep 0.1; done

# The calls: method, path, body (none for GET).
"$python" - "$work" <<'PY'
import base64, json, sys
work = sys.argv[1]
def nested(depth):
    node = {"value": depth, "name": "n"}
    for d in range(depth):
        node = {"child": node, "value": d, "name": "n"}
    return node
calls = {
    # int32 array length
    "int32_1": ("POST", "/v1/int32s", {"values": [7919]}),
    "int32_256": ("POST", "/v1/int32s", {"values": [i * 7919 % 100000 for i in range(256)]}),
    "int32_1024": ("POST", "/v1/int32s", {"values": [i * 7919 % 100000 for i in range(1024)]}),
    "int32_16384": ("POST", "/v1/int32s", {"values": [i * 7919 % 100000 for i in range(16384)]}),
    # value type, 1024 zeros; and 1024 values as json.dumps writes them
    "zeros_int32": ("POST", "/v1/int32s", {"values": [0] * 1024}),
    "zeros_double": ("POST", "/v1/doubles", {"values": [0.0] * 1024}),
    "zeros_string": ("POST", "/v1/strings", {"values": ["0"] * 1024}),
    "double_1024": ("POST", "/v1/doubles", {"values": [i / 7 for i in range(1024)]}),
    "string_1024": ("POST", "/v1/strings", {"values": ["value%d" % i for i in range(1024)]}),
    # bytes body
    "bytes_1": ("POST", "/v1/payload", {"data": base64.b64encode(b"x").decode()}),
    "bytes_1k": ("POST", "/v1/payload", {"data": base64.b64encode(bytes(range(256)) * 4).decode()}),
    "bytes_1m": ("POST", "/v1/payload", {"data": base64.b64encode(bytes(range(256)) * 4096).decode()}),
    # nesting (a recursive message, and Struct)
    "nested_0": ("POST", "/v1/nested", nested(0)),
    "nested_1": ("POST", "/v1/nested", nested(1)),
    "nested_8": ("POST", "/v1/nested", nested(8)),
    "nested_31": ("POST", "/v1/nested", nested(31)),
    "struct": ("POST", "/v1/document", {"body": {"a": [1, 2.5, "x", True, None, {"b": {"c": [1, 2, 3]}}], "n": 1}}),
    # bindings: how many (depth 0), and how deep (one)
    "bindings_1": ("GET", "/v1/one/s1", None),
    "bindings_2": ("GET", "/v1/shelves/s1/books/b1", None),
    "bindings_8": ("GET", "/v1/many/a/b/c/d/e/f/g/h", None),
    "depth_1": ("GET", "/v1/depth1/abc", None),
    "depth_8": ("GET", "/v1/deep/abc", None),
    "depth_32": ("GET", "/v1/depth32/abc", None),
}
with open(f"{work}/calls", "w") as out:
    for name, (method, path, body) in calls.items():
        if body is not None:
            with open(f"{work}/{name}.json", "w") as f:
                json.dump(body, f)
        out.write(f"{name} {method} {path}\n")
PY

# The same answer from both (as JSON values).
while read -r name method path; do
    for port in 18151 18152; do
        if [ "$method" = GET ]; then
            curl -sf "http://127.0.0.1:$port$path" > "$work/$name.$port.out"
        else
            curl -sf -H 'Content-Type: application/json' --data-binary "@$work/$name.json" \
                "http://127.0.0.1:$port$path" > "$work/$name.$port.out"
        fi || { echo "$name: port $port refuses the call" >&2; exit 1; }
    done
    # grpc-gateway also prints unset message fields, as null.
    "$python" -c "
import json, sys
def bare(v):
    if isinstance(v, dict):
        return {k: bare(x) for k, x in v.items() if x is not None}
    return [bare(x) for x in v] if isinstance(v, list) else v
a, b = (bare(json.load(open(p))) for p in sys.argv[1:])
sys.exit(a != b)" \
        "$work/$name.18151.out" "$work/$name.18152.out" || { echo "$name: the answers differ" >&2; exit 1; }
done < "$work/calls"

micros() { awk '/^ +50%/ {v=$2; u=v; sub(/[0-9.]+/, "", u); sub(/[a-z]+$/, "", v);
    print (u=="us") ? v : (u=="ms") ? v*1000 : v*1000000}'; }
median() { sort -g | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }
for round in $(seq "$rounds"); do
    while read -r name method path; do
        for port in 18151 18152; do
            body=""
            [ "$method" = GET ] || body=$work/$name.json
            before=$(ticks "${proxy_pid[$port]}")
            out=$(WRK_METHOD=$method WRK_PATH=$path WRK_BODY=$body \
                wrk -t1 -c32 -d"${seconds}s" --latency -s benchmarks/wrk/post.lua "http://127.0.0.1:$port")
            after=$(ticks "${proxy_pid[$port]}")
            ! grep -q "Non-2xx" <<<"$out" || { echo "$name on $port: errors under load" >&2; exit 1; }
            awk '/Requests\/sec/ {print $2}' <<<"$out" >> "$work/$name.$port.rate"
            micros <<<"$out" >> "$work/$name.$port.p50"
            n=$(awk '/requests in/ {print $1}' <<<"$out")
            echo "($after - $before) * 1000000 / $hz / $n" | bc -l >> "$work/$name.$port.cpu"
        done
        printf 'round %s %s: grpc-gateway %s req/s %.1f us CPU, wirespeed %s req/s %.1f us CPU\n' "$round" "$name" \
            "$(tail -1 "$work/$name.18151.rate")" "$(tail -1 "$work/$name.18151.cpu")" \
            "$(tail -1 "$work/$name.18152.rate")" "$(tail -1 "$work/$name.18152.cpu")"
    done < "$work/calls"
done

printf '\n| call | JSON bytes | grpc-gateway req/s | p50 us | CPU us/req | wirespeed req/s | p50 us | CPU us/req | throughput ratio | CPU ratio |\n|---|---|---|---|---|---|---|---|---|---|\n'
while read -r name method path; do
    size=0
    [ "$method" = GET ] || size=$(wc -c < "$work/$name.json")
    g=$(median < "$work/$name.18151.rate"); w=$(median < "$work/$name.18152.rate")
    gp=$(median < "$work/$name.18151.p50"); wp=$(median < "$work/$name.18152.p50")
    gc=$(median < "$work/$name.18151.cpu"); wc=$(median < "$work/$name.18152.cpu")
    printf '| %s | %s | %.0f | %.0f | %.1f | %.0f | %.0f | %.1f | %.2fx | %.2fx |\n' "$name" "$size" "$g" "$gp" "$gc" \
        "$w" "$wp" "$wc" "$(echo "$w / $g" | bc -l)" "$(echo "$gc / $wc" | bc -l)"
done < "$work/calls"
