#!/usr/bin/env bash
# The test command (`pnpm test`): start the real servers, build, run every test, write the
# backend × behaviour matrix. In CI (CI=true) every server must come up; locally
# DEADBOLT_BACKENDS=redis,mysql narrows both the servers and the backend test files.
# Test files given as arguments run instead of all (`pnpm matrix` passes the conformance files).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
bash test-matrix/up
# The bench's report test renders report.html in Debian's headless Chromium.
command -v chromium >/dev/null || bash test-matrix/lib.sh apt chromium
pnpm -s build
pnpm -s typecheck
files=(packages/core packages/conformance)
if [ $# -gt 0 ]; then
  files=("$@")
elif [ -n "${DEADBOLT_BACKENDS:-}" ] && [ "${CI:-}" != true ]; then
  for b in ${DEADBOLT_BACKENDS//,/ }; do [ -d "packages/backend-$b" ] && files+=("packages/backend-$b"); done
else
  files=()
fi
mkdir -p test-matrix/results
status=0
pnpm -s exec vitest run --reporter=default --reporter=json --outputFile.json=test-matrix/results/vitest.json "${files[@]}" || status=$?
node test-matrix/matrix.mjs test-matrix/results/vitest.json || status=1
exit $status
