// What a user installs: every package that is not private, packed as a publish would pack it
// (`pnpm pack`: `workspace:` ranges become versions, `prepack` adds the LICENSE), installed with
// plain npm into an empty project, and used from there as a user would: ES modules on every store,
// CommonJS `require()`, TypeScript with node16 and bundler resolution, the CLI's binary. Twice: once
// with every peer dependency at the lowest version its range allows, once at the highest. Then
// `attw` (ES-module-only profile: the packages have no CommonJS build; `require()` works on the
// Node versions `engines` allows) and `publint` on each package.
//
// Cost: about two minutes, most of it npm installing the two projects from the registry.
import { execFile } from 'node:child_process';
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { matrixUrl } from '@deadbolt/conformance/test-matrix';

const run = promisify(execFile);
const root = fileURLToPath(new URL('..', import.meta.url));
const MINUTE = 60_000;

interface Manifest {
  name: string;
  private?: boolean;
  peerDependencies?: Record<string, string>;
  [field: string]: unknown;
}

const packageDirs = (await readdir(join(root, 'packages'))).map((dir) => join(root, 'packages', dir));
const manifests = await Promise.all(
  packageDirs.map(async (dir) => ({ dir, manifest: JSON.parse(await readFile(join(dir, 'package.json'), 'utf8')) as Manifest })),
);
const published = manifests.filter(({ manifest }) => !manifest.private);
const rootManifest = JSON.parse(await readFile(join(root, 'package.json'), 'utf8')) as { engines: { node: string } };

/** Every third-party peer range of the published packages (ioredis, pg, …), one entry per name. */
const peerRanges = new Map<string, string>();
for (const { manifest } of published) {
  for (const [name, range] of Object.entries(manifest.peerDependencies ?? {})) {
    if (!name.startsWith('@deadbolt/') && name !== 'vitest') peerRanges.set(name, range);
  }
}
/** `^5.4.2 || ^6.0.0` → lowest `5.4.2`, highest `^6` (npm picks that major's newest). */
const lowest = (range: string) => /(\d+\.\d+\.\d+)/.exec(range)![1]!;
const highest = (range: string) => `^${/(\d+)\.\d+\.\d+(?!.*\d+\.\d+\.\d+)/.exec(range)![1]}`;

const stores = {
  redis: matrixUrl('redis'),
  mysql: matrixUrl('mysql'),
  postgres: matrixUrl('postgres'),
  zookeeper: matrixUrl('zookeeper'),
  etcd: matrixUrl('etcd'),
  cassandra: matrixUrl('cassandra'),
};

// A user's first program, in plain JavaScript: a lock on every store, then a second client kept out
// and a later holder's larger token. It prints one line per store and nothing else: a driver's
// stray console output (ioredis 5.4.0 printed a line on every command) shows up as a difference.
const SMOKE_ESM = `
import { createLocker, memoryBackend } from '@deadbolt/core';
import { redisBackend } from '@deadbolt/redis';
import { mysqlBackend } from '@deadbolt/mysql';
import { postgresBackend } from '@deadbolt/postgres';
import { zookeeperBackend } from '@deadbolt/zookeeper';
import { etcdBackend } from '@deadbolt/etcd';
import { cassandraBackend } from '@deadbolt/cassandra';
import { instrumentDeadbolt } from '@deadbolt/otel';
import { randomUUID } from 'node:crypto';

const urls = JSON.parse(process.env.STORES);
const backends = {
  memory: () => memoryBackend(),
  redis: () => redisBackend({ url: urls.redis }),
  mysql: () => mysqlBackend({ url: urls.mysql }),
  postgres: () => postgresBackend({ url: urls.postgres }),
  zookeeper: () => zookeeperBackend({ url: urls.zookeeper }),
  etcd: () => etcdBackend({ url: urls.etcd }),
  cassandra: () => cassandraBackend({ url: urls.cassandra }),
};
const instrumentation = instrumentDeadbolt();
for (const [name, make] of Object.entries(backends)) {
  const locker = createLocker(make(), { ttlMs: 10_000 });
  try {
    const key = 'packaging:' + randomUUID();
    const first = await locker.lock(key, { timeoutMs: 30_000 });
    const busy = await locker.tryLock(key);
    await first.release();
    const second = await locker.withLock(key, async (lock) => lock.token, { timeoutMs: 30_000 });
    console.log(name, busy === null && second > first.token ? 'ok' : 'WRONG');
  } finally {
    await locker.close();
  }
}
instrumentation.disable();
`;

