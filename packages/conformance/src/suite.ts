import { createLocker, MigratingBackend, type Capabilities, type Fence, type Locker, type LockerOptions } from '@deadbolt/core';
import { fullCapabilities } from '@deadbolt/core/backend';
import { afterEach, beforeEach, describe, expect, it } from './harness.js';
import { ChildHolder } from './children.js';
import type { ConformanceHarness, ConformanceOptions } from './context.js';
import { defineCoreBehaviours } from './core-behaviours.js';
import { defineFaultBehaviours } from './faults.js';
import { defineInputBehaviours } from './input-behaviours.js';
import { defineLeaseBehaviours } from './lease-behaviours.js';
import { defineOrderBehaviours } from './order-behaviours.js';
import { defineMultiBehaviours } from './multi-behaviours.js';
import { defineHardeningBehaviours } from './hardening.js';
import { defineSharedBehaviours } from './shared-behaviours.js';
import { defineFenceBehaviours } from './fence-behaviours.js';
import { defineInspectBehaviours } from './inspect-behaviours.js';
import { fenceFromConfig } from './migration-child.js';
import { FencedRegister } from './register.js';

/**
 * Registers the whole conformance suite (behaviours 1–37, listed in the package's README) for one backend with
 * vitest. Groups switch on by the backend's capabilities; a behaviour that does not apply is listed
 * as skipped with its reason, so reports show it as not applicable rather than passed.
 */
