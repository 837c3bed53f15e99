/**
 * One process of the thesis experiment (scenario 2): builds the named subject's client, waits for
 * the parent's "go", takes the shared key `count` times with an empty critical section, and reports
 * every acquisition as [wait ms, completed ms since the common start, fencing token].
 */
import { subjects } from './subjects.js';

const [name, key, count] = [process.argv[2]!, process.argv[3]!, Number(process.argv[4])];
const subject = subjects().find((s) => s.name === name);
if (!subject || !process.send) throw new Error(`thesis worker: unknown subject ${name} or no IPC channel`);
const client = await subject.client();
process.send({ ready: true });
const startWall: number = await new Promise((resolve) => process.once('message', (m: { go: number }) => resolve(m.go)));
const sinceStart = () => performance.timeOrigin + performance.now() - startWall;
const records: [wait: number, done: number, token?: string][] = [];
for (let i = 0; i < count; i++) {
  const asked = performance.now();
  const held = await client.acquire(key);
  const [wait, done] = [performance.now() - asked, sinceStart()];
  records.push(held.token === undefined ? [wait, done] : [wait, done, String(held.token)]);
  await held.release();
}
await client.close();
process.send({ records }, () => process.exit(0));
