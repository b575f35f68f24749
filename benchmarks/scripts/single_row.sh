#!/usr/bin/env bash
# One Titanic passenger in-process: leaves (Go, benchmarks/peers/leaves)
# against wirespeed-trees (criterion), alternated twice in one run so a slow
# moment of the machine hits both. Needs Go (the module proxy) and Rust.
#
#   benchmarks/scripts/single_row.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
for round in 1 2; do
    echo "== round $round: leaves"
    (cd benchmarks/peers/leaves && go test -bench . -count 3 | grep ns/op)
    echo "== round $round: wirespeed"
    cargo bench -q -p wirespeed-trees --bench single_row -- --noplot 2>/dev/null | grep -E "^titanic|time:"
done
