// Times shorter shapes of a Redis lock cycle against the `SET NX PX` + `DEL` floor, to see what the
// command count buys (the Redis README's "Shorter cycles, tried and measured"). Not a backend:
// only the uncontended cycle of each shape, on one connection, 1000-cycle blocks interleaved over
// 12 rounds (the first 2 discarded) so the machine's drift reaches every shape alike.
// Run: node packages/bench/experiments/redis-cycle-shapes.mjs [redis://127.0.0.1:6379]
import { Redis } from 'ioredis';

const redis = new Redis(process.argv[2] ?? 'redis://127.0.0.1:6379');
const load = (source) => redis.script('LOAD', source);

// Today's backend, reduced to its uncontended path: token = max(last + 1, server µs).
const acquire7 = await load(`if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local t = redis.call('TIME') local n = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local last = tonumber(redis.call('SET', KEYS[2], string.format('%.0f', n), 'PX', 86400000, 'GET') or '0')
  return string.format('%.0f', math.max(n, last + 1)) end return false`);
const release3 = await load(`if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) return 1 end return 0`);
// The token as a stream id (strictly rising, floored at the server clock in ms).
const acquire3 = await load(`if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local ms, seq = string.match(redis.call('XADD', KEYS[2], 'MAXLEN', '0', '*', 't', ''), '^(%d+)-(%d+)$')
  return string.format('%.0f', tonumber(ms) * 1000 + tonumber(seq)) end return false`);
// A release in two commands (a real one would put back a value that was not ours).
const release2 = await load(`if redis.call('GETDEL', KEYS[1]) == ARGV[1] then return 1 end return 0`);

const busy = () => {
  throw new Error('the key was held: is something else using it?');
};
const shapes = {
  'floor: SET NX PX + DEL (2)': async (o) => ((await redis.set('x:k', o, 'NX', 'PX', 10000)) ? redis.del('x:k') : busy()),
  'today: script SET+TIME+SET GET, script GET+DEL (7)': async (o) =>
    (await redis.evalsha(acquire7, 2, 'x:k', 'x:c', o, '10000')) ? redis.evalsha(release3, 1, 'x:k', o) : busy(),
  'script SET+XADD, script GETDEL (5)': async (o) =>
    (await redis.evalsha(acquire3, 2, 'x:k', 'x:s', o, '10000')) ? redis.evalsha(release2, 1, 'x:k', o) : busy(),
  'pipelined SET NX PX + XADD, script GETDEL (4)': async (o) => {
    const [[, set]] = await redis.pipeline().set('x:k', o, 'NX', 'PX', 10000).xadd('x:s', 'MAXLEN', '0', '*', 't', '').exec();
    return set === 'OK' ? redis.evalsha(release2, 1, 'x:k', o) : busy();
  },
  'SET NX PX, no token, script GETDEL (3)': async (o) =>
    (await redis.set('x:k', o, 'NX', 'PX', 10000)) ? redis.evalsha(release2, 1, 'x:k', o) : busy(),
};

const times = Object.fromEntries(Object.keys(shapes).map((name) => [name, []]));
for (let round = 0; round < 12; round++) {
  for (const [name, cycle] of Object.entries(shapes)) {
    for (let i = 0; i < 1000; i++) {
      const started = performance.now();
      await cycle(`owner-${round}-${i}`);
      if (round >= 2) times[name].push(performance.now() - started);
    }
  }
}
const p50 = (list) => list.sort((a, b) => a - b)[list.length >> 1];
const floor = p50(times['floor: SET NX PX + DEL (2)']);
for (const [name, list] of Object.entries(times))
  console.log(`${p50(list).toFixed(4)} ms  ${(p50(list) / floor).toFixed(2)} × floor  ${name}`);
await redis.del('x:k', 'x:c', 'x:s');
redis.disconnect();
