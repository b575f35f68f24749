#!/usr/bin/env bash
# Triton repositories on the same runtimes, each against its direct form,
# every comparison one `wirespeed bench` run with windows interleaved:
#   1. an ensemble of two steps (an identity model, then the Titanic trees)
#      against the Titanic trees asked directly: p50 at one connection (the
#      ensemble's added latency), throughput at 16
#   2. the Titanic trees as a FIL model (config.pbtxt, backend: "fil")
#      against the same file from a config.toml (backend = "xgboost"):
#      throughput at 16 connections
# Servers at their defaults; one Titanic row per request, V2 JSON.
# Usage: benchmarks/scripts/ensemble.sh   (from the repository root, after
# `cargo build --release -p wirespeed`)
set -euo pipefail
cd "$(dirname "$0")/../.."
W=${WIRESPEED:-target/release/wirespeed}
OUT=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; rm -rf "$OUT"' EXIT

tensor() {  # NAME DATATYPE SHAPE
    printf '[[%s]]\nname = "%s"\ndatatype = "FP32"\nshape = %s\n' "$1" "$2" "$3"
}
# 1. The trees alone, and the ensemble ahead of them.
mkdir -p "$OUT/direct/titanic" "$OUT/ens/titanic" "$OUT/ens/trees" "$OUT/ens/pass"
cp models/titanic/* "$OUT/direct/titanic/"
cp models/titanic/* "$OUT/ens/trees/"
{ echo 'backend = "identity"'; tensor inputs INPUT0 '[-1, 12]'; tensor outputs OUTPUT0 '[-1, 12]'; } >"$OUT/ens/pass/config.toml"
{ echo 'backend = "ensemble"'; tensor inputs features '[-1, 12]'; tensor outputs probability '[-1]'
  printf '[[steps]]\nmodel = "pass"\ninputs = { INPUT0 = "features" }\noutputs = { OUTPUT0 = "passed" }\n'
  printf '[[steps]]\nmodel = "trees"\ninputs = { features = "passed" }\noutputs = { probability = "probability" }\n'
} >"$OUT/ens/titanic/config.toml"
# 2. FIL's folder, and config.toml's, of the same file.
mkdir -p "$OUT/fil/titanic/1" "$OUT/toml/titanic"
cp models/titanic/model.json "$OUT/fil/titanic/1/xgboost.json"
cat >"$OUT/fil/titanic/config.pbtxt" <<'PBTXT'
backend: "fil"
max_batch_size: 8192
input [ { name: "input__0" data_type: TYPE_FP32 dims: [ 12 ] } ]
output [ { name: "output__0" data_type: TYPE_FP32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU } ]
parameters [
  { key: "model_type" value: { string_value: "xgboost_json" } },
  { key: "is_classifier" value: { string_value: "true" } },
  { key: "predict_proba" value: { string_value: "true" } }
]
PBTXT
cp models/titanic/model.json "$OUT/toml/titanic/"
{ printf 'backend = "xgboost"\nmodel_file = "model.json"\n'; tensor inputs input__0 '[-1, 12]'
  tensor outputs output__0 '[-1]'; echo 'kind = "prediction"'; } >"$OUT/toml/titanic/config.toml"

port=9700
for repo in direct ens fil toml; do
    "$W" serve --models "$OUT/$repo" --http "127.0.0.1:$port" --grpc off --metrics off \
        >"$OUT/$repo.log" 2>&1 & pids+=($!)
    eval "port_$repo=$port"
    port=$((port + 1))
done
for p in $port_direct $port_ens $port_fil $port_toml; do
    until curl -sf "http://127.0.0.1:$p/v2/health/ready" >/dev/null; do
        for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null || { cat "$OUT"/*.log; exit 1; }; done
        sleep 0.1
    done
done

echo "== 1. ensemble (identity -> trees) vs the trees directly: p50 at 1 connection"
"$W" bench "http://127.0.0.1:$port_ens" --compare "http://127.0.0.1:$port_direct" -c 1 --threads 1 --min-windows 5
echo "== 1. the same at 16 connections"
"$W" bench "http://127.0.0.1:$port_ens" --compare "http://127.0.0.1:$port_direct" -c 16 --min-windows 5
echo "== 2. FIL config.pbtxt vs config.toml, 16 connections"
"$W" bench "http://127.0.0.1:$port_fil" --compare "http://127.0.0.1:$port_toml" -c 16 --input input__0 --min-windows 5
