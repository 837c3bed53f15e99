import { noop } from './time.js';
import { DONE } from './wait.js';

/**
 * A setup step every call of a backend needs done first (connect, create tables, check a server
 * setting, subscribe), run once and shared by the calls that arrive while it runs. A failure is not
 * kept: the next call runs the step again, so a store that was out of reach at the first call is
 * not failed for good. Once it has succeeded, `run()` costs nothing.
 */
export class Once {
  readonly #step: () => Promise<void>;
  #running: Promise<void> | undefined;
  #done = false;

  /** `step` is an async function; what it rejects with is what `run()` rejects with. */
  constructor(step: () => Promise<void>) {
    this.#step = step;
  }

  /** Whether the step has succeeded. */
  get done(): boolean {
    return this.#done;
  }

  /** Resolves at once if the step has succeeded; else runs it, or joins the run under way. @throws the step's error (the next call tries again). */
  run(): Promise<void> {
    if (this.#done) return DONE;
    this.#running ??= this.#step().then(
      () => {
        this.#done = true;
        this.#running = undefined;
      },
      (error: unknown) => {
        this.#running = undefined;
        throw error;
      },
    );
    return this.#running;
  }

  /** The run under way, if any, settled either way: never rejects. */
  settled(): Promise<void> {
    return this.#running?.catch(noop) ?? DONE;
  }
}
