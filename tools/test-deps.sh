#!/usr/bin/env bash
# Installs the external programs the tests drive into $BATON_TEST_DEPS (default: .test-deps in
# the checkout): npm packages under node/, a Python virtualenv under venv/. Idempotent; .ci/run
# calls it. Versions are pinned so a registry release cannot change what the tests exercise.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
deps="${BATON_TEST_DEPS:-$root/.test-deps}"
mkdir -p "$deps/node"

# One package a line (keeps merges clean).
npm_packages=(
    @modelcontextprotocol/server-everything@2026.8.31
    @modelcontextprotocol/server-filesystem@2026.8.31
)
pip_packages=(
    mcp==1.30.0
)

if [ ${#npm_packages[@]} -gt 0 ]; then
    [ -f "$deps/node/package.json" ] || echo '{"private": true}' > "$deps/node/package.json"
    (cd "$deps/node" && npm install --no-audit --no-fund --loglevel=error "${npm_packages[@]}")
fi
if [ ${#pip_packages[@]} -gt 0 ]; then
    [ -x "$deps/venv/bin/python" ] || python3 -m venv "$deps/venv"
    "$deps/venv/bin/python" -m pip install -q --disable-pip-version-check "${pip_packages[@]}"
fi
echo "test deps in $deps"
