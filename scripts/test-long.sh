#!/usr/bin/env bash
# The long profile (`pnpm test:long`; `.ci/nightly` runs it), two parts one after the other:
# 1. the model-based tests (test/model.test.ts) with ten times the default budget per target
#    (DEADBOLT_MODEL_PROFILE=long): generated programs on every store and migration, about 25 minutes;
# 2. Cassandra with three nodes at replication factor 3 under the cluster faults, judged by the
#    history checker as the other clusters are in `pnpm test`, about 21 minutes. Not part of
#    `pnpm test` (CI): three Cassandra nodes serving four polling workers keep both cores of the
#    test machine busy (55-65 % of a core each), enough to starve the other clusters' runs beside
#    them, and restarting a node takes a minute. Writes test-matrix/results/clusters-long.md.
# DEADBOLT_LONG_PARTS=model (or cluster) runs one part only. Exits non-zero if either part failed.
set -euo pipefail
cd "$(dirname "$0")/.."
parts="${DEADBOLT_LONG_PARTS:-model,cluster}"
bash scripts/bootstrap.sh
bash test-matrix/up
case ",$parts," in *,cluster,*) bash test-matrix/up cassandra-cluster ;; esac
pnpm -s build
failed=0
case ",$parts," in *,model,*)
  echo "[test:long] the model-based tests, long profile" >&2
  DEADBOLT_MODEL_PROFILE=long pnpm -s vitest run test/model.test.ts || failed=1 ;;
esac
case ",$parts," in *,cluster,*)
  echo "[test:long] Cassandra's cluster faults" >&2
  DEADBOLT_LONG=1 DEADBOLT_CLUSTER_ONLY="${DEADBOLT_CLUSTER_ONLY:-^cassandra}" pnpm -s vitest run test/cluster-faults.test.ts || failed=1 ;;
esac
exit "$failed"
