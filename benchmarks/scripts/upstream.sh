#!/usr/bin/env bash
# wirespeed in front of KServe, MLServer and another wirespeed:
# `wirespeed bench scenario upstream` against each, every comparison one
# measurement with windows interleaved:
#   1. 262144x8 FP32 V2 JSON (json.dumps-style floats) to KServe's REST port
#      vs through wirespeed to KServe's gRPC port; the same for MLServer
#   2. one 10-feature row over gRPC to KServe's XGBoost model, directly vs
#      through wirespeed: p50 at one connection, throughput at 16
#   3. the proxy's own ceiling: a wirespeed identity server over a Unix
#      socket, directly vs through a second wirespeed
#   4. the front's peak RSS over a 262144x8 request (VmHWM) against idle
# It uses the peers' venvs and models (../shared/peers/setup.sh, in $R).
# Usage: benchmarks/scripts/upstream.sh   (from the repository root, after
# `cargo build --release -p wirespeed`)
set -euo pipefail
. "$(dirname "$0")/peers.sh"

(cd "$R" && OMP_NUM_THREADS=1 exec "$R/venv_ks/bin/python" "$PEERS/kserve_server.py" "$R/models" \
    --http_port 8280 --grpc_port 8281 >"$OUT/kserve.log" 2>&1) & pids+=($!)
mkdir -p "$OUT/mls"; cp -r "$R/models/mlserver_repo/." "$OUT/mls/"
sed -i 's/8080/8380/;s/8081/8381/;s/8082/8382/' "$OUT/mls/settings.json"
(cd "$OUT/mls" && OMP_NUM_THREADS=1 exec "$R/venv_mls/bin/mlserver" start . >"$OUT/mlserver.log" 2>&1) & pids+=($!)
"$W" serve --models models --http 127.0.0.1:9100 --grpc off --grpc-uds "$OUT/up.sock" >"$OUT/up.log" 2>&1 & pids+=($!)

front() {  # NAME GRPC_URL HTTP_PORT GRPC_PORT
    mkdir -p "$OUT/$1/sum" "$OUT/$1/xgb"
    printf 'backend = "upstream"\nurl = "%s"\n[[inputs]]\nname = "x"\ndatatype = "FP32"\nshape = [-1, -1]\n[[outputs]]\nname = "sum"\ndatatype = "FP32"\nshape = [-1, 1]\n' "$2" >"$OUT/$1/sum/config.toml"
    printf 'backend = "upstream"\nurl = "%s"\n[[inputs]]\nname = "x"\ndatatype = "FP32"\nshape = [-1, 10]\n[[outputs]]\nname = "predict"\ndatatype = "INT64"\nshape = [-1, 1]\n' "$2" >"$OUT/$1/xgb/config.toml"
    "$W" serve --models "$OUT/$1" --http "127.0.0.1:$3" --grpc "127.0.0.1:$4" >"$OUT/$1.log" 2>&1 & pids+=($!)
}
front front_ks grpc://127.0.0.1:8281 9400 9401
front front_mls grpc://127.0.0.1:8381 9500 9501
mkdir -p "$OUT/front_ws/identity_fp32"
printf 'backend = "upstream"\nurl = "grpc+unix://%s"\n' "$OUT/up.sock" >"$OUT/front_ws/identity_fp32/config.toml"
"$W" serve --models "$OUT/front_ws" --http 127.0.0.1:9600 --grpc 127.0.0.1:9601 >"$OUT/front_ws.log" 2>&1 & pids+=($!)
front_ks_pid=${pids[3]}

ready http://127.0.0.1:8280/v2/health/ready
ready http://127.0.0.1:8380/v2/models/sum/ready
for port in 9400 9500 9600; do ready "http://127.0.0.1:$port/v2/health/ready"; done

rss() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/status"; }
idle=$(rss "$front_ks_pid" VmRSS)

echo "== KServe: wirespeed bench scenario upstream"
"$W" bench scenario upstream --http http://127.0.0.1:9400 --grpc grpc://127.0.0.1:9401 \
    --compare http://127.0.0.1:8280 --upstream-grpc grpc://127.0.0.1:8281 \
    --grpc-uds "$OUT/up.sock" --ceiling-front grpc://127.0.0.1:9601 --json "$OUT/kserve.json"
echo "== front RSS over the large requests: idle ${idle} KiB, peak $(rss "$front_ks_pid" VmHWM) KiB (tensor 8192 KiB in, 1024 KiB out)"
echo "== MLServer: wirespeed bench scenario upstream"
"$W" bench scenario upstream --http http://127.0.0.1:9500 --grpc grpc://127.0.0.1:9501 \
    --compare http://127.0.0.1:8380 --upstream-grpc grpc://127.0.0.1:8381 --json "$OUT/mlserver.json"
echo "results in $OUT"
