// Runs the node:test example (handler.node-test.ts, built to dist/) as a user would, with
// `node --test`, so that it is tested in CI beside the vitest ones.
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { expect, it } from 'vitest';

it('node --test dist/handler.node-test.js passes its three tests', async () => {
  const file = fileURLToPath(new URL('../dist/handler.node-test.js', import.meta.url));
  const { stdout } = await promisify(execFile)(process.execPath, ['--test', '--test-reporter=tap', file], { timeout: 60_000 });
  expect(stdout).toMatch(/^# pass 3$/m);
  expect(stdout).toMatch(/^# fail 0$/m);
});
