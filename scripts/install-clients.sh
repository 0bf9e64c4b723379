#!/usr/bin/env bash
# The coding agents the client tests run for real (tests/test_clients_agents.py, docs/clients.md),
# at the versions docs/clients.md reports, into one directory ($LLAMACTL_CLIENTS_DIR, default
# ~/.cache/llamactl-tests/clients): aider from PyPI into a virtual environment of its own there
# (it pins its own dependencies), the others from npm. Safe to re-run: what is installed at the
# right version is kept. The npm clients need Node.js 18+ and npm.
set -euo pipefail
dir="${LLAMACTL_CLIENTS_DIR:-$HOME/.cache/llamactl-tests/clients}"
packages=(@openai/codex@0.171.0 opencode-ai@1.18.33 @anthropic-ai/claude-code@2.1.332)
aider_version=0.86.2
mkdir -p "$dir"
if ! "$dir/aider/bin/aider" --version 2>/dev/null | grep -qx "aider $aider_version"; then
  python3 -m venv "$dir/aider"
  "$dir/aider/bin/pip" install --quiet --disable-pip-version-check "aider-chat==$aider_version"
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "install-clients: npm is not installed; the agent client tests will skip" >&2
  exit 0
fi
cd "$dir"
[ -f package.json ] || echo '{"private": true}' > package.json
npm install --no-audit --no-fund --loglevel=error "${packages[@]}"