const SMOKE_CJS = `
const { createLocker, memoryBackend, LockTimeoutError } = require('@deadbolt/core');
for (const name of ['@deadbolt/redis', '@deadbolt/mysql', '@deadbolt/postgres', '@deadbolt/zookeeper', '@deadbolt/etcd', '@deadbolt/cassandra', '@deadbolt/otel', '@deadbolt/conformance']) {
  if (Object.keys(require(name)).length === 0) throw new Error(name + ' exports nothing');
}
(async () => {
  const locker = createLocker(memoryBackend());
  const lock = await locker.lock('k');
  await locker.lock('k', { timeoutMs: 10 }).then(() => { throw new Error('granted twice'); }, (e) => { if (!(e instanceof LockTimeoutError)) throw e; });
  await lock.release();
  await locker.close();
  console.log('require ok');
})();
`;

// A TypeScript user's code: each package's main types in use, strict, and no skipLibCheck, so a
// declaration file that needs types the user was never told to install fails here.
const CONSUMER_TS = `
import { createLocker, memoryBackend, LockTimeoutError, type Lock, type LockBackend } from '@deadbolt/core';
import { redisBackend, pgFence } from './imports.js';
import { instrumentDeadbolt } from '@deadbolt/otel';

const backend: LockBackend = redisBackend({ url: 'redis://127.0.0.1:6379' });
void backend;
void pgFence;
const locker = createLocker(memoryBackend(), { ttlMs: 5_000 });
export async function critical(): Promise<bigint> {
  await using lock = await locker.lock('k', { timeoutMs: 1_000 });
  const held: Lock = lock;
  return held.token;
}
export const isTimeout = (error: unknown): boolean => error instanceof LockTimeoutError;
export const tracing = instrumentDeadbolt();
`;
const IMPORTS_TS = `
export { redisBackend, redlockBackend } from '@deadbolt/redis';
export { mysqlBackend } from '@deadbolt/mysql';
export { postgresBackend, postgresFence as pgFence } from '@deadbolt/postgres';
export { zookeeperBackend } from '@deadbolt/zookeeper';
export { etcdBackend } from '@deadbolt/etcd';
export { cassandraBackend } from '@deadbolt/cassandra';
export { main } from 'deadbolt';
`;
const tsconfig = (module: string, moduleResolution: string, skipLibCheck = false) =>
  JSON.stringify({
    compilerOptions: {
      target: 'ES2022',
      module,
      moduleResolution,
      lib: ['ES2023', 'ESNext.Disposable'],
      types: ['node'],
      strict: true,
      noEmit: true,
      skipLibCheck,
    },
    files: ['consumer.ts', 'imports.ts', 'shims.d.ts'],
  });

/**
 * What the README's Install tells a project that type-checks its dependencies: ioredis 6.1's own
 * declarations import `redis-errors`, which ships no types (TS7016 in ioredis's files, not ours).
 */
const SHIMS_TS = `declare module 'redis-errors';
`;

let work: string;
const tarballs: string[] = [];

async function npm(cwd: string, ...args: string[]) {
  return run('npm', [...args, '--no-audit', '--no-fund', '--loglevel=error'], { cwd, maxBuffer: 64 << 20 });
}

/** A project like a user's: the tarballs and the peers at the given versions, installed with npm. */
async function project(name: string, peers: Record<string, string>): Promise<string> {
  const dir = join(work, name);
  await mkdir(dir);
  await writeFile(join(dir, 'package.json'), JSON.stringify({ name: `scratch-${name}`, private: true, type: 'module' }));
  const pinned = Object.entries(peers).map(([peer, version]) => `${peer}@${version}`);
  await npm(dir, 'install', ...tarballs, ...pinned, '@types/node@20');
  await writeFile(join(dir, 'smoke.mjs'), SMOKE_ESM);
  await writeFile(join(dir, 'smoke.cjs'), SMOKE_CJS);
  await writeFile(join(dir, 'consumer.ts'), CONSUMER_TS);
  await writeFile(join(dir, 'imports.ts'), IMPORTS_TS);
  await writeFile(join(dir, 'shims.d.ts'), SHIMS_TS);
  return dir;
}