export function defineConformanceSuite(options: ConformanceOptions): void {
  const { harness } = options;
  let capabilities: Required<Capabilities>;
  let probeHasFloor = false;
  let dualMigration = false;
  let probeAddress: string | undefined;
  const lockers: Locker[] = [];
  const children: ChildHolder[] = [];
  let keySeq = 0;
  const runId = Math.random().toString(36).slice(2, 8);

  /** A fresh key per test, so tests never see each other's leftovers. */
  const freshKey = (label = 'k') => `${options.keyPrefix ?? 'conformance'}/${runId}/${++keySeq}/${label}`;

  async function makeLocker(lockerOptions: LockerOptions = {}): Promise<Locker> {
    const locker = createLocker(await options.createBackend(), { ttlMs: ttl(), ...lockerOptions });
    lockers.push(locker);
    return locker;
  }

  const fences: Fence[] = [];
  async function makeFence(): Promise<Fence> {
    if (!options.fence) throw new Error('no fence config');
    const fence = await fenceFromConfig(options.fence);
    fences.push(fence);
    return fence;
  }

  async function spawnChild(lockerOptions: LockerOptions = {}, env?: Record<string, string>, config = options.child): Promise<ChildHolder> {
    if (!config) throw new Error('no child config');
    const register = currentRegister;
    const child = await ChildHolder.spawn(
      config,
      { ttlMs: ttl(), ...lockerOptions },
      {
        read: () => counter.value,
        write: (value: number) => {
          counter.value = value;
        },
        fencedWrite: (token: bigint, checkedAt?: bigint) => register.write(token, 'child', `child:${child.process.pid}`, checkedAt),
      },
      env,
    );
    children.push(child);
    return child;
  }

  const counter = { value: 0 };
  let currentRegister = new FencedRegister<string>();

  function ttl(): number {
    const granularity = capabilities.ttlGranularityMs;
    const wanted = Math.max(options.ttlMs ?? 1000, capabilities.minTtlMs);
    return Math.ceil(wanted / granularity) * granularity;
  }

  /** A test that applies only when `skipReason` is undefined; otherwise listed as `[n/a: reason]`. */
  const itWhen = (skipReason: () => string | undefined, name: string, fn: () => Promise<void>, timeout?: number) => {
    const reason = skipReason();
    return reason === undefined ? it(name, fn, timeout) : it.skip(`${name} [n/a: ${reason}]`, fn);
  };
  const crossProcessIt = (name: string, fn: () => Promise<void>, timeout?: number) =>
    itWhen(() => (capabilities.crossProcess ? undefined : 'in-process backend'), name, fn, timeout);
  const semIt = (name: string, fn: () => Promise<void>, timeout?: number) =>
    itWhen(() => (capabilities.semaphore ? undefined : 'the backend has no semaphores'), name, fn, timeout);
  const rwIt = (name: string, fn: () => Promise<void>, timeout?: number) =>
    itWhen(() => (capabilities.readWrite ? undefined : 'the backend has no read-write locks'), name, fn, timeout);
  const hookIt = (hook: keyof ConformanceHarness, name: string, fn: () => Promise<void>, timeout?: number) =>
    itWhen(() => (harness[hook] ? undefined : `harness has no ${hook}`), name, fn, timeout);

  describe(`conformance: ${options.name}`, async () => {
    const probe = await options.createBackend();
    capabilities = fullCapabilities(probe.capabilities);
    probeHasFloor = typeof probe.raiseTokenFloor === 'function';
    dualMigration = probe instanceof MigratingBackend && probe.phase === 'dual';
    probeAddress = probe.address;
    await probe.close();
    const T = ttl();
    const renewMs = T / 3;

    // No store is emptied between tests: every test uses keys of its own (`freshKey`), and suites of
    // other backends may be using the same store at the same time (see scripts/test.sh).
    beforeEach(() => {
      counter.value = 0;
      currentRegister = new FencedRegister<string>();
    });

    afterEach(async () => {
      await Promise.all(children.splice(0).map((c) => c.kill()));
      await Promise.allSettled(lockers.splice(0).map((l) => l.close()));
      await Promise.allSettled(fences.splice(0).map((f) => f.close()));
    });

    it('declares honest capabilities', () => {
      expect(capabilities.fencing).toBe('strict');
      expect(['fifo', 'none']).toContain(capabilities.fairness);
      expect(['ttl', 'session']).toContain(capabilities.lease);
      expect(['push', 'poll']).toContain(capabilities.wake);
      expect(capabilities.minTtlMs).toBeGreaterThan(0);
      expect(capabilities.ttlGranularityMs).toBeGreaterThan(0);
      // A backend made from a URL names its store in events (never with credentials: `addressOf`).
      if (options.network) {
        const stores = [options.network.store].flat();
        expect(probeAddress, 'a backend made from a URL says where its store is (LockBackend.address)').toBeDefined();
        expect(
          stores.some((s) => probeAddress!.includes(`${s.host}:${s.port}`)),
          `${probeAddress} names the store`,
        ).toBe(true);
      }
      // A backend that claims cross-process exclusion must let the suite prove it.
      if (capabilities.crossProcess) expect(options.child, 'crossProcess backends must give a child config').toBeDefined();
      // Shared claims must be real and inspectable for groups 25 and 26 to prove anything.
      if (capabilities.semaphore || capabilities.readWrite) {
        expect(harness.inspectShared, 'shared claims need harness.inspectShared').toBeDefined();
        // Only a run on a live store leaves out the hooks that break claims.
        expect(!harness.loseClaim || harness.loseSharedClaim, 'a harness that can lose claims loses shared ones too').toBeTruthy();
      }
    });

    const context = {
      options,
      harness,
      freshKey,
      makeLocker,
      spawnChild,
      lockers,
      T,
      renewMs,
      capabilities,
      itWhen,
      crossProcessIt,
      semIt,
      rwIt,
      hookIt,
      counter,
      register: () => currentRegister,
      makeFence,
      probeFloor: () => probeHasFloor,
      dualMigration,
    };
    defineCoreBehaviours(context);
    defineLeaseBehaviours(context);
    defineOrderBehaviours(context);
    defineInputBehaviours(context);
    defineFaultBehaviours(context);
    defineSharedBehaviours(context);
    defineMultiBehaviours(context);
    defineFenceBehaviours(context);
    defineInspectBehaviours(context);
    defineHardeningBehaviours(context);
  });
}
