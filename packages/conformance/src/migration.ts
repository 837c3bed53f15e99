import { migratingBackend, type LockBackend, type MigratingBackend, type MigrationPhase } from '@deadbolt/core';
import type { ConformanceHarness, ConformanceOptions } from './context.js';

const childModule = new URL('./migration-child.js', import.meta.url).href;

/**
 * The whole shared suite for a migration from one store to another: every behaviour runs against
 * `migratingBackend({ from, to, phase })` (default `dual`) built from the two stores' own suite
 * options, child processes included. The harness reads and breaks both stores:
 * - `inspect` lists the owners found in either store;
 * - `loseClaim` (and `loseSharedClaim`) removes the claim from `to` only, the second store (a loss
 *   in either store must abort the lock);
 * - `inspectShared` lists the owners of shared claims found in either store;
 * - `dropConnection` cuts both stores' connections, `restartServer` restarts `to`'s server;
 * - the fault proxy sits between the backend and `from`'s store, the one every call goes to first
 *   (so a partitioned process cannot even learn that a key is busy, as the fault behaviours
 *   expect); core's tests stage a silent `to` behind a held `from`.
 * Child processes, the unreachable store, the fault proxy, time zones, other namespaces,
 * credentials (on `from`) and slow pollers come from the sides' options where they offer them. The
 * factory's hostile options (35) are each store's own behaviour; here core's entry points get them.
 */
export function migrationSuiteOptions(
  from: ConformanceOptions,
  to: ConformanceOptions,
  phase: MigrationPhase = 'dual',
): ConformanceOptions {
  const pair = async (a: LockBackend | Promise<LockBackend>, b: LockBackend | Promise<LockBackend>) =>
    migratingBackend({ from: await a, to: await b, phase });
  const sides = (backend: LockBackend) => backend as MigratingBackend;
  const [fh, th] = [from.harness, to.harness];
  const harness: ConformanceHarness = {
    async inspect(key) {
      const [a, b] = await Promise.all([fh.inspect(key), th.inspect(key)]);
      return [...new Set([...a, ...b])];
    },
    ...(th.loseClaim ? { loseClaim: (key: string) => th.loseClaim!(key) } : {}),
    ...(fh.inspectShared && th.inspectShared && th.loseSharedClaim
      ? {
          async inspectShared(key: string) {
            const [a, b] = await Promise.all([fh.inspectShared!(key), th.inspectShared!(key)]);
            return [...new Set([...a, ...b])];
          },
          loseSharedClaim: (key: string, owner: string) => th.loseSharedClaim!(key, owner),
        }
      : {}),
    ...(fh.dropConnection && th.dropConnection
      ? {
          async dropConnection(backend: LockBackend, key: string) {
            await Promise.all([fh.dropConnection!(sides(backend).from, key), th.dropConnection!(sides(backend).to, key)]);
          },
        }
      : {}),
    ...(th.restartServer ? { restartServer: th.restartServer } : {}),
    ...(fh.retained || th.retained
      ? {
          async retained(backend: LockBackend) {
            const [a, b] = await Promise.all([fh.retained?.(sides(backend).from) ?? 0, th.retained?.(sides(backend).to) ?? 0]);
            return a + b;
          },
        }
      : {}),
    ...(fh.scanCost || th.scanCost
      ? {
          async scanCost(key: string) {
            const [a, b] = await Promise.all([fh.scanCost?.(key) ?? 0, th.scanCost?.(key) ?? 0]);
            return a + b;
          },
        }
      : {}),
  };
  const options: ConformanceOptions = {
    name: `migration ${from.name} -> ${to.name} (${phase})`,
    createBackend: () => pair(from.createBackend(), to.createBackend()),
    harness,
    ttlMs: Math.max(from.ttlMs ?? 0, to.ttlMs ?? 0) || undefined,
    // Each store's own suite runs its full count; what a pair adds is the dual phase's two claims a
    // cycle (and the phases' token floors), which leave their garbage in far fewer cycles.
    garbageCycles: Math.min(from.garbageCycles ?? 10_000, to.garbageCycles ?? 10_000, 2_000),
    exclusionRounds: Math.min(from.exclusionRounds ?? 30, to.exclusionRounds ?? 30),
    createUnreachableBackend: null,
    network: null,
    // A pair has no factory of its own: each store's is fed by that store's own suite.
    factory: null,
  };
  const fence = to.fence ?? from.fence;
  if (fence) options.fence = fence;
  if (from.child && to.child)
    options.child = { module: childModule, export: 'migratingFromConfigs', options: { from: from.child, to: to.child, phase } };
  if (to.createUnreachableBackend) options.createUnreachableBackend = () => pair(from.createBackend(), to.createUnreachableBackend!());
  if (from.network) {
    const network = from.network;
    options.network = {
      store: network.store,
      createBackend: (via, all, extra) => pair(network.createBackend(via, all, extra), to.createBackend()),
    };
  }
  const [fromOther, toOther] = [from.createBackendInOtherNamespace, to.createBackendInOtherNamespace];
  if (fromOther && toOther) options.createBackendInOtherNamespace = () => pair(fromOther(), toOther());
  const withCredentials = from.createBackendWithCredentials;
  if (withCredentials)
    options.createBackendWithCredentials = (user, password, address) => pair(withCredentials(user, password, address), to.createBackend());
  if (from.child && to.child && (from.slowPollChild || to.slowPollChild)) {
    const [fromChild, toChild] = [from.child, to.child];
    options.slowPollChild = (ms) => ({
      module: childModule,
      export: 'migratingFromConfigs',
      options: { from: from.slowPollChild?.(ms) ?? fromChild, to: to.slowPollChild?.(ms) ?? toChild, phase },
    });
  }
  const fromZone = from.createBackendInTimeZone;
  const toZone = to.createBackendInTimeZone;
  if (fromZone || toZone) {
    options.createBackendInTimeZone = (zone) =>
      pair(fromZone ? fromZone(zone) : from.createBackend(), toZone ? toZone(zone) : to.createBackend());
  }
  return options;
}
