import type { ConformanceHarness, ConformanceOptions } from '@deadbolt/conformance';
import { matrixUrl, matrixRestartHook, storeAddress, viaUrl, withCredentials } from '@deadbolt/conformance';
import { RedisBackend, redisBackend, redisOptionRules, redlockBackend, redlockOptionRules } from '@deadbolt/redis';
import { claimsOf, keysFor, valkeyBackend } from '@deadbolt/redis/testing';
import type { LockBackend } from '@deadbolt/core';
import { Cluster, Redis } from 'ioredis';

/** The shared suite's options for the test-matrix Redis (also one side of the migration suites). */
export function redisSuiteOptions(fifo = true): ConformanceOptions {
  const url = matrixUrl('redis');
  const child = (options: object = {}) => ({
    module: import.meta.resolve('@deadbolt/redis'),
    export: 'redisBackend',
    options: { url, fifo, ...options },
  });
  return {
    name: fifo ? 'redis' : 'redis (unordered)',
    createBackend: () => redisBackend({ url, fifo }),
    createUnreachableBackend: () => redisBackend({ url: 'redis://127.0.0.1:1', fifo }),
    network: { store: storeAddress(url), createBackend: (via, _all, extra) => redisBackend({ url: viaUrl(url, via), fifo, ...extra }) },
    factory: {
      create: (options) => redisBackend(options as never),
      rules: redisOptionRules,
      valid: (address) => ({ url: viaUrl(url, address), fifo }),
    },
    createBackendInOtherNamespace: () => redisBackend({ url, fifo, namespace: 'deadbolt:other:' }),
    createBackendWithCredentials: (user, password, address) => redisBackend({ url: withCredentials(url, user, password, address), fifo }),
    slowPollChild: (ms) => child({ maxPollDelayMs: ms }),
    child: child(),
    fence: { module: import.meta.resolve('@deadbolt/redis'), export: 'redisFence', options: { url } },
    harness: redisHarness(url),
  };
}

/**
 * The shared suite's options for the test-matrix Redis reached through an iovalkey client (each
 * backend and fence on one of its own, `valkeyBackend` and `valkeyFence`), FIFO.
 */
export function valkeySuiteOptions(): ConformanceOptions {
  const url = matrixUrl('redis');
  const testing = import.meta.resolve('@deadbolt/redis/testing');
  const child = (options: object = {}) => ({ module: testing, export: 'valkeyBackend', options: { url, ...options } });
  return {
    name: 'redis (iovalkey client)',
    createBackend: () => valkeyBackend({ url }),
    createUnreachableBackend: () => valkeyBackend({ url: 'redis://127.0.0.1:1' }),
    network: { store: storeAddress(url), createBackend: (via, _all, extra) => valkeyBackend({ url: viaUrl(url, via), ...extra }) },
    // redisBackend's option checks run in conformance.test.ts; the client is what differs here.
    factory: null,
    createBackendInOtherNamespace: () => valkeyBackend({ url, namespace: 'deadbolt:other:' }),
    slowPollChild: (ms) => child({ maxPollDelayMs: ms }),
    child: child(),
    fence: { module: testing, export: 'valkeyFence', options: { url } },
    harness: redisHarness(url),
  };
}

/**
 * The shared suite's options for test-matrix's three-master Redis Cluster (the nodes listen on
 * three consecutive ports from the url's). Network faults go through one proxy listener per node,
 * which the Cluster client reaches through a NAT map.
 */
export function redisClusterSuiteOptions(): ConformanceOptions {
  const url = matrixUrl('redis-cluster');
  const first = storeAddress(url);
  const nodes = [0, 1, 2].map((i) => ({ host: first.host, port: first.port + i }));
  const child = (options: object = {}) => ({
    module: import.meta.resolve('@deadbolt/redis'),
    export: 'redisBackend',
    options: { url, cluster: true, ...options },
  });
  return {
    name: 'redis cluster',
    createBackend: () => redisBackend({ url, cluster: true }),
    createUnreachableBackend: () => redisBackend({ url: 'redis://127.0.0.1:1', cluster: true }),
    network: {
      store: nodes,
      createBackend: (via, all, extra) =>
        redisBackend({
          url: viaUrl(url, via),
          cluster: true,
          clusterOptions: { natMap: Object.fromEntries(nodes.map((node, i) => [`${node.host}:${node.port}`, all[i]!])) },
          ...extra,
        }),
    },
    factory: {
      create: (options) => redisBackend(options as never),
      rules: redisOptionRules,
      valid: (address) => ({ url: viaUrl(url, address), cluster: true }),
    },
    createBackendInOtherNamespace: () => redisBackend({ url, cluster: true, prefix: 'deadbolt:other:' }),
    createBackendWithCredentials: (user, password, address) =>
      redisBackend({ url: withCredentials(url, user, password, address), cluster: true }),
    slowPollChild: (ms) => child({ maxPollDelayMs: ms }),
    child: child(),
    fence: { module: import.meta.resolve('@deadbolt/redis'), export: 'redisFence', options: { url, cluster: true } },
    harness: redisHarness(url, 'redis-cluster'),
  };
}

