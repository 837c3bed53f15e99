// `pnpm demo` as a reader sees it: the run without a lock loses updates, every store that test-matrix
// started keeps all of them and refuses the paused holder's late write, in lines of at most 100
// columns. About 30 s (every store, one after another); over 120 s once in CI beside heavy work.
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { expect, it } from 'vitest';

it('pnpm demo: lost updates without the lock, none with it on every store, the late write refused', async () => {
  const demo = fileURLToPath(new URL('../scripts/demo.mjs', import.meta.url));
  const { stdout } = await promisify(execFile)(process.execPath, [demo], { timeout: 240_000 });
  const lines = stdout.trimEnd().split('\n');
  expect(lines.filter((line) => line.length > 100)).toEqual([]);
  const lost = /no lock +counter (\d+)\/400: (\d+) updates lost/.exec(stdout);
  expect(lost, stdout).not.toBeNull();
  expect(Number(lost![1])).toBeLessThan(400);
  const stores = ['memory', 'redis', 'redis unordered', 'mysql', 'postgres', 'etcd', 'zookeeper', 'cassandra'];
  for (const store of stores) {
    const pad = ' '.repeat(17 - store.length);
    expect(stdout, store).toContain(`  ${store}${pad}counter 400/400, tokens increasing,`);
    expect(stdout, store).toMatch(new RegExp(`  ${store}${pad}late write, token \\d+: refused \\(the new holder's: \\d+\\)`));
  }
  expect(stdout).not.toMatch(/skipped|ACCEPTED|NOT increasing/);
}, 270_000);
