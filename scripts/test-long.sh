#!/usr/bin/env bash
# The long profile (`pnpm test:long`): Cassandra with three nodes at replication factor 3 under the
# cluster faults, judged by the history checker as the other clusters are in `pnpm test`. Not part
# of `pnpm test` (CI): three Cassandra nodes serving four polling workers keep both cores of the
# test machine busy (55-65 % of a core each), enough to starve the other clusters' runs beside
# them, and restarting a node takes a minute. Writes test-matrix/results/clusters-long.md. About 21 minutes here.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
bash test-matrix/up cassandra-cluster
pnpm -s build
DEADBOLT_LONG=1 DEADBOLT_CLUSTER_ONLY="${DEADBOLT_CLUSTER_ONLY:-^cassandra}" exec pnpm -s vitest run test/cluster-faults.test.ts
