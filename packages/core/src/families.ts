// The lock family over shared claims: a semaphore's permits and a read-write lock's reads and
// writes are each one claim on the key (`Claim`), taken through the locker like a mutex. The
// locker does the taking; this module does not import it.
import type { Claim, KeySpace } from './backend.js';
import type { HeldKind } from './held-scope.js';
import type { Inspection, Lock, LockOptions, ReadWriteLock, Semaphore, TryLockOptions } from './types.js';

/** What the families need of their locker. */
export interface FamilyHost {
  takeShared(
    key: string,
    want: HeldKind,
    claim: Claim,
    options: LockOptions | TryLockOptions | undefined,
    where: string,
    trying: boolean,
  ): Promise<Lock | null>;
  withHeld<T>(
    key: string,
    want: HeldKind,
    fn: (lock: Lock) => Promise<T> | T,
    options: LockOptions | undefined,
    where: string,
    claim?: Claim,
  ): Promise<T>;
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
    return this.locker.takeShared(this.key, 'permit', this.#claim, options, 'acquire', false) as Promise<Lock>;
  }

  tryAcquire(options?: TryLockOptions): Promise<Lock | null> {
    return this.locker.takeShared(this.key, 'permit', this.#claim, options, 'tryAcquire', true);
  }

  withPermit<T>(fn: (permit: Lock) => Promise<T> | T, options?: LockOptions): Promise<T> {
    return this.locker.withHeld(this.key, 'permit', fn, options, 'withPermit', this.#claim);
  }

  inspect(): Promise<Inspection> {
    return this.locker.inspectKey(this.key, 'shared');
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
    return this.locker.takeShared(this.key, 'read', READ, options, 'read', false) as Promise<Lock>;
  }

  write(options?: LockOptions): Promise<Lock> {
    return this.locker.takeShared(this.key, 'write', WRITE, options, 'write', false) as Promise<Lock>;
  }

  tryRead(options?: TryLockOptions): Promise<Lock | null> {
    return this.locker.takeShared(this.key, 'read', READ, options, 'tryRead', true);
  }

  tryWrite(options?: TryLockOptions): Promise<Lock | null> {
    return this.locker.takeShared(this.key, 'write', WRITE, options, 'tryWrite', true);
  }

  withRead<T>(fn: (lock: Lock) => Promise<T> | T, options?: LockOptions): Promise<T> {
    return this.locker.withHeld(this.key, 'read', fn, options, 'withRead', READ);
  }

  withWrite<T>(fn: (lock: Lock) => Promise<T> | T, options?: LockOptions): Promise<T> {
    return this.locker.withHeld(this.key, 'write', fn, options, 'withWrite', WRITE);
  }

  inspect(): Promise<Inspection> {
    return this.locker.inspectKey(this.key, 'shared');
  }
}
