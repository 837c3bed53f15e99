import { createLocker, MigratingBackend, type Capabilities, type Fence, type Locker, type LockerOptions } from '@deadbolt/core';
import { fullCapabilities } from '@deadbolt/core/testing';
import { defaultRunner } from './harness.js';
import { ChildHolder } from './children.js';
import type { ConformanceHarness, ConformanceOptions, SuiteContext, TestRunner } from './context.js';
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
import { defineElectionBehaviours } from './election-behaviours.js';
import { fenceFromConfig } from './migration-child.js';
import { FencedRegister } from './register.js';

/**
 * The suite's groups of behaviours by name, in the order it registers them; each takes the
 * `SuiteContext` the suite builds for a backend, whose `runner` it registers its tests with.
 */
export const conformanceGroups = {
  /** 1–7: exclusion, tryLock, timeouts, aborts, release, many keys, odd keys. */
  core: defineCoreBehaviours,
  /** 8–11: renewal, crashes, pauses, lost claims. */
  lease: defineLeaseBehaviours,
  /** 12–13: fencing tokens and fairness. */
  order: defineOrderBehaviours,
  /** 14–17 and 15b: bad input, an unreachable store, close, garbage. */
  input: defineInputBehaviours,
  /** 18–24: the faults production has (resets, silences, late answers, clocks, stalls). */
  faults: defineFaultBehaviours,
  /** 25–26: semaphores and read-write locks. */
  shared: defineSharedBehaviours,
  /** 27–28: multi-key locks, reentrancy, lock-delay. */
  multi: defineMultiBehaviours,
  /** 36: fenced writes in the store. */
  fence: defineFenceBehaviours,
  /** 37: introspection. */
  inspect: defineInspectBehaviours,
  /** 38–39: leader election and once-per-fleet jobs. */
  election: defineElectionBehaviours,
  /** 29–35: what an outside audit showed the suite could not see. */
  hardening: defineHardeningBehaviours,
} as const satisfies Record<string, (ctx: SuiteContext) => void>;

/** A group of behaviours (`conformanceGroups`). */
export type ConformanceGroup = keyof typeof conformanceGroups;

/** How `defineConformanceSuite` runs: with which test runner, and which groups. */
export interface SuiteSettings {
  /** What the suite registers its tests with and asserts through. Default: vitest's, or the suite's own runner's under `deadbolt check`. */
  runner?: TestRunner;
  /** The groups to register (the capability check always runs). Default: every group. */
  groups?: readonly ConformanceGroup[];
}

/**
 * Registers the conformance suite (behaviours 1–39, listed in the package's README) for one backend
 * with the test runner: every group, or those `settings.groups` names. Groups switch on by the
 * backend's capabilities; a behaviour that does not apply is listed as skipped with its reason, so
 * reports show it as not applicable rather than passed. @throws Error for a group name it does not
 * know, before anything is registered.
 */
export function defineConformanceSuite(options: ConformanceOptions, settings: SuiteSettings = {}): void {
  const { harness } = options;
  const runner = settings.runner ?? defaultRunner;
  const { describe, it, expect, beforeEach, afterEach } = runner;
  const groups = settings.groups ?? (Object.keys(conformanceGroups) as ConformanceGroup[]);
  const unknown = groups.filter((name) => !Object.hasOwn(conformanceGroups, name));
  if (unknown.length > 0)
    throw new Error(`unknown conformance groups: ${unknown.join(', ')} (known: ${Object.keys(conformanceGroups).join(', ')})`);
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

  /**
   * A locker whose backend has already done `first` once (and let go of what it got), so its
   * connection and scripts are ready: a crash test that starts its clock at a kill then measures
   * the lease, not a cold connection made inside it under load.
   */
  async function warmLocker(first: (locker: Locker) => Promise<{ release(): Promise<unknown> } | null>): Promise<Locker> {
    const locker = await makeLocker();
    await (await first(locker))?.release();
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

  /** `ms` rounded up to a whole number of the backend's ttl steps (whole seconds on Cassandra). */
  const roundTtl = (ms: number) => Math.ceil(ms / capabilities.ttlGranularityMs) * capabilities.ttlGranularityMs;

  function ttl(): number {
    return roundTtl(Math.max(options.ttlMs ?? 1000, capabilities.minTtlMs));
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

    const context: SuiteContext = {
      runner,
      options,
      harness,
      freshKey,
      makeLocker,
      warmLocker,
      spawnChild,
      lockers,
      T,
      renewMs,
      roundTtl,
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
    for (const group of groups) conformanceGroups[group](context);
  });
}
