// What every store's backend shares, written once: a backend package's backend class extends
// `StoreBackend` and writes only its store's part (how a claim is taken, renewed, released,
// inspected, and what else it opened). The contract is backend.ts; this is the skeleton around it.
import type { AcquireRequest, Capabilities, Lease, LockBackend } from './backend.js';
import type { StoreClient } from './options.js';
import { InFlight } from './wait.js';

/** What a `StoreBackend` is made of: its name, its client and the deadline of one store call. */
export interface StoreBackendParts<C> {
  /** The backend's name (`LockBackend.name`), as errors name it. */
  readonly name: string;
  /** The client (`storeClient`): made from `url`, or the caller's. */
  readonly connection: StoreClient<C>;
  /** The longest one store call waits for its answer: what `close()` gives the acquisitions in flight to clean up. */
  readonly commandTimeoutMs: number;
}

/**
 * The skeleton every store's backend keeps: the client and its address, and the acquisitions in
 * flight (`InFlight`). `acquire` tracks each one; `close()` lets aborted ones finish removing what
 * they wrote, then closes, once, what the backend opened (a client it was given stays open); a
 * closed backend refuses new acquisitions with LockerClosedError. A backend writes `acquireClaim`
 * and `closeStore`, and the contract's other methods. @throws from `acquire` what `acquireClaim`
 * throws, and LockerClosedError after `close()`; `close()` never throws.
 */
export abstract class StoreBackend<C, L extends Lease = Lease> implements LockBackend<L> {
  /** The backend's name (`LockBackend.name`), as errors and events name it. */
  readonly name: string;
  abstract readonly capabilities: Capabilities;
  /** The store's servers as given in `url`, or as a client of yours shows them where its backend reads them: `LockBackend.address`. */
  readonly address: string | undefined;
  /** The driver's client: made from `url` (closed by `close()`), or yours (left open). */
  readonly client: C;
  /** Acquisitions and clean-ups under way: `close()` lets aborted ones leave the store's queue first. */
  protected readonly inFlight: InFlight;
  /** The client and whether the backend made it (`url` set): `closeStore` ends it through `end`. */
  protected readonly connection: StoreClient<C>;

  protected constructor(parts: StoreBackendParts<C>) {
    this.name = parts.name;
    this.connection = parts.connection;
    this.address = parts.connection.address;
    this.client = parts.connection.client;
    this.inFlight = new InFlight(parts.name, parts.commandTimeoutMs);
  }

  acquire(req: AcquireRequest): Promise<L | null> {
    return this.inFlight.track(() => this.acquireClaim(req));
  }

  /**
   * `LockBackend.renew`: extends the lease to `ttlMs` from now if it is still the owner's; false
   * when it is not (expired, freed). @throws BackendUnavailableError / BackendError when the store fails.
   */
  abstract renew(lease: L, ttlMs: number): Promise<boolean>;
  /** `LockBackend.release`: gives the lease up, owner-checked and idempotent. @throws BackendUnavailableError / BackendError. */
  abstract release(lease: L): Promise<void>;

  close(): Promise<void> {
    return this.inFlight.close(() => this.closeStore().catch(() => undefined));
  }

  /** `LockBackend.acquire`, tracked by `acquire` (which refuses it once the backend is closing). */
  protected abstract acquireClaim(req: AcquireRequest): Promise<L | null>;

  /**
   * Closes what the backend opened, once, after the acquisitions in flight settled: its own parts
   * (a subscriber, sessions, a timer), then `this.connection.end(close)`, which closes the client
   * only if the backend made it. Its errors are dropped: `close()` never throws.
   */
  protected abstract closeStore(): Promise<void>;
}
