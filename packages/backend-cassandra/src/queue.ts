// The queue algorithm (the default; the thesis' "new" one, see the README): a waiter writes a cell
// in the key's queue partition, stamped by the time service, and takes the lock when it is first
// in the queue and alone in the main partition. FIFO by time-service order.
import { waiterCadence, type AcquireRequest, type StoreView } from '@deadbolt/core/backend';
import type { CassandraTimeService } from './time-service.js';
import {
  keepNewest,
  NOT_YET,
  secondsLeft,
  ttlSeconds,
  type CassandraStore,
  type MutexAlgorithm,
  type QueueLease,
  type Slot,
  type Statement,
} from './store.js';

/** How many waiters behind the head look again at the line's own pace (see `#lock`). */
const NEAR_HEAD = 16;

export class QueueLock implements MutexAlgorithm<QueueLease> {
  readonly holderTable = 'lock_holders' as const;
  readonly #store: CassandraStore;
  readonly #timeService: CassandraTimeService;
  /** Keys (base64) whose last first look found others queued: see `#atOnce`. The newest only (`keepNewest`). */
  readonly #crowded = new Set<string>();

  constructor(store: CassandraStore, timeService: CassandraTimeService) {
    this.#store = store;
    this.#timeService = timeService;
  }

  acquire(req: AcquireRequest, id: Buffer): Promise<QueueLease | null> {
    return req.wait ? this.#lock(req, id) : this.#tryLock(req, id);
  }

  /** The main partition's holder, and the queue's other cells in arrival order (their tokens come with their grants). */
  async inspect(id: Buffer): Promise<StoreView> {
    const store = this.#store;
    const queued = (
      await store.run('inspect', `SELECT entry, owner, TTL(owner) AS ttl FROM ${store.keyspace}.lock_waiters WHERE lock_id = ?`, [id])
    ).rows
      .filter((r) => r['owner'] !== null)
      .sort((a, b) => ((a['entry'] as string) < (b['entry'] as string) ? -1 : 1));
    const holders = await store.holderIn(
      this.holderTable,
      id,
      queued.map((r) => r['owner'] as string),
    );
    const waiters = queued
      .filter((r) => r['owner'] !== holders[0]?.owner)
      .map((r) => ({ owner: r['owner'] as string, token: null, ttlLeftMs: secondsLeft(r['ttl']) }));
    return { holders, waiters };
  }

  renew(lease: QueueLease, ttlMs: number): Promise<boolean> {
    return this.#store.renewSlot(lease, this.holderTable, ttlMs, () => this.release(lease));
  }

  raiseFloor(lease: QueueLease, floor: bigint): Promise<boolean> {
    return this.#store.raiseFloor(lease, this.holderTable, floor);
  }

  async free(id: Buffer, key: string, owner: string): Promise<boolean> {
    const freed = await this.#store.freeOwner(id, owner, this.holderTable, ['lock_waiters']);
    if (freed) this.#store.notifier.notify(key);
    return freed;
  }

  async release(lease: QueueLease): Promise<void> {
    await this.#leave(lease.id, lease.slot);
    this.#store.notifier.notify(lease.key);
  }

