#!/usr/bin/env bash
# Tabular ONNX models served end to end: wirespeed (`backend = "onnx"`)
# against KServe's ModelServer running the same files with onnxruntime
# (benchmarks/scripts/kserve_onnx.py), one row of V2 JSON, one client
# (`wirespeed bench -c 1`, closed loop), windows of the two servers
# interleaved. The models are those of tests/test_onnx_ml.py: a random
# forest (100 trees), XGBoost (100 trees), gradient boosting (50 trees)
# and a StandardScaler + LogisticRegression pipeline.
# Usage: benchmarks/scripts/onnx_served.sh   (from the repository root,
# after `cargo build --release -p wirespeed` and ./scripts/test's .venv)
set -euo pipefail
cd "$(dirname "$0")/../.."
W=${W:-target/release/wirespeed}
OUT=${OUT:-$(mktemp -d)}
export WIRESPEED_METRICS=127.0.0.1:0

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
ready() { for _ in $(seq 600); do curl -sf "$1" >/dev/null && return 0; sleep 0.1; done; echo "not ready: $1" >&2; exit 1; }

.venv/bin/python - "$OUT/models" <<'PY'
import sys
from pathlib import Path

import onnx

sys.path.insert(0, "tests")
import test_onnx_ml  # noqa: E402

root = Path(sys.argv[1])
for name in ["forest", "xgboost", "boosting", "pipeline"]:
    (root / name).mkdir(parents=True)
    onnx.save(test_onnx_ml.CONVERTED[name], root / name / "model.onnx")
    (root / name / "config.toml").write_text('backend = "onnx"\n')
PY

"$W" serve --models "$OUT/models" --http 127.0.0.1:9700 --grpc off >"$OUT/wirespeed.log" 2>&1 & pids+=($!)
.venv/bin/python benchmarks/scripts/kserve_onnx.py "$OUT/models" --http_port 9710 --grpc_port 9711 \
    >"$OUT/kserve.log" 2>&1 & pids+=($!)
ready http://127.0.0.1:9700/v2/health/ready
ready http://127.0.0.1:9710/v2/models/forest/ready

for model in forest xgboost boosting pipeline; do
    input=$(.venv/bin/python -c "import onnx; print(onnx.load('$OUT/models/$model/model.onnx').graph.input[0].name)")
    echo "== $model: one row of V2 JSON, one client; wirespeed, then KServe + onnxruntime"
    "$W" bench http://127.0.0.1:9700 --compare http://127.0.0.1:9710 --model "$model" --input "$input" \
        --body fp32:1x8 -c 1 --json "$OUT/$model.json"
done
echo "figures in $OUT"
