#!/usr/bin/env bash
# One Terminal-Bench 2 task through `harbor run` with baton as the agent, on Docker.
# Not run by this project (its machines have no Docker); tests/harbor.rs checks that it parses,
# passes shellcheck, and stops with a reason when something it needs is missing.
# Needs: docker (a reachable daemon), Python 3.12+, network for Harbor's dataset and images,
# a model server the containers can reach.
#
#   BATON_ENDPOINT=http://10.0.0.5:8000/v1 BATON_API_KEY=sk-... tools/harbor/smoke.sh [TASK]
#
# TASK (default hello-world) is a task name of the dataset BATON_SMOKE_DATASET
# (default terminal-bench@2.0). Exit codes: 0 the trial ran and its trajectory validates,
# 1 it ran but something is wrong, 2 a requirement is missing (the message says which).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
task="${1:-hello-world}"
dataset="${BATON_SMOKE_DATASET:-terminal-bench@2.0}"

cannot_run() {
    echo "smoke.sh: cannot run: $*" >&2
    exit 2
}

[ -n "${BATON_ENDPOINT:-}" ] ||
    cannot_run "set BATON_ENDPOINT to the model server as the containers reach it"
command -v docker >/dev/null 2>&1 ||
    cannot_run "docker is not installed (harbor run starts each trial in a Docker container)"
docker info >/dev/null 2>&1 ||
    cannot_run "docker is installed but its daemon does not answer (docker info failed)"
command -v python3 >/dev/null 2>&1 || cannot_run "python3 is not installed"
python3 -c 'import sys; sys.exit(sys.version_info < (3, 12))' ||
    cannot_run "harbor needs Python 3.12 or later; python3 is $(python3 -V 2>&1)"
command -v cargo >/dev/null 2>&1 || cannot_run "cargo is needed to build baton"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install -q harbor==0.26.0 "$root/tools/harbor"

# A static binary runs in any task image; fall back to the host build.
target_dir="${CARGO_TARGET_DIR:-$root/target}"
if rustup target list --installed 2>/dev/null | grep -qx x86_64-unknown-linux-musl; then
    (cd "$root" && cargo build --release --target x86_64-unknown-linux-musl)
    bin="$target_dir/x86_64-unknown-linux-musl/release/baton"
else
    echo "smoke.sh: no musl target; the host build must match the task image's libc" >&2
    (cd "$root" && cargo build --release)
    bin="$target_dir/release/baton"
fi
[ -x "$bin" ] || { echo "smoke.sh: no binary at $bin after the build" >&2; exit 1; }

# The key reaches baton through Harbor's agent env, never a file.
BATON_HARBOR_BINARY="$bin" "$work/venv/bin/harbor" run \
    -d "$dataset" -i "$task" \
    --agent baton_harbor:BatonAgent \
    --jobs-dir "$work/jobs" -n 1
trajectory="$(find "$work/jobs" -name trajectory.json | head -n 1)"
[ -n "$trajectory" ] || { echo "smoke.sh: no trajectory.json was written" >&2; exit 1; }
"$work/venv/bin/python" - "$trajectory" <<'PY'
import sys
from harbor.models.trajectories import Trajectory
t = Trajectory.model_validate_json(open(sys.argv[1]).read())
print(f"ok: {t.schema_version}, {len(t.steps)} steps, model {t.agent.model_name}")
PY
