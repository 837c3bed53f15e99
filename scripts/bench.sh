#!/usr/bin/env bash
# The main job on a fresh machine: `bash scripts/bench.sh [bench options]`. Installs what is missing
# (pnpm, the workspace's packages), starts every store the benchmark uses that test-matrix can start
# here (installing the servers from Debian and Maven Central the first time), builds, and runs the
# benchmark on memory and every store that answers. A store that cannot be started is left out,
# named, and the run goes on: with none, it benchmarks the in-memory backend alone.
# `--only memory` starts nothing. `pnpm bench` is the same run without starting anything.
set -euo pipefail
cd "$(dirname "$0")/.."
say() { echo "[bench] $*" >&2; }
say "installing what is missing (pnpm, the workspace's packages)"
bash scripts/bootstrap.sh
stores=(redis redis-redlock mysql postgres zookeeper etcd cassandra)
only=""
for ((i = 1; i <= $#; i++)); do
  case ${!i} in --only) j=$((i + 1)); only=${!j:-};; --only=*) only=${!i#--only=};; esac
done
if [ -n "$only" ]; then
  wanted=()
  for s in "${stores[@]}"; do
    name=$s; [ "$s" = redis-redlock ] && name=redlock # the bench's name for the five Redlock nodes
    case ",$only," in *",$name,"*) wanted+=("$s");; esac
  done
  stores=("${wanted[@]}")
fi
if [ ${#stores[@]} -gt 0 ]; then
  say "starting the stores (${stores[*]}); the first time this installs them, a few minutes"
  bash test-matrix/up "${stores[@]}" || say "some stores did not start (above): the benchmark leaves them out"
fi
say "building the packages (tsc -b: about 25 s from a fresh clone, a second or two after)"
pnpm -s build
exec node packages/bench/dist/cli.js "$@"