/** Reads and breaks the store directly, through a backend of its own (for its key names). */
export function redisHarness(url: string, server: 'redis' | 'redis-cluster' = 'redis'): ConformanceHarness {
  const cluster = server === 'redis-cluster';
  const admin = redisBackend({ url, cluster });
  /** One connection per node: every master of a cluster, or the one server. */
  const nodes = (): Redis[] => (admin.client instanceof Cluster ? admin.client.nodes('master') : [admin.client]);
  return {
    ...claimsOf(admin),
    async dropConnection(backend: LockBackend) {
      const client = (backend as RedisBackend).client;
      if (client instanceof Cluster) {
        // A cluster client has a connection to every node: cut every client connection but ours.
        await Promise.all(nodes().map((node) => node.call('CLIENT', 'KILL', 'TYPE', 'normal', 'SKIPME', 'yes')));
        return;
      }
      const id = await client.client('ID');
      await (admin.client as Redis).client('KILL', 'ID', String(id));
    },
    ...matrixRestartHook(server, () => admin.client.set('deadbolt:probe', '1', 'PX', 1000)),
  };
}

/** test-matrix's independent Redis nodes for Redlock (five, on consecutive ports from the url's). */
export function redlockNodes(count: number): string[] {
  const first = storeAddress(matrixUrl('redis-redlock'));
  return Array.from({ length: count }, (_, i) => `redis://${first.host}:${first.port + i}`);
}

/**
 * The shared suite's options for Redlock over test-matrix's first three nodes, with a short
 * longest ttl (so a restarted node's guard is short too). Network faults go through one proxy
 * listener per node.
 */
export function redlockSuiteOptions(maxTtlMs = 5000): ConformanceOptions {
  const nodes = redlockNodes(3);
  const admins = nodes.map((url) => new Redis(url).on('error', () => undefined));
  const keyNames = redlockBackend({ nodes: admins, maxTtlMs });
  return {
    name: 'redlock (3 nodes)',
    createBackend: () => redlockBackend({ nodes, maxTtlMs }),
    createUnreachableBackend: () =>
      redlockBackend({ nodes: ['redis://127.0.0.1:1', 'redis://127.0.0.1:2', 'redis://127.0.0.1:3'], maxTtlMs }),
    network: {
      store: nodes.map(storeAddress),
      createBackend: (_via, all, extra) => redlockBackend({ nodes: all.map((a) => `redis://${a.host}:${a.port}`), maxTtlMs, ...extra }),
    },
    factory: {
      create: (options) => redlockBackend(options as never),
      rules: redlockOptionRules,
      valid: (address) => ({ nodes: [`redis://${address.host}:${address.port}`], maxTtlMs }),
    },
    createBackendInOtherNamespace: () => redlockBackend({ nodes, maxTtlMs, namespace: 'deadbolt:other:' }),
    createBackendWithCredentials: (user, password, address) =>
      redlockBackend({
        nodes: nodes.map((node, i) => withCredentials(node, user, password, i === 0 ? address : storeAddress(node))),
        maxTtlMs,
      }),
    child: { module: import.meta.resolve('@deadbolt/redis'), export: 'redlockBackend', options: { nodes, maxTtlMs } },
    harness: {
      async inspect(key) {
        // Whoever holds the key on any node (a Redlock never queues). A release settles once a
        // majority released and the other nodes' releases land moments later: an owner found on
        // fewer nodes than a majority is read again for up to 200 ms before it is reported.
        const name = keysFor(keyNames, key).lock;
        for (const started = performance.now(); ; await new Promise((r) => setTimeout(r, 20))) {
          const values = (await Promise.all(admins.map((admin) => admin.get(name)))).filter((v): v is string => v !== null);
          const owners = [...new Set(values)];
          const straggling = owners.some((owner) => values.filter((v) => v === owner).length <= admins.length / 2);
          if (!straggling || performance.now() - started > 200) return owners;
        }
      },
      async loseClaim(key) {
        const name = keysFor(keyNames, key).lock;
        await Promise.all(admins.map((admin) => admin.del(name)));
      },
      async dropConnection() {
        await Promise.all(admins.map((admin) => admin.call('CLIENT', 'KILL', 'TYPE', 'normal', 'SKIPME', 'yes')));
      },
      // Restarts the first node empty: its restart guard keeps it out, the other two are a majority.
      ...matrixRestartHook('redis-redlock', () => admins[0]!.ping()),
    },
  };
}
