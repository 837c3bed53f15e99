/**
 * The leader scenario 11 kills: a process of its own that wins election `name` on `store`, tells
 * the parent, and leads (renewing its term) until it is killed with SIGKILL.
 */
import { createLocker } from '@deadbolt/core';
import { electionBackends, ELECTION_TTL_MS } from './elections.js';
import type { Store } from './subjects.js';

const [store, name] = [process.argv[2] as Store, process.argv[3]!];
const made = electionBackends[store];
if (!made || !process.send) throw new Error(`election leader: unknown store ${store} or no IPC channel`);
const { backend, fence } = made();
const locker = createLocker(backend(), { ttlMs: ELECTION_TTL_MS, fence: fence() });
await locker.elect(name, { value: `pid ${process.pid}` });
process.send({ elected: true });
setInterval(() => undefined, 60_000); // leads until killed
