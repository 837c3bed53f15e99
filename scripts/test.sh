#!/usr/bin/env bash
# The test command (`pnpm test`): start the real servers, build, run every test, write the
# backend × behaviour matrix. In CI (CI=true) every server must come up; locally
# DEADBOLT_BACKENDS=redis,mysql narrows both the servers and the backend test files.
# Test files given as arguments run instead of all (`pnpm matrix` passes the conformance files).
# The tests run in lanes side by side, then the server restarts on their own: scripts/run-tests.mjs
# says how the lanes are chosen; the README gives the time budget.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "[test] installing what is missing (pnpm, the workspace's packages), then starting the servers" >&2
bash scripts/bootstrap.sh
bash test-matrix/up
# The bench's report test renders report.html in Debian's headless Chromium.
command -v chromium >/dev/null || bash test-matrix/lib.sh apt chromium
echo "[test] building and type-checking" >&2
pnpm -s build
pnpm -s typecheck
# About 45 s: the promise rules need the type checker, on the sources and the tests alike. A finding
# fails the run before any test.
echo "[test] linting and checking the format" >&2
pnpm -s lint
pnpm -s format:check
# About 25 s: the API reference (TypeDoc), which fails on a public export without a doc comment
# and on a {@link} that resolves to nothing.
echo "[test] building the API reference" >&2
pnpm -s docs
exec node scripts/run-tests.mjs "$@"
