#!/usr/bin/env bash
# One Terminal-Bench 2 task through `harbor run` with baton as the agent, on Docker.
# UNTESTED: the machines this project runs on have no Docker. Needs: docker, Python 3.12+,
# network for Harbor's dataset and images, a model server the containers can reach.
#
#   BATON_ENDPOINT=http://10.0.0.5:8000/v1 BATON_API_KEY=sk-... tools/harbor/smoke.sh [TASK]
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
task="${1:-hello-world}"
: "${BATON_ENDPOINT:?set BATON_ENDPOINT to the model server as the containers reach it}"
command -v docker >/dev/null || { echo "smoke.sh: docker is not installed" >&2; exit 2; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install -q harbor==0.26.0 "$root/tools/harbor"

# A static binary runs in any task image; fall back to the host build.
if rustup target list --installed 2>/dev/null | grep -q x86_64-unknown-linux-musl; then
    (cd "$root" && cargo build --release --target x86_64-unknown-linux-musl)
    bin="$root/target/x86_64-unknown-linux-musl/release/baton"
else
    (cd "$root" && cargo build --release)
    bin="${CARGO_TARGET_DIR:-$root/target}/release/baton"
fi

BATON_HARBOR_BINARY="$bin" "$work/venv/bin/harbor" run \
    -d terminal-bench/terminal-bench-2 -t "$task" \
    --agent baton_harbor:BatonAgent \
    --jobs-dir "$work/jobs" -n 1
trial="$(find "$work/jobs" -name trajectory.json | head -n 1)"
test -n "$trial" || { echo "smoke.sh: no trajectory.json was written" >&2; exit 1; }
"$work/venv/bin/python" - "$trial" <<'PY'
import sys
from harbor.models.trajectories import Trajectory
t = Trajectory.model_validate_json(open(sys.argv[1]).read())
print(f"ok: {t.schema_version}, {len(t.steps)} steps, model {t.agent.model_name}")
PY
