import type { ConformanceHarness, ConformanceOptions } from '@deadbolt/conformance';
import { matrixUrl, matrixRestartHook, storeAddress, viaUrl, withCredentials } from '@deadbolt/conformance';
import { zookeeperBackend, zookeeperOptionRules, type ZooKeeperBackend, type ZooKeeperSession } from '@deadbolt/zookeeper';
import { pathFor, session, sessions, sharedPathFor } from '@deadbolt/zookeeper/testing';
import { createRequire } from 'node:module';
import { bySequence, ownerOf } from '../src/zookeeper-backend.js';

type Client = ZooKeeperSession['client'];
const { createClient } = createRequire(import.meta.url)('node-zookeeper-client') as {
  createClient(hosts: string, options: object): Client;
};
const ADMIN_TTL = 10_000;
const NO_NODE = -101;

const call = <T>(start: (cb: (error: { getCode(): number } | null, result?: T) => void) => void) =>
  new Promise<T | undefined>((resolve, reject) =>
    start((error, result) => (!error || error.getCode() === NO_NODE ? resolve(result) : reject(error))),
  );

const children = async (client: Client, path: string) => (await call<string[]>((cb) => client.getChildren(path, undefined, cb))) ?? [];

/** The owner id in a lock node's name: `lock-[<S|X><limit>-]<owner>-<sequence>` (a negative one after the wrap). */

/** Owner ids of the nodes queued under a key, in sequence order. */
export async function queuedOwners(admin: ZooKeeperBackend, key: string): Promise<string[]> {
  const { client } = await session(admin, ADMIN_TTL);
  return (await children(client, pathFor(admin, key)))
    .filter((n) => n.startsWith('lock-'))
    .sort(bySequence)
    .map(ownerOf);
}

/**
 * Expires `session` as a partition would: a second client joins the same session (the server
 * drops the first connection) and closes it (the server ends the session).
 */
export async function expireSession(url: string, session: ZooKeeperSession): Promise<void> {
  const twin = createClient(url.replace(/^zookeeper:\/\//, ''), {
    sessionTimeout: session.ttlMs,
    sessionId: session.client.getSessionId(),
    sessionPassword: session.client.getSessionPassword(),
  });
  const joined = await new Promise<boolean>((resolve) => {
    twin.once('connected', () => resolve(true));
    twin.on('expired', () => resolve(false)); // the session ended on its own meanwhile
    twin.connect();
  });
  if (!joined) return twin.close();
  // The server ends the session (and deletes its nodes) before it closes the connection.
  await new Promise<void>((resolve) => {
    twin.on('disconnected', () => resolve());
    twin.close();
  });
}

/** Reads and breaks the lock nodes directly. */
export function zookeeperHarness(url: string): ConformanceHarness {
  const admin = zookeeperBackend({ url });
  return {
    inspect: (key) => queuedOwners(admin, key),
    async inspectShared(key) {
      const { client } = await session(admin, ADMIN_TTL);
      return (await children(client, sharedPathFor(admin, key)))
        .filter((n) => n.startsWith('lock-'))
        .sort(bySequence)
        .map(ownerOf);
    },
    async loseSharedClaim(key, owner) {
      const { client } = await session(admin, ADMIN_TTL);
      const path = sharedPathFor(admin, key);
      for (const c of await children(client, path)) if (c.includes(owner)) await call((cb) => client.remove(`${path}/${c}`, -1, cb));
    },
    async loseClaim(key) {
      const { client } = await session(admin, ADMIN_TTL);
      const path = pathFor(admin, key);
      for (const c of await children(client, path)) await call((cb) => client.remove(`${path}/${c}`, -1, cb));
    },
    async dropConnection(backend) {
      for (const open of sessions(backend as ZooKeeperBackend)) await expireSession(url, open);
    },
    ...matrixRestartHook('zookeeper'),
    // Sessions still open once idle: one per distinct ttl ever used was the leak.
    retained: (backend) => sessions(backend as ZooKeeperBackend).length,
  };
}

/** The shared suite's options for the test-matrix ZooKeeper (also one side of the migration suites). */
export function zookeeperSuiteOptions(): ConformanceOptions {
  const url = matrixUrl('zookeeper');
  return {
    name: 'zookeeper',
    createBackend: () => zookeeperBackend({ url }),
    createUnreachableBackend: () => zookeeperBackend({ url: 'zookeeper://127.0.0.1:1', connectTimeoutMs: 2000 }),
    network: { store: storeAddress(url), createBackend: (via, _all, extra) => zookeeperBackend({ url: viaUrl(url, via), ...extra }) },
    factory: {
      create: (options) => zookeeperBackend(options as never),
      rules: zookeeperOptionRules,
      valid: (address) => ({ url: viaUrl(url, address) }),
    },
    createBackendInOtherNamespace: () => zookeeperBackend({ url, root: '/deadbolt/other' }),
    createBackendWithCredentials: (user, password, address) => zookeeperBackend({ url: withCredentials(url, user, password, address) }),
    child: { module: import.meta.resolve('@deadbolt/zookeeper'), export: 'zookeeperBackend', options: { url } },
    fence: { module: import.meta.resolve('@deadbolt/zookeeper'), export: 'zookeeperFence', options: { url } },
    harness: zookeeperHarness(url),
    // Sessions of 1 s leave little room on a busy two-core machine: 2 s keeps the tests about leases.
    ttlMs: 2000,
  };
}