  /** GetLock: enqueue, then poll until first in the queue and alone in the main partition. */
  async #lock(req: AcquireRequest, id: Buffer): Promise<QueueLease> {
    const store = this.#store;
    const ttl = ttlSeconds(req.ttlMs);
    const slot = store.takeSlot(id);
    const entry = this.#entry(req);
    let queueWrittenAt = performance.now();
    /** Our place in the queue at the last look (0: first). */
    let position = Infinity;
    let firstLook = true;
    const { behindMs } = waiterCadence(req.ttlMs, store.poll.maxDelayMs);
    // A waiter k places back is granted no sooner than k handoffs from now. The first NEAR_HEAD
    // look every handoff or so, at the pace they saw the line move (between the poll delays; the
    // poll ceiling until they have seen a move), so a quick chain of handoffs keeps its pace;
    // one further back looks again after about k - NEAR_HEAD handoffs, and at least every
    // `behindMs` (the cadence rule's pace for a waiter behind the head, which also rewrites its
    // place in time). A release in this process wakes only the first two. With hundreds of
    // waiters on a key, each polling every 50 ms and every one woken by each release, a handoff
    // cost a read from each (250 waiters: 57 s to serve them; 1 000 waiters left the store no time
    // to answer a release within 4 s).
    let paceMs = store.poll.maxDelayMs;
    let lookedAt = performance.now();
    const cadence = {
      nextDelayMs: () => (position >= 2 ? Math.min(behindMs, paceMs * Math.max(1, position - NEAR_HEAD)) : undefined),
      wakes: () => position <= 1,
    };
    try {
      if (this.#isCrowded(id)) {
        await this.#writeQueueCell(id, slot, entry, req.owner, ttl);
      } else {
        const lease = await this.#atOnce(req, id, slot, entry);
        if (typeof lease === 'object') return lease;
        firstLook = false;
      }
      return await store.pollLease(
        req,
        async () => {
          // A long wait must not let our place in the queue expire: rewrite it like a renewal would.
          if (performance.now() - queueWrittenAt > req.ttlMs / 3) {
            queueWrittenAt = performance.now();
            await this.#writeQueueCell(id, slot, entry, req.owner, ttl);
          }
          // Poll often right after moving up (first or second in line), then back off: the queue
          // reacts quickly to a handoff while a long hold costs only a few reads per second.
          const head = await this.#order(id);
          if (firstLook) this.#noteCrowd(id, head.length > 1);
          firstLook = false;
          const index = head.indexOf(req.owner);
          const now = index < 0 ? head.length : index;
          const moved = now < position;
          const at = performance.now();
          if (moved && Number.isFinite(position)) {
            const { minDelayMs, maxDelayMs } = store.poll;
            paceMs = Math.min(maxDelayMs, Math.max(minDelayMs, (at - lookedAt) / (position - now)));
          }
          lookedAt = at;
          position = now;
          if (now > 0) return moved && now <= 1 ? 'soon' : NOT_YET;
          // Just became first: the one ahead has left, so main is most likely free; write at once.
          // Still first since the last look: main was taken then, so read it before writing.
          return (await this.#takeMain(req, id, slot, entry, !moved)) ?? (moved ? 'soon' : NOT_YET);
        },
        (lease) => this.release(lease),
        cadence,
      );
    } catch (error) {
      // Cancelled, timed out or failed: leave nothing behind.
      await this.#leave(id, slot).catch(() => undefined);
      throw error;
    }
  }

  /** TryGetLock: never waits; on failure removes what it wrote. */
  async #tryLock(req: AcquireRequest, id: Buffer): Promise<QueueLease | null> {
    const store = this.#store;
    if ((await store.owners('acquire', this.holderTable, id)).length > 0) return null;
    const slot = store.takeSlot(id);
    const entry = this.#entry(req);
    const quiet = !this.#isCrowded(id);
    try {
      if (quiet) {
        const first = await this.#atOnce(req, id, slot, entry);
        if (typeof first === 'object') return first;
        if (!first) {
          await this.#leave(id, slot);
          return null;
        }
      } else {
        await this.#writeQueueCell(id, slot, entry, req.owner, ttlSeconds(req.ttlMs));
      }
      // First in the queue but not alone in main: another TryGetLock raced us; look a few times.
      for (let i = quiet ? 1 : 0; i < 3 && (await this.#order(id))[0] === req.owner; i++) {
        const lease = await this.#takeMain(req, id, slot, entry, i > 0); // main was just read empty
        if (lease) return lease;
      }
    } catch (error) {
      await this.#leave(id, slot).catch(() => undefined);
      throw error;
    }
    await this.#leave(id, slot);
    return null;
  }

