/**
 * A fenced register, as a storage service protected by fencing tokens would be: it remembers the
 * highest token it has seen and rejects any write that carries a lower one. The current holder may
 * write as often as it likes; a stale holder (lease lost, someone newer wrote) is refused.
 */
export class FencedRegister<T = unknown> {
  #highest = -1n;
  #value: T | undefined;
  readonly accepted: { token: bigint; value: T; writer: string }[] = [];
  readonly rejected: { token: bigint; value: T; writer: string }[] = [];

  /** Returns true when the write was accepted. */
  write(token: bigint, value: T, writer = ''): boolean {
    if (typeof token !== 'bigint') throw new TypeError('a fencing token is a bigint');
    if (token < this.#highest) {
      this.rejected.push({ token, value, writer });
      return false;
    }
    this.#highest = token;
    this.#value = value;
    this.accepted.push({ token, value, writer });
    return true;
  }

  read(): T | undefined {
    return this.#value;
  }

  get highestToken(): bigint {
    return this.#highest;
  }
}
