/**
 * A fenced register, as a storage service protected by fencing tokens would be: it remembers the
 * highest token it has seen and rejects any write that carries a lower one. The current holder may
 * write as often as it likes; a stale holder (lease lost, someone newer wrote) is refused.
 */
/** One write the register saw. */
export interface FencedWrite<T> {
  readonly token: bigint;
  readonly value: T;
  readonly writer: string;
  readonly checkedAt?: bigint;
}

/** A resource that refuses writes whose token is lower than the highest it has taken, as a fenced store does; it keeps every write, taken or refused. */
export class FencedRegister<T = unknown> {
  #highest = -1n;
  #value: T | undefined;
  readonly accepted: FencedWrite<T>[] = [];
  readonly rejected: FencedWrite<T>[] = [];

  /**
   * Returns true when the write was accepted. `checkedAt`: when the writer last checked that it
   * held its lock (`process.hrtime.bigint()`, one clock for every process of the machine), kept
   * with the write for tests that ask whether a refused write was checked before a pause.
   */
  write(token: bigint, value: T, writer = '', checkedAt?: bigint): boolean {
    if (typeof token !== 'bigint') throw new TypeError('a fencing token is a bigint');
    const write = checkedAt === undefined ? { token, value, writer } : { token, value, writer, checkedAt };
    if (token < this.#highest) {
      this.rejected.push(write);
      return false;
    }
    this.#highest = token;
    this.#value = value;
    this.accepted.push(write);
    return true;
  }

  /** The last value written, if any. */
  read(): T | undefined {
    return this.#value;
  }

  get highestToken(): bigint {
    return this.#highest;
  }
}
