import { defineConformanceSuite, matrixUrl, storeAddress, viaUrl } from '@deadbolt/conformance';
import { redisBackend } from '@deadbolt/redis';
import { redisHarness } from './harness.js';

const url = matrixUrl('redis');

for (const fifo of [false, true]) {
  defineConformanceSuite({
    name: fifo ? 'redis' : 'redis (unordered)',
    createBackend: () => redisBackend({ url, fifo }),
    createUnreachableBackend: () => redisBackend({ url: 'redis://127.0.0.1:1', fifo }),
    network: { store: storeAddress(url), createBackend: (via) => redisBackend({ url: viaUrl(url, via), fifo }) },
    child: { module: import.meta.resolve('@deadbolt/redis'), export: 'redisBackend', options: { url, fifo } },
    harness: redisHarness(url),
  });
}