const projects = new Map<string, { dir: string; peers: Record<string, string> }>();

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), 'deadbolt-packaging-'));
  // The README's command, which lists the tarballs it made.
  const { stdout } = await run('pnpm', ['-s', 'tarballs'], {
    cwd: root,
    env: { ...process.env, DEADBOLT_TARBALLS: join(work, 'tarballs') },
  });
  tarballs.push(...stdout.trim().split('\n'));
  const low = Object.fromEntries([...peerRanges].map(([name, range]) => [name, lowest(range)]));
  const high = Object.fromEntries([...peerRanges].map(([name, range]) => [name, highest(range)]));
  // One after the other: two npm installs at once share (and lock) one cache.
  projects.set('lowest peers', { dir: await project('low', low), peers: low });
  projects.set('highest peers', { dir: await project('high', high), peers: high });
}, 8 * MINUTE);

afterAll(async () => {
  if (work) await rm(work, { recursive: true, force: true });
  await Promise.all(published.map(({ dir }) => rm(join(dir, 'LICENSE'), { force: true })));
});

/**
 * The lowest TypeScript each kind of project takes, as the README states them: 5.2 for an ES module
 * project (`await using`), 5.8 for one compiled to CommonJS (`module: nodenext`, whose `require`
 * of an ES module 5.8 first allows; before it, TS1479), and 5.7 refused there, so the statement
 * stays true. With the lowest peers installed.
 */
describe('packaging: the TypeScript versions the README states', () => {
  /** Each version's compiler, installed in one npm call (as aliases). */
  const compilers = async <V extends string>(versions: readonly V[]): Promise<Record<V, string>> => {
    const dir = join(work, 'typescript');
    await mkdir(dir, { recursive: true });
    await npm(dir, 'install', '--no-save', ...versions.map((v) => `typescript-${v}@npm:typescript@${v}`));
    return Object.fromEntries(versions.map((v) => [v, join(dir, 'node_modules', `typescript-${v}`, 'bin/tsc')])) as Record<V, string>;
  };
  const check = (compiler: string, dir: string) =>
    run(process.execPath, [compiler, '-p', dir], { cwd: dir }).then(
      () => 'ok',
      (error: { stdout?: string }) => error.stdout ?? String(error),
    );

  it(
    'an ES module project from 5.2 (5.7 with skipLibCheck false), a CommonJS one from 5.8 (5.7: TS1479)',
    async () => {
      const { dir } = projects.get('lowest peers')!;
      const project = async (name: string, type: string, module: string, skipLibCheck: boolean) => {
        const at = join(dir, name);
        await mkdir(at, { recursive: true });
        await writeFile(join(at, 'package.json'), JSON.stringify({ name: `scratch-${name}`, private: true, type }));
        await writeFile(join(at, 'consumer.ts'), CONSUMER_TS);
        await writeFile(join(at, 'imports.ts'), IMPORTS_TS);
        await writeFile(join(at, 'shims.d.ts'), SHIMS_TS);
        await writeFile(join(at, 'tsconfig.json'), tsconfig(module, module, skipLibCheck));
        return at;
      };
      const esm = await project('esm-skiplibcheck', 'module', 'node16', true);
      const esmStrict = await project('esm-libcheck', 'module', 'node16', false);
      const cjs = await project('cjs', 'commonjs', 'nodenext', false);
      const { '5.2': ts52, '5.6': ts56, '5.7': ts57, '5.8': ts58 } = await compilers(['5.2', '5.6', '5.7', '5.8'] as const);
      expect(await check(ts52, esm), 'TypeScript 5.2, ES modules').toBe('ok');
      expect(await check(ts57, esmStrict), 'TypeScript 5.7, ES modules, skipLibCheck false').toBe('ok');
      expect(await check(ts56, esmStrict), 'TypeScript 5.6, ES modules, skipLibCheck false').toContain('TS2315');
      expect(await check(ts58, cjs), 'TypeScript 5.8, CommonJS').toBe('ok');
      expect(await check(ts57, cjs), 'TypeScript 5.7, CommonJS').toContain('TS1479');
    },
    4 * MINUTE,
  );
});

