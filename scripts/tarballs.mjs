// `pnpm tarballs`: packs every package a user installs into one folder (./tarballs, or
// $DEADBOLT_TARBALLS), as a publish would pack it, and prints their paths.
//
// The command line's tarball is made to install alone: until the packages are on the registry,
// `npm install --global deadbolt-0.1.0.tgz` could not find the deadbolt packages it runs, and
// giving npm every tarball instead makes each one a global package with its own copies of its
// dependencies (65 MB where the command line's own tree is 26). So its tarball carries those
// packages inside it (npm's `bundleDependencies`), and npm installs only the third-party clients
// from the registry: 28.6 MB in all with every store's client. The library packages' tarballs are
// left as pnpm packs them.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

const out = resolve(process.env.DEADBOLT_TARBALLS ?? 'tarballs');
const quiet = { stdio: ['ignore', 'ignore', 'inherit'] };
execFileSync('pnpm', ['-s', '-r', '--filter', '!@deadbolt/bench', 'pack', '--pack-destination', out], quiet);

/** The tarball pnpm made for a package: `@deadbolt/core` 0.1.0 → `deadbolt-core-0.1.0.tgz`. */
const tarballOf = (name, version) => join(out, `${name.replace(/^@/, '').replace('/', '-')}-${version}.tgz`);

const cli = JSON.parse(readFileSync('packages/cli/package.json', 'utf8'));
const work = mkdtempSync(join(tmpdir(), 'deadbolt-tarballs-'));
try {
  execFileSync('tar', ['-xzf', tarballOf(cli.name, cli.version), '-C', work]);
  const manifestPath = join(work, 'package', 'package.json');
  const manifest = JSON.parse(readFileSync(manifestPath, 'utf8'));
  const bundled = Object.keys(manifest.dependencies).filter((name) => name.startsWith('@deadbolt/'));
  for (const name of bundled) {
    // Each bundled package at the version the command line's manifest names (pnpm wrote it there).
    const into = join(work, 'package', 'node_modules', name);
    mkdirSync(into, { recursive: true });
    const version = manifest.dependencies[name].replace(/^[\^~]/, '');
    execFileSync('tar', ['-xzf', tarballOf(name, version), '-C', into, '--strip-components=1']);
    // What a bundled package needs from the registry becomes the command line's dependency, and the
    // bundled copy names none: npm counts everything a bundled package depends on, peers included,
    // as part of the bundle, and so would fetch neither cockatiel nor a single store's client.
    const ownPath = join(into, 'package.json');
    const own = JSON.parse(readFileSync(ownPath, 'utf8'));
    for (const [dependency, range] of Object.entries(own.dependencies ?? {}))
      if (!dependency.startsWith('@deadbolt/')) manifest.dependencies[dependency] ??= range;
    for (const field of ['dependencies', 'peerDependencies', 'peerDependenciesMeta']) delete own[field];
    writeFileSync(ownPath, JSON.stringify(own, null, 2) + '\n');
    // Only what runs and what types the command line's own exports: a bundled copy drops its
    // TypeScript sources and source maps (2.6 MB of the 4.7 its packages would add).
    rmSync(join(into, 'src'), { recursive: true, force: true });
    for (const file of readdirSync(into, { recursive: true })) if (file.endsWith('.map')) rmSync(join(into, file));
  }
  manifest.bundleDependencies = bundled;
  writeFileSync(manifestPath, JSON.stringify(manifest, null, 2) + '\n');
  execFileSync('tar', ['-czf', tarballOf(cli.name, cli.version), '-C', work, 'package']);
} finally {
  rmSync(work, { recursive: true, force: true });
}

for (const file of readdirSync(out)
  .filter((file) => file.endsWith('.tgz'))
  .sort())
  console.log(join(out, file));
