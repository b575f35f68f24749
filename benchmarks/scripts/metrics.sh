#!/usr/bin/env bash
# What observability costs: the same Titanic row against three wirespeeds
# in one run, windows interleaved: metrics and tracing off; metrics on (the
# defaults: Triton's counters, latency histograms, a scrape every second as
# a busy Prometheus would); and metrics on plus OpenTelemetry traces
# sampled at 1 % (--trace-sample-ratio 0.01), exported over OTLP to a
# collector that drops them unread (otlp_sink.py). Throughput at 16 connections
# (closed loop), and p50 at one connection.
# Usage: benchmarks/scripts/metrics.sh   (from the repository root, after
# `cargo build --release -p wirespeed` and with .venv from scripts/test)
set -euo pipefail
export WIRESPEED_METRICS=127.0.0.1:0
W=${W:-target/release/wirespeed}
PY=${PY:-.venv/bin/python}
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
ready() { for _ in $(seq 600); do curl -sf "$1" >/dev/null && return 0; sleep 0.1; done; echo "not ready: $1" >&2; exit 1; }

"$PY" benchmarks/scripts/otlp_sink.py 127.0.0.1:9830 2>"$OUT/sink.log" & pids+=($!)
"$W" serve --models models --http 127.0.0.1:9800 --grpc off --metrics off >"$OUT/off.log" 2>&1 & pids+=($!)
"$W" serve --models models --http 127.0.0.1:9810 --grpc off >"$OUT/on.log" 2>&1 & pids+=($!)
"$W" serve --models models --http 127.0.0.1:9820 --grpc off \
    --otlp-endpoint http://127.0.0.1:9830 --trace-sample-ratio 0.01 >"$OUT/traced.log" 2>&1 & pids+=($!)
ready http://127.0.0.1:9800/v2/health/ready
ready http://127.0.0.1:9810/v2/health/ready
ready http://127.0.0.1:9820/v2/health/ready
# Prometheus scrapes every 15 s by default; once a second is harsher.
(while sleep 1; do
    curl -s http://127.0.0.1:9810/metrics >/dev/null
    curl -s http://127.0.0.1:9820/metrics >/dev/null
done) & pids+=($!)

for c in 16 1; do
    "$W" bench http://127.0.0.1:9800 --compare http://127.0.0.1:9810 http://127.0.0.1:9820 -c "$c" \
        --warmup 2 --window 2 --min-windows 6 --max-windows 12 --stable 0.02 \
        --json "$OUT/metrics_c$c.json"
done
cleanup
echo "$(cat "$OUT/sink.log")"
echo "results in $OUT"