describe("packaging: the command line installed globally from its one tarball (the README's way before publishing)", () => {
  it(
    "runs `deadbolt check` on the suite's own runner, in under 30 MB with every store's client and no test runner",
    async () => {
      const prefix = join(work, 'global');
      // The command line's tarball alone: it carries the deadbolt packages it runs, and npm fetches
      // the stores' clients. Nothing else may be needed, so nothing else is given.
      const cliTarball = tarballs.find((tarball) => /\/deadbolt-\d+\.\d+\.\d+\.tgz$/.test(tarball))!;
      await npm(work, 'install', '--global', '--prefix', prefix, cliTarball);
      expect(await readdir(join(prefix, 'lib/node_modules'))).toEqual(['deadbolt']);
      const ran = await run(join(prefix, 'bin/deadbolt'), ['check', stores.redis, '--only', '1'], { cwd: work }).catch(
        (error: { code?: number; stdout?: string; stderr?: string }) => error,
      );
      expect(ran.stdout, ran.stderr).toContain('1 passed, 0 failed');
      expect((ran as { code?: number }).code ?? 0).toBe(0);
      // The size the CLI's README states: the whole prefix, with every store's client, stays under
      // 30 MB (vitest and its bundler made it 148 MB; every package's tarball given to npm, 65).
      const size = async (dir: string) => Number((await run('du', ['-sk', dir])).stdout.split('\t')[0]) / 1024;
      const installed = await size(prefix);
      console.log(`[packaging] the command line installed globally from its tarball: ${installed.toFixed(1)} MB`);
      expect(installed).toBeLessThan(30);
      const { stdout: runners } = await run('find', [
        prefix,
        '-type',
        'd',
        '(',
        '-name',
        'vitest',
        '-o',
        '-name',
        'vite',
        '-o',
        '-name',
        'rollup',
        ')',
      ]);
      expect(runners.trim()).toBe('');
      for (const client of ['ioredis', 'mysql2', 'pg', 'node-zookeeper-client', 'etcd3', 'cassandra-driver'])
        expect(runners + (await run('find', [prefix, '-type', 'd', '-name', client])).stdout, client).toContain(`/${client}`);
    },
    4 * MINUTE,
  );
});

