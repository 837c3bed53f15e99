import { describe, expect, it } from 'vitest';
import { BackendError, BackendUnavailableError } from '../src/api/errors.js';
import { InFlight } from '../src/kit/wait.js';

const unreachable = () => new BackendUnavailableError('test', 'release', { cause: new Error('ECONNRESET') });
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A cleanup that fails as unavailable `failures` times, then lands; counts its sends. */
function flaky(failures: number) {
  const sent: number[] = [];
  return {
    sent,
    send: async () => {
      sent.push(performance.now());
      if (sent.length <= failures) throw unreachable();
    },
  };
}

// The store side of this (a waiter that gives up during an outage leaves nothing) is conformance
// behaviour 19g on every backend; these pin the retry rules it relies on.
describe('InFlight.cleanUp: a cleanup outlasts a store out of reach', () => {
  it('reports the first failure, then sends again in the background until it lands', async () => {
    const inFlight = new InFlight('store', 5000);
    const cleanup = flaky(2);
    await expect(inFlight.cleanUp(cleanup.send, performance.now() + 10_000)).rejects.toBeInstanceOf(BackendUnavailableError);
    await sleep(700); // retries after about 100 and 200 ms more
    expect(cleanup.sent).toHaveLength(3);
    await sleep(400);
    expect(cleanup.sent, 'no send after one landed').toHaveLength(3);
  });

  it('stops once what it removes has expired anyway', async () => {
    const inFlight = new InFlight('store', 0); // no answer time to add to the expiry
    const cleanup = flaky(Infinity);
    await expect(inFlight.cleanUp(cleanup.send, performance.now() + 250)).rejects.toThrow();
    await sleep(1200);
    expect(cleanup.sent.length).toBeLessThanOrEqual(3);
    const count = cleanup.sent.length;
    await sleep(1200);
    expect(cleanup.sent).toHaveLength(count);
  });

  it('leave: never rejects, and retries for as long as what it removes lives', async () => {
    const inFlight = new InFlight('store', 5000);
    const cleanup = flaky(1);
    await expect(inFlight.leave(cleanup.send, 10_000)).resolves.toBeUndefined();
    await sleep(400);
    expect(cleanup.sent).toHaveLength(2);
  });

  it('does not retry an error that is not "out of reach"', async () => {
    const inFlight = new InFlight('store', 5000);
    let sent = 0;
    const send = async () => {
      sent++;
      throw new BackendError('test', 'release', { cause: new Error('syntax') });
    };
    await expect(inFlight.cleanUp(send, performance.now() + 10_000)).rejects.toBeInstanceOf(BackendError);
    await sleep(400);
    expect(sent).toBe(1);
  });

  it('close: settled() makes the retries try once more at once, then waits for them; none after', async () => {
    const inFlight = new InFlight('store', 5000);
    const cleanup = flaky(Infinity);
    await expect(inFlight.cleanUp(cleanup.send, performance.now() + 60_000)).rejects.toThrow();
    await sleep(800); // sends at about 0, 100, 300 and 700 ms: now in an 800 ms pause
    const before = cleanup.sent.length;
    const started = performance.now();
    await inFlight.settled();
    expect(performance.now() - started, 'the pause is cut short').toBeLessThan(500);
    expect(cleanup.sent).toHaveLength(before + 1);
    await expect(inFlight.cleanUp(cleanup.send, performance.now() + 60_000)).rejects.toThrow();
    await sleep(300);
    expect(cleanup.sent, 'no retries once closing').toHaveLength(before + 2);
  });
});

describe('InFlight.waitInLine: a wait that ends without a grant leaves the line first', () => {
  it("sends the leave before passing the wait's error on, and sends none after a grant", async () => {
    const inFlight = new InFlight('store', 5000);
    const order: string[] = [];
    const leave = async () => void order.push('left');
    const failed = inFlight.waitInLine(
      async () => {
        throw new BackendError('store', 'acquire', { cause: new Error('boom') });
      },
      leave,
      1000,
    );
    await expect(failed.finally(() => order.push('reported'))).rejects.toBeInstanceOf(BackendError);
    expect(order).toEqual(['left', 'reported']);
    expect(await inFlight.waitInLine(async () => 'granted', leave, 1000)).toBe('granted');
    expect(order, 'a grant leaves nothing').toEqual(['left', 'reported']);
  });

  it("reports the wait's error, not the leave's, and sends the leave again while the store is out of reach", async () => {
    const inFlight = new InFlight('store', 5000);
    const cleanup = flaky(1);
    const aborted = new DOMException('aborted', 'AbortError');
    await expect(inFlight.waitInLine(() => Promise.reject(aborted), cleanup.send, 10_000)).rejects.toBe(aborted);
    await sleep(400);
    expect(cleanup.sent).toHaveLength(2);
  });
});

describe("InFlight.close: a backend's close, once", () => {
  it('lets the calls in flight end first, closes the connections once, and every call waits for that', async () => {
    const inFlight = new InFlight('store', 5000);
    const order: string[] = [];
    void inFlight.track(() => sleep(200).then(() => order.push('cleanup landed')));
    const closeConnections = async () => {
      await sleep(50);
      order.push('connections closed');
    };
    const first = inFlight.close(closeConnections);
    const second = inFlight.close(closeConnections);
    await second;
    expect(order, 'the second close resolves only once the first has closed everything').toEqual(['cleanup landed', 'connections closed']);
    await first;
    await inFlight.close(closeConnections);
    expect(order).toEqual(['cleanup landed', 'connections closed']);
    await expect(inFlight.track(async () => 'late')).rejects.toMatchObject({ code: 'LOCKER_CLOSED' });
  });
});
