/**
 * The source tree's shape, checked on every run (a few milliseconds): no package's modules import
 * each other in a cycle. A cycle is how a module of public types ends up inside the code that uses
 * them, and how a group of behaviours comes to need the suite that registers it; type-only imports
 * count, because the next value import along the same edge would make the cycle real. And the
 * user entry of core holds the user API only: a backend's toolkit is `@deadbolt/core/backend`.
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');

/** Every `.ts` file under `dir`. */
function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return sources(path);
    return entry.name.endsWith('.ts') && !entry.name.endsWith('.d.ts') ? [path] : [];
  });
}

/** The files a source imports by a relative path (`import … from './x.js'`, `export … from`, `import('./x.js')`). */
function relativeImports(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  const found = new Set<string>();
  for (const match of text.matchAll(/(?:from\s+|import\s*\(\s*|import\s+)['"](\.{1,2}\/[^'"]+)['"]/g)) {
    found.add(resolve(dirname(file), match[1]!.replace(/\.js$/, '.ts')));
  }
  return [...found];
}

/** The import cycles among `files`, each as the list of files around it (depth-first search). */
function cycles(files: string[]): string[][] {
  const edges = new Map(files.map((f) => [f, relativeImports(f).filter((to) => files.includes(to))]));
  const found: string[][] = [];
  const state = new Map<string, 'open' | 'done'>();
  const path: string[] = [];
  const visit = (file: string) => {
    state.set(file, 'open');
    path.push(file);
    for (const next of edges.get(file) ?? []) {
      if (state.get(next) === 'open') found.push(path.slice(path.indexOf(next)));
      else if (!state.has(next)) visit(next);
    }
    path.pop();
    state.set(file, 'done');
  };
  for (const file of files) if (!state.has(file)) visit(file);
  return found;
}

const packages = readdirSync(join(root, 'packages'), { withFileTypes: true })
  .filter((e) => e.isDirectory())
  .map((e) => e.name);

describe('source layout', () => {
  it('sees a cycle, type-only imports included (the check itself)', () => {
    const dir = mkdtempSync(join(tmpdir(), 'deadbolt-layout-'));
    try {
      writeFileSync(join(dir, 'types.ts'), "import type { Lock } from './lock.js';\nexport interface Held { lock: Lock }\n");
      writeFileSync(join(dir, 'lock.ts'), "import type { Held } from './types.js';\nexport interface Lock { held?: Held }\n");
      writeFileSync(join(dir, 'leaf.ts'), "export { type Lock } from './lock.js';\n");
      expect(cycles(sources(dir)).map((cycle) => cycle.map((f) => relative(dir, f)).sort())).toEqual([['lock.ts', 'types.ts']]);
    } finally {
      rmSync(dir, { recursive: true });
    }
  });

  it.each(packages)('packages/%s/src has no import cycles', (name) => {
    const files = sources(join(root, 'packages', name, 'src'));
    expect(cycles(files).map((cycle) => cycle.map((f) => relative(root, f)).join(' -> '))).toEqual([]);
  });

  it('@deadbolt/core exports the user API and nothing else (toolkit: /backend, test hooks: /testing)', async () => {
    const user = Object.keys(await import('../packages/core/src/index.js')).sort();
    expect(user).toEqual([
      'BackendError',
      'BackendUnavailableError',
      'DEFAULT_FENCE_TIMEOUT_MS',
      'DEFAULT_MAX_TTL_MS',
      'DeadboltError',
      'FENCE_TOKEN_LIMIT',
      'InvalidArgumentError',
      'LimitMismatchError',
      'LockLostError',
      'LockTimeoutError',
      'LockUpgradeError',
      'LockerClosedError',
      'MAX_KEY_BYTES',
      'MAX_LOCK_ALL_KEYS',
      'MAX_SEMAPHORE_LIMIT',
      'MemoryBackend',
      'MemoryFence',
      'MemoryLockStore',
      'MigratingBackend',
      'NotOwnerError',
      'SelfDeadlockError',
      'StaleTokenError',
      'createLocker',
      'diagnostics',
      'memoryBackend',
      'memoryFence',
      'migratingBackend',
    ]);
    const toolkit = Object.keys(await import('../packages/core/src/backend-api.js'));
    expect(
      toolkit.filter((name) => user.includes(name)),
      'a name in both entries',
    ).toEqual([]);
  });

  it.each([
    ['backend', () => import('../packages/core/src/backend-api.js'), () => TOOLKIT],
    ['sql', () => import('../packages/core/src/sql-api.js'), () => SQL_KIT],
  ] as const)('@deadbolt/core/%s is its list below, and a package outside core imports each of its names', async (entry, load, list) => {
    const names = Object.keys(await load()).sort();
    expect(names).toEqual(list());
    // Every `import { … } from '@deadbolt/core/<entry>'` outside core, its names (types aside).
    const imported = new Set<string>();
    const examples = readdirSync(join(root, 'examples')).map((name) => join(root, 'examples', name, 'src'));
    const outside = [...packages.filter((name) => name !== 'core').map((name) => join(root, 'packages', name, 'src')), ...examples];
    const from = new RegExp(`import\\s*(?:type\\s*)?\\{([^}]*)\\}\\s*from\\s*'@deadbolt/core/${entry}'`, 'g');
    for (const source of outside.flatMap(sources))
      for (const match of readFileSync(source, 'utf8').matchAll(from))
        for (const name of match[1]!.split(',').map((n) => n.trim()))
          if (name && !name.startsWith('type ')) imported.add(name.split(/\s+as\s+/)[0]!);
    expect(
      names.filter((name) => !imported.has(name)),
      'names no package outside core imports',
    ).toEqual([]);
  });
});

/** `@deadbolt/core/backend`'s names (its types aside), sorted: a name joins on purpose. */
const TOOLKIT = [
  'InFlight',
  'LeaseKeeper',
  'Once',
  'QueuePlace',
  'ReleaseNotifier',
  'StoreBackend',
  'StoreFence',
  'after',
  'answerDeadline',
  'answerWithin',
  'backendFailure',
  'connectionRefused',
  'grantable',
  'keySpace',
  'pollForLease',
  'raceSignal',
  'readOptions',
  'rules',
  'sharedView',
  'sleep',
  'stillStands',
  'storeClient',
  'waiterCadence',
  'wallMicros',
];

/** `@deadbolt/core/sql`'s names (its types aside), sorted. */
const SQL_KIT = [
  'SessionLocks',
  'SqlBackend',
  'StrandedConnections',
  'checkFenceToken',
  'claimOfRow',
  'fencedTransaction',
  'grantableBehind',
  'sharedViewOfRows',
];
