#!/usr/bin/env bash
# What metrics cost: the same Titanic row against wirespeed with metrics
# off and with metrics on (the defaults: Triton's counters, latency
# histograms, a scrape every second as a busy Prometheus would), windows
# interleaved in one run. Throughput at 16 connections (closed loop), and
# p50 at one connection.
# Usage: benchmarks/scripts/metrics.sh   (from the repository root, after
# `cargo build --release -p wirespeed`)
set -euo pipefail
export WIRESPEED_METRICS=127.0.0.1:0
W=${W:-target/release/wirespeed}
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
ready() { for _ in $(seq 600); do curl -sf "$1" >/dev/null && return 0; sleep 0.1; done; echo "not ready: $1" >&2; exit 1; }

"$W" serve --models models --http 127.0.0.1:9800 --grpc off --metrics off >"$OUT/off.log" 2>&1 & pids+=($!)
"$W" serve --models models --http 127.0.0.1:9810 --grpc off >"$OUT/on.log" 2>&1 & pids+=($!)
ready http://127.0.0.1:9800/v2/health/ready
ready http://127.0.0.1:9810/v2/health/ready
# Prometheus scrapes every 15 s by default; once a second is harsher.
(while sleep 1; do curl -s http://127.0.0.1:9810/metrics >/dev/null; done) & pids+=($!)

for c in 16 1; do
    "$W" bench http://127.0.0.1:9800 --compare http://127.0.0.1:9810 -c "$c" \
        --warmup 2 --window 2 --min-windows 6 --max-windows 12 --stable 0.02 \
        --json "$OUT/metrics_c$c.json"
done
echo "results in $OUT"
