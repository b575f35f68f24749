#!/usr/bin/env bash
# Sequence batching at 64 concurrent sequences: Triton's perf_analyzer
# (unmodified; it reads the model's sequence_batching and sends sequences of
# 20 requests with sequence_id, start and end) against an accumulator whose
# running sum is the server's implicit state (ONNX: OUTPUT = INPUT + SUM_IN,
# SUM_OUT = OUTPUT), beside the same graph served without sequences (dynamic
# batching, the client sending SUM_IN itself): what carrying the state and
# ordering each sequence costs. Rounds alternate; throughput and p99 of each.
# Usage: benchmarks/scripts/sequences.sh   (from the repository root, after
# `cargo build --release -p wirespeed` and ./scripts/test, which fetches
# perf_analyzer into .tools and makes .venv)
set -euo pipefail
cd "$(dirname "$0")/../.."
W=${WIRESPEED:-target/release/wirespeed}
ROUNDS=${ROUNDS:-3}
OUT=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; rm -rf "$OUT"' EXIT
.venv/bin/python - "$OUT" <<'PY'
import sys
from pathlib import Path
sys.path.insert(0, "tests")
import onnx
from test_sequences import ACCUMULATOR, accumulator_onnx
root = Path(sys.argv[1])
for name, config in [
    ("accumulator", ACCUMULATOR),
    ("stateless", """
name: "stateless"
platform: "onnxruntime_onnx"
max_batch_size: 8
dynamic_batching { max_queue_delay_microseconds: 200 }
input [ { name: "INPUT" data_type: TYPE_INT64 dims: [ 1 ] }, { name: "SUM_IN" data_type: TYPE_INT64 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT64 dims: [ 1 ] }, { name: "SUM_OUT" data_type: TYPE_INT64 dims: [ 1 ] } ]
"""),
]:
    (root / name / "1").mkdir(parents=True)
    (root / name / "config.pbtxt").write_text(config)
    onnx.save(accumulator_onnx(), root / name / "1" / "model.onnx")
PY
"$W" serve --models "$OUT" --http 127.0.0.1:9760 --grpc 127.0.0.1:9761 --metrics off >"$OUT/log" 2>&1 & pids+=($!)
until curl -sf http://127.0.0.1:9760/v2/health/ready >/dev/null; do
    kill -0 "${pids[0]}" 2>/dev/null || { cat "$OUT/log"; exit 1; }
    sleep 0.1
done
CUDA=$(.venv/bin/python -c "import nvidia.cuda_runtime; print(list(nvidia.cuda_runtime.__path__)[0] + '/lib')")
pa() {
    # p99 at 64 concurrent callers on a 2-core machine that also runs the
    # client moves by tens of percent between windows: a wide stability band.
    LD_LIBRARY_PATH=$CUDA .tools/perf_analyzer -m "$1" -u 127.0.0.1:9761 -i grpc --concurrency-range 64 \
        --percentile 99 --measurement-interval 3000 --stability-percentage 50 --max-trials 10 "${@:2}" \
        >"$OUT/pa.txt" 2>&1 || true
    grep -E "^Concurrency: 64" "$OUT/pa.txt" | sed "s/^/$1: /" || { echo "$1: no stable measurement"; tail -3 "$OUT/pa.txt"; }
}
for round in $(seq "$ROUNDS"); do
    echo "== round $round"
    pa accumulator --sequence-length 20
    pa stateless
done
