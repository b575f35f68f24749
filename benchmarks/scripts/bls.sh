#!/usr/bin/env bash
# Triton's BLS: a Python model (Triton's API) that calls a tree model, against
# the tree model asked directly, one `wirespeed bench` run with windows
# interleaved: p50 at one connection (the call's added latency: the Python
# worker's round trip plus the BLS call back into the server), throughput
# at 16. One Titanic row per request (12 FP32 features), V2 JSON.
# Usage: benchmarks/scripts/bls.sh   (from the repository root, after
# `cargo build --release -p wirespeed`; WIRESPEED_PYTHON: an interpreter with
# numpy, .venv's by default)
set -euo pipefail
cd "$(dirname "$0")/../.."
W=${WIRESPEED:-target/release/wirespeed}
export WIRESPEED_PYTHON=${WIRESPEED_PYTHON:-$PWD/.venv/bin/python}
OUT=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; rm -rf "$OUT"' EXIT

# The trees alone, as `titanic`.
mkdir -p "$OUT/direct/titanic" "$OUT/bls/trees" "$OUT/bls/titanic/1"
cp models/titanic/* "$OUT/direct/titanic/"
cp models/titanic/* "$OUT/bls/trees/"
# `titanic` as a Python model that asks `trees` (BLS) and answers its output.
cat >"$OUT/bls/titanic/config.pbtxt" <<'PBTXT'
name: "titanic"
backend: "python"
max_batch_size: 8
input [ { name: "features" data_type: TYPE_FP32 dims: [ 12 ] } ]
output [ { name: "probability" data_type: TYPE_FP32 dims: [ -1 ] } ]
instance_group [ { count: 2 kind: KIND_CPU } ]
PBTXT
sed -i 's/dims: \[ -1 \]/dims: [ ]/' "$OUT/bls/titanic/config.pbtxt"
cat >"$OUT/bls/titanic/1/model.py" <<'PY'
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            answer = pb_utils.InferenceRequest(
                model_name="trees",
                requested_output_names=["probability"],
                inputs=[pb_utils.get_input_tensor_by_name(request, "features")],
            ).exec()
            if answer.has_error():
                raise pb_utils.TritonModelException(answer.error().message())
            responses.append(pb_utils.InferenceResponse(answer.output_tensors()))
        return responses
PY

port=9750
for repo in bls direct; do
    "$W" serve --models "$OUT/$repo" --http "127.0.0.1:$port" --grpc off --metrics off \
        >"$OUT/$repo.log" 2>&1 & pids+=($!)
    eval "port_$repo=$port"
    port=$((port + 1))
done
for p in $port_bls $port_direct; do
    until curl -sf "http://127.0.0.1:$p/v2/health/ready" >/dev/null; do
        for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null || { cat "$OUT"/*.log; exit 1; }; done
        sleep 0.1
    done
done

echo "== BLS (Python -> trees) vs the trees directly: p50 at 1 connection"
"$W" bench "http://127.0.0.1:$port_bls" --compare "http://127.0.0.1:$port_direct" -c 1 --threads 1 --min-windows 5
echo "== the same at 16 connections"
"$W" bench "http://127.0.0.1:$port_bls" --compare "http://127.0.0.1:$port_direct" -c 16 --min-windows 5
