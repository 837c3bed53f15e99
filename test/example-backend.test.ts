// The "Writing a backend" example (docs/writing-a-backend.md), run through the whole shared suite against the
// test-matrix Redis: what a new backend does to show it holds the contract. It adds one Redis
// suite's time to the Redis lane (see TESTING.md's "Time and budget").
import { defineConformanceSuite, matrixUrl, storeAddress, viaUrl, withCredentials } from '@deadbolt/conformance';
import { Redis } from 'ioredis';
import { setNxBackend, setNxOptionRules } from '../examples/set-nx-backend/dist/index.js';

const url = matrixUrl('redis');
const admin = new Redis(url, { lazyConnect: true });
const child = (options: object = {}) => ({
  module: import.meta.resolve('../examples/set-nx-backend/dist/index.js'),
  export: 'setNxBackend',
  options: { url, ...options },
});

defineConformanceSuite({
  name: 'example: set-nx',
  createBackend: () => setNxBackend({ url }),
  createUnreachableBackend: () => setNxBackend({ url: 'redis://127.0.0.1:1' }),
  network: { store: storeAddress(url), createBackend: (via, _all, extra) => setNxBackend({ url: viaUrl(url, via), ...extra }) },
  factory: {
    create: (options) => setNxBackend(options as never),
    rules: setNxOptionRules,
    valid: (address) => ({ url: viaUrl(url, address) }),
  },
  createBackendWithCredentials: (user, password, address) => setNxBackend({ url: withCredentials(url, user, password, address) }),
  createBackendInOtherNamespace: () => setNxBackend({ url, namespace: 'set-nx:other:' }),
  slowPollChild: (ms) => child({ maxPollDelayMs: ms }),
  child: child(),
  harness: {
    async inspect(key) {
      const owner = await admin.get(`set-nx:lock:${key}`);
      return owner === null ? [] : [owner];
    },
    async loseClaim(key) {
      await admin.del(`set-nx:lock:${key}`);
    },
  },
});
