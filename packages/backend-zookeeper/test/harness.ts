import type { ConformanceHarness, ConformanceOptions } from '@deadbolt/conformance';
import { matrixUrl, matrixRestartHook, storeAddress, viaUrl, withCredentials } from '@deadbolt/conformance';
import { zookeeperBackend, zookeeperOptionRules, type ZooKeeperBackend, type ZooKeeperSession } from '@deadbolt/zookeeper';
import { claimsOf, sessions } from '@deadbolt/zookeeper/testing';
import { createRequire } from 'node:module';

type Client = ZooKeeperSession['client'];
const { createClient } = createRequire(import.meta.url)('node-zookeeper-client') as {
  createClient(hosts: string, options: object): Client;
};
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

/** Reads and breaks the lock nodes directly, through a backend of its own. */
export function zookeeperHarness(url: string): ConformanceHarness {
  const admin = zookeeperBackend({ url });
  return {
    ...claimsOf(admin),
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
    createBackendInOtherNamespace: () => zookeeperBackend({ url, namespace: '/deadbolt/other' }),
    createBackendWithCredentials: (user, password, address) => zookeeperBackend({ url: withCredentials(url, user, password, address) }),
    child: { module: import.meta.resolve('@deadbolt/zookeeper'), export: 'zookeeperBackend', options: { url } },
    fence: { module: import.meta.resolve('@deadbolt/zookeeper'), export: 'zookeeperFence', options: { url } },
    harness: zookeeperHarness(url),
    // Sessions of 1 s leave little room on a busy two-core machine: 2 s keeps the tests about leases.
    ttlMs: 2000,
  };
}