  /** The arrival stamp: time-service microseconds, then the owner (a tie-break). */
  #entry(req: AcquireRequest): string {
    return `${String(this.#timeService.now()).padStart(20, '0')}/${req.owner}`;
  }

  /**
   * The first attempt on a key this process last found uncontended: the queue cell and the main
   * cell in one write, then the queue and main read side by side. Ours if we are first in the queue
   * and alone in main: the same two conditions as the usual path, whose main write-then-read is
   * still what excludes a second holder (the queue only orders the takers), in two round trips
   * instead of four. Otherwise our main cell goes again, and the answer is whether we were first
   * in the queue. A key found with others queued is left to the usual path until a first look
   * finds it quiet again, so a newcomer's cell does not keep spoiling the queue head's take.
   */
  async #atOnce(req: AcquireRequest, id: Buffer, slot: Slot, entry: string): Promise<QueueLease | boolean> {
    const acquiredAt = await this.#writeCells(req, id, slot, entry);
    const [queue, owners] = await Promise.all([this.#order(id), this.#store.owners('acquire', this.holderTable, id)]);
    this.#noteCrowd(id, queue.length > 1);
    if (queue[0] === req.owner && owners.length === 1 && owners[0] === req.owner) return this.#fence(req, id, slot, entry, acquiredAt);
    await this.#dropMainCell(id, slot);
    return queue[0] === req.owner;
  }

  #isCrowded(id: Buffer): boolean {
    return this.#crowded.has(id.toString('base64'));
  }

  /** Remembers whether a first look at a key found others queued (see `#atOnce`). */
  #noteCrowd(id: Buffer, crowded: boolean): void {
    const key = id.toString('base64');
    this.#crowded.delete(key);
    if (crowded) keepNewest(this.#crowded.add(key));
  }

  /**
   * Write our main cell; ours if it is the only one, else take it back out. `checkFirst` reads main
   * before writing, to skip the write while the holder is still in (the write-then-read alone is
   * what makes it safe).
   */
  async #takeMain(req: AcquireRequest, id: Buffer, slot: Slot, entry: string, checkFirst: boolean): Promise<QueueLease | null> {
    const store = this.#store;
    if (checkFirst && (await store.owners('acquire', this.holderTable, id)).length > 0) return NOT_YET;
    const acquiredAt = await this.#writeCells(req, id, slot, entry);
    const owners = await store.owners('acquire', this.holderTable, id);
    if (owners.length !== 1 || owners[0] !== req.owner) {
      await this.#dropMainCell(id, slot);
      return NOT_YET;
    }
    return this.#fence(req, id, slot, entry, acquiredAt);
  }

  /** Writes our main cell and refreshes our queue cell in one batch; resolves when (local ms) it was sent. */
  async #writeCells(req: AcquireRequest, id: Buffer, slot: Slot, entry: string): Promise<number> {
    const store = this.#store;
    const ttl = ttlSeconds(req.ttlMs);
    const sentAt = performance.now();
    const timestamp = store.timestamp();
    await store.batch('acquire', [
      this.#mainCell(id, slot, req.owner, ttl, timestamp),
      this.#queueCell(id, slot, entry, req.owner, ttl, timestamp),
    ]);
    slot.written = { at: sentAt, ttlMs: req.ttlMs };
    return sentAt;
  }

  #fence(req: AcquireRequest, id: Buffer, slot: Slot, entry: string, acquiredAt: number): Promise<QueueLease> {
    const won: QueueLease = { key: req.key, owner: req.owner, id, slot, entry, acquiredAt, token: 0n };
    return this.#store.fence(won, this.holderTable, req, (lease) => this.release(lease));
  }

  /** The owners of every queue cell, in arrival order (the partition holds few rows: see schema.ts). */
  async #order(id: Buffer): Promise<(string | undefined)[]> {
    const store = this.#store;
    const result = await store.run('acquire', `SELECT entry, owner FROM ${store.keyspace}.lock_waiters WHERE lock_id = ?`, [id]);
    const rows = result.rows.map((r) => ({ entry: r['entry'] as string, owner: r['owner'] as string }));
    return rows.sort((a, b) => (a.entry < b.entry ? -1 : a.entry > b.entry ? 1 : 0)).map((r) => r.owner);
  }

  #mainCell(id: Buffer, slot: Slot, owner: string, ttl: number, timestamp: number): Statement {
    this.#store.writing(slot, ttl);
    return {
      query: `INSERT INTO ${this.#store.keyspace}.lock_holders (lock_id, slot, owner) VALUES (?, ?, ?) USING TTL ? AND TIMESTAMP ?`,
      params: [id, slot.name, owner, ttl, timestamp],
    };
  }

  /** Takes our main cell back out after a lost take (a later timestamp than its write). */
  async #dropMainCell(id: Buffer, slot: Slot): Promise<void> {
    const store = this.#store;
    await store.run('acquire', `DELETE FROM ${store.keyspace}.lock_holders USING TIMESTAMP ? WHERE lock_id = ? AND slot = ?`, [
      store.timestamp(),
      id,
      slot.name,
    ]);
  }

  #writeQueueCell(id: Buffer, slot: Slot, entry: string, owner: string, ttl: number) {
    const { query, params } = this.#queueCell(id, slot, entry, owner, ttl, this.#store.timestamp());
    return this.#store.run('acquire', query, params);
  }

  #queueCell(id: Buffer, slot: Slot, entry: string, owner: string, ttl: number, timestamp: number): Statement {
    this.#store.writing(slot, ttl);
    return {
      query: `INSERT INTO ${this.#store.keyspace}.lock_waiters (lock_id, slot, entry, owner) VALUES (?, ?, ?, ?) USING TTL ? AND TIMESTAMP ?`,
      params: [id, slot.name, entry, owner, ttl, timestamp],
    };
  }

  /**
   * Removes our queue cell and main cell (release, or a waiter giving up), with one timestamp later
   * than all our writes, so a renewal still in flight cannot resurrect them. Once per slot.
   */
  #leave(id: Buffer, slot: Slot): Promise<void> {
    const keyspace = this.#store.keyspace;
    return this.#store.leaveSlot('release', id, slot, (timestamp) => [
      {
        query: `DELETE FROM ${keyspace}.lock_waiters USING TIMESTAMP ? WHERE lock_id = ? AND slot = ?`,
        params: [timestamp, id, slot.name],
      },
      {
        query: `DELETE FROM ${keyspace}.lock_holders USING TIMESTAMP ? WHERE lock_id = ? AND slot = ?`,
        params: [timestamp, id, slot.name],
      },
    ]);
  }
}
