#!/usr/bin/env bash
# `wirespeed bench scenario batching`: Clipper's batching figure on a model
# with a fixed cost per call, batching in front of KServe, and the
# batcher's cost on Titanic rows. It starts:
#   - KServe serving the peers' `xgb` (../shared/peers, venvs in $R), gRPC
#     on 8281;
#   - wirespeed on the models below (written into $OUT): delay_none,
#     delay_fixed, delay_dynamic, delay_adaptive (identity, 10 ms a call,
#     one call at a time), delay_slo (the same with [slo] 25 ms), upstream_alone and upstream_batched (KServe's
#     xgb over gRPC, without and with [batching]), and titanic with
#     [batching];
#   - wirespeed on the bundled models (titanic without [batching]), the
#     baseline of the batcher's cost.
# Usage: benchmarks/scripts/batching.sh   (from the repository root, after
# `cargo build --release -p wirespeed`; SHORT=1 for a quick look)
set -euo pipefail
. "$(dirname "$0")/peers.sh"

M="$OUT/models"
identity() {  # NAME [batching table]
    mkdir -p "$M/$1"
    printf 'backend = "identity"\ndelay_ms = 10\nmax_concurrency = 1\n[[inputs]]\nname = "x"\ndatatype = "FP32"\nshape = [-1, 4]\n[[outputs]]\nname = "y"\ndatatype = "FP32"\nshape = [-1, 4]\n%s' "${2:-}" >"$M/$1/config.toml"
}
identity delay_none
identity delay_fixed $'[batching]\nmax_batch_size = 16\npreferred_batch_sizes = [16]\nmax_queue_delay_us = 100000\n'
identity delay_dynamic $'[batching]\nmax_batch_size = 64\nmax_queue_delay_us = 2000\n'
identity delay_adaptive $'[batching]\nmax_batch_size = 64\nmode = "adaptive"\nslo_ms = 20\n'
identity delay_slo $'[slo]\nlatency_ms = 25\ndefault_output = { y = [0, 0, 0, 0] }\n'
upstream() {  # NAME [extra keys]
    mkdir -p "$M/$1"
    printf 'backend = "upstream"\nurl = "grpc://127.0.0.1:8281"\nmodel = "xgb"\n%s[[inputs]]\nname = "x"\ndatatype = "FP32"\nshape = [-1, 10]\n[[outputs]]\nname = "predict"\ndatatype = "INT64"\nshape = [-1, 1]\n%s' "${2:-}" "${3:-}" >"$M/$1/config.toml"
}
upstream upstream_alone
upstream upstream_batched $'max_concurrency = 2\n' $'[batching]\nmax_batch_size = 64\nmax_queue_delay_us = 1000\n'
mkdir -p "$M/titanic"
cp models/titanic/config.toml models/titanic/model.json "$M/titanic/"
printf '\n[batching]\nmax_batch_size = 64\n' >>"$M/titanic/config.toml"

(cd "$R" && OMP_NUM_THREADS=1 exec "$R/venv_ks/bin/python" "$PEERS/kserve_server.py" "$R/models" \
    --http_port 8280 --grpc_port 8281 >"$OUT/kserve.log" 2>&1) & pids+=($!)
"$W" serve --models "$M" --http 127.0.0.1:9700 --grpc off >"$OUT/batching.log" 2>&1 & pids+=($!)
"$W" serve --models models --http 127.0.0.1:9710 --grpc off >"$OUT/plain.log" 2>&1 & pids+=($!)
ready http://127.0.0.1:8280/v2/health/ready
ready http://127.0.0.1:9700/v2/health/ready
ready http://127.0.0.1:9710/v2/health/ready

"$W" bench scenario batching --http http://127.0.0.1:9700 --grpc off \
    --compare http://127.0.0.1:9710 ${SHORT:+--short} --json "$OUT/batching.json"
echo "results in $OUT"
