#!/usr/bin/env bash
# Makes a fresh clone runnable: pnpm (the version pinned in package.json) and the workspace's
# packages. Idempotent, quiet, and quick when everything is already there.
set -euo pipefail
cd "$(dirname "$0")/.."
want=$(sed -n 's/.*"packageManager": "pnpm@\([^"]*\)".*/\1/p' package.json)
if [ "$(pnpm --version 2>/dev/null || true)" != "$want" ]; then
  echo "[bootstrap] installing pnpm $want" >&2
  if ! { corepack enable pnpm >/dev/null 2>&1 && COREPACK_ENABLE_DOWNLOAD_PROMPT=0 pnpm --version >/dev/null 2>&1; }; then
    # Corepack can fail to verify a release's signature (older corepack, newer npm keys): its shim
    # then stands in npm's way, so take it out before installing pnpm from the npm registry.
    corepack disable pnpm >/dev/null 2>&1 || true
    npm install --global --silent "pnpm@$want" >/dev/null
  fi
fi
pnpm install --frozen-lockfile --reporter=silent
