#!/usr/bin/env bash
# Makes a fresh clone runnable: pnpm (the version pinned in package.json) and the workspace's
# packages. Idempotent, quiet, and quick when everything is already there.
set -euo pipefail
cd "$(dirname "$0")/.."
want=$(sed -n 's/.*"packageManager": "pnpm@\([^"]*\)".*/\1/p' package.json)
if [ "$(pnpm --version 2>/dev/null || true)" != "$want" ]; then
  echo "[bootstrap] installing pnpm $want" >&2
  if ! { corepack enable pnpm >/dev/null 2>&1 && COREPACK_ENABLE_DOWNLOAD_PROMPT=0 pnpm --version >/dev/null 2>&1; }; then
    npm install --global --silent "pnpm@$want" >/dev/null
  fi
fi
# The zookeeper client compiles a native addon; it needs a compiler toolchain.
if ! command -v g++ >/dev/null || ! command -v make >/dev/null; then
  sudo=''; [ "$(id -u)" = 0 ] || sudo=sudo
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq build-essential python3 >/dev/null
fi
pnpm install --frozen-lockfile --reporter=silent
