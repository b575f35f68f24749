# Sourced by the scripts that measure wirespeed beside the peers: where the
# peers' venvs and models are (../shared/peers/setup.sh makes them, in $R),
# the wirespeed binary ($W), the output folder ($OUT), and `ready URL`,
# which waits for a server to answer. Processes started with `... & pids+=($!)`
# are stopped on exit.
set -euo pipefail
# Each wirespeed started here serves its metrics listener on a free port.
export WIRESPEED_METRICS=${WIRESPEED_METRICS:-127.0.0.1:0}
R=${R:-/tmp/research_e}
PEERS=${PEERS:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)/shared/peers}
W=${W:-target/release/wirespeed}
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
[ -x "$R/venv_ks/bin/python" ] && [ -x "$R/venv_mls/bin/mlserver" ] && [ -d "$R/models" ] || R="$R" bash "$PEERS/setup.sh"

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
ready() { for _ in $(seq 600); do curl -sf "$1" >/dev/null && return 0; sleep 0.1; done; echo "not ready: $1" >&2; exit 1; }
