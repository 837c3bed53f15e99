/**
 * How a child process builds what it runs from configs: a backend, a migrating backend over two
 * stores, a fence. Kept apart from the suite so a child never loads vitest.
 */
import { migratingBackend, type Fence, type LockBackend, type MigratingBackend, type MigrationPhase } from '@deadbolt/core';
import type { ChildBackendConfig } from './children.js';

/** How a child process builds a migrating backend: each store's config and the phase. */
export interface MigratingChildOptions {
  from: ChildBackendConfig;
  to: ChildBackendConfig;
  phase: MigrationPhase;
}

/** Builds one side from its config, as the child does for a plain backend. */
export async function backendFromConfig(config: ChildBackendConfig): Promise<LockBackend> {
  const factory = (await import(config.module))[config.export] as (options: unknown) => LockBackend | Promise<LockBackend>;
  if (typeof factory !== 'function') throw new Error(`${config.module} has no export ${config.export}`);
  return factory(config.options);
}

/** A store's `Fence` from its config (`ConformanceOptions.fence`). */
export async function fenceFromConfig(config: ChildBackendConfig): Promise<Fence> {
  const factory = (await import(config.module))[config.export] as (options: unknown) => Fence;
  if (typeof factory !== 'function') throw new Error(`${config.module} has no export ${config.export}`);
  return factory(config.options);
}

/** `migratingBackend` over the two configured stores. @throws what `migratingBackend` throws. */
export async function migratingFromConfigs(options: MigratingChildOptions): Promise<MigratingBackend> {
  const [from, to] = await Promise.all([backendFromConfig(options.from), backendFromConfig(options.to)]);
  return migratingBackend({ from, to, phase: options.phase });
}
