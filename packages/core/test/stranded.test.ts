import { describe, expect, it } from 'vitest';
import { StrandedConnections } from '../src/sql/stranded.js';

/** A checkout wraps its connection anew each time, as mysql2's pool does. */
type Checkout = { inner: { id: string } };

/** A pool that hands out `idle` in order, then opens new connections; keeps what was dropped. */
function pool(idle: Checkout['inner'][]) {
  const dropped: string[] = [];
  let opened = 0;
  return {
    dropped,
    get: async (): Promise<Checkout> => ({ inner: idle.shift() ?? { id: `new-${++opened}` } }),
    drop: (c: Checkout) => void dropped.push(c.inner.id),
  };
}

const tick = () => new Promise((resolve) => setTimeout(resolve, 2));

describe('StrandedConnections: which pooled connections to drop after a silence', () => {
  it('drops, unused, the connections that have not answered since an unanswered statement was sent; keeps the rest', async () => {
    const watch = new StrandedConnections<Checkout>((c) => c.inner);
    const [a, b, c] = [{ id: 'a' }, { id: 'b' }, { id: 'c' }];
    watch.answered({ inner: a });
    watch.answered({ inner: b });
    // No silence yet: connections are taken as they come.
    expect((await watch.take(pool([b]).get, () => expect.fail('dropped'))).inner).toBe(b);
    await tick();
    watch.silent(performance.now()); // sent after a and b last answered, never answered
    await tick();
    watch.answered({ inner: c }); // answered after the silence began
    const p = pool([a, b, c]);
    expect((await watch.take(p.get, p.drop)).inner).toBe(c);
    expect((await watch.take(p.get, p.drop)).inner.id, 'a connection never seen answer is a new one').toBe('new-1');
    expect(p.dropped).toEqual(['a', 'b']);
  });

  it('an earlier silence reported late does not move the mark back', async () => {
    const watch = new StrandedConnections<Checkout>((c) => c.inner);
    const a = { id: 'a' };
    watch.answered({ inner: a });
    await tick();
    watch.silent(performance.now());
    watch.silent(0);
    const p = pool([a]);
    expect((await watch.take(p.get, p.drop)).inner.id).toBe('new-1');
    expect(p.dropped).toEqual(['a']);
  });
});
