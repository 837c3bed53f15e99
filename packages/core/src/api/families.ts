// The lock family over shared claims: a semaphore's permits and a read-write lock's reads and
// writes are each one claim on the key (`Claim`), taken through the locker like a mutex. The
// locker does the taking; this module does not import it.
import type { Claim, KeySpace } from '../kit/backend.js';
import type { HeldKind } from './held-scope.js';
import type { Inspection, Lock, LockOptions, ReadWriteLock, Semaphore, TryLockOptions } from './types.js';

/**
 * One family method's take of its key: what the caller then holds it as (the nesting rules read
 * it), the claim it makes (none for a mutex), and the method's name for errors.
 */
export interface AcquireCall {
  readonly key: string;
  readonly as: HeldKind;
  readonly claim?: Claim;
  readonly where: string;
}

/** What the families need of their locker. */
export interface FamilyHost {
  /** As `lock()`. */
  take(call: AcquireCall, options: LockOptions | undefined): Promise<Lock>;
  /** As `tryLock()`. */
  tryTake(call: AcquireCall, options: TryLockOptions | undefined): Promise<Lock | null>;
  /** As `withLock()`. */
  withHeld<T>(call: AcquireCall, fn: (lock: Lock) => Promise<T> | T, options: LockOptions | undefined): Promise<T>;
  inspectKey(key: string, space: KeySpace): Promise<Inspection>;
}

export class LockerSemaphore implements Semaphore {
  readonly #claim: Claim;
  constructor(
    private readonly locker: FamilyHost,
    readonly key: string,
    readonly limit: number,
  ) {
    this.#claim = { mode: 'shared', limit };
  }

  acquire(options?: LockOptions): Promise<Lock> {
    return this.locker.take(this.#call('acquire'), options);
  }

  tryAcquire(options?: TryLockOptions): Promise<Lock | null> {
    return this.locker.tryTake(this.#call('tryAcquire'), options);
  }

  withPermit<T>(fn: (permit: Lock) => Promise<T> | T, options?: LockOptions): Promise<T> {
    return this.locker.withHeld(this.#call('withPermit'), fn, options);
  }

  inspect(): Promise<Inspection> {
    return this.locker.inspectKey(this.key, 'shared');
  }

  #call(where: string): AcquireCall {
    return { key: this.key, as: 'permit', claim: this.#claim, where };
  }
}

const READ: Claim = { mode: 'shared', limit: 0 };
const WRITE: Claim = { mode: 'exclusive', limit: 0 };

export class LockerReadWriteLock implements ReadWriteLock {
  constructor(
    private readonly locker: FamilyHost,
    readonly key: string,
  ) {}

  read(options?: LockOptions): Promise<Lock> {
    return this.locker.take(this.#call('read', 'read'), options);
  }

  write(options?: LockOptions): Promise<Lock> {
    return this.locker.take(this.#call('write', 'write'), options);
  }

  tryRead(options?: TryLockOptions): Promise<Lock | null> {
    return this.locker.tryTake(this.#call('read', 'tryRead'), options);
  }

  tryWrite(options?: TryLockOptions): Promise<Lock | null> {
    return this.locker.tryTake(this.#call('write', 'tryWrite'), options);
  }

  withRead<T>(fn: (lock: Lock) => Promise<T> | T, options?: LockOptions): Promise<T> {
    return this.locker.withHeld(this.#call('read', 'withRead'), fn, options);
  }

  withWrite<T>(fn: (lock: Lock) => Promise<T> | T, options?: LockOptions): Promise<T> {
    return this.locker.withHeld(this.#call('write', 'withWrite'), fn, options);
  }

  inspect(): Promise<Inspection> {
    return this.locker.inspectKey(this.key, 'shared');
  }

  #call(as: 'read' | 'write', where: string): AcquireCall {
    return { key: this.key, as, claim: as === 'write' ? WRITE : READ, where };
  }
}
