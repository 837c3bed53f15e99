/**
 * Which pooled connections to drop, unused, after a statement went unanswered. A partition, or a
 * middlebox that lost its state, strands every open connection at once, and nothing tells the
 * client: no reset, no close, and keep-alive probes take minutes. A pool would hand its idle
 * connections out one by one, each costing a whole command timeout before it is found dead. So
 * once a statement got no answer in time, a connection that has not answered since that
 * statement was sent is dropped when it is next taken from the pool, and the pool opens a new one
 * (a lost connection to a store that is fine costs one connect).
 *
 * A backend reports every answer (`answered`) and every statement that timed out (`silent`), and
 * takes its connections through `take`. Never throws by itself.
 */
export class StrandedConnections<C> {
  /** When the latest statement that got no answer in time was sent (`performance.now()`). */
  #silentSince = -Infinity;
  readonly #answeredAt = new WeakMap<object, number>();
  readonly #keyOf: (connection: C) => object;

  /** `keyOf` names the object that lives as long as the connection (a pool may wrap it anew on every checkout). */
  constructor(keyOf: (connection: C) => object) {
    this.#keyOf = keyOf;
  }

  /** The connection answered just now. */
  answered(connection: C): void {
    this.#answeredAt.set(this.#keyOf(connection), performance.now());
  }

  /** A statement sent at `sentAt` (`performance.now()`) got no answer in time. */
  silent(sentAt: number): void {
    this.#silentSince = Math.max(this.#silentSince, sentAt);
  }

  /**
   * A connection from `get` that has answered since the latest silence began; the others it gets
   * are handed to `drop` (which must close them without waiting on the store) and it asks again.
   * Rejects as `get` rejects.
   */
  async take(get: () => Promise<C>, drop: (connection: C) => void): Promise<C> {
    for (;;) {
      const connection = await get();
      // A connection this has never seen answer is one the pool just opened.
      if ((this.#answeredAt.get(this.#keyOf(connection)) ?? Infinity) >= this.#silentSince) return connection;
      drop(connection);
    }
  }
}