describe('packaging: the packed packages', () => {
  it('carry what a registry page and an install need, and nothing of the workspace', async () => {
    for (const tarball of tarballs) {
      const { stdout: list } = await run('tar', ['tzf', tarball]);
      const files = list.split('\n');
      expect(files, tarball).toContain('package/LICENSE');
      expect(files, tarball).toContain('package/README.md');
      const { stdout: json } = await run('tar', ['xzf', tarball, '-O', 'package/package.json']);
      const manifest = JSON.parse(json) as Manifest;
      // Only the command line's tarball carries packages: the deadbolt packages it runs, each
      // without its sources or source maps, and not one third-party package.
      const bundled = (manifest.bundleDependencies ?? []) as string[];
      expect(
        bundled.every((name) => name.startsWith('@deadbolt/')),
        tarball,
      ).toBe(true);
      if (manifest.name === 'deadbolt') expect(bundled, tarball).toContain('@deadbolt/core');
      else expect(bundled, tarball).toEqual([]);
      const misplaced = (f: string) => {
        if (/tsbuildinfo|\/test\//.test(f)) return true;
        if (!f.startsWith('package/node_modules/')) return false;
        if (/\/src\/|\.map$/.test(f)) return true;
        return !bundled.some((name) => f.startsWith(`package/node_modules/${name}/`) || `package/node_modules/${name}/`.startsWith(f));
      };
      expect(files.filter(misplaced), tarball).toEqual([]);
      expect(json, tarball).not.toContain('workspace:');
      expect(manifest, tarball).toMatchObject({
        license: 'MIT',
        type: 'module',
        engines: rootManifest.engines,
        publishConfig: { access: 'public' },
        repository: { type: 'git', directory: expect.stringMatching(/^packages\//) },
      });
      for (const field of ['description', 'keywords', 'homepage', 'bugs', 'exports'])
        expect(manifest[field], `${tarball}: ${field}`).toBeTruthy();
    }
    // The benchmark is private: it depends on peer libraries to race against and is not for users;
    // packing it fails, so it cannot be published by hand either.
    const bench = manifests.find(({ manifest }) => manifest.name === '@deadbolt/bench')!;
    expect(bench.manifest.private).toBe(true);
    await expect(run('pnpm', ['pack', '--pack-destination', work], { cwd: bench.dir })).rejects.toThrow(/not published/);
    expect(tarballs).toHaveLength(published.length);
  });

  it(
    'pass attw (ES-module-only profile) and publint',
    async () => {
      const attw = tarballs.map((tarball) =>
        run('pnpm', ['exec', 'attw', '--profile', 'esm-only', '--format', 'table-flipped', tarball], { cwd: root }).catch(
          (error: { stdout?: string }) => {
            throw new Error(`attw ${tarball}:\n${error.stdout ?? String(error)}`);
          },
        ),
      );
      const publint = published.map(async ({ dir }) => {
        const { stdout } = await run('pnpm', ['exec', 'publint', '--strict'], { cwd: dir });
        expect(stdout, dir).toContain('All good!');
      });
      await Promise.all([...attw, ...publint]);
    },
    3 * MINUTE,
  );
});

describe.each(['lowest peers', 'highest peers'])('packaging: installed with npm, %s', (which) => {
  it(
    'works from ES modules on memory and every store, printing nothing of its own',
    async () => {
      const { dir } = projects.get(which)!;
      const { stdout, stderr } = await run('node', ['smoke.mjs'], { cwd: dir, env: { ...process.env, STORES: JSON.stringify(stores) } });
      expect(stdout.trim().split('\n')).toEqual(['memory', ...Object.keys(stores)].map((store) => `${store} ok`));
      expect(stderr).toBe('');
    },
    3 * MINUTE,
  );

  it('works from CommonJS require()', async () => {
    const { stdout } = await run('node', ['smoke.cjs'], { cwd: projects.get(which)!.dir });
    expect(stdout.trim()).toBe('require ok');
  });

  it.each([
    ['node16', 'node16'],
    ['nodenext', 'nodenext'],
    ['esnext', 'bundler'],
  ])(
    'type-checks a TypeScript consumer (module %s, resolution %s, no skipLibCheck)',
    async (module, resolution) => {
      const { dir } = projects.get(which)!;
      await writeFile(join(dir, 'tsconfig.json'), tsconfig(module, resolution));
      await run(process.execPath, [join(root, 'node_modules/typescript/bin/tsc'), '-p', dir], { cwd: dir }).catch(
        (error: { stdout?: string }) => {
          throw new Error(`tsc (${module}, ${resolution}):\n${error.stdout ?? String(error)}`);
        },
      );
    },
    // 14-23 s on a quiet machine; over a minute once in CI with four lanes beside it.
    3 * MINUTE,
  );

  it('runs the CLI from its binary', async () => {
    const { dir } = projects.get(which)!;
    const { stdout } = await run(join(dir, 'node_modules/.bin/deadbolt'), ['--help'], { cwd: dir });
    expect(stdout).toMatch(/run KEY/);
    const inspected = await run(join(dir, 'node_modules/.bin/deadbolt'), ['inspect', 'packaging:free', '--url', stores.redis, '--json'], {
      cwd: dir,
    });
    expect(JSON.parse(inspected.stdout)).toMatchObject({ key: 'packaging:free', holders: [] });
  });

  it('was installed with the peer versions it names', async () => {
    const { dir, peers } = projects.get(which)!;
    for (const [name, version] of Object.entries(peers)) {
      const installed = JSON.parse(await readFile(join(dir, 'node_modules', name, 'package.json'), 'utf8')) as { version: string };
      if (which === 'lowest peers') expect(installed.version, name).toBe(version);
      else expect(installed.version.split('.')[0], name).toBe(version.slice(1));
    }
  });
});
